"""The validation table's results: one :class:`RowResult` per row, a :class:`ValidationReport` to read,
save as JSON, exit on, and plot.

Statuses: ``"pass"``, ``"fail"`` and ``"not-applicable"`` (the row cannot run on this model, or its
criterion does not apply to it; :attr:`RowResult.reason` says why). A report passes when no row fails.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Status = Literal["pass", "fail", "not-applicable"]
PASS: Status = "pass"
FAIL: Status = "fail"
NOT_APPLICABLE: Status = "not-applicable"


@dataclass(frozen=True)
class RowResult:
    """One row of the validation table.

    Attributes:
        name: the row (``"relativity"``, ``"prefill_decode"``, ...; :data:`mrope.testing.validate.ROW_NAMES`).
        status: ``"pass"``, ``"fail"`` or ``"not-applicable"``.
        reason: what was checked and, for a failure or a row that did not run, why.
        measured: the numbers the row measured (JSON values), e.g. ``{"max_error": 3e-7, "tolerance": 1e-5}``.
    """

    name: str
    status: Status
    reason: str = ""
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason, "measured": self.measured}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v) for v in value[:6]) + (", ..." if len(value) > 6 else "") + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_cell(v)}" for k, v in value.items()) + "}"
    return str(value)


@dataclass(frozen=True)
class ValidationReport:
    """What :func:`mrope.testing.validate` found on one model.

    Attributes:
        model: the checkpoint folder, or ``"tiny <family>"`` for a tiny model built from the family's config.
        family: the registry family of the model.
        quick: whether the rows ran in their bounded (``quick``) form.
        rows: the row results, in table order.
        notes: remarks that belong to no row (a plot that was skipped, ...).
    """

    model: str
    family: str
    quick: bool
    rows: tuple[RowResult, ...]
    notes: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        """No row failed (rows that do not apply do not fail)."""
        return all(r.status != FAIL for r in self.rows)

    @property
    def exit_code(self) -> int:
        """0 when :attr:`passed`, else 1 (what ``mrope check`` exits with)."""
        return 0 if self.passed else 1

    def row(self, name: str) -> RowResult:
        """The result of the row called ``name``."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(f"no row {name!r} in this report; it has {[r.name for r in self.rows]}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "family": self.family,
            "quick": self.quick,
            "passed": self.passed,
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }

    def to_json(self, path: str | Path | None = None) -> str:
        """The report as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n")
        return text

    def table(self) -> str:
        """The report as a text table a person reads: row, status, measured numbers, reason."""
        head = f"mrope check: {self.model} (family {self.family}{', quick' if self.quick else ''})"
        width = max(len(r.name) for r in self.rows) if self.rows else 4
        lines = [head, f"{'row':<{width}}  {'status':<14}  measured / reason"]
        for r in self.rows:
            measured = ", ".join(f"{k} {_cell(v)}" for k, v in r.measured.items())
            detail = "; ".join(x for x in (measured, r.reason) if x)
            lines.append(f"{r.name:<{width}}  {r.status:<14}  {detail}")
        counts = {s: sum(r.status == s for r in self.rows) for s in (PASS, FAIL, NOT_APPLICABLE)}
        lines.append(
            f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NOT_APPLICABLE]} not applicable: "
            + ("PASS" if self.passed else "FAIL")
        )
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)

    def plot(self, path: str | Path) -> str | None:
        """Draw the position sweep (the model's score for the same evidence at each depth) to ``path``
        with matplotlib. Returns ``None`` when drawn, else a note saying why not (matplotlib is not
        installed, or the sweep did not run)."""
        try:
            sweep = self.row("position_sweep")
        except KeyError:
            return "no position sweep in this report: nothing to plot"
        if "scores" not in sweep.measured:
            return f"the position sweep did not run ({sweep.reason}): nothing to plot"
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return "matplotlib is not installed: the sweep plot was skipped (pip install matplotlib)"
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.plot(sweep.measured["depths"], sweep.measured["scores"], marker="o")
        ax.set_xlabel("evidence depth (fraction of the context)")
        ax.set_ylabel("log p(answer)")
        ax.set_title(f"position sweep, {sweep.measured['context_tokens']} tokens: {self.model}")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
        return None


__all__ = ["FAIL", "NOT_APPLICABLE", "PASS", "RowResult", "Status", "ValidationReport"]
