"""EVS and VidCom2 retention masks and counts against the published algorithms, written out here.

EVS: vLLM ``vllm/multimodal/evs.py`` (``compute_retained_tokens_count``, ``compute_retention_mask``):
``1 - cos`` to the same cell of the previous frame (torch's ``cosine_similarity``), 255 for the first
frame, a stable descending sort, the first ``max(tpf, int(tpf * T * (1 - q)))`` kept. VidCom2: the
authors' ``token_compressor/vidcom2/vidcom2.py`` (low-variance channels, Gaussian scores, softmax
shares), with the budgets apportioned to the exact total by largest remainder (ties to the lower index).
The selection, the sort orders, the counts and the apportionment are plain Python loops here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mrope import LayoutError
from mrope._pruning import (
    evs_mask,
    evs_retained_tokens,
    vidcom2_budgets,
    vidcom2_mask,
    vidcom2_retained_tokens,
)

MERGE = 2
Q_SWEEP = [float(q) for q in np.linspace(0.0, 0.999, 37)] + [0.1, 0.25, 0.5, 0.7, 0.75, 0.9, 1 / 3]


def _reference_evs(
    embeds: torch.Tensor, grid: tuple[int, int, int], q: float, first: float = 255.0
) -> list[bool]:
    t, h, w = grid[0], grid[1] // MERGE, grid[2] // MERGE
    x = embeds.reshape(t, h, w, -1)
    rows = [[first] * (h * w)]
    for k in range(1, t):
        rows.append((1 - F.cosine_similarity(x[k], x[k - 1], dim=-1)).reshape(-1).tolist())
    flat = [d for row in rows for d in row]
    keep = max(h * w, int(h * w * t * (1 - q)))
    chosen = sorted(range(len(flat)), key=lambda i: (-flat[i], i))[:keep]
    out = [False] * len(flat)
    for i in chosen:
        out[i] = True
    return out


def _embeddings(kind: str, t: int, per_frame: int, seed: int, dim: int = 16) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.randn(t * per_frame, dim, generator=gen)
    # tie-heavy: tokens from a codebook of three vectors, every other frame a repeat of the one before
    book = torch.randn(3, dim, generator=gen)
    frames = [book[torch.randint(0, 3, (per_frame,), generator=gen)]]
    for k in range(1, t):
        frames.append(frames[-1].clone() if k % 2 else book[torch.randint(0, 3, (per_frame,), generator=gen)])
    return torch.cat(frames)


GRIDS = [(1, 4, 6), (3, 4, 4), (6, 6, 4)]


def test_evs_counts_equal_the_published_formula_over_a_q_sweep() -> None:
    for grid in GRIDS + [(9, 10, 14), (64, 28, 28)]:
        t, per_frame = grid[0], (grid[1] // MERGE) * (grid[2] // MERGE)
        for q in Q_SWEEP:
            total_tokens = per_frame * t
            assert evs_retained_tokens(grid, MERGE, q) == max(per_frame, int(total_tokens * (1 - q)))
    assert evs_retained_tokens((1, 4, 6), MERGE, 0.99) == 6  # T = 1: the first frame is all there is


@pytest.mark.parametrize("kind", ["random", "tie-heavy"])
@pytest.mark.parametrize("grid", GRIDS)
def test_evs_masks_equal_the_reference(kind: str, grid: tuple[int, int, int]) -> None:
    per_frame = (grid[1] // MERGE) * (grid[2] // MERGE)
    embeds = _embeddings(kind, grid[0], per_frame, seed=sum(grid))
    for q in Q_SWEEP[::3]:
        got = evs_mask(embeds, grid, MERGE, q)
        assert got.dtype == torch.bool and got.shape == (grid[0] * per_frame,)
        assert got.tolist() == _reference_evs(embeds, grid, q), q
        assert int(got.sum()) == evs_retained_tokens(grid, MERGE, q)
        assert got[:per_frame].all()  # the first frame is whole


def test_evs_tie_break_and_first_frame_controls_can_fail() -> None:
    """Negative controls: the reference with ties broken the other way, or without the first frame's
    255, differs from the mask on tie-heavy embeddings (so the comparison above can fail)."""
    grid = (6, 6, 4)
    embeds = _embeddings("tie-heavy", 6, 6, seed=3)
    mask = evs_mask(embeds, grid, MERGE, 0.6).tolist()
    assert mask != _reference_evs(embeds, grid, 0.6, first=0.0)
    x = embeds.reshape(6, 6, -1)
    flat = [255.0] * 6 + [
        d for k in range(1, 6) for d in (1 - F.cosine_similarity(x[k], x[k - 1], dim=-1)).tolist()
    ]
    keep = evs_retained_tokens(grid, MERGE, 0.6)
    late = sorted(range(36), key=lambda i: (-flat[i], -i))[:keep]  # ties: the later token first
    assert mask != [i in late for i in range(36)]


def _reference_vidcom2(
    embeds: torch.Tensor, grid: tuple[int, int, int], retention: float
) -> tuple[list[int], list[bool]]:
    t, per_frame = grid[0], (grid[1] // MERGE) * (grid[2] // MERGE)
    x = embeds.float()
    variances = x.var(dim=0, unbiased=False)
    k = int(x.shape[-1] * 0.5)
    channels = sorted(sorted(range(x.shape[-1]), key=lambda c: (float(variances[c]), c))[:k])
    frames = F.normalize(x[:, channels].view(-1, per_frame, k), dim=-1)
    alphas = [2**e for e in range(-3, 2)]

    def gaussian(center: torch.Tensor) -> torch.Tensor:
        dist_sq = ((frames - center) ** 2).sum(dim=-1)
        return sum(torch.exp(-dist_sq / (2 * a)) for a in alphas)

    v_score = gaussian(frames.mean(dim=(0, 1), keepdim=True))
    f_score = gaussian(frames.mean(dim=1, keepdim=True))
    scores = -v_score.mean(dim=-1)
    probs = F.softmax((scores - scores.max()) / 0.01, dim=0)
    scales = (retention * (1 + probs - probs.mean())).clamp(max=1.0)
    ideal = (scales * per_frame).tolist()
    total = max(t, int(t * per_frame * retention))
    budget = [min(max(math.floor(v), 1), per_frame) for v in ideal]
    remainder = [float(np.float32(v) - np.float32(b)) for v, b in zip(ideal, budget, strict=True)]
    missing = total - sum(budget)
    while missing > 0:
        for i in sorted(range(t), key=lambda i: (-remainder[i], i)):
            if missing and budget[i] < per_frame:
                budget[i] += 1
                missing -= 1
    while missing < 0:
        for i in sorted(range(t), key=lambda i: (remainder[i], i)):
            if missing and budget[i] > 1:
                budget[i] -= 1
                missing += 1
    token = (v_score + f_score).tolist()
    mask = []
    for f in range(t):
        kept = set(sorted(range(per_frame), key=lambda j: (token[f][j], j))[: budget[f]])
        mask += [j in kept for j in range(per_frame)]
    return budget, mask


@pytest.mark.parametrize("kind", ["random", "tie-heavy"])
@pytest.mark.parametrize("grid", GRIDS)
def test_vidcom2_masks_equal_the_reference_with_the_exact_total(
    kind: str, grid: tuple[int, int, int]
) -> None:
    t, per_frame = grid[0], (grid[1] // MERGE) * (grid[2] // MERGE)
    embeds = _embeddings(kind, t, per_frame, seed=7 + sum(grid))
    for q in Q_SWEEP[::3]:
        retention = 1 - q
        total = max(t, int(t * per_frame * retention))
        assert vidcom2_retained_tokens(grid, MERGE, retention) == total
        budget, want = _reference_vidcom2(embeds, grid, retention)
        got = vidcom2_mask(embeds, grid, MERGE, retention)
        assert vidcom2_budgets(embeds, grid, MERGE, retention).tolist() == budget
        assert got.tolist() == want, retention
        assert int(got.sum()) == total
        assert all(any(want[f * per_frame : (f + 1) * per_frame]) for f in range(t))  # one a frame at least


def test_vidcom2_budgets_follow_frame_distinctiveness() -> None:
    """A frame unlike the others gets the largest budget (the softmax share); repeats of one frame
    split the total evenly (ties to the lower frame index). Control: the authors' per-frame rounding
    alone misses the exact total here."""
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(6, 16, generator=gen)
    frames = [base + 0.01 * torch.randn(6, 16, generator=gen) for _ in range(5)]
    frames[3] = torch.randn(6, 16, generator=gen) * 3
    budgets = vidcom2_budgets(torch.cat(frames), (5, 4, 6), MERGE, 0.4)
    assert int(budgets.argmax()) == 3 and int(budgets.sum()) == 12
    same = vidcom2_budgets(torch.cat([base] * 4), (4, 4, 6), MERGE, 0.5)
    assert same.tolist() == [3, 3, 3, 3]
    uneven = vidcom2_budgets(torch.cat([base] * 4), (4, 4, 6), MERGE, 0.45)  # 10 tokens over 4 frames
    assert uneven.tolist() == [3, 3, 2, 2]
    rounded = [max(1, round(0.45 * 6))] * 4
    assert sum(rounded) != vidcom2_retained_tokens((4, 4, 6), MERGE, 0.45)


def test_bad_inputs_are_refused_clearly() -> None:
    embeds = torch.randn(12, 8)
    for bad, match in (
        (lambda: evs_retained_tokens((2, 4, 6), MERGE, 1.0), r"in \[0, 1\)"),
        (lambda: evs_retained_tokens((2, 4, 5), MERGE, 0.5), "multiples of merge_size"),
        (lambda: evs_mask(embeds, (3, 4, 6), MERGE, 0.5), "18 tokens .* 12 rows"),
        (lambda: vidcom2_mask(embeds, (2, 4, 6), MERGE, 0.0), r"in \(0, 1\]"),
        (lambda: vidcom2_mask(embeds.long(), (2, 4, 6), MERGE, 0.5), "floating-point"),
        (lambda: evs_mask(embeds, (2, 4, 6), MERGE, float("nan")), "must be a number"),
    ):
        with pytest.raises(LayoutError, match=match):
            bad()
