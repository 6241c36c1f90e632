"""Invariance assertions for users' test suites (and this project's own).

Each assertion checks what a model actually sees: the RoPE attention scores ``q_i . k_j`` after
rotation by :func:`mrope.apply_mrope` (float64 by default), not only the coordinates. Two token sets
that should be "the same picture" get identical q and k content vectors, are rotated by their own
positions, and must give equal score matrices.

- :func:`assert_translation_invariant`: shifting every coordinate by a constant changes no score.
- :func:`assert_crop_invariant`: a merge-aligned crop at the same scale scores like the same region of
  the whole image (and under ``crop="keep"`` has exactly its coordinates).
- :func:`assert_tile_invariant`: under the ``global`` tile rule, tiles (in any order) score like the
  untiled image.
- :func:`assert_prefill_decode_consistent`: a prompt plus decode continuation equals the whole
  sequence, also when the prompt is prefilled in chunks.
- :func:`assert_time_aligned`: the same moment sampled at two frame rates gets the same time.

Failures raise ``AssertionError`` with the first offending tokens and values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from mrope.builder import build_positions, next_positions
from mrope.models import ModelLike, names, resolve_rules, resolve_spec
from mrope.positions import Positions
from mrope.rules import LayoutRules
from mrope.segments import Segment, Text, Video
from mrope.spec import RopeSpec

__all__ = [
    "assert_crop_invariant",
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
        raise AssertionError(f"positions must be [3, T]; got shape {tuple(ids.shape)}")
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
    if len(spans) != 1 or spans[0].tile is not None or spans[0].grid[0] != 1:
        raise AssertionError(f"{what} must hold exactly one untiled image; got {len(spans)} image spans")
    _, hh, ww = spans[0].grid
    return np.arange(spans[0].start, spans[0].stop).reshape(hh, ww), hh, ww


def assert_crop_invariant(
    whole: Positions,
    crop: Positions,
    origin: tuple[int, int],
    spec: RopeSpec | str | None = None,
    *,
    heads: int = 2,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> None:
    """A crop aligned to the merge grid at the same scale scores like that region of the whole image.

    Args:
        whole: positions of a sequence holding the whole image (one untiled image).
        crop: positions of a sequence holding the crop (one untiled image).
        origin: the crop's ``(row, col)`` in the whole image's merged grid.

    Under ``crop="keep"`` rules (and the same block start) the crop's (h, w) must also equal the
    whole image's exactly.
    """
    whole_idx, hh, ww = _grid_of(whole, "whole")
    crop_idx, ch, cw = _grid_of(crop, "crop")
    r, c = (int(v) for v in origin)
    if r < 0 or c < 0 or r + ch > hh or c + cw > ww:
        raise AssertionError(f"crop {ch}x{cw} at {origin} does not fit in the whole image's {hh}x{ww} grid")
    region = whole_idx[r : r + ch, c : c + cw].reshape(-1)
    a = _ids(whole)[:, region]
    b = _ids(crop)[:, crop_idx.reshape(-1)]
    sp = _spec(spec, whole)
    _assert_scores_match(
        a, b, sp, f"crop at {tuple(origin)}", heads=heads, seed=seed, rtol=rtol, atol=atol, backend=backend
    )
    if crop.rules.crop == "keep" and a[0, 0] == b[0, 0] and not np.array_equal(a[1:], b[1:]):
        raise AssertionError(
            "crop='keep': the crop's (h, w) differ from the whole image's at the same pixels"
        )


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


def _patch_starts(video: Video, rules: LayoutRules) -> np.ndarray:
    """Nominal start time (seconds) of every temporal patch, ``i * second_per_grid``: the time the
    ``seconds`` rule encodes (real frame times only feed the timestamps rule's text)."""
    spg = video.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
    return np.arange(video.grid[0], dtype=np.float64) * spg


def assert_time_aligned(
    video_a: Video,
    video_b: Video,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    spec: RopeSpec | str | None = None,
    backend: str = "torch",
) -> None:
    """The same moment sampled at two rates gets the same time coordinate.

    Builds each video alone (bare tokens, so both start at 0), pairs every temporal patch of ``video_a``
    with the patch of ``video_b`` that starts at the same second (nominal time ``i * second_per_grid``,
    at least two pairs), and asserts equal ``t`` and equal q.k scores between the paired patches' first
    tokens. E.g. ``Video(grid=(4, h, w), fps=1.0)`` against
    ``Video(grid=(8, h, w), fps=2.0)``: patch i at 1 fps pairs with patch 2i at 2 fps.
    """
    lay = resolve_rules(model, rules)
    if lay.temporal == "timestamps":
        raise AssertionError(
            "the timestamps rule gives every patch t = its block start; compare its time text"
        )
    bare_a = Video(video_a.grid, video_a.fps, video_a.second_per_grid, video_a.frame_times, wrap=False)
    bare_b = Video(video_b.grid, video_b.fps, video_b.second_per_grid, video_b.frame_times, wrap=False)
    pa = build_positions([bare_a], rules=lay)
    pb = build_positions([bare_b], rules=lay)
    starts_a, starts_b = _patch_starts(video_a, lay), _patch_starts(video_b, lay)
    per_a = video_a.grid[1] * video_a.grid[2] // lay.merge_size**2
    per_b = video_b.grid[1] * video_b.grid[2] // lay.merge_size**2
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
    ta = pa.ids[0, [i * per_a for i, _ in pairs]]
    tb = pb.ids[0, [j * per_b for _, j in pairs]]
    if not np.array_equal(ta, tb):
        bad = int(np.flatnonzero(ta != tb)[0])
        i, j = pairs[bad]
        raise AssertionError(
            f"not time-aligned under {lay.name!r} rules: the moment {starts_a[i]:g} s is patch {i} (t = {ta[bad]}) "
            f"in one video and patch {j} (t = {tb[bad]}) in the other"
        )
    sp = _spec(spec, pa)
    a = pa.ids[:, [i * per_a for i, _ in pairs]]
    b = pb.ids[:, [j * per_b for _, j in pairs]]
    _assert_scores_match(a, b, sp, "time alignment", heads=1, seed=0, rtol=1e-9, atol=1e-9, backend=backend)
