"""The builder's output types (Positions, Batch, Span) and decode continuation.

:class:`Positions` describes one sequence, :class:`Batch` a padded batch, a :class:`Span` the tokens one
segment produced; :func:`next_positions` continues a sequence past its prompt. Every layout engine
describes what it filled with these types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from mrope._caches import register
from mrope._errors import LayoutError
from mrope._media_record import MediaRecord
from mrope._prefix_key import prefix_key
from mrope._program import PositionProgram
from mrope._program_build import compile_program
from mrope._rules import LayoutRules, rules_digest

if TYPE_CHECKING:
    import torch


class Span(NamedTuple):
    """A contiguous run of tokens ``[start, stop)`` that one segment produced.

    An immutable named tuple (a builder writes one per piece, so it must cost little to make).

    Attributes:
        kind: ``"text"``, ``"wrapper"`` (vision start/end), ``"timestamp"`` (Qwen3-VL time text),
            ``"image"``, ``"video"`` or ``"thumbnail"``.
        start, stop: token indices.
        index: index of the segment in the input list.
        grid: the LLM grid ``(T', H', W')`` of a vision span (per tile for tiles), else ``None``.
        tile: ``(row, col)`` of the tile a span holds, else ``None``.
    """

    kind: str
    start: int
    stop: int
    index: int
    grid: tuple[int, int, int] | None = None
    tile: tuple[int, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "start": self.start, "stop": self.stop, "index": self.index}
        if self.grid is not None:
            out["grid"] = list(self.grid)
        if self.tile is not None:
            out["tile"] = list(self.tile)
        return out


SPAN_TYPES = {"image": 1, "thumbnail": 1, "video": 2}
"""Span kind -> modality type id of its tokens (1 image, 2 video); other kinds are text (0)."""


def span_token_types(spans: Sequence[Span], n: int) -> np.ndarray:
    """int64 ``[n]`` modality types of tokens covered by ``spans``: 1 image, 2 video, 0 otherwise."""
    out = np.zeros(n, dtype=np.int64)
    for s in spans:
        kind = SPAN_TYPES.get(s.kind)
        if kind:
            out[s.start : s.stop] = kind
    return out


@dataclass(frozen=True, eq=False)
class Positions:
    """Positions of one sequence.

    Attributes:
        ids: int64 ``[3, T]``, rows t, h, w.
        delta: ``max(ids) + 1 - T``; decode token at logical index ``i >= T`` gets ``i + delta``.
        spans: what produced each token; they cover ``[0, T)`` exactly once, in order.
        input_ids: int64 ``[T]``: the token ids the model would see (text given as a count holds
            :data:`TEXT_FILL_ID`).
        image_grid_thw, video_grid_thw: int64 ``[n, 3]`` encoder grids in order, as the processors
            give them (tiled images report their whole grid).
        second_per_grid_ts: float64 ``[n_videos]``.
        notes: things worth knowing that are not errors (e.g. video patches sharing a time).
        rules: the layout rules used.
        generation_ids: int64 ``[3, n + 1]``: under ``generates_images`` rules, the positions of the
            tokens the model will generate for the ``Image(..., generate=True)`` targets (last target
            first, then one end marker), as GLM-Image caches them; else ``None``.
        audio_tokens: int64 ``[n_audios]``: tokens of each audio clip in order (standalone and inside
            videos), for rules with audio.
        media: one entry per image and video segment, in segment order: how a loader of
            :mod:`mrope.media` read and sized it (:class:`mrope.media.MediaRecord`: route, resized size,
            frames read, where each sizing value came from), ``None`` for one given by its grid.

    ``ids`` has ``rules.num_axes`` rows (3: t, h, w; HunyuanOCR's four: sequence, w, h, image index).
    Rules with fractional time (``time_rounding="none"``, Qwen3-Omni) give ``ids`` as float32 (the
    model's own dtype) and a float ``delta``; every other family gives int64 and an int.
    """

    ids: np.ndarray
    delta: int | float
    spans: tuple[Span, ...]
    input_ids: np.ndarray
    image_grid_thw: np.ndarray
    video_grid_thw: np.ndarray
    second_per_grid_ts: np.ndarray
    rules: LayoutRules
    notes: tuple[str, ...] = field(default=())
    audio_tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    generation_ids: np.ndarray | None = None
    media: tuple[MediaRecord | None, ...] = ()

    @property
    def num_tokens(self) -> int:
        lazy = self.__dict__.get("_lazy_fill")
        return lazy[1] if lazy is not None else int(self.ids.shape[1])

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """int64 ``[T]``: 0 text (wrappers and timestamps included), 1 image, 2 video, as the transformers
        5.x processors return them (GLM-4.1V's video frames carry the image id and are still 2)."""
        return span_token_types(self.spans, self.num_tokens)

    def torch(self) -> torch.Tensor:
        """``ids`` as a torch tensor ``[3, T]`` (int64, or float32 for fractional time; shares memory)."""
        import torch

        return torch.from_numpy(self.ids)

    def metadata(self) -> dict[str, Any]:
        """Everything but the ids, JSON-ready: delta, num_tokens, spans, the grids, second_per_grid_ts,
        notes (the fields of the service's positions response besides ``positions``); ``audio_tokens``
        under rules with audio, and ``generation_ids`` (``[3][n + 1]``) when the sequence has images to
        generate (GLM-Image)."""
        out = {
            "delta": float(self.delta) if self._ids_kind() == "f" else int(self.delta),
            "num_tokens": self.num_tokens,
            "spans": [s.to_dict() for s in self.spans],
            "image_grid_thw": self.image_grid_thw.tolist(),
            "video_grid_thw": self.video_grid_thw.tolist(),
            "second_per_grid_ts": self.second_per_grid_ts.tolist(),
            "notes": list(self.notes),
        }
        if self.rules.has_audio:
            out["audio_tokens"] = self.audio_tokens.tolist()
        if self.generation_ids is not None:
            out["generation_ids"] = self.generation_ids.tolist()
        return out

    def _ids_kind(self) -> str:
        """The dtype kind of :attr:`ids` (``"f"`` under fractional time), without writing lazy ids."""
        lazy = self.__dict__.get("_lazy_fill")
        return lazy[2] if lazy is not None else self.ids.dtype.kind

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"positions": [[t...], [h...], [w...]], **metadata()}``."""
        return {"positions": self.ids.tolist(), **self.metadata()}

    def program(self) -> PositionProgram:
        """These positions as a :class:`mrope.PositionProgram`: runs (text lines, grid blocks, stored ids
        where nothing shorter is exact) in O(segments) space; ``program().expand()`` equals :attr:`ids`.
        It holds the prompt's tokens and :attr:`delta`; GLM-Image's planned :attr:`generation_ids` are not
        part of it.

        Positions the counter engine filled make it from the engine's plan in O(pieces)
        (:func:`mrope._layout.plan_program.plan_program`); the others (pruned, the sequence, canvas and
        omni engines, blocks with unevenly spaced frames) compile it from :attr:`ids` and check it
        (:func:`mrope._program_build.compile_program`). Both give the same program."""
        digest = rules_digest(self.rules)
        source = self.__dict__.get("_plan_program")
        if source is not None:  # made by the counter engine: straight from its plan (no ids read)
            make, args = source
            program = make(*args, self.delta, digest)
            if program is not None:
                return program
        return compile_program(self.ids, self.spans, self.delta, digest)

    def prefix_key(self, n: int, media_keys: Sequence[Any] | None = None) -> str:
        """A digest (32 hex characters) of what the first ``n`` tokens fix: two prompts with equal keys
        have, under the same rules, equal positions for those tokens and equal state after them.

        ``media_keys``: one str or bytes per media item of the prompt in sequence order (the engine's own
        hashes of the pixels or samples); the keys of the items the prefix reaches into enter the digest.
        See :mod:`mrope._prefix_key` for what the digest covers.
        """
        return prefix_key(self.ids, self.spans, self.second_per_grid_ts, self.rules, n, media_keys)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle and copy the spans themselves, never the pieces they are made from."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def window(self, start: int, stop: int, out: np.ndarray | None = None) -> np.ndarray:
        """Positions ``[A, stop - start]`` of tokens ``start .. stop-1`` of a sequence that begins with
        this prompt: the prompt's own positions where they exist, decode continuation past its end
        (``i + delta`` on every axis; under ``generates_images`` rules the :attr:`generation_ids`, which
        end after the generated images' end marker).

        This is how chunked prefill and decode stay in one coordinate system: slice, never rebuild.
        ``out``: the caller's ``[A, stop - start]`` buffer of the ids' dtype, written and returned (a
        chunk's slice of the prompt is copied into it with no allocation).
        """
        if not (0 <= start <= stop):
            raise LayoutError(f"window needs 0 <= start <= stop; got start={start}, stop={stop}")
        shape = (self.ids.shape[0], stop - start)
        if out is not None and (
            not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != self.ids.dtype
        ):
            got = f"{out.dtype} {list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
            raise LayoutError(
                f"window: out must be a {self.ids.dtype} array of shape {list(shape)}; got {got}"
            )
        t = self.num_tokens
        inside = self.ids[:, start : min(stop, t)]
        if stop <= t:
            if out is None:
                return inside.copy()
            out[...] = inside
            return out
        first = max(start, t)
        if self.generation_ids is not None:
            if stop - t > self.generation_ids.shape[1]:
                raise LayoutError(
                    f"window up to token {stop}: this prompt of {t} tokens decodes "
                    f"{self.generation_ids.shape[1]} generated tokens (its images and one end marker)"
                )
            after = self.generation_ids[:, first - t : stop - t]
        else:
            after = next_positions(self.delta, first, stop - first)[:1]
        if out is None:
            return np.concatenate([inside, np.broadcast_to(after, (self.ids.shape[0], stop - first))], axis=1)
        out[:, : inside.shape[1]] = inside
        out[:, inside.shape[1] :] = after
        return out


class _LazySpans:
    """``Positions.spans`` of a sequence made on first read by the engine that filled it (kept until then
    under ``_span_pieces`` as ``(make_spans, args)``), then kept in the instance (which then shadows this
    non-data descriptor). Building a batch thus writes no span that nobody reads."""

    def __get__(self, obj: Positions | None, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError("spans")  # a required field: no class-level default
        state = obj.__dict__
        source = state.get("_span_pieces")
        if source is None:  # another thread made them in between
            return state["spans"]
        make_spans, args = source
        spans = state["spans"] = tuple(make_spans(*args))
        state.pop("_span_pieces", None)
        return spans


Positions.spans = _LazySpans()  # type: ignore[assignment,misc]


class _LazyFill:
    """``Positions.ids`` and ``input_ids`` of a sequence whose engine writes them on first read (kept until
    then under ``_lazy_fill`` as ``(fill, num_tokens, dtype kind)``, ``fill()`` giving both arrays), then
    kept in the instance, which then shadows this non-data descriptor. A caller that asks only for the
    program or the metadata thus writes no position."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, obj: Positions | None, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # a required field: no class-level default
        state = obj.__dict__
        source = state.get("_lazy_fill")
        if source is None:  # another thread wrote them in between
            return state[self.name]
        state["ids"], state["input_ids"] = source[0]()
        state.pop("_lazy_fill", None)
        return state[self.name]


Positions.ids = _LazyFill("ids")  # type: ignore[assignment,misc]
Positions.input_ids = _LazyFill("input_ids")  # type: ignore[assignment,misc]


def filled_on_read(
    p: Positions, fill: Callable[[], tuple[np.ndarray, np.ndarray]], num_tokens: int, kind: str
) -> Positions:
    """``p`` (made with no ``ids`` or ``input_ids``) whose ``ids`` and ``input_ids`` are ``fill()``'s two
    arrays, written on first read; ``num_tokens`` and the ids' dtype ``kind`` are known before."""
    state = p.__dict__
    state.pop("ids", None)
    state.pop("input_ids", None)
    state["_lazy_fill"] = (fill, num_tokens, kind)
    return p


def positions_with_lazy_spans(
    make_spans: Callable[..., Sequence[Span]],
    span_args: tuple,
    ids: np.ndarray | None,
    delta: int,
    input_ids: np.ndarray | None,
    image_grid_thw: np.ndarray,
    video_grid_thw: np.ndarray,
    second_per_grid_ts: np.ndarray,
    rules: LayoutRules,
    notes: tuple[str, ...],
    generation_ids: np.ndarray | None,
    plan_program: tuple[Callable[..., PositionProgram | None], tuple] | None = None,
) -> Positions:
    """A :class:`Positions` whose spans are ``make_spans(*span_args)``, made on first read (same fields as
    the dataclass constructor gives; made without its frozen ``__setattr__`` per field). ``plan_program``:
    ``(make, args)`` whose ``make(*args, delta, rules_digest)`` is :meth:`Positions.program` made from the
    engine's plan (``None`` where that form does not apply)."""
    out = object.__new__(Positions)
    out.__dict__.update(
        ids=ids,
        delta=delta,
        _span_pieces=(make_spans, span_args),
        input_ids=input_ids,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        rules=rules,
        notes=notes,
        audio_tokens=np.zeros(0, dtype=np.int64),
        generation_ids=generation_ids,
    )
    if plan_program is not None:
        out.__dict__["_plan_program"] = plan_program
    return out


def with_media(p: Positions, media: tuple[MediaRecord | None, ...]) -> Positions:
    """``p`` with ``media`` set (its spans, if not made yet, stay unmade)."""
    out = object.__new__(Positions)
    out.__dict__.update(p.__dict__, media=media)
    return out


@dataclass(frozen=True, eq=False)
class Batch:
    """Positions of a padded batch.

    Attributes:
        ids: int64 ``[A, B, L]`` (A = ``rules.num_axes``, 3 but for HunyuanOCR; float32 for fractional
            time, Qwen3-Omni); pad slots hold ``pad_position``.
        attention_mask: int64 ``[B, L]``, 1 at valid tokens.
        deltas: int64 ``[B]`` (float32 with fractional time).
        input_ids: int64 ``[B, L]`` (pad slots hold ``pad_token_id``).
        sequences: the per-sample :class:`Positions`; their ``ids`` and ``input_ids`` are views of this
            batch's rows (they share memory with ``ids`` and ``input_ids``).
    """

    ids: np.ndarray
    attention_mask: np.ndarray
    deltas: np.ndarray
    input_ids: np.ndarray
    sequences: tuple[Positions, ...]

    @property
    def mm_token_type_ids(self) -> np.ndarray:
        """int64 ``[B, L]``: each sequence's :attr:`Positions.mm_token_type_ids` at its valid tokens, 0 at pads."""
        out = np.zeros(self.attention_mask.shape, dtype=np.int64)
        for row, p in enumerate(self.sequences):
            out[row, self.attention_mask[row].astype(bool)] = p.mm_token_type_ids
        return out

    @property
    def image_grid_thw(self) -> np.ndarray:
        """int64 ``[n, 3]``: every sequence's image grids, in order (images to generate included)."""
        return np.concatenate([p.image_grid_thw for p in self.sequences]).reshape(-1, 3)

    @property
    def images_per_sample(self) -> np.ndarray:
        """int64 ``[B]``: how many of :attr:`image_grid_thw` belong to each sequence (GLM-Image's
        ``images_per_sample``)."""
        return np.asarray([len(p.image_grid_thw) for p in self.sequences], dtype=np.int64)

    def __repr__(self) -> str:
        """A summary (shapes, valid lengths, deltas), never the arrays themselves."""
        axes, rows, length = self.ids.shape
        valid = self.attention_mask.sum(axis=1).tolist()
        shown = 8
        lengths = ", ".join(map(str, valid[:shown])) + (", ..." if rows > shown else "")
        deltas = ", ".join(f"{d:g}" for d in self.deltas.tolist()[:shown]) + (", ..." if rows > shown else "")
        rules = self.sequences[0].rules.name if self.sequences else "?"
        return (
            f"Batch({rules}: {rows} sequences x {length} slots, {axes} axes, {self.ids.dtype}; "
            f"valid tokens [{lengths}]; deltas [{deltas}])"
        )

    def torch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(position_ids [3, B, L], attention_mask [B, L], deltas [B, 1])`` as torch tensors."""
        import torch

        return (
            torch.from_numpy(self.ids),
            torch.from_numpy(self.attention_mask),
            torch.from_numpy(self.deltas).unsqueeze(1),
        )


_GRID_ARRAYS: dict[tuple, np.ndarray] = {}  # read-only int64 [n, 3] per tuple of grids
_GRID_ARRAY_LIMIT = 1024
"""Most grid lists kept (each of at most :data:`_GRID_ARRAY_GRIDS` grids); when full the cache starts over."""
_GRID_ARRAY_GRIDS = 64
register("positions.grid_arrays", lambda: _GRID_ARRAYS.clear(), lambda: len(_GRID_ARRAYS), _GRID_ARRAY_LIMIT)


def grid_array(grids: list[tuple[int, int, int]]) -> np.ndarray:
    """A new int64 ``[n, 3]`` of the grids (``[0, 3]`` for none). Prompts repeat the same grid lists, and
    copying a cached array costs a fifth of numpy's conversion of a list of tuples."""
    if not grids:
        return np.zeros((0, 3), dtype=np.int64)
    if len(grids) > _GRID_ARRAY_GRIDS:
        return np.array(grids, dtype=np.int64)
    key = tuple(grids)
    try:
        hit = _GRID_ARRAYS.get(key)
    except TypeError:  # a grid that is not a tuple of ints
        return np.array(grids, dtype=np.int64)
    if hit is None:
        hit = np.array(grids, dtype=np.int64)
        hit.flags.writeable = False
        if len(_GRID_ARRAYS) >= _GRID_ARRAY_LIMIT:
            _GRID_ARRAYS.clear()
        _GRID_ARRAYS[key] = hit
    return hit.copy()


def next_positions(delta: int | np.ndarray | Sequence[int], n_done: int, n_new: int) -> np.ndarray:
    """Positions of ``n_new`` tokens that follow ``n_done`` valid tokens (decode, or prefill chunks past
    the prompt): token ``i`` gets ``i + delta`` on every axis.

    Args:
        delta: the sequence's delta (an int), or one per sequence (``[B]``); a float delta (Qwen3-Omni's
            fractional positions) gives float32 positions ``fl32(i + delta)``.
        n_done: valid tokens already in the cache (prompt included), counted without padding.
        n_new: tokens to place.

    Returns:
        int64 ``[3, n_new]`` for an int delta, ``[3, B, n_new]`` for ``[B]`` deltas.
    """
    for name, v in (("n_done", n_done), ("n_new", n_new)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise LayoutError(f"{name} must be an int >= 0; got {v!r}")
    steps = np.arange(n_done, n_done + n_new, dtype=np.int64)
    d = np.asarray(delta)
    fractional = d.dtype.kind == "f" and d.ndim <= 1 and d.size and np.all(np.isfinite(d))
    if not fractional and (d.dtype.kind not in "iu" or d.ndim > 1 or (d.ndim == 1 and d.size == 0)):
        raise LayoutError(f"delta must be an int or a 1-D int array [B]; got {delta!r}")
    if d.ndim == 0:
        return np.broadcast_to(continued(steps, d), (3, n_new)).copy()
    return np.broadcast_to(continued(steps[None, :], d[:, None]), (3, d.size, n_new)).copy()


def continued(steps: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """``steps + delta`` (broadcast): where decode continuation puts token ``steps`` of a sequence of
    ``delta``. int64 for int deltas; for float deltas (the fractional-time families, Qwen3-Omni) float32
    ``fl32(steps) + fl32(delta)``, as the model adds them."""
    if delta.dtype.kind == "f":
        return steps.astype(np.float32) + delta.astype(np.float32)
    return steps.astype(np.int64) + delta.astype(np.int64)


__all__ = [
    "SPAN_TYPES",
    "Batch",
    "Positions",
    "Span",
    "continued",
    "filled_on_read",
    "grid_array",
    "next_positions",
    "positions_with_lazy_spans",
    "span_token_types",
]
