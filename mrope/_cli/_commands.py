"""The ``positions``, ``plot`` and ``serve`` commands (``probe`` and ``batch`` have their own modules)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from mrope._cli._args import CliError, add_segment_options, positive_int
from mrope._cli._output import (
    check_out_suffix,
    positions_document,
    save_positions,
    save_sets,
    sets_document,
    sets_table,
    summary_table,
)
from mrope._cli._sequence import Built, build_from_args
from mrope._positions import Positions

_FILE_SAFE = re.compile(r"[A-Za-z0-9_.-]+")
"""A position set name that may stand in a file name as is (``mrope plot`` writes one PNG per set)."""

EXAMPLE = "mrope positions --model qwen2.5-vl --text 12 --image cat.jpg --text 5 --video clip.mp4 --fps 2"


def add_positions_parser(sub: Any) -> None:
    p = sub.add_parser(
        "positions",
        help="positions of a sequence of text, images and videos",
        description="Build the [3, T] position ids of an ordered sequence and print a summary table "
        f"(one row per span) and the delta. Example: {EXAMPLE}",
    )
    add_segment_options(p)
    p.add_argument(
        "--out", metavar="FILE", help="save: .npy (int64 [3, T]) or .json (positions, spans, grids)"
    )
    p.add_argument("--json", action="store_true", help="print the JSON document instead of the table")
    p.add_argument(
        "--layer-sets",
        action="store_true",
        help="every position set of the model (a per-layer choice, e.g. circle-rope-age) and the layer "
        "pattern; --out .npy then holds the sets stacked [S, 3, T] (a spec's layer_sets names sets of its own)",
    )
    p.set_defaults(run=run_positions)


def run_positions(args: argparse.Namespace) -> int:
    if args.out:
        check_out_suffix(args.out)
    built = build_from_args(args)
    if built.sets:
        written = save_sets(built.sets, built.pattern, built.model, args.out) if args.out else None
        if args.json:
            print(json.dumps(sets_document(built.sets, built.pattern, built.model)))
        else:
            print(sets_table(built.sets, built.pattern, built.model, built.labels))
    else:
        written = save_positions(built.positions, built.model, args.out) if args.out else None
        if args.json:
            print(json.dumps(positions_document(built.positions, built.model)))
        else:
            print(summary_table(built.positions, built.model, built.labels))
    if written:
        print(written, file=sys.stderr if args.json else sys.stdout)
    return 0


def add_plot_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plot",
        help="draw the coordinates of a sequence as a PNG",
        description="Draw the t, h, w coordinates of a sequence (colour strips along the tokens, a chart "
        "against the token index, heat maps of every image and tile grid) as a PNG. Takes the same "
        "segment options as 'positions'.",
    )
    add_segment_options(p)
    p.add_argument("--png", required=True, metavar="FILE.png", help="where to write the picture")
    p.add_argument("--width", default="1200", help="picture width in pixels (>= 600; default 1200)")
    p.add_argument(
        "--layer-sets",
        action="store_true",
        help="draw every position set of the model (a per-layer choice, e.g. circle-rope-age), one PNG "
        "each: FILE.<set>.png (as a spec's layer_sets does)",
    )
    p.add_argument("--set", metavar="NAME", help="draw only the position set NAME, to FILE.png")
    p.set_defaults(run=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from mrope._plot import save_layout

    width = positive_int(args.width, "--width")
    if width < 600:
        raise CliError(f"--width must be at least 600 pixels; got {width}")
    if not args.png.lower().endswith(".png"):
        raise CliError(f"--png {args.png!r}: the file name must end in .png")
    if args.set is not None:
        args.layer_sets = True
    built = build_from_args(args)
    for name, positions, path in plot_targets(built, args.png, args.set):
        try:
            img = save_layout(positions, path, width=width, labels=built.labels, position_set=name)
        except OSError as exc:
            raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
        print(f"{img.width}x{img.height} px, {positions.num_tokens} tokens -> {path}")
    return 0


def plot_targets(built: Built, png: str, chosen: str | None) -> list[tuple[str | None, Positions, str]]:
    """What ``mrope plot`` draws: ``(set name, positions, file)`` of the one sequence (no set name), of
    the set ``chosen`` (to ``png``), or of every set (to ``<png stem>.<set>.png``)."""
    if not built.sets:
        return [(None, built.positions, png)]
    names = ", ".join(built.sets)
    if chosen is not None:
        if chosen not in built.sets:
            raise CliError(f"--set {chosen!r}: the position sets are {names}")
        return [(chosen, built.sets[chosen], png)]
    unsafe = [n for n in built.sets if not _FILE_SAFE.fullmatch(n)]
    if unsafe:
        raise CliError(
            f"position sets {unsafe} cannot name a file (letters, digits, '_', '-' and '.' only): draw "
            f"one with --set NAME (the sets are {names})"
        )
    stem = png[: -len(".png")]
    return [(name, p, f"{stem}.{name}.png") for name, p in built.sets.items()]


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise CliError(f"--port must be an int in [0, 65535]; got {text!r}")
    return port


def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the HTTP service",
        description="Serve the HTTP API (POST /v1/positions, /v1/positions/upload, /v1/rope-index, "
        "GET /v1/presets, /healthz) with uvicorn. Limits come from MROPE_* environment variables; "
        "MROPE_TOKENIZER names a tokenizer.json.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)")
    p.add_argument("--port", default="8000", help="port (default 8000)")
    p.add_argument("--workers", default="1", help="worker processes (default 1)")
    p.add_argument(
        "--log-level", default="info", choices=("critical", "error", "warning", "info", "debug", "trace")
    )
    p.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    port = _port(args.port)
    workers = positive_int(args.workers, "--workers")
    try:
        from mrope.service._server import run
    except ImportError as exc:
        raise CliError(
            f"the service cannot be imported ({exc}); install mrope with its service dependencies"
        ) from None
    try:
        run(host=args.host, port=port, workers=workers, log_level=args.log_level)
    except ValueError as exc:  # the service's settings (MROPE_*) or arguments
        raise CliError(f"serve: {exc}") from None
    return 0
