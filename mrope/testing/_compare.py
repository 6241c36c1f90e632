"""Schemes compared on the same prompts: invariances, id growth of a long video, per-axis score decay.

:func:`compare_schemes` builds the same prompts under every scheme's rules (the builder) and rotates
content by its spec (:func:`mrope.apply_mrope`, exact angles, float64), then measures:

- **invariances** (:data:`~mrope.testing._comparison.CHECK_NAMES`), each the largest difference of the q.k
  scores of the same random content at two position sets, token ``i`` of one paired with token ``i`` of
  the other; a check passes when every score agrees within ``rtol`` / ``atol`` (``torch.allclose``):

  - ``shift``: each prompt against itself moved later by ``shift`` tokens of text (all its tokens);
  - ``crop``: a 2 x 4 crop at (3, 2) of a 6 x 8 merged grid against that region of the whole image
    (image tokens; the crop's origin reaches its coordinates only under ``crop="keep"``);
  - ``tiles``: 3 x 2 tiles emitted in a shuffled order against the same pixels of the untiled image;
  - ``frames``: a video of 4 temporal patches at 1 fps against every other patch of the same video of 8
    at 2 fps (the same moments);

- **id growth**: the largest position id of one long video (``video_frames`` temporal patches of 8 x 8
  merged tokens) and that over its token count;
- **decay**: the mean score of constant content (:class:`~mrope.testing._comparison.DecayCurve`) against
  the distance in frames, rows and columns of a ``decay_extent``-cubed video, as the scheme lays it out
  (VideoRoPE's frame step moves t, h and w by its stride; a 1-pair RoPE on one axis gives ``cos(theta d)``).

Where a scheme's rules cannot build a prompt (no videos, no grid per frame), that measure does not apply
and the result says why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from mrope._builder import build_positions
from mrope._errors import LayoutError, MRopeError
from mrope._golden import suite_tokenize
from mrope._layer_sets import NOPE, SINGLE_SET
from mrope._position_sets import position_set_rules
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Image, Segment, Text, Video
from mrope.models import SCHEME_NAMES, ModelFamily, ModelLike, get_family, resolve_rules, resolve_spec
from mrope.ops import PairTable, apply_mrope, pair_table
from mrope.testing._comparison import AXES, CHECK_NAMES, DecayCurve, SchemeComparison, SchemeResult
from mrope.testing._invariance import grid_of, paired_scores, tile_tokens, video_patches
from mrope.testing._report import FAIL, NOT_APPLICABLE, PASS, RowResult
from mrope.testing._rows.multimodal import TILE_ORDERS

BASELINE = "qwen2-vl"
"""The released family :func:`compare_schemes` puts first when no models are named."""
CROP_ORIGIN, CROP_SIZE, WHOLE_SIZE = (3, 2), (2, 4), (6, 8)
"""The crop check's origin and size and the whole image's size, in merged tokens."""
RESAMPLED = (0, 2, 4, 6)
"""The frames check: the 2 fps video's patches the 1 fps video shows."""


def _build(
    fam: ModelFamily, rules: LayoutRules | dict[str, Any] | None, tokenizer: Any
) -> Callable[[list[Segment]], Positions]:
    def build(segments: list[Segment]) -> Positions:
        return build_positions(segments, model=fam, rules=rules, tokenizer=tokenizer)

    return build


def _gap_result(
    name: str,
    pairs: list[tuple[np.ndarray, np.ndarray]],
    spec: Any,
    heads: int,
    tol: tuple[float, float],
    backend: str,
) -> RowResult:
    """``pass`` when every pair of position sets gives equal scores (within ``tol``), with the largest gap."""
    gap, ok = 0.0, True
    for a_ids, b_ids in pairs:
        if a_ids.shape != b_ids.shape:  # e.g. a row's newline token, which the other arrangement lacks
            reason = (
                f"the two arrangements pair {a_ids.shape[1]} with {b_ids.shape[1]} tokens under these rules"
            )
            return RowResult(name, NOT_APPLICABLE, reason)
        a, b = paired_scores(a_ids, b_ids, spec, heads=heads, seed=0, backend=backend)
        gap = max(gap, float((a - b).abs().max()))
        ok = ok and bool(torch.allclose(a, b, rtol=tol[0], atol=tol[1]))
    measured = {"max_score_difference": gap, "tolerance": {"rtol": tol[0], "atol": tol[1]}}
    return RowResult(name, PASS if ok else FAIL, "", measured)


def _default_prompts(m: int, tm: int) -> list[list[Segment]]:
    return [
        [Text(5), Image(grid=(1, 6 * m, 8 * m)), Text(4)],
        [Text(5), Video(grid=(4 * tm, 4 * m, 4 * m), fps=2.0), Text(4)],
    ]


def _shift_pairs(
    build: Callable[[list[Segment]], Positions], prompts: Sequence[Sequence[Segment]], shift: int
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[str]]:
    pairs, skipped = [], []
    for k, prompt in enumerate(prompts):
        try:
            base, moved = build(list(prompt)), build([Text(shift), *prompt])
        except MRopeError as exc:
            skipped.append(f"prompt {k}: {exc}")
            continue
        pairs.append((base.ids, moved.ids[:, moved.num_tokens - base.num_tokens :]))
    return pairs, skipped


def _crop_pairs(build: Callable[[list[Segment]], Positions], m: int) -> list[tuple[np.ndarray, np.ndarray]]:
    (r, c), (ch, cw), (hh, ww) = CROP_ORIGIN, CROP_SIZE, WHOLE_SIZE
    whole = build([Text(4), Image(grid=(1, hh * m, ww * m))])
    part = build([Text(4), Image(grid=(1, ch * m, cw * m), origin=(r, c))])
    whole_idx = grid_of(whole, "whole")[0][r : r + ch, c : c + cw].reshape(-1)
    return [(whole.ids[:, whole_idx], part.ids[:, grid_of(part, "crop")[0].reshape(-1)])]


def _tile_pairs(build: Callable[[list[Segment]], Positions], m: int) -> list[tuple[np.ndarray, np.ndarray]]:
    untiled = build([Text(2), Image(grid=(1, 4 * m, 6 * m))])
    tiled = build([Text(2), Image(grid=(1, 4 * m, 6 * m), tiles=(3, 2), tile_order=TILE_ORDERS[1])])
    mine, theirs = tile_tokens(tiled, untiled)
    return [(tiled.ids[:, mine], untiled.ids[:, theirs])]


def _frame_pairs(
    build: Callable[[list[Segment]], Positions], m: int, tm: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    high = build([Text(3), Video(grid=(8 * tm, 2 * m, 2 * m), fps=2.0)])
    low = build([Text(3), Video(grid=(4 * tm, 2 * m, 2 * m), fps=1.0)])
    ref, new = video_patches(high, 0, "the 2 fps video"), video_patches(low, 0, "the 1 fps video")
    return [(high.ids[:, ref[list(RESAMPLED)].reshape(-1)], low.ids[:, new.reshape(-1)])]


def _frame_grid(p: Positions, extent: int) -> np.ndarray:
    """Token indices of the first video of ``p`` as ``[T', H', W']`` (a row's newline token dropped)."""
    patches = video_patches(p, 0, "the decay video")
    per = patches.shape[1]
    if patches.shape[0] != extent or per not in (extent * extent, extent * (extent + 1)):
        raise LayoutError(
            f"the decay video is not {extent} frames of {extent} x {extent} tokens under these rules "
            f"({patches.shape[0]} temporal patches of {per} tokens)"
        )
    return patches.reshape(extent, extent, per // extent)[:, :, :extent]


def _decay(p: Positions, spec: Any, heads: int, extent: int, backend: str) -> tuple[DecayCurve, ...]:
    grid = _frame_grid(p, extent)
    ones = torch.ones(p.num_tokens, heads, spec.head_dim, dtype=torch.float64)
    q, k = apply_mrope(
        ones,
        ones,
        torch.from_numpy(np.asarray(p.ids)),
        spec,
        layout="thd",
        backend=backend,
        angle_precision="exact",
    )
    idx = torch.from_numpy(grid.astype(np.int64))
    qg, kg = q[idx], k[idx]  # [T', H', W', heads, D]
    curves = []
    for axis, dim in zip(AXES, range(3), strict=True):
        scores = []
        for d in range(extent):
            a = qg.narrow(dim, 0, extent - d)
            b = kg.narrow(dim, d, extent - d)
            scores.append(float((a * b).sum(-1).mean()) / spec.head_dim)
        curves.append(DecayCurve(axis, tuple(range(extent)), tuple(scores)))
    return tuple(curves)


def _heads(spec: Any) -> int:
    table = spec if isinstance(spec, PairTable) else pair_table(spec)
    return table.heads if table.heads > 1 else 2


def _measure(
    name: str,
    run: Callable[[], list[tuple[np.ndarray, np.ndarray]]],
    spec: Any,
    heads: int,
    tol: tuple[float, float],
    backend: str,
) -> RowResult:
    try:
        pairs = run()
    except (MRopeError, AssertionError) as exc:
        return RowResult(name, NOT_APPLICABLE, f"these rules cannot build it: {' '.join(str(exc).split())}")
    return _gap_result(name, pairs, spec, heads, tol, backend)


def _compare_model(model: ModelLike, options: dict[str, Any]) -> tuple[SchemeResult, ...]:
    """One row for a model whose every layer reads its own positions; for a model with per-layer
    position sets (:class:`mrope.LayerSets`), one row per set, measured on that set's positions (the
    layers that read it), with a note naming those layers."""
    fam = get_family(model)
    if fam.layer_sets == SINGLE_SET:
        return (_compare_one(fam, options["rules"], options),)
    pattern = fam.layer_sets.pattern
    rows = []
    for name, rules in position_set_rules(fam, options["rules"]).items():
        layers = [i for i, p in enumerate(pattern) if p == name]
        note = (
            f"position set {name!r}: layers {layers} of every {len(pattern)} read it (pattern "
            f"{list(pattern)}"
            + (f"; {NOPE!r} layers rotate nothing and have no row)" if NOPE in pattern else ")")
        )
        row = _compare_one(fam, rules, options)
        rows.append(replace(row, position_set=name, notes=(note, *row.notes)))
    return tuple(rows)


def _compare_one(
    fam: ModelFamily, rules: LayoutRules | dict[str, Any] | None, options: dict[str, Any]
) -> SchemeResult:
    lay = resolve_rules(fam, rules)
    build = _build(fam, rules, options["tokenizer"])
    spec, m, tm = resolve_spec(fam), lay.merge_size, lay.temporal_merge_size  # refuses a learned rotary
    heads, tol, backend = _heads(spec), options["tolerance"], options["backend"]
    prompts = options["prompts"] if options["prompts"] is not None else _default_prompts(m, tm)
    notes: list[str] = []
    shift_pairs, skipped = _shift_pairs(build, prompts, options["shift"])
    notes.extend(f"shift: skipped {s}" for s in skipped)
    if shift_pairs:
        shift = _gap_result("shift", shift_pairs, spec, heads, tol, backend)
    else:
        shift = RowResult("shift", NOT_APPLICABLE, "these rules build none of the prompts")
    runs = {
        "crop": lambda: _crop_pairs(build, m),
        "tiles": lambda: _tile_pairs(build, m),
        "frames": lambda: _frame_pairs(build, m, tm),
    }
    checks = (shift, *(_measure(n, runs[n], spec, heads, tol, backend) for n in CHECK_NAMES[1:]))
    tokens = top = growth = None
    try:
        long = build([Video(grid=(options["video_frames"] * tm, 8 * m, 8 * m), fps=2.0)])
        tokens, top = long.num_tokens, float(np.max(long.ids))
        growth = top / tokens
    except MRopeError as exc:
        notes.append(f"id growth: these rules cannot build the long video: {exc}")
    decay: tuple[DecayCurve, ...] = ()
    e = options["decay_extent"]
    try:
        decay = _decay(build([Video(grid=(e * tm, e * m, e * m), fps=2.0)]), spec, heads, e, backend)
    except (MRopeError, AssertionError) as exc:
        notes.append(f"decay: {' '.join(str(exc).split())}")
    return SchemeResult(fam.name, checks, tokens, top, growth, decay, tuple(notes))


def compare_schemes(
    models: Sequence[ModelLike] | None = None,
    *,
    prompts: Sequence[Sequence[Segment]] | None = None,
    rules: dict[str, Any] | None = None,
    tokenizer: Any = None,
    shift: int = 37,
    video_frames: int = 256,
    decay_extent: int = 16,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    backend: str = "torch",
) -> SchemeComparison:
    """Compare rotary schemes (or released families) on the same prompts.

    Args:
        models: scheme or family names (any name ``model=`` takes: :data:`mrope.models.SCHEME_NAMES`,
            :func:`mrope.models.names`, aliases) or :class:`~mrope.models.ModelFamily` values; default:
            ``"qwen2-vl"`` then every research scheme.
        prompts: the prompts of the ``shift`` check (lists of segments); default: text, an image of
            6 x 8 merged tokens, text; and text, a video of 4 patches of 4 x 4, text.
        rules: :class:`~mrope.LayoutRules` overrides applied to every model's rules (e.g.
            ``{"crop": "keep"}``).
        tokenizer: for text given as words and timestamp text (Qwen3-VL-based schemes); default: a
            stand-in, one id per character (timestamp text then moves positions as its length does).
        shift: text tokens put before each prompt in the ``shift`` check.
        video_frames: temporal patches of the long video (id growth), each 8 x 8 merged tokens.
        decay_extent: frames, rows and columns of the decay video; the curves run over distances
            ``0 .. decay_extent - 1``.
        rtol, atol: a check passes when its scores agree within these (``torch.allclose``).
        backend: the apply path of the scores (``"torch"``, or ``"triton"`` under the interpreter).

    Returns:
        A :class:`SchemeComparison`: ``.table()``, ``.to_json()``, ``.row(name)``. A model with per-layer
        position sets (``circle-rope-age``) has one row per set, each measured on that set's positions
        and labelled ``model [set]`` (``.row(name, position_set)``).

    Raises:
        LayoutError: an unknown model name, bad rule overrides, or sizes below 1.
        SpecError: a model whose rotation is partly a checkpoint tensor (Falcon-OCR: its scores need the
            checkpoint's ``freqs_cis_golden``, which a spec does not hold).
    """
    for what, value in (("shift", shift), ("video_frames", video_frames), ("decay_extent", decay_extent)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LayoutError(f"compare_schemes: {what} must be an int >= 1; got {value!r}")
    chosen = list(models) if models is not None else [BASELINE, *SCHEME_NAMES]
    if not chosen:
        raise LayoutError("compare_schemes: models is empty; name at least one scheme or family")
    options = {
        "rules": rules,
        "tokenizer": suite_tokenize if tokenizer is None else tokenizer,
        "prompts": prompts,
        "shift": shift,
        "video_frames": video_frames,
        "decay_extent": decay_extent,
        "tolerance": (rtol, atol),
        "backend": backend,
    }
    settings = {
        "shift": shift,
        "video_grid_merged": [video_frames, 8, 8],
        "decay_extent": decay_extent,
        "rtol": rtol,
        "atol": atol,
        "prompts": "default" if prompts is None else f"{len(prompts)} given",
        "rules": rules or {},
    }
    return SchemeComparison(tuple(r for m in chosen for r in _compare_model(m, options)), settings)


__all__ = ["BASELINE", "compare_schemes"]
