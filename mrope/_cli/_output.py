"""What ``mrope positions`` prints and saves: the summary table, the JSON document, ``.npy`` / ``.json`` files."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mrope._cli._args import CliError
from mrope._errors import LayoutError
from mrope._position_sets import stacked_ids
from mrope._positions import Positions
from mrope._result_rows import media_items

SAVE_SUFFIXES = (".npy", ".json", ".mrpg")


def positions_document(p: Positions, model: str) -> dict[str, Any]:
    """The positions as JSON (the shape of the service's ``POST /v1/positions`` response, plus ``model``
    and ``media``: each image's and video's record, :meth:`mrope.media.MediaRecord.as_dict`, or ``null``
    for one given by its grid)."""
    return {"model": model, **p.to_dict(), "media": media_items(p)}


def sets_document(sets: Mapping[str, Positions], pattern: Sequence[str], model: str) -> dict[str, Any]:
    """Every position set as JSON (the service's ``layer_sets`` response plus ``model``): ``position_sets``
    (each set's :meth:`~mrope.Positions.to_dict`), ``layer_pattern`` and ``media``."""
    first = next(iter(sets.values()))
    return {
        "model": model,
        "position_sets": {name: p.to_dict() for name, p in sets.items()},
        "layer_pattern": list(pattern),
        "media": media_items(first),
    }


def sets_table(
    sets: Mapping[str, Positions], pattern: Sequence[str], model: str, labels: Sequence[str]
) -> str:
    """The summary table of each position set, under a line naming the sets and the layer pattern."""
    head = (
        f"{len(sets)} position set{'s' * (len(sets) != 1)} ({', '.join(sets)}); layer i reads set "
        f"pattern[i % {len(pattern)}] of ({', '.join(pattern)})"
    )
    parts = [head]
    for name, p in sets.items():
        parts.extend(("", f"set {name}:", summary_table(p, model, labels)))
    return "\n".join(parts)


def save_sets(sets: Mapping[str, Positions], pattern: Sequence[str], model: str, path: str) -> str:
    """Write the sets' ids stacked (:func:`mrope._position_sets.stacked_ids`, ``[S, A, T]`` in their
    order) as ``.npy``, or :func:`sets_document` as ``.json``; a position program is one set's (refused)."""
    suffix = check_out_suffix(path)
    if suffix == ".mrpg":
        raise CliError(
            f"--out {path!r}: position sets have no .mrpg form (a program is one set's); use .npy or .json"
        )
    try:
        if suffix == ".npy":
            try:
                ids = stacked_ids(sets)
            except LayoutError as exc:
                raise CliError(f"--out {path!r}: {exc}; use .json") from None
            with open(path, "wb") as f:
                np.save(f, ids, allow_pickle=False)
            return f"position sets {list(sets)} {ids.dtype} {list(ids.shape)} -> {path}"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(sets_document(sets, pattern, model), f)
            f.write("\n")
        return f"position sets {list(sets)} and the layer pattern (JSON) -> {path}"
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


def _num(v: Any) -> str:
    """A position as text: an int, or a float32 (fractional time) in its shortest form."""
    return f"{v.item():g}" if isinstance(v, np.floating) else str(int(v))


def _range(row: np.ndarray) -> str:
    lo, hi = _num(row.min()), _num(row.max())
    return lo if lo == hi else f"{lo}..{hi}"


def summary_table(p: Positions, model: str, labels: Sequence[str]) -> str:
    """A readable table: one row per span (segment, source, kind, token range, t / h / w ranges, LLM grid,
    tile), then the delta and the first decode position. Positions of other than three rows (VRoPE's
    four maps, HunyuanOCR's four axes) show one range per row, headed ``r0``, ``r1``, ..."""
    axes = p.ids.shape[0]
    names = ("t", "h", "w") if axes == 3 else tuple(f"r{a}" for a in range(axes))
    header = ("seg", "source", "kind", "tokens", *names, "grid", "tile")
    rows: list[tuple[str, ...]] = []
    for s in p.spans:
        block = p.ids[:, s.start : s.stop]
        label = labels[s.index] if s.index < len(labels) else ""
        rows.append(
            (
                str(s.index),
                label if len(label) <= 28 else label[:27] + "…",
                s.kind,
                str(s.start) if s.stop - s.start == 1 else f"{s.start}..{s.stop - 1}",
                *(_range(block[a]) for a in range(axes)),
                "" if s.grid is None else "x".join(str(v) for v in s.grid),
                "" if s.tile is None else f"r{s.tile[0]} c{s.tile[1]}",
            )
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {0, 3, *range(4, 4 + axes)}

    def line(cells: Sequence[str]) -> str:
        out = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    n = p.num_tokens
    top = _num(p.ids.max()) if n else "-1"
    lines = [
        f"model {model}: {n} tokens in {len(p.spans)} span{'s' * (len(p.spans) != 1)}, max position {top}",
        line(header),
        line(["-" * w for w in widths]),
        *(line(r) for r in rows),
        f"delta {_num(np.asarray(p.delta, dtype=p.ids.dtype)[()])}: decode token i (i >= {n}) gets position "
        f"i + delta; the next one gets {_num(p.window(n, n + 1)[0, 0])}",
    ]
    lines.extend(f"note: {note}" for note in p.notes)
    return "\n".join(lines)


def check_out_suffix(path: str) -> str:
    """The lower-case suffix of an ``--out`` path, which must be ``.npy``, ``.json`` or ``.mrpg``."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in SAVE_SUFFIXES:
        raise CliError(
            f"--out {path!r}: the suffix must be .npy (int64 [3, T]), .json (positions, spans, grids) or "
            ".mrpg (a position program)"
        )
    return suffix


def save_positions(p: Positions, model: str, path: str) -> str:
    """Write ``ids`` as ``.npy`` (int64 ``[3, T]``), the JSON document as ``.json``, or the position program
    (:meth:`mrope.PositionProgram.to_bytes`) as ``.mrpg``; returns what was written."""
    suffix = check_out_suffix(path)
    try:
        if suffix == ".mrpg":
            program = p.program()
            with open(path, "wb") as f:
                f.write(program.to_bytes())
            return f"position program ({program.num_runs} runs, {p.num_tokens} tokens) -> {path}"
        if suffix == ".npy":
            with open(path, "wb") as f:
                np.save(f, p.ids, allow_pickle=False)
            return f"positions {p.ids.dtype} [{p.ids.shape[0]}, {p.num_tokens}] -> {path}"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(positions_document(p, model), f)
            f.write("\n")
        return f"positions, spans and grids (JSON) -> {path}"
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None
