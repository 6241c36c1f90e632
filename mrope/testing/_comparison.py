"""What :func:`mrope.testing.compare_schemes` measured: one :class:`SchemeResult` per scheme, gathered in a
:class:`SchemeComparison` to read as a table, as JSON, or look up by name.

Statuses are the validation table's (:mod:`mrope.testing._report`): ``"pass"``, ``"fail"`` and
``"not-applicable"``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrope.testing._report import FAIL, PASS, RowResult, json_text

CHECK_NAMES: tuple[str, ...] = ("shift", "crop", "tiles", "frames")
"""The invariance checks of a comparison, in table order (what each compares: :func:`compare_schemes`)."""
AXES: tuple[str, ...] = ("t", "h", "w")
"""The grid axes a decay curve runs along: frames, rows, columns."""


@dataclass(frozen=True)
class DecayCurve:
    """The mean q.k score of constant content against grid distance along one axis.

    Attributes:
        axis: ``"t"`` (frames of a video), ``"h"`` (rows) or ``"w"`` (columns).
        distances: grid steps ``d`` (frames, rows or columns; 0, 1, ...).
        scores: for each distance, the mean over every token pair ``d`` steps apart along ``axis`` (same
            place on the other two) and every head of ``q_rot . k_rot / head_dim`` with ``q = k`` all ones
            before rotation: 1 at ``d = 0`` (without YaRN's attention factor), ``cos`` of the angle
            difference averaged over the channels beyond.
    """

    axis: str
    distances: tuple[int, ...]
    scores: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "distances": list(self.distances), "scores": list(self.scores)}


@dataclass(frozen=True)
class SchemeResult:
    """One scheme's row of a comparison.

    Attributes:
        model: the scheme's (or family's) canonical name.
        checks: one :class:`~mrope.testing.RowResult` per :data:`CHECK_NAMES` entry; ``measured`` holds
            ``max_score_difference`` (the largest ``|score_a - score_b|`` over the paired tokens and heads)
            and ``tolerance`` where the check ran.
        video_tokens: tokens of the long video prompt (``None`` where it could not be built).
        max_id: the largest position id (any axis) of the long video prompt.
        id_growth: ``max_id / video_tokens``: how fast ids grow with the video's length.
        decay: one :class:`DecayCurve` per axis of :data:`AXES` (empty where the decay video could not be
            built as one grid per frame).
        notes: what could not be measured, and why (and, for a position set, which layers read it).
        position_set: the position set measured, for a model with per-layer sets
            (:class:`mrope.LayerSets`: a row per set); ``None`` for a model whose every layer reads its
            own positions.
    """

    model: str
    checks: tuple[RowResult, ...]
    video_tokens: int | None
    max_id: float | None
    id_growth: float | None
    decay: tuple[DecayCurve, ...]
    notes: tuple[str, ...] = ()
    position_set: str | None = None

    @property
    def label(self) -> str:
        """The row's name in a table: the model, and ``[set]`` for a position set."""
        return self.model if self.position_set is None else f"{self.model} [{self.position_set}]"

    def check(self, name: str) -> RowResult:
        """The check called ``name`` (one of :data:`CHECK_NAMES`)."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check {name!r}; the checks are {[c.name for c in self.checks]}")

    def curve(self, axis: str) -> DecayCurve:
        """The decay curve along ``axis`` (``"t"``, ``"h"`` or ``"w"``)."""
        for c in self.decay:
            if c.axis == axis:
                return c
        raise KeyError(
            f"no decay curve along {axis!r} for {self.model!r}; it has {[c.axis for c in self.decay]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "checks": [c.to_dict() for c in self.checks],
            "video_tokens": self.video_tokens,
            "max_id": self.max_id,
            "id_growth": self.id_growth,
            "decay": [c.to_dict() for c in self.decay],
            "notes": list(self.notes),
            "position_set": self.position_set,
        }


def _check_cell(result: RowResult) -> str:
    if result.status not in (PASS, FAIL):
        return "n/a"
    gap = result.measured.get("max_score_difference")
    return result.status if gap is None else f"{result.status} {gap:.1g}"


@dataclass(frozen=True)
class SchemeComparison:
    """Schemes compared on the same prompts (:func:`mrope.testing.compare_schemes`).

    Attributes:
        rows: one :class:`SchemeResult` per scheme, in the order asked.
        settings: what the prompts were (the shift, the long video's grid, the decay video's grid, the
            tolerances), JSON values.
    """

    rows: tuple[SchemeResult, ...]
    settings: dict[str, Any]

    def row(self, model: str, position_set: str | None = None) -> SchemeResult:
        """The result of the scheme called ``model`` (its canonical name); for a model with several
        position sets, the row of ``position_set`` (required then)."""
        found = [r for r in self.rows if r.model == model]
        sets = list(dict.fromkeys(r.position_set for r in found))
        if position_set is not None:
            found = [r for r in found if r.position_set == position_set]
        elif len(sets) > 1:
            raise KeyError(
                f"{model!r} has a row per position set {sets}: name one (row(model, position_set))"
            )
        if not found:
            raise KeyError(
                f"no scheme {model!r}{f' set {position_set!r}' if position_set else ''} in this comparison; "
                f"it has {[r.label for r in self.rows]}"
            )
        return found[0]

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "rows": [r.to_dict() for r in self.rows]}

    def to_json(self, path: str | Path | None = None) -> str:
        """The comparison as JSON text; also written to ``path`` when given."""
        return json_text(self.to_dict(), path)

    def table(self) -> str:
        """A text table a person reads: each check's status and largest score difference, the long
        video's ids per token and largest id, and the decay curves' scores at the largest distance."""
        far = max((self.settings.get("decay_extent", 1) - 1), 0)
        head = ["scheme", *CHECK_NAMES, "ids/token", "max id", f"score at d={far} (t h w)"]
        lines = []
        for r in self.rows:
            growth = "n/a" if r.id_growth is None else f"{r.id_growth:.4f}"
            top = "n/a" if r.max_id is None else f"{r.max_id:g}"
            decay = " ".join(f"{c.scores[-1]:+.3f}" for c in r.decay) or "n/a"
            lines.append([r.label, *(_check_cell(r.check(n)) for n in CHECK_NAMES), growth, top, decay])
        widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
        out = [
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            for row in [head, *lines]
        ]
        for r in self.rows:
            out.extend(f"note: {r.label}: {n}" for n in r.notes)
            out.extend(
                f"note: {r.label}: {c.name}: {c.reason}" for c in r.checks if c.status not in (PASS, FAIL)
            )
        return "\n".join(out)


__all__ = ["AXES", "CHECK_NAMES", "DecayCurve", "SchemeComparison", "SchemeResult"]
