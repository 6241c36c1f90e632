"""The ``mrope`` command line: ``positions``, ``probe``, ``plot``, ``batch``, ``serve``, ``check``, ``compare``,
``golden`` and ``conform``.

Run ``mrope --help`` (or ``python -m mrope --help``). :func:`main` takes the arguments as a list and
returns the exit code: 0 on success, 1 when a batch had failed samples, 2 for bad input (a one-line
message on stderr, never a traceback), 130 when interrupted.
"""

from __future__ import annotations

from mrope import _extras

_extras.require("the mrope command", "cli", "pydantic", "pyarrow", "PIL", "av")

import os
import sys
import warnings
from collections.abc import Sequence

from mrope._cli import _batch, _check, _commands, _compare, _golden, _probe
from mrope._cli._args import CliError, Parser
from mrope._errors import MRopeError, MRopeWarning

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> Parser:
    """The ``mrope`` argument parser with its subcommands."""
    from mrope import __version__

    parser = Parser(
        prog="mrope",
        description="Multimodal M-RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V).",
        epilog=f"Example: {_commands.EXAMPLE}",
    )
    parser.add_argument("--version", action="version", version=f"mrope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _commands.add_positions_parser(sub)
    _probe.add_parser(sub)
    _commands.add_plot_parser(sub)
    _batch.add_parser(sub)
    _commands.add_serve_parser(sub)
    _check.add_parser(sub)
    _compare.add_parser(sub)
    _golden.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MRopeWarning)  # printed as notes instead
            return int(args.run(args))
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except (CliError, MRopeError) as exc:
        _error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `mrope positions ... | head`: stop quietly
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_OK
    except Exception as exc:  # a bug, not bad input: still one line unless asked for the traceback
        if os.environ.get("MROPE_DEBUG"):
            raise
        _error(f"internal error: {type(exc).__name__}: {exc} (set MROPE_DEBUG=1 for the traceback)")
        return EXIT_FAILED


def _error(message: str) -> None:
    text = " ".join(message.split())
    if not text.startswith("mrope"):
        text = "mrope: error: " + text
    print(text, file=sys.stderr)


__all__ = ["build_parser", "main"]
