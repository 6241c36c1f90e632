"""The validation table on a user's model: :func:`validate` runs every row and returns the report.

The rows (docs/check.md has the table): relativity (scores unchanged when q and k positions shift
together, up to position 10^6, with float64 exact angles as the reference), prefill = token-by-token
decode with the KV cache, left and right padding, pairing against the model's own rotary, length
boundaries ``L0 - 1, L0, L0 + 1, L1 - 1``, a position sweep (the same evidence at head / middle / tail),
short-context regression (inside ``L0``, with and without the length scaling), and the multimodal rows
(a crop with its origin, tiles in any order, frames resampled). ``mrope check`` is the same on the
command line.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from mrope._errors import MRopeError
from mrope.testing._report import FAIL, RowResult, ValidationReport
from mrope.testing._rows import ROWS
from mrope.testing._rows.subject import ValidationError, load_subject
from mrope.testing._rows.sweep import position_sweep

ROW_NAMES: tuple[str, ...] = tuple(ROWS)
"""The rows of the table, in order."""


def validate(
    model_or_path: Any = None,
    *,
    family: Any = None,
    quick: bool = False,
    rows: Sequence[str] | None = None,
    tokenizer: Any = None,
    sweep_tokens: int | None = None,
    sweep_max_spread: float | None = None,
) -> ValidationReport:
    """Run the validation table on a model.

    Args:
        model_or_path: a loaded transformers model of a registered family, a local checkpoint folder
            (loaded with transformers in float32, no network; an omni checkpoint's thinker is checked),
            or ``None`` with ``family`` for a tiny random-weight model built from the family's config.
        family: the registry family (a name or model_type) when the config's model_type does not say it,
            or the family of the tiny model.
        quick: bounded time: a short position sweep (48 tokens, or what the pass-key text needs) at three depths, two decoded tokens, padding
            compared left against right only (every row still runs).
        rows: run only these rows (:data:`ROW_NAMES`), in table order.
        tokenizer: the tokenizer of the position sweep's text (default: the checkpoint folder's, if it has
            one; without one the sweep uses token ids).
        sweep_tokens: the sweep's context length (default 48 quick, 512 full, raised to what the tokenizer
            needs for the pass-key text; always below ``L0``).
        sweep_max_spread: fail the sweep when the scores of its depths differ by more than this.

    Returns:
        The :class:`~mrope.testing._report.ValidationReport` (``.passed``, ``.table()``, ``.to_json()``,
        ``.plot(path)``, ``.exit_code``).

    Raises:
        ValidationError: no checkpoint there, a row name that does not exist, or a model mrope cannot read.
    """
    chosen = ROW_NAMES if rows is None else tuple(rows)
    unknown = [r for r in chosen if r not in ROWS]
    if unknown:
        raise ValidationError(f"unknown rows {unknown}; the rows are {list(ROW_NAMES)}")
    try:
        subject = load_subject(model_or_path, family, tokenizer)
    except ValidationError:
        raise
    except MRopeError as exc:
        raise ValidationError(f"cannot validate this model: {exc}") from None
    table = dict(ROWS)
    table["position_sweep"] = functools.partial(
        position_sweep, tokens=sweep_tokens, max_spread=sweep_max_spread
    )
    results = []
    for name in ROW_NAMES:
        if name not in chosen:
            continue
        start = time.perf_counter()
        result = _run_row(name, table[name], subject, quick)
        measured = {**result.measured, "seconds": round(time.perf_counter() - start, 3)}
        results.append(RowResult(result.name, result.status, result.reason, measured))
    return ValidationReport(model=subject.label, family=subject.family.name, quick=quick, rows=tuple(results))


def _run_row(name: str, row: Any, subject: Any, quick: bool) -> RowResult:
    """One row; the model's own code failing on the row's input fails the row (with what it raised)."""
    try:
        return row(subject, quick)
    except MRopeError as exc:
        return RowResult(name, FAIL, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    except (RuntimeError, ValueError, TypeError, IndexError, KeyError, AttributeError) as exc:
        return RowResult(
            name, FAIL, f"the model raised {type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        )


__all__ = ["ROW_NAMES", "ValidationError", "validate"]
