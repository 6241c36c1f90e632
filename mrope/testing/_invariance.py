"""Invariance assertions for users' test suites (and this project's own).

Each assertion checks what a model actually sees: the RoPE attention scores ``q_i . k_j`` after
rotation by :func:`mrope.apply_mrope` (float64 by default), not only the coordinates. Two token sets
that should be "the same picture" get identical q and k content vectors, are rotated by their own
positions, and must give equal score matrices.

- :func:`assert_translation_invariant`: shifting every coordinate by a constant changes no score.
- :func:`assert_crop_invariant`: a merge-aligned crop at the same scale scores like the same region of
  the whole image (and under ``crop="keep"`` has exactly its coordinates).
- :func:`assert_frame_order_invariant`: a video whose frames were reordered or resampled keeps every
  frame's coordinates: they move with the frames.
- :func:`assert_tile_invariant`: under the ``global`` tile rule, tiles (in any order) score like the
  untiled image.
- :func:`assert_prefill_decode_consistent`: a prompt plus decode continuation equals the whole
  sequence, also when the prompt is prefilled in chunks.
- :func:`assert_time_aligned`: the same moment sampled at two frame rates gets the same time.

Every assertion takes the :class:`~mrope.Positions` the builder returned (or ``[3, T]`` ids where no
span is needed) and an optional spec.

Failures raise ``AssertionError`` with the first offending tokens and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mrope._builder import build_positions, next_positions
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Segment, Text
from mrope._spec import RopeSpec
from mrope.models import ModelLike, names, resolve_spec

__all__ = [
    "assert_crop_invariant",
    "assert_frame_order_invariant",
    "assert_prefill_decode_consistent",
    "assert_tile_invariant",
    "assert_time_aligned",
    "assert_translation_invariant",
    "rope_scores",
]


def _ids(positions: Positions | np.ndarray | torch.Tensor) -> np.ndarray:
    ids = positions.ids if isinstance(positions, Positions) else positions
    if isinstance(ids, torch.Tensor):
        ids = ids.detach().cpu().numpy()
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] != 3:
        whose = (
            f" (the {positions.rules.name!r} rules write that)" if isinstance(positions, Positions) else ""
        )
        raise AssertionError(
            f"positions must be [3, T] (t, h, w: the kit reads h and w as such); got shape "
            f"{tuple(ids.shape)}{whose}"
        )
    return ids.astype(np.int64)


def _spec(spec: RopeSpec | str | None, positions: Any = None) -> RopeSpec:
    if spec is None and isinstance(positions, Positions) and positions.rules.name in names():
        spec = positions.rules.name  # the family whose rules built the positions
    return resolve_spec(spec)


def _content(n: int, spec: RopeSpec, heads: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(n, heads, spec.head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(n, heads, spec.head_dim, generator=gen, dtype=torch.float64)
    return q, k


def rope_scores(
    positions: Positions | np.ndarray | torch.Tensor,
    spec: RopeSpec,
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    backend: str = "torch",
) -> torch.Tensor:
    """Attention logits after M-RoPE: ``[heads, T, T]`` with entry ``(h, i, j) = q_rot[i, h] . k_rot[j, h]``.

    Args:
        positions: ``[3, T]`` position ids (or a :class:`~mrope.Positions`).
        spec: the rotary spec.
        q, k: content vectors ``[T, heads, head_dim]`` (float64 recommended).
        backend: apply path, ``"torch"`` or ``"triton"`` (see :func:`mrope.apply_mrope`).

    Angles use ``angle_precision="exact"`` (right to one fp32 rounding at any position), so scores at
    large positions are comparable to about 1e-5 of their scale; fp32 angles would drift by 1e-2 there.
    """
    from mrope.ops import apply_mrope

    pos = torch.from_numpy(_ids(positions))
    q_rot, k_rot = apply_mrope(q, k, pos, spec, layout="thd", backend=backend, angle_precision="exact")
    return torch.einsum("ihd,jhd->hij", q_rot, k_rot)


def _assert_scores_match(
    pos_a: np.ndarray,
    pos_b: np.ndarray,
    spec: RopeSpec,
    what: str,
    *,
    heads: int,
    seed: int,
    rtol: float,
    atol: float,
    backend: str,
) -> None:
    """Same content at both position sets (token i of a pairs with token i of b): equal scores."""
    q, k = _content(pos_a.shape[1], spec, heads, seed)
    a = rope_scores(pos_a, spec, q, k, backend=backend)
    b = rope_scores(pos_b, spec, q, k, backend=backend)
    if not torch.allclose(a, b, rtol=rtol, atol=atol):
        err = (a - b).abs()
        h, i, j = np.unravel_index(int(err.argmax()), tuple(err.shape))
        raise AssertionError(
            f"{what}: q.k scores differ (max abs error {float(err.max()):.3g} at head {h}, tokens {i}, {j}: "
            f"{float(a[h, i, j]):.9g} vs {float(b[h, i, j]):.9g}); positions of those tokens: "
            f"{pos_a[:, [i, j]].T.tolist()} vs {pos_b[:, [i, j]].T.tolist()}"
        )


def assert_translation_invariant(
    positions: Positions | np.ndarray | torch.Tensor,
    spec: RopeSpec | str | None = None,
    *,
    shift: int | Sequence[int] = 100_003,
    heads: int = 2,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> None:
    """Adding a constant (one per axis, or the same on all) to every coordinate changes no q.k score.

    Args:
        positions: ``[3, T]`` ids or a :class:`~mrope.Positions`.
        spec: a :class:`~mrope.RopeSpec` or preset name (default: the positions' preset, else qwen2-vl).
        shift: the constant, or ``(t, h, w)`` constants.
    """
    ids = _ids(positions)
    sp = _spec(spec, positions)
    delta = np.broadcast_to(np.asarray(shift, dtype=np.int64).reshape(-1, 1), (3, 1))
    _assert_scores_match(
        ids,
        ids + delta,
        sp,
        f"translation by {np.asarray(shift).tolist()}",
        heads=heads,
        seed=seed,
        rtol=rtol,
        atol=atol,
        backend=backend,
    )


def _image_spans(p: Positions, what: str) -> list:
    spans = [s for s in p.spans if s.kind == "image"]
    if not spans:
        raise AssertionError(f"{what} has no image tokens")
    return spans


def _grid_of(p: Positions, what: str) -> tuple[np.ndarray, int, int]:
    """Token indices of a single untiled image as a merged ``[H', W']`` array."""
    spans = _image_spans(p, what)
    if len(spans) == 1 and spans[0].grid is None:  # a canvas of slices (MiniCPM-V) has no one grid
        raise AssertionError(f"{what}'s image is laid out as a canvas of slices, without one merged grid")
    if len(spans) != 1 or spans[0].tile is not None or spans[0].grid[0] != 1:
        raise AssertionError(f"{what} must hold exactly one untiled image; got {len(spans)} image spans")
    _, hh, ww = spans[0].grid
    return np.arange(spans[0].start, spans[0].stop).reshape(hh, ww), hh, ww


def _relative_hw(ids: np.ndarray, p: Positions) -> np.ndarray:
    """(h, w) of image tokens counted from their block start (``t`` of an image token), or from 0 under
    the ``spatial="reset"`` rule, where h and w do not count from the block start."""
    return ids[1:] - ids[:1] if p.rules.spatial != "reset" else ids[1:]


def assert_crop_invariant(
    whole: Positions,
    crop: Positions,
    spec: RopeSpec | str | None = None,
    *,
    heads: int = 2,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> tuple[int, int] | None:
    """A crop aligned to the merge grid at the same scale scores like that region of the whole image.

    Args:
        whole: positions of a sequence holding the whole image at the crop's scale (one untiled image;
            :func:`mrope.media.crop_segment` gives its segment as ``.whole``).
        crop: positions of a sequence holding the crop (one untiled image).
        spec: a :class:`~mrope.RopeSpec` or preset name (default: the positions' preset).

    Where the crop sits is read from the crop itself. Under ``crop="keep"`` rules its coordinates are
    its place in the whole image: the corner's (h, w) from its block start, less the whole image's, is
    the origin; the crop's tokens must then have exactly the (h, w) (from the block start) of that
    region of the whole image, and equal q.k scores. Under ``crop="reset"`` (every released model) no
    coordinate carries the origin and the crop's scores equal those of every region of its shape (the
    scores depend only on coordinate differences), so it is compared with the region at the corner.

    Returns:
        The origin ``(row, col)`` in the whole image's merged grid that the crop's coordinates give
        (``crop="keep"``), for a test to compare with ``Image.origin``; ``None`` under ``"reset"``.
    """
    whole_idx, hh, ww = _grid_of(whole, "whole")
    crop_idx, ch, cw = _grid_of(crop, "crop")
    whole_ids, crop_ids = _ids(whole), _ids(crop)
    keep = crop.rules.crop == "keep"
    found: tuple[int, int] | None = None
    if keep:
        corner = _relative_hw(crop_ids[:, [crop_idx[0, 0]]], crop) - _relative_hw(
            whole_ids[:, [whole_idx[0, 0]]], whole
        )
        found = (int(corner[0, 0]), int(corner[1, 0]))
    r, c = found if found is not None else (0, 0)
    if r < 0 or c < 0 or r + ch > hh or c + cw > ww:
        raise AssertionError(
            f"crop {ch}x{cw} at {(r, c)} does not fit in the whole image's {hh}x{ww} grid"
            + (" (read from the crop's coordinates under crop='keep')" if keep else "")
        )
    region = whole_idx[r : r + ch, c : c + cw].reshape(-1)
    a = whole_ids[:, region]
    b = crop_ids[:, crop_idx.reshape(-1)]
    if keep:
        rel_a, rel_b = _relative_hw(a, whole), _relative_hw(b, crop)
        if not np.array_equal(rel_a, rel_b):
            bad = int(np.flatnonzero(np.any(rel_a != rel_b, axis=0))[0])
            raise AssertionError(
                f"crop='keep': crop token {bad} is at (h, w) {rel_b[:, bad].tolist()} from its block start, "
                f"but the same pixels of the whole image are at {rel_a[:, bad].tolist()}"
            )
    sp = _spec(spec, whole)
    _assert_scores_match(
        a, b, sp, f"crop at {(r, c)}", heads=heads, seed=seed, rtol=rtol, atol=atol, backend=backend
    )
    return found


def assert_tile_invariant(
    tiled: Positions,
    untiled: Positions,
    spec: RopeSpec | str | None = None,
    *,
    heads: int = 2,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> None:
    """Tile tokens (emitted in any tile order) score like the same pixels of the untiled image, and the
    (h, w) difference between any two tile tokens equals their difference in the untiled grid.

    Args:
        tiled: positions of a sequence holding one tiled image (spans carry each tile's (row, col)).
        untiled: positions of a sequence holding the same image untiled (same merged grid).
    """
    whole_idx, hh, ww = _grid_of(untiled, "untiled")
    tiles = [s for s in _image_spans(tiled, "tiled") if s.tile is not None]
    if not tiles:
        raise AssertionError("tiled holds no tile spans (build it from Image(..., tiles=(cols, rows)))")
    mine, theirs = [], []
    for span in tiles:
        (_, th, tw), (r, c) = span.grid, span.tile
        if (r + 1) * th > hh or (c + 1) * tw > ww:
            raise AssertionError(
                f"tile {span.tile} of {th}x{tw} tokens lies outside the untiled {hh}x{ww} grid"
            )
        mine.append(np.arange(span.start, span.stop))
        theirs.append(whole_idx[r * th : (r + 1) * th, c * tw : (c + 1) * tw].reshape(-1))
    a = _ids(tiled)[:, np.concatenate(mine)]
    b = _ids(untiled)[:, np.concatenate(theirs)]
    rel_a = a[1:] - a[1:, :1]
    rel_b = b[1:] - b[1:, :1]
    if not np.array_equal(rel_a, rel_b):
        bad = int(np.flatnonzero(np.any(rel_a != rel_b, axis=0))[0])
        raise AssertionError(
            f"tile geometry lost: token {bad} of the tiles is at (h, w) offset {rel_a[:, bad].tolist()} from "
            f"the first, but {rel_b[:, bad].tolist()} in the untiled grid"
        )
    sp = _spec(spec, tiled)
    _assert_scores_match(
        a, b, sp, "tiles vs untiled", heads=heads, seed=seed, rtol=rtol, atol=atol, backend=backend
    )


def assert_prefill_decode_consistent(
    segments: Sequence[Segment],
    n_decode: int = 8,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    tokenizer: Any = None,
    chunk: int | None = None,
    spec: RopeSpec | str | None = None,
    backend: str = "torch",
) -> None:
    """Positions of a prompt plus ``n_decode`` decoded tokens equal those of the whole sequence built at
    once, whether the prompt is prefilled whole or in chunks of ``chunk`` tokens; the decode tokens'
    q.k scores against the prompt match too.
    """
    prompt = build_positions(segments, model=model, rules=rules, tokenizer=tokenizer)
    whole = build_positions([*segments, Text(n_decode)], model=model, rules=rules, tokenizer=tokenizer)
    t = prompt.num_tokens
    step = chunk or max(t, 1)
    pieces = [prompt.window(a, min(a + step, t)) for a in range(0, t, step)]
    pieces.append(next_positions(prompt.delta, t, n_decode))
    stitched = np.concatenate(pieces, axis=1)
    if not np.array_equal(stitched, whole.ids):
        bad = int(np.flatnonzero(np.any(stitched != whole.ids, axis=0))[0])
        raise AssertionError(
            f"prefill + decode diverges from the whole sequence at token {bad} (of {whole.num_tokens}): "
            f"{stitched[:, bad].tolist()} vs {whole.ids[:, bad].tolist()} (delta {prompt.delta})"
        )
    sp = _spec(spec, prompt)
    _assert_scores_match(
        stitched, whole.ids, sp, "prefill + decode", heads=1, seed=0, rtol=1e-12, atol=1e-12, backend=backend
    )


def _video_patches(p: Positions, video: int, what: str) -> np.ndarray:
    """Token indices of video ``video`` (0-based, in order) of ``p`` as ``[T', tokens per patch]``."""
    owners = sorted({s.index for s in p.spans if s.kind == "video"})
    if not 0 <= video < len(owners):
        raise AssertionError(f"{what} holds {len(owners)} video(s); there is no video {video}")
    spans = [s for s in p.spans if s.kind == "video" and s.index == owners[video]]
    if any(s.tile is not None for s in spans):
        raise AssertionError(f"{what}: video {video} is tiled; compare untiled videos")
    tokens = np.concatenate([np.arange(s.start, s.stop) for s in spans])
    patches = sum(s.grid[0] for s in spans if s.grid is not None)
    if patches < 1 or tokens.size % patches:
        raise AssertionError(f"{what}: video {video} has {tokens.size} tokens for {patches} temporal patches")
    return tokens.reshape(patches, -1)


def assert_frame_order_invariant(
    reference: Positions,
    changed: Positions,
    frames: Sequence[int],
    spec: RopeSpec | str | None = None,
    *,
    video: int = 0,
    heads: int = 2,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> None:
    """A video whose frames were reordered or resampled keeps every frame's coordinates.

    ``changed`` holds video ``video`` of ``reference`` with its temporal patches changed: its patch
    ``k`` shows the reference's patch ``frames[k]`` (a reordering is a permutation, a resampling a
    subset such as ``range(0, n, 2)``, in any order). The coordinates are consistent when they move
    with the frames: asserted are

    1. exactly, every token of ``changed``'s video has the reference coordinates of the same pixel of
       the frame it shows, up to one constant shift per axis for the whole video (text before the
       video may differ), so frames keep their picture geometry and their times;
    2. the q.k scores between any two of those tokens equal the reference's (the consequence a model
       sees).

    Time in M-RoPE is given by a patch's place in the sequence, so a reordered video built afresh
    (patch ``k`` gets slot ``k``'s time) fails; a reordering that carries each frame's coordinates
    along passes, and so does a resampling under the ``seconds`` temporal rule at the rate that keeps
    patch times (every other patch at half the rate), while the ``index`` rule fails it.

    Args:
        reference: positions of a sequence holding the original video.
        changed: positions of a sequence holding the changed video (same frame grid).
        frames: ``frames[k]`` = the reference temporal patch that ``changed``'s patch ``k`` shows.
        video: which video of each sequence (0-based, in order).
    """
    ref = _video_patches(reference, video, "reference")
    new = _video_patches(changed, video, "changed")
    order = [int(f) for f in frames]
    if len(order) != new.shape[0]:
        raise AssertionError(f"frames names {len(order)} patches but changed's video has {new.shape[0]}")
    if any(not 0 <= f < ref.shape[0] for f in order):
        raise AssertionError(
            f"frames must index the reference's {ref.shape[0]} temporal patches; got {order}"
        )
    if new.shape[1] != ref.shape[1]:
        raise AssertionError(
            f"changed's patches hold {new.shape[1]} tokens each, the reference's {ref.shape[1]}: another grid"
        )
    a = _ids(reference)[:, ref[order].reshape(-1)]
    b = _ids(changed)[:, new.reshape(-1)]
    shift = b - a
    moved = np.any(shift != shift[:, :1], axis=0)
    if moved.any():
        bad = int(np.flatnonzero(moved)[0])
        k, m = divmod(bad, new.shape[1])
        raise AssertionError(
            f"frame order: patch {k} of changed (reference patch {order[k]}) token {m} is at "
            f"{b[:, bad].tolist()}, shifted by {shift[:, bad].tolist()} from the reference's {a[:, bad].tolist()}, "
            f"but the video's first token is shifted by {shift[:, 0].tolist()}: the coordinates did not move "
            "with the frames"
        )
    sp = _spec(spec, reference)
    _assert_scores_match(
        a, b, sp, "frame order", heads=heads, seed=seed, rtol=rtol, atol=atol, backend=backend
    )


def assert_time_aligned(
    a: Positions,
    b: Positions,
    spec: RopeSpec | str | None = None,
    *,
    video: int = 0,
    backend: str = "torch",
) -> None:
    """The same moment sampled at two rates gets the same time coordinate.

    ``a`` and ``b`` hold the same video (video ``video`` of each) sampled at two rates. Every temporal
    patch of ``a``'s video is paired with the patch of ``b``'s that starts at the same second (nominal
    time ``i * second_per_grid``, from ``Positions.second_per_grid_ts``; at least two pairs), and the
    paired patches' first tokens must have equal ``t`` counted from their video's first token, and equal
    q.k scores. E.g. ``Video(grid=(4, h, w), fps=1.0)`` against ``Video(grid=(8, h, w), fps=2.0)``:
    patch i at 1 fps pairs with patch 2i at 2 fps.
    """
    lay = a.rules
    if lay.temporal == "timestamps":
        raise AssertionError(
            "the timestamps rule gives every patch t = its block start; compare its time text"
        )
    patches_a, patches_b = _video_patches(a, video, "a"), _video_patches(b, video, "b")
    spg_a, spg_b = float(a.second_per_grid_ts[video]), float(b.second_per_grid_ts[video])
    starts_a = np.arange(patches_a.shape[0], dtype=np.float64) * spg_a
    starts_b = np.arange(patches_b.shape[0], dtype=np.float64) * spg_b
    pairs = []
    for i, start in enumerate(starts_a):
        j = np.flatnonzero(np.isclose(starts_b, start, rtol=0, atol=1e-9))
        if j.size:
            pairs.append((i, int(j[0])))
    if len(pairs) < 2:
        raise AssertionError(
            f"only {len(pairs)} temporal patch(es) of the two videos start at the same second; nothing to compare "
            "(sample the same span at rates that share patch boundaries, e.g. 1 and 2 fps)"
        )
    first_a = patches_a[[i for i, _ in pairs], 0]
    first_b = patches_b[[j for _, j in pairs], 0]
    ids_a, ids_b = _ids(a), _ids(b)
    ta = ids_a[0, first_a] - ids_a[0, patches_a[0, 0]]
    tb = ids_b[0, first_b] - ids_b[0, patches_b[0, 0]]
    if not np.array_equal(ta, tb):
        bad = int(np.flatnonzero(ta != tb)[0])
        i, j = pairs[bad]
        raise AssertionError(
            f"not time-aligned under {lay.name!r} rules: the moment {starts_a[i]:g} s is patch {i} (t = {ta[bad]} "
            f"from the video's start) in one video and patch {j} (t = {tb[bad]}) in the other"
        )
    sp = _spec(spec, a)
    # counted from each video's first token (scores do not change under a shift; exact angles stay
    # exact at small positions, so the tolerance can be tight)
    rel_a = ids_a[:, first_a] - ids_a[:, patches_a[0, :1]]
    rel_b = ids_b[:, first_b] - ids_b[:, patches_b[0, :1]]
    _assert_scores_match(
        rel_a, rel_b, sp, "time alignment", heads=1, seed=0, rtol=1e-9, atol=1e-9, backend=backend
    )
