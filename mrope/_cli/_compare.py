"""``mrope compare [MODEL ...]``: schemes compared on the same prompts (:func:`mrope.testing.compare_schemes`),
printed as a table or JSON, the decay curves optionally drawn to a PNG."""

from __future__ import annotations

import argparse
from typing import Any

from mrope._cli._args import CliError, add_rule_option, positive_int, rule_overrides
from mrope._cli._sequence import tokenizer_from_arg
from mrope.schema._fields import model_names, require_model


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="compare rotary schemes: invariances, id growth of a long video, per-axis score decay",
        description="Build the same prompts under each scheme (or family) and compare: shift, crop, tile and "
        "frame-resampling invariance of the q.k scores (pass / fail with the largest score difference), the "
        "largest id of a long video over its tokens, and the mean score of constant content against the "
        "distance in frames, rows and columns. Default models: qwen2-vl and every research scheme.",
    )
    p.add_argument(
        "models",
        nargs="*",
        metavar="MODEL",
        help="schemes or families to compare: " + ", ".join(model_names()),
    )
    add_rule_option(p, " of every model")
    p.add_argument("--tokenizer", metavar="TOKENIZER_JSON", help="for timestamp text (default: a stand-in)")
    p.add_argument("--shift", default="37", help="text tokens put before each prompt (default 37)")
    p.add_argument("--video-frames", default="256", help="temporal patches of the long video (default 256)")
    p.add_argument("--decay-extent", default="16", help="frames, rows and columns of the decay video (16)")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")
    p.add_argument("--png", metavar="FILE.png", help="also draw the decay curves to FILE.png")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mrope.testing._compare import compare_schemes

    if args.png is not None and not args.png.lower().endswith(".png"):
        raise CliError(f"--png {args.png!r}: the file name must end in .png")
    models = [require_model(m, "MODEL") for m in args.models] or None  # a RequestError is bad input: exit 2
    comparison = compare_schemes(
        models,
        rules=rule_overrides(args.rule) or None,
        tokenizer=tokenizer_from_arg(args.tokenizer),
        shift=positive_int(args.shift, "--shift"),
        video_frames=positive_int(args.video_frames, "--video-frames"),
        decay_extent=positive_int(args.decay_extent, "--decay-extent"),
    )
    print(comparison.to_json() if args.json else comparison.table())
    if args.png is not None:
        from mrope._plot import render_decay

        curves = {r.label: {c.axis: (c.distances, c.scores) for c in r.decay} for r in comparison.rows}
        if not any(curves.values()):
            raise CliError("no decay curve was measured (see the notes): nothing to draw")
        try:
            render_decay(curves).save(args.png, format="PNG", optimize=True)
        except OSError as exc:
            raise CliError(f"cannot write {args.png}: {exc.strerror or exc}") from None
    return 0
