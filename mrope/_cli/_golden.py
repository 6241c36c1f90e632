"""``mrope golden OUT`` writes the conformance suite; ``mrope conform SUITE RESULTS`` checks a runtime's
results against it (first divergence per case; exit 1 on any mismatch)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import Any

from mrope._cli._args import CliError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "golden",
        help="write the golden conformance suite (positions, deltas, decode, cos/sin) to a folder",
        description="Write the versioned conformance suite to the folder OUT: manifest.json and cases.jsonl, "
        "every registry family under each convention, with edge cases (padding, pruned, continued, long "
        "video, fractional time). cos/sin rows need torch (the 'torch' extra); without it give --no-cos-sin. "
        "The format is in docs/golden.md.",
    )
    p.add_argument("out", metavar="OUT", help="the folder to write (created; its suite files are replaced)")
    p.add_argument("--no-cos-sin", action="store_true", help="leave out the cos/sin rows (no torch needed)")
    p.set_defaults(run=run_golden)
    c = sub.add_parser(
        "conform",
        help="check another runtime's positions against a golden suite",
        description='Check RESULTS, a JSONL file of {"case": NAME, "positions": [[...]], "delta": D, '
        '"decode": [[...]]} lines, against the suite folder SUITE. Prints the first divergence of every '
        "case that diverges; exits 0 when all agree, 1 on any mismatch (or a suite case without a result, "
        "unless --partial), 2 for a malformed file.",
    )
    c.add_argument("suite", metavar="SUITE", help="the folder `mrope golden` wrote")
    c.add_argument("results", metavar="RESULTS", help="the runtime's results, one JSON object a line")
    c.add_argument("--partial", action="store_true", help="check only the cases RESULTS names")
    c.set_defaults(run=run_conform)


def run_golden(args: argparse.Namespace) -> int:
    from mrope._golden import write_suite

    if not args.no_cos_sin and importlib.util.find_spec("torch") is None:
        raise CliError(
            'mrope golden: the cos/sin rows need torch, which mrope\'s "torch" extra installs '
            '(pip install "mrope[torch]"); or give --no-cos-sin'
        )
    manifest = write_suite(args.out, with_rope=not args.no_cos_sin)
    skipped = len(manifest["not_applicable"])
    print(
        f"{manifest['num_cases']} cases of {len(manifest['families'])} families -> {args.out} "
        f"(format {manifest['format']} v{manifest['version']}; {skipped} not applicable, in the manifest)"
    )
    return 0


def run_conform(args: argparse.Namespace) -> int:
    from mrope._conform import conform

    report = conform(args.suite, args.results)
    for r in report.failed:
        print(f"FAIL {r.case}: {r.divergence}")
    if report.missing and not args.partial:
        print(f"MISSING {len(report.missing)} cases without a result, e.g. {report.missing[0]}")
    passed = len(report.results) - len(report.failed)
    print(f"{passed} of {len(report.results)} checked cases agree", file=sys.stdout)
    return 0 if report.ok(partial=args.partial) else 1
