"""Conformance check: another runtime's results (a JSONL file) against a golden suite, first divergence per case.

A results line is ``{"case": NAME, "positions": [[...] per axis], "delta": D, "decode": [[...] per axis]}``
(``decode``: the positions of the suite's first decode tokens, required where the case has them; optional
``cos`` / ``sin``: the rows the case's ``rope.rows`` name). Integer positions compare exactly; fractional
ones (Qwen3-Omni) as float32, the dtype the model uses; cos / sin within :data:`ROPE_ATOL`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mrope._errors import GoldenError
from mrope._golden import json_lines, read_suite

_AXES = "thwa"
ROPE_ATOL = 1e-5
"""How far a runtime's cos / sin may be from the suite's (float32 angles of positions up to a few
thousand differ by a few ulp between libraries)."""


@dataclass(frozen=True)
class CaseResult:
    """One case's verdict: ``divergence`` is ``None`` when the runtime agreed, else its first divergence
    in words (the field, the token index and axis, expected and got)."""

    case: str
    divergence: str | None


@dataclass(frozen=True)
class ConformReport:
    """The verdict of every case checked, in the suite's order, and the suite cases no result named."""

    results: tuple[CaseResult, ...]
    missing: tuple[str, ...]

    @property
    def failed(self) -> tuple[CaseResult, ...]:
        return tuple(r for r in self.results if r.divergence is not None)

    def ok(self, *, partial: bool = False) -> bool:
        """True when no case diverged and (unless ``partial``) every suite case had a result."""
        return not self.failed and (partial or not self.missing) and bool(self.results)


def _array(value: Any, what: str, where: str) -> np.ndarray:
    """A rectangular ``[A, n]`` array of numbers, or a clear error."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 2 or not isinstance(value, list):
        raise GoldenError(f"{where}: {what!r} must be a list of equal-length lists of numbers (one per axis)")
    return arr


def _first_divergence(field: str, want: Any, got: np.ndarray) -> str | None:
    expected = np.asarray(want)
    fractional = expected.dtype.kind == "f"
    if got.shape != expected.shape:
        return f"{field}: shape {list(got.shape)}, expected {list(expected.shape)} (axes x tokens)"
    if fractional:
        bad = expected.astype(np.float32) != got.astype(np.float32)
    else:
        bad = (got != np.round(got)) | (got != expected)
    if not bad.any():
        return None
    token = int(np.argmax(bad.any(axis=0)))
    axis = int(np.argmax(bad[:, token]))
    name = _AXES[axis] if axis < len(_AXES) else str(axis)
    return (
        f"{field}: token {token} axis {name}: expected {expected[axis, token].item()}, "
        f"got {got[axis, token].item():g}"
    )


def check_case(case: dict[str, Any], result: dict[str, Any], where: str) -> str | None:
    """The first divergence of one result from its case, or ``None``."""
    expected = case["expected"]
    got = _array(result.get("positions"), "positions", where)
    found = _first_divergence("positions", expected["positions"], got)
    if found is not None:
        return found
    delta = result.get("delta")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)):
        raise GoldenError(f"{where}: 'delta' must be a number; got {delta!r}")
    want = expected["delta"]
    same = delta == want if isinstance(want, int) else np.float32(delta) == np.float32(want)
    if not same:
        return f"delta: expected {want}, got {delta}"
    if "decode" in expected:
        if "decode" not in result:
            raise GoldenError(
                f"{where}: case {case['case']!r} has decode positions; the result gives no 'decode'"
            )
        found = _first_divergence("decode", expected["decode"], _array(result["decode"], "decode", where))
        if found is not None:
            return found
    rope = expected.get("rope")
    for name in ("cos", "sin"):
        if name in result and rope is None:
            raise GoldenError(f"{where}: case {case['case']!r} has no cos/sin rows to check {name!r} against")
        if name in result:
            found = _first_rope_divergence(name, rope, _array(result[name], name, where))
            if found is not None:
                return found
    return None


def _first_rope_divergence(name: str, rope: dict[str, Any], got: np.ndarray) -> str | None:
    """cos / sin rows (the case's ``rope.rows``, ``rotary_dim`` values each) within ``ROPE_ATOL``."""
    expected = np.asarray(rope[name], dtype=np.float64)
    if got.shape != expected.shape:
        return f"{name}: shape {list(got.shape)}, expected {list(expected.shape)} (rows x rotary channels)"
    bad = ~(np.abs(got - expected) <= ROPE_ATOL)
    if not bad.any():
        return None
    row, channel = (int(i) for i in np.argwhere(bad)[0])
    return (
        f"{name}: token {rope['rows'][row]} channel {channel}: expected {expected[row, channel]:.7g}, "
        f"got {got[row, channel]:.7g}"
    )


def conform(suite: str | Path, results: str | Path) -> ConformReport:
    """Check the results file ``results`` against the suite folder ``suite``.

    Raises:
        GoldenError: a malformed suite or results file (not JSON, no case name, a case the suite does not
            hold or given twice, positions that are not ``[A, n]`` numbers, no delta or decode).
    """
    _, cases = read_suite(suite)
    verdicts: dict[str, CaseResult] = {}
    for number, line in json_lines(Path(results)):
        where = f"{results} line {number}"
        if not isinstance(line, dict) or not isinstance(line.get("case"), str):
            raise GoldenError(f"{where}: expected an object with a 'case' name; got {str(line)[:80]}")
        name = line["case"]
        if name not in cases:
            raise GoldenError(f"{where}: case {name!r} is not in the suite {suite}")
        if name in verdicts:
            raise GoldenError(f"{where}: case {name!r} is given twice")
        verdicts[name] = CaseResult(name, check_case(cases[name], line, where))
    order = [n for n in cases if n in verdicts]
    return ConformReport(
        results=tuple(verdicts[n] for n in order), missing=tuple(n for n in cases if n not in verdicts)
    )


__all__ = ["CaseResult", "ConformReport", "check_case", "conform"]
