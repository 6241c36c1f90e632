"""``mrope check PATH | --family NAME``: the validation table on a checkpoint (or a tiny model of a family),
printed as a table, optionally saved as JSON and the sweep as a plot; exit 1 when a row fails."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mrope._cli._args import CliError, positive_int
from mrope.schema._fields import model_names


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "check",
        help="run the RoPE validation table on a checkpoint (or a tiny model of a family)",
        description="Run the validation table (relativity, prefill = decode, padding, pairing, length "
        "boundaries, position sweep, short context, crop / tiles / frames) on a local checkpoint folder "
        "loaded with transformers (no network), or on a tiny random-weight model of --family. Prints the "
        "table; exits 0 when no row fails, 1 when one does, 2 for bad input.",
    )
    p.add_argument("path", nargs="?", help="a checkpoint folder (config.json and weights)")
    p.add_argument(
        "--family",
        metavar="NAME",
        help="the family: of a tiny model when no PATH is given, else of the checkpoint when its config does "
        "not say it; one of " + ", ".join(model_names()),
    )
    p.add_argument("--quick", action="store_true", help="bounded time: a short sweep, fewer decode steps")
    p.add_argument(
        "--sweep-tokens",
        metavar="N",
        help="the position sweep's context length (default 48 with --quick, 512 without, raised to what the "
        "tokenizer needs for the pass-key text; always below the model's L0)",
    )
    p.add_argument("--rows", metavar="A,B", help="only these rows, comma-separated (e.g. pairing,padding)")
    p.add_argument("--json", metavar="OUT", help="also write the report as JSON to OUT ('-': stdout only)")
    p.add_argument("--plot", metavar="OUT", help="draw the position sweep to OUT (a PNG)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mrope.testing._validate import validate

    if args.path is None and args.family is None:
        raise CliError("mrope check: give a checkpoint folder or --family NAME (see --help)")
    rows = None if args.rows is None else [r.strip() for r in args.rows.split(",") if r.strip()]
    sweep = None if args.sweep_tokens is None else positive_int(args.sweep_tokens, "--sweep-tokens")
    report = validate(args.path, family=args.family, quick=args.quick, rows=rows, sweep_tokens=sweep)
    if args.plot is not None:
        note = report.plot(args.plot)
        if note is not None:
            print(f"mrope check: {note}", file=sys.stderr)
    if args.json == "-":
        print(report.to_json())
    else:
        print(report.table())
        if args.json is not None:
            report.to_json(args.json)
    return report.exit_code
