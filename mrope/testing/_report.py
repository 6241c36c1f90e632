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
        name: the row (``"relativity"``, ``"prefill_decode"``, ...; :data:`mrope.testing._validate.ROW_NAMES`).
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


def json_text(document: dict[str, Any], path: str | Path | None = None) -> str:
    """``document`` as indented JSON text; also written to ``path`` (with a final newline) when given."""
    text = json.dumps(document, indent=2)
    if path is not None:
        Path(path).write_text(text + "\n")
    return text


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
    """What :func:`mrope.testing._validate` found on one model.

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
        return json_text(self.to_dict(), path)

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
        """Draw the position sweep (the model's score for the same evidence at each depth) to ``path`` as
        a PNG (Pillow, as :mod:`mrope._plot` draws). Returns ``None`` when drawn, else a note saying why not
        (the sweep did not run)."""
        try:
            sweep = self.row("position_sweep")
        except KeyError:
            return "no position sweep in this report: nothing to plot"
        if "scores" not in sweep.measured:
            return f"the position sweep did not run ({sweep.reason}): nothing to plot"
        sweep_chart(
            sweep.measured["depths"],
            sweep.measured["scores"],
            f"position sweep, {sweep.measured['context_tokens']} tokens: {self.model}",
        ).save(path, format="PNG")
        return None


CHART_SIZE = (480, 300)
"""Width and height of the sweep chart in pixels."""
CHART_BOX = (60, 30, 460, 250)
"""The plot area inside it: left, top, right, bottom."""
POINT_COLOUR = (31, 119, 180)
"""The colour of the sweep's points and line."""


def chart_point(depth: float, score: float, lo: float, hi: float) -> tuple[int, int]:
    """Pixel ``(x, y)`` of one sweep point: depth 0..1 across the plot area, score ``lo``..``hi`` up it."""
    left, top, right, bottom = CHART_BOX
    span = hi - lo if hi > lo else 1.0
    return round(left + depth * (right - left)), round(bottom - (score - lo) / span * (bottom - top))


def sweep_chart(depths: list[float], scores: list[float], title: str) -> Any:
    """The sweep as a Pillow image: score (log p of the answer) against the evidence's depth."""
    from PIL import Image as PILImage
    from PIL import ImageDraw

    lo, hi = min(scores), max(scores)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    image = PILImage.new("RGB", CHART_SIZE, "white")
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = CHART_BOX
    draw.rectangle(CHART_BOX, outline=(0, 0, 0))
    points = [chart_point(d, s, lo, hi) for d, s in zip(depths, scores, strict=True)]
    draw.line(points, fill=POINT_COLOUR, width=2)
    for x, y in points:
        draw.ellipse((x - 4, y - 4, x + 4, y + 4), fill=POINT_COLOUR)
    draw.text((left, 8), title, fill=(0, 0, 0))
    draw.text((left, bottom + 8), "evidence depth: 0 (head) .. 1 (tail)", fill=(0, 0, 0))
    draw.text((4, top), f"{hi:.3g}", fill=(0, 0, 0))
    draw.text((4, bottom - 10), f"{lo:.3g}", fill=(0, 0, 0))
    draw.text((4, (top + bottom) // 2), "log p", fill=(0, 0, 0))
    return image


__all__ = [
    "CHART_BOX",
    "CHART_SIZE",
    "FAIL",
    "NOT_APPLICABLE",
    "PASS",
    "POINT_COLOUR",
    "RowResult",
    "Status",
    "ValidationReport",
    "chart_point",
    "json_text",
    "sweep_chart",
]
