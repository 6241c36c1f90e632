"""Retention masks of pruned video tokens (EVS, VidCom2) and the token counts a processor sizes prompts with.

Engines prune a video's language-model tokens (after the spatial merge) once the vision tower has run,
but size the prompt's placeholder run before: the ``*_retained_tokens`` counts need only the grid,
and the masks built later from the embeddings keep exactly that many tokens. Masks are boolean
``[T * H' * W']`` over the video's tokens in the builder's order (``t`` outermost, ``w`` fastest), the
``keep=`` of :class:`mrope.Video`.

- **EVS** (Efficient Video Sampling, arXiv 2510.14624; vLLM ``vllm/multimodal/video_prune/evs.py``
  v0.33.0 and v0.34.0 (the same file), ``compute_retention_mask`` line 38): each token's dissimilarity
  ``1 - cos`` to the token in the same cell of the previous frame, the first frame's set to 255 (above
  any ``1 - cos``, so it is always kept), and a stable descending sort (ties: the earlier token first)
  whose first ``max(H'W', int(T * H'W' * (1 - q)))`` tokens are kept; ``q`` is the pruning rate in
  ``[0, 1)``.
- **VidCom2** (Video Compression Commander, arXiv 2505.14454): the lowest-variance half of the channels
  (in ascending variance), L2-normalised; each token's sum of five Gaussian kernels (``alpha = 2^-3 ..
  2^1``) to the video's mean and to its frame's mean (its similarity; lower: more distinct); a frame's
  distinctiveness is minus its mean video kernel, ``p = softmax(distinctiveness / 0.01)``, its budget
  ``round(H'W' * min(1, retention * (1 + p - mean(p))))`` clamped to ``[1, H'W']``, filled with the
  frame's lowest-similarity tokens. Two published variants, by name: ``"authors"`` (their
  ``token_compressor/vidcom2/vidcom2.py``, ``select_outlier_indices``) stops there, so the total drifts
  with the embeddings; ``"vllm"`` (``vllm/multimodal/video_prune/vidcom2.py``, v0.33.0 and v0.34.0 (the
  same file), ``compute_retention_mask`` line 33) then drops the kept tokens of globally highest
  similarity, or adds the free ones of lowest, to exactly ``max(T, int(T * H'W' * retention))``, the
  count a processor sized the placeholders with. Selections go through ``torch.topk`` as in both codes,
  so ties fall as they fall there.
"""

from __future__ import annotations

from mrope import _extras

_extras.require("the pruning masks (mrope.evs_mask, mrope.vidcom2_mask, ...)", "torch", "torch")

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from mrope._errors import LayoutError

EVS_FIRST_FRAME = 255.0
"""The dissimilarity EVS gives the first frame's tokens (``1 - cos`` is at most 2), as vLLM does."""
VIDCOM2_ALPHAS = tuple(2.0**k for k in range(-3, 2))
"""The widths of VidCom2's five Gaussian kernels."""
VIDCOM2_TEMPERATURE = 0.01
"""The softmax temperature of VidCom2's frame shares."""
VIDCOM2_CHANNELS = 0.5
"""The fraction of channels (the lowest-variance ones) VidCom2 scores on."""
VIDCOM2_METHODS = ("vllm", "authors")
"""VidCom2's published variants: vLLM's (an exact total) and the authors' (per-frame rounding only)."""


def _frames(grid: Sequence[int], merge_size: int) -> tuple[int, int]:
    """``(T, tokens per frame)`` of an encoder grid ``(T, H, W)`` under ``merge_size``."""
    try:
        t, h, w = (int(v) for v in grid)
    except (TypeError, ValueError):
        raise LayoutError(f"grid must be (T, H, W) of ints; got {grid!r}") from None
    if isinstance(merge_size, bool) or not isinstance(merge_size, int) or merge_size < 1:
        raise LayoutError(f"merge_size must be an int >= 1; got {merge_size!r}")
    if t < 1 or h < 1 or w < 1 or h % merge_size or w % merge_size:
        raise LayoutError(
            f"grid {tuple(grid)} must have T, H, W >= 1 with H and W multiples of merge_size {merge_size}"
        )
    return t, (h // merge_size) * (w // merge_size)


def _rate(value: float, name: str, low_open: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise LayoutError(f"{name} must be a number; got {value!r}")
    value = float(value)
    ok = (0.0 < value <= 1.0) if low_open else (0.0 <= value < 1.0)
    if not ok:
        want = "in (0, 1]" if low_open else "in [0, 1)"
        raise LayoutError(f"{name} must be {want}; got {value!r}")
    return value


def _embeddings(embeds: torch.Tensor, n: int) -> torch.Tensor:
    if not isinstance(embeds, torch.Tensor) or embeds.ndim != 2 or not embeds.is_floating_point():
        raise LayoutError(
            f"embeddings must be a floating-point torch tensor [tokens, hidden]; got "
            f"{type(embeds).__name__} {tuple(getattr(embeds, 'shape', ()))}"
        )
    if embeds.shape[0] != n:
        raise LayoutError(
            f"the grid has {n} tokens after the merge; the embeddings have {embeds.shape[0]} rows"
        )
    return embeds


def evs_retained_tokens(grid: Sequence[int], merge_size: int, q: float) -> int:
    """Tokens EVS keeps of a video of encoder grid ``(T, H, W)``: ``max(H'W', int(T * H'W' * (1 - q)))``
    (the first frame is always whole), ``q`` the pruning rate in ``[0, 1)``."""
    t, per_frame = _frames(grid, merge_size)
    q = _rate(q, "q (the EVS pruning rate)", low_open=False)
    return max(per_frame, int(per_frame * t * (1 - q)))


def evs_mask(embeds: torch.Tensor, grid: Sequence[int], merge_size: int, q: float) -> torch.Tensor:
    """EVS retention mask: bool ``[T * H' * W']`` on the embeddings' device.

    Args:
        embeds: ``[T * H' * W', hidden]`` the video's embeddings after the merger, in token order.
        grid: the encoder grid ``(T, H, W)`` (``video_grid_thw``'s row).
        merge_size: the spatial merge size.
        q: the pruning rate in ``[0, 1)``.
    """
    t, per_frame = _frames(grid, merge_size)
    keep = evs_retained_tokens(grid, merge_size, q)
    x = _embeddings(embeds, t * per_frame).reshape(t, per_frame, -1)
    dissimilarity = torch.empty((t, per_frame), dtype=x.dtype, device=x.device)
    dissimilarity[0] = EVS_FIRST_FRAME
    dissimilarity[1:] = 1 - F.cosine_similarity(x[1:], x[:-1], dim=-1)
    order = torch.argsort(dissimilarity.reshape(-1), descending=True, stable=True)
    mask = torch.zeros(t * per_frame, dtype=torch.bool, device=x.device)
    mask[order[:keep]] = True
    return mask


def vidcom2_retained_tokens(grid: Sequence[int], merge_size: int, retention: float) -> int:
    """Tokens VidCom2 (``method="vllm"``) keeps of a video of encoder grid ``(T, H, W)``:
    ``max(T, int(T * H'W' * retention))`` (one a frame at least), ``retention`` in ``(0, 1]``. vLLM's
    ``compute_retained_tokens_count`` (``vllm/multimodal/video_prune/vidcom2.py``, v0.33.0 and v0.34.0,
    line 19) with its pruning rate ``q = 1 - retention``. The authors' method has no fixed count."""
    t, per_frame = _frames(grid, merge_size)
    retention = _rate(retention, "retention (the VidCom2 retention ratio)", low_open=True)
    return max(t, int(t * per_frame * retention))


def _vidcom2_method(method: str) -> str:
    """``method`` if it names a published VidCom2 variant (:data:`VIDCOM2_METHODS`), else a clear error."""
    if method not in VIDCOM2_METHODS:
        raise LayoutError(f"VidCom2 method must be one of {VIDCOM2_METHODS}; got {method!r}")
    return method


def _gaussians(tokens: torch.Tensor, centre: torch.Tensor) -> torch.Tensor:
    """Sum of the five Gaussian kernels of ``[T, N, C]`` tokens to a broadcast centre: ``[T, N]``."""
    d2 = ((tokens - centre) ** 2).sum(dim=-1)
    return sum(torch.exp(-d2 / (2.0 * a)) for a in VIDCOM2_ALPHAS)  # type: ignore[return-value]


def _vidcom2_frames(
    embeds: torch.Tensor, t: int, per_frame: int, retention: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(similarity [T, H'W'], budgets [T] int64)`` in the embeddings' dtype, step for step as both
    published codes compute them: channels taken in ascending variance (``torch.topk``'s order), the
    budgets ``round(share * H'W')`` (half to even) clamped to ``[1, H'W']``."""
    variances = embeds.var(dim=0, unbiased=False)
    n_channels = max(1, int(embeds.shape[-1] * VIDCOM2_CHANNELS))
    low = torch.topk(variances, k=n_channels, largest=False).indices
    tokens = F.normalize(embeds.index_select(-1, low).view(t, per_frame, n_channels), dim=-1)
    video = _gaussians(tokens, tokens.mean(dim=(0, 1), keepdim=True))
    frame = _gaussians(tokens, tokens.mean(dim=1, keepdim=True))
    distinct = -video.mean(dim=-1)
    p = F.softmax((distinct - distinct.max()) / VIDCOM2_TEMPERATURE, dim=0)
    share = (retention * (1.0 + p - p.mean())).clamp(max=1.0)
    budgets = (share * per_frame).round().long().clamp(min=1, max=per_frame)
    return video + frame, budgets


def _reconcile(mask: torch.Tensor, similarity: torch.Tensor, total: int) -> None:
    """Drop the kept tokens of highest similarity, or add the free ones of lowest, until ``mask``
    (flat, in place) keeps ``total``; ``torch.topk`` picks among ties, as in vLLM."""
    kept = int(mask.sum())
    if kept > total:
        idx = mask.nonzero(as_tuple=False).squeeze(-1)
        worst = torch.topk(similarity[idx], k=kept - total, largest=True, sorted=False).indices
        mask[idx[worst]] = False
    elif kept < total:
        idx = (~mask).nonzero(as_tuple=False).squeeze(-1)
        best = torch.topk(similarity[idx], k=total - kept, largest=False, sorted=False).indices
        mask[idx[best]] = True


def vidcom2_mask(
    embeds: torch.Tensor,
    grid: Sequence[int],
    merge_size: int,
    retention: float,
    method: str = "vllm",
) -> torch.Tensor:
    """VidCom2 retention mask: bool ``[T * H' * W']`` on the embeddings' device.

    Args:
        embeds: ``[T * H' * W', hidden]`` the video's embeddings after the merger, in token order.
        grid: the encoder grid ``(T, H, W)``.
        merge_size: the spatial merge size.
        retention: the retention ratio in ``(0, 1]`` (vLLM's ``1 - video_pruning_rate``).
        method: ``"vllm"`` keeps exactly :func:`vidcom2_retained_tokens` tokens (vLLM v0.33.0 / v0.34.0
            ``compute_retention_mask``); ``"authors"`` keeps each frame's rounded budget and no more
            (the authors' ``select_outlier_indices``: a total that depends on the embeddings).
    """
    method = _vidcom2_method(method)
    t, per_frame = _frames(grid, merge_size)
    total = vidcom2_retained_tokens(grid, merge_size, retention)
    x = _embeddings(embeds, t * per_frame)
    similarity, budgets = _vidcom2_frames(x, t, per_frame, float(retention))
    mask = torch.zeros((t, per_frame), dtype=torch.bool, device=x.device)
    for f, k in enumerate(budgets.tolist()):
        mask[f, torch.topk(similarity[f], k=k, largest=False, sorted=False).indices] = True
    mask = mask.reshape(-1)
    if method == "vllm":
        _reconcile(mask, similarity.reshape(-1), total)
    return mask


def _per_video(
    mask_of: Callable[[torch.Tensor, Sequence[int]], torch.Tensor],
) -> Callable[..., list[torch.Tensor]]:
    def rule(features: Sequence[torch.Tensor], llm_grids: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        return [mask_of(f, g) for f, g in zip(features, llm_grids, strict=True)]

    return rule


def evs_rule(q: float) -> Callable[..., list[torch.Tensor]]:
    """EVS at pruning rate ``q`` as a mask rule ``rule(features, llm_grids) -> masks`` (one
    :func:`evs_mask` per video, on its merged features and ``(T', H', W')`` grid): the ``video_keep=`` of
    :func:`mrope.integrations.transformers.pruned_video_inputs`, which prunes a model's videos at that rate."""
    _rate(q, "q (the EVS pruning rate)", low_open=False)
    return _per_video(lambda features, grid: evs_mask(features, grid, 1, q))


def vidcom2_rule(retention: float, method: str = "vllm") -> Callable[..., list[torch.Tensor]]:
    """VidCom2 at ``retention`` (by ``method``, see :func:`vidcom2_mask`) as a mask rule
    ``rule(features, llm_grids) -> masks`` (see :func:`evs_rule`)."""
    _rate(retention, "retention (the VidCom2 retention ratio)", low_open=True)
    _vidcom2_method(method)
    return _per_video(lambda features, grid: vidcom2_mask(features, grid, 1, retention, method))


__all__ = [
    "evs_mask",
    "evs_rule",
    "evs_retained_tokens",
    "vidcom2_mask",
    "vidcom2_retained_tokens",
    "vidcom2_rule",
]
