"""Retention masks of pruned video tokens (EVS, VidCom2) and the token counts a processor sizes prompts with.

Engines prune a video's language-model tokens (after the spatial merge) once the vision tower has run,
but size the prompt's placeholder run before: the ``*_retained_tokens`` counts need only the grid,
and the masks built later from the embeddings keep exactly that many tokens. Masks are boolean
``[T * H' * W']`` over the video's tokens in the builder's order (``t`` outermost, ``w`` fastest), the
``keep=`` of :class:`mrope.Video`.

- **EVS** (Efficient Video Sampling, arXiv 2510.14624; vLLM ``vllm/multimodal/evs.py``,
  ``compute_retention_mask``): each token's dissimilarity ``1 - cos`` to the token in the same cell of
  the previous frame, the first frame's set to 255 (above any ``1 - cos``, so it is always kept), and
  a stable descending sort (ties: the earlier token first) whose first
  ``max(H'W', int(T * H'W' * (1 - q)))`` tokens are kept; ``q`` is the pruning rate in ``[0, 1)``.
- **VidCom2** (Video Compression Commander, arXiv 2505.14454; the authors' ``token_compressor/vidcom2/
  vidcom2.py``): the lowest-variance half of the channels, L2-normalised; each token's sum of five
  Gaussian kernels (``alpha = 2^-3 .. 2^1``) to the video's mean and to its frame's mean; a frame's
  distinctiveness is minus its mean video score, ``p = softmax(distinctiveness / 0.01)``, its share
  ``retention * (1 + p - mean(p))`` (at most 1). Where the authors round each frame's budget on its
  own (a total that drifts), the budgets here are the shares times ``H'W'`` apportioned by largest
  remainder to exactly ``max(T, int(T * H'W' * retention))`` tokens, at least one a frame; each frame
  keeps its lowest-scoring tokens (the most distinct). Ties, everywhere: the lower index first.
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
    """Tokens VidCom2 keeps here of a video of encoder grid ``(T, H, W)``:
    ``max(T, int(T * H'W' * retention))`` (one a frame at least), ``retention`` in ``(0, 1]``."""
    t, per_frame = _frames(grid, merge_size)
    retention = _rate(retention, "retention (the VidCom2 retention ratio)", low_open=True)
    return max(t, int(t * per_frame * retention))


def vidcom2_scores(embeds: torch.Tensor, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(distinctiveness [T], token scores [T, H'W'])`` of VidCom2, in float32: a frame's minus mean
    Gaussian similarity to the video's mean; a token's similarity to the video's and its frame's means
    (lower: more distinct). Scored on the lowest-variance half of the channels, in channel order."""
    x = embeds.float()
    var = x.var(dim=0, unbiased=False)
    n_keep = max(1, int(x.shape[-1] * VIDCOM2_CHANNELS))
    channels = torch.argsort(var, stable=True)[:n_keep].sort().values
    tokens = F.normalize(x[:, channels].reshape(frames, -1, n_keep), dim=-1)

    def gaussians(centre: torch.Tensor) -> torch.Tensor:
        d2 = ((tokens - centre) ** 2).sum(dim=-1)
        return sum(torch.exp(-d2 / (2 * a)) for a in VIDCOM2_ALPHAS)  # type: ignore[return-value]

    video = gaussians(tokens.mean(dim=(0, 1), keepdim=True))
    frame = gaussians(tokens.mean(dim=1, keepdim=True))
    return -video.mean(dim=-1), video + frame


def apportion(ideal: torch.Tensor, total: int, low: int, high: int) -> torch.Tensor:
    """Integer budgets ``[T]`` summing to ``total``, each in ``[low, high]``: ``floor(ideal)`` clamped,
    then rounds of one more token to the frames of largest remainder ``ideal - budget`` (fewer: one less
    from the smallest), ties to the lower frame index, skipping frames at their bound."""
    t = ideal.numel()
    if not t * low <= total <= t * high:
        raise LayoutError(f"{total} tokens cannot be split into {t} budgets in [{low}, {high}]")
    budget = ideal.floor().clamp(min=low, max=high).long()
    remainder = ideal - budget.to(ideal.dtype)
    missing = total - int(budget.sum())
    step = 1 if missing > 0 else -1
    order = torch.argsort(remainder, descending=missing > 0, stable=True)
    while missing:
        room = (budget[order] < high) if step > 0 else (budget[order] > low)
        take = order[room][: abs(missing)]
        budget[take] += step
        missing -= step * int(take.numel())
    return budget


def vidcom2_mask(
    embeds: torch.Tensor, grid: Sequence[int], merge_size: int, retention: float
) -> torch.Tensor:
    """VidCom2 retention mask: bool ``[T * H' * W']`` with exactly :func:`vidcom2_retained_tokens` set.

    Args:
        embeds: ``[T * H' * W', hidden]`` the video's embeddings after the merger, in token order.
        grid: the encoder grid ``(T, H, W)``.
        merge_size: the spatial merge size.
        retention: the retention ratio in ``(0, 1]`` (``1 - q``).
    """
    t, per_frame = _frames(grid, merge_size)
    total = vidcom2_retained_tokens(grid, merge_size, retention)
    distinct, scores = vidcom2_scores(_embeddings(embeds, t * per_frame), t)
    budgets = _budgets(distinct, float(retention), per_frame, total)
    rank = torch.empty((t, per_frame), dtype=torch.long, device=scores.device)
    order = torch.argsort(scores, dim=1, stable=True)
    rank.scatter_(1, order, torch.arange(per_frame, device=scores.device).expand(t, per_frame).contiguous())
    mask = (rank < budgets[:, None]).reshape(-1)
    assert int(mask.sum()) == total
    return mask


def vidcom2_budgets(
    embeds: torch.Tensor, grid: Sequence[int], merge_size: int, retention: float
) -> torch.Tensor:
    """Tokens VidCom2 keeps of each frame, int64 ``[T]``: the frames' shares apportioned to
    :func:`vidcom2_retained_tokens` (at least one a frame)."""
    t, per_frame = _frames(grid, merge_size)
    total = vidcom2_retained_tokens(grid, merge_size, retention)
    distinct, _ = vidcom2_scores(_embeddings(embeds, t * per_frame), t)
    return _budgets(distinct, float(retention), per_frame, total)


def _budgets(distinct: torch.Tensor, retention: float, per_frame: int, total: int) -> torch.Tensor:
    p = torch.softmax((distinct - distinct.max()) / VIDCOM2_TEMPERATURE, dim=0)
    share = (retention * (1 + p - p.mean())).clamp(max=1.0)
    return apportion(share * per_frame, total, 1, per_frame)


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


def vidcom2_rule(retention: float) -> Callable[..., list[torch.Tensor]]:
    """VidCom2 at ``retention`` as a mask rule ``rule(features, llm_grids) -> masks`` (see :func:`evs_rule`)."""
    _rate(retention, "retention (the VidCom2 retention ratio)", low_open=True)
    return _per_video(lambda features, grid: vidcom2_mask(features, grid, 1, retention))


__all__ = [
    "apportion",
    "evs_mask",
    "evs_rule",
    "evs_retained_tokens",
    "vidcom2_budgets",
    "vidcom2_mask",
    "vidcom2_retained_tokens",
    "vidcom2_rule",
    "vidcom2_scores",
]
