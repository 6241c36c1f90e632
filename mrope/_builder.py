"""The builder's public API: segments -> position ids, batches, token counts, decode continuation.

Each call asks the layout engine of its rules (:mod:`mrope._layout`) to plan and fill ``[3, T]`` int64 ids.

The output types live in :mod:`mrope._positions`, grid arithmetic in :mod:`mrope._grid`, the pieces and
the fill engine in :mod:`mrope._layout.pieces`, audio-token arithmetic in :mod:`mrope._audio_grid`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace as _replace
from typing import TYPE_CHECKING, Any

import numpy as np

import mrope._audio_grid as _audio_grid
from mrope._errors import LayoutError, MRopeWarning
from mrope._layout import LayoutPlan, engine
from mrope._layout.pruned import pruned_positions, segment_masks
from mrope._positions import Batch, next_positions, with_media
from mrope._rules import LayoutRules
from mrope._segments import Audio, Image, Segment, Text, Video
from mrope.models import ModelLike, resolve_rules, resolve_tokenizer

if TYPE_CHECKING:
    from mrope._positions import Batch, Positions


def build_positions(
    segments: Sequence[Segment],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
    convention: str = "released",
) -> Positions:
    """Positions of one sequence of segments.

    Args:
        segments: :class:`Text`, :class:`Image` and :class:`Video` values in sequence order.
        model: required (there is no default model): a family name (``"qwen2.5-vl"``, see
            :func:`mrope.models.names`), a Hugging Face model_type (``"qwen2_5_vl"``), a repo id
            (``"Qwen/Qwen2.5-VL-7B-Instruct"``), a :class:`mrope.models.ModelFamily`, or what
            :func:`mrope.from_pretrained` returns. May be omitted only when ``rules`` is a full
            :class:`LayoutRules`.
        rules: a :class:`LayoutRules` (replaces the model's) or a dict of overrides of the model's.
        tokenizer: a callable ``str -> list[int]`` or a ``tokenizers.Tokenizer``; needed for Qwen3-VL
            video timestamps (default: the tokenizer of a :func:`mrope.from_pretrained` checkpoint).
        convention: ``"released"`` (the official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``: ``s + max(H', W')`` advance, its pad value).

    Returns:
        :class:`Positions` with ``ids`` int64 ``[3, T]``. Segments with ``keep=`` masks give the pruned
        prompt: the unpruned positions at the kept tokens (docs/pruning.md). ``media`` holds each image's
        and video's ``record`` (how :mod:`mrope.media` sized it), in segment order.
    """
    return _built(segments, model, rules, tokenizer, convention, lazy=False)


def build_lazy_positions(
    segments: Sequence[Segment], model: Any, rules: LayoutRules, tokenizer: Any
) -> Positions:
    """:func:`build_positions` (``rules`` resolved) whose ``ids`` and ``input_ids`` are written on first read where the engine
    can defer them (:meth:`mrope._layout.counter.CounterPlan.lazy_positions`): the program, delta and
    metadata of an unpruned counter-engine prompt then cost O(segments) and no position is written
    (the service's program answer). Same values and errors as :func:`build_positions`."""
    return _built(segments, model, rules, tokenizer, "released", lazy=True)


def _built(
    segments: Sequence[Segment], model: Any, rules: Any, tokenizer: Any, convention: str, lazy: bool
) -> Positions:
    tokenizer = resolve_tokenizer(model, tokenizer)
    plan = plan_sequence(segments, resolve_rules(model, rules, convention), tokenizer)
    for note in plan.notes:
        warnings.warn(note, MRopeWarning, stacklevel=3)
    masks = segment_masks(segments)
    if masks:
        p = pruned_positions(plan.positions(), masks, segments)
    else:
        p = plan.lazy_positions() if lazy else plan.positions()
    return _with_records(p, segments)


def _with_records(p: Positions, segments: Sequence[Segment]) -> Positions:
    """``p`` with ``media``: each image's and video's ``record``, in segment order."""
    media = tuple(s.record for s in segments if isinstance(s, (Image, Video)))
    return with_media(p, media) if media else p


def plan_sequence(segments: Sequence[Segment], lay: LayoutRules, tokenizer: Any) -> LayoutPlan:
    """The layout engine's plan of one sequence of segments (not filled yet)."""
    if isinstance(segments, (Text, Image, Video, Audio)) or not isinstance(segments, Sequence):
        raise LayoutError(
            f"segments must be a list of Text / Image / Video / Audio; got {type(segments).__name__}"
        )
    return engine(lay).plan_segments(segments, lay, tokenizer)


def count_tokens(
    segments: Sequence[Segment],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    tokenizer: Any = None,
) -> int:
    """How many tokens :func:`build_positions` would emit, without writing any position.

    Uses the same planner, so it is exact; without a tokenizer each timestamp text counts as one token
    (a lower bound for Qwen3-VL / GLM-4.1V videos). Cheap for any grid size: use it to enforce caps
    before building. ``model`` is required, as in :func:`build_positions`. With ``keep=`` masks it is
    the pruned prompt's count: the unpruned count less the dropped tokens (the masks' lengths are checked
    when the prompt is built; the work of building is the unpruned prompt's).
    """
    tokenizer = resolve_tokenizer(model, tokenizer)
    lay = resolve_rules(model, rules)
    n = engine(lay).count_tokens(segments, lay, tokenizer)
    masks = segment_masks(segments)
    return n - sum(m.size - int(np.count_nonzero(m)) for m in masks.values()) if masks else n


def audio_tokens(audio: Audio, model: ModelLike | LayoutRules | None = None, rules: Any = None) -> int:
    """How many audio tokens ``audio`` has for a model (given, or from its seconds / mel frames by the
    family's rule): ``mrope.audio_tokens(Audio(seconds=2.0), model="qwen2.5-omni") == 50``.

    Args:
        audio: an :class:`mrope.Audio`.
        model: a model (name, model_type, repo id, family) or a :class:`~mrope.LayoutRules`.
        rules: overrides of the model's rules (or full rules).

    Raises:
        LayoutError: the rules have no audio, or the clip is too short for one token.
    """
    lay = model if isinstance(model, LayoutRules) and rules is None else resolve_rules(model, rules)
    return _audio_grid.audio_tokens(audio, lay)


def build_batch(
    samples: Sequence[Sequence[Segment]],
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    *,
    padding_side: str = "left",
    pad_position: int | None = None,
    pad_token_id: int = 0,
    tokenizer: Any = None,
    convention: str = "released",
) -> Batch:
    """Positions of a batch of sequences, padded to the longest.

    Positions are computed on valid tokens only, so left and right padding give the same values at
    valid tokens. Pad slots hold ``pad_position`` (default: the rules' ``pad_position``, the family's
    value under ``convention``) and ``attention_mask`` is 0 there. ``model`` is required, as in
    :func:`build_positions`.

    Returns:
        :class:`Batch` with ``ids`` int64 ``[3, B, L]``, ``attention_mask`` ``[B, L]``, ``deltas`` ``[B]``;
        each of its ``sequences`` holds its sample's ``media`` records (as :func:`build_positions`).
    """
    if padding_side not in ("left", "right"):
        raise LayoutError(f"padding_side must be 'left' or 'right'; got {padding_side!r}")
    tokenizer = resolve_tokenizer(model, tokenizer)
    lay = resolve_rules(model, rules, convention)
    if pad_position is None:
        pad_position = lay.pad_position
    if isinstance(samples, (str, bytes)) or not isinstance(samples, Sequence) or not samples:
        raise LayoutError("build_batch takes a non-empty list of segment lists")
    plans = [plan_sequence(s, lay, tokenizer) for s in samples]
    masks = [segment_masks(s) for s in samples]
    if any(masks):
        return _pruned_batch(plans, masks, samples, lay, padding_side, pad_position, pad_token_id)
    lengths = [plan.num_tokens for plan in plans]
    width = max(lengths)
    b = len(plans)
    # every sequence is filled straight into its row (no per-sequence arrays to copy); only the pad
    # slots are written besides, so each byte of the batch is touched once
    ids = np.empty((lay.num_axes, b, width), dtype=np.float32 if lay.fractional_time else np.int64)
    mask = np.ones((b, width), dtype=np.int64)
    input_ids = np.empty((b, width), dtype=np.int64)
    seqs = []
    image_index = 0
    for row, (plan, n) in enumerate(zip(plans, lengths, strict=True)):
        sl, pad = (
            (slice(width - n, width), slice(0, width - n))
            if padding_side == "left"
            else (
                slice(0, n),
                slice(n, width),
            )
        )
        if n < width:
            ids[:, row, pad] = pad_position
            input_ids[row, pad] = pad_token_id
            mask[row, pad] = 0
        for note in plan.notes:
            warnings.warn(f"sample {row}: {note}", MRopeWarning, stacklevel=2)
        seqs.append(
            _with_records(plan.positions(ids[:, row, sl], input_ids[row, sl], image_index, n), samples[row])
        )
        if lay.image_index_scope == "batch":  # the image index keeps counting across the rows
            image_index += len(plan.image_grids) - len(plan.targets)
    deltas = np.asarray([p.delta for p in seqs], dtype=ids.dtype)
    return Batch(ids=ids, attention_mask=mask, deltas=deltas, input_ids=input_ids, sequences=tuple(seqs))


def _pruned_batch(
    plans: list[LayoutPlan],
    masks: list[dict[int, np.ndarray]],
    samples: Sequence[Sequence[Segment]],
    lay: LayoutRules,
    padding_side: str,
    pad_position: int,
    pad_token_id: int,
) -> Batch:
    """:func:`build_batch` of samples some of which carry ``keep=`` masks: each row built unpruned, its
    kept columns selected, then padded (the rows' ids are views of the batch, as unpruned)."""
    seqs = []
    image_index = 0
    for row, (plan, row_masks) in enumerate(zip(plans, masks, strict=True)):
        for note in plan.notes:
            warnings.warn(f"sample {row}: {note}", MRopeWarning, stacklevel=3)
        full = plan.positions(None, None, image_index)
        row_positions = pruned_positions(full, row_masks, samples[row]) if row_masks else full
        seqs.append(_with_records(row_positions, samples[row]))
        if lay.image_index_scope == "batch":
            image_index += len(plan.image_grids) - len(plan.targets)
    width = max(p.num_tokens for p in seqs)
    ids = np.full((lay.num_axes, len(seqs), width), pad_position, dtype=seqs[0].ids.dtype)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    input_ids = np.full((len(seqs), width), pad_token_id, dtype=np.int64)
    rows = []
    for row, p in enumerate(seqs):
        n = p.num_tokens
        sl = slice(width - n, width) if padding_side == "left" else slice(0, n)
        ids[:, row, sl], input_ids[row, sl], mask[row, sl] = p.ids, p.input_ids, 1
        rows.append(_replace(p, ids=ids[:, row, sl], input_ids=input_ids[row, sl]))
    deltas = np.asarray([p.delta for p in seqs], dtype=ids.dtype)
    return Batch(ids=ids, attention_mask=mask, deltas=deltas, input_ids=input_ids, sequences=tuple(rows))


def text_positions(n: int) -> np.ndarray:
    """``0 .. n-1`` on every axis, int64 ``[3, n]`` (what M-RoPE sees for text only)."""
    if n < 0:
        raise LayoutError(f"n must be >= 0; got {n}")
    return np.broadcast_to(np.arange(n, dtype=np.int64), (3, n)).copy()


__all__ = [
    "audio_tokens",
    "build_batch",
    "build_lazy_positions",
    "build_positions",
    "count_tokens",
    "next_positions",
    "plan_sequence",
    "text_positions",
]
