"""EVS and VidCom2 retention masks and counts against the published algorithms, written out here.

EVS: vLLM v0.34.0 ``vllm/multimodal/video_prune/evs.py`` (byte-identical in v0.33.0;
``compute_retained_tokens_count`` line 16, ``compute_retention_mask`` line 38): ``1 - cos`` to the
same cell of the previous frame (torch's ``cosine_similarity``), 255 for the first frame, a stable
descending sort, the first ``max(tpf, int(tpf * T * (1 - q)))`` kept; the sort order and the counts
are plain Python here. VidCom2: vLLM v0.34.0 ``vllm/multimodal/video_prune/vidcom2.py``
(byte-identical in v0.33.0) and the authors' ``token_compressor/vidcom2/vidcom2.py``
(xuyang-liu16/VidCom2), restated below step by step; their selections call ``torch.topk`` as both
codes do (which tokens of a tie it returns is torch's choice, so the reference makes the same calls).
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
    vidcom2_mask,
    vidcom2_retained_tokens,
    vidcom2_rule,
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


def _low_variance_similarity(embeds: torch.Tensor, t: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token similarity [T, tpf], frame distinctiveness [T])``: vLLM v0.34.0
    ``vllm/multimodal/video_prune/vidcom2.py`` lines 68-86 (the same lines in v0.33.0), the authors'
    ``select_low_var_channels`` / ``compute_gaussian_scores``: ``torch.topk`` of the biased channel
    variances, smallest ``int(C / 2)`` in its (ascending) order, L2-normalised per token, five kernels
    ``exp(-d^2 / (2a))`` with ``a = 1/8 .. 2`` to the video mean and to the frame mean."""
    half = int(embeds.shape[1] * 0.5)
    order = torch.topk(embeds.var(dim=0, unbiased=False), k=half, largest=False).indices
    z = F.normalize(embeds[:, order].reshape(t, -1, half), dim=-1)
    widths = [0.125, 0.25, 0.5, 1.0, 2.0]
    to_video = sum(
        torch.exp(-((z - z.mean(dim=(0, 1), keepdim=True)) ** 2).sum(-1) / (2 * a)) for a in widths
    )
    to_frame = sum(torch.exp(-((z - z.mean(dim=1, keepdim=True)) ** 2).sum(-1) / (2 * a)) for a in widths)
    return to_video + to_frame, -to_video.mean(dim=-1)


def _frame_budgets(distinct: torch.Tensor, retention: float, tpf: int) -> list[int]:
    """vLLM v0.34.0 lines 85-89 / the authors' ``compute_scales`` and ``select_outlier_indices``:
    ``share = min(1, r * (1 + p - mean p))`` with ``p`` the softmax of distinctiveness / 0.01, a budget
    ``round(share * tpf)`` (torch: half to even), at least 1."""
    p = torch.softmax((distinct - distinct.max()) / 0.01, dim=0)
    share = torch.clamp(retention * (1.0 + p - p.mean()), max=1.0)
    return [min(max(int(v), 1), tpf) for v in torch.round(share * tpf).tolist()]


def _reference_vidcom2(
    embeds: torch.Tensor, grid: tuple[int, int, int], retention: float, exact: bool = True
) -> list[bool]:
    """VidCom2's mask. ``exact``: vLLM v0.33.0 / v0.34.0 ``compute_retention_mask`` (line 33): each
    frame's ``torch.topk`` of lowest similarity (lines 92-96), then (lines 98-115) the kept tokens of
    highest similarity dropped, or the free ones of lowest added, by ``torch.topk`` over the flat kept /
    free lists in index order, to ``max(T, min(int(T * tpf * (1 - q)), T * tpf))`` (line 19). Without
    ``exact``: the authors' ``select_outlier_indices`` (no reconcile)."""
    t, tpf = grid[0], (grid[1] // MERGE) * (grid[2] // MERGE)
    similarity, distinct = _low_variance_similarity(embeds, t)
    keep = [False] * (t * tpf)
    for f, k in enumerate(_frame_budgets(distinct, retention, tpf)):
        for j in torch.topk(similarity[f], k=k, largest=False, sorted=False).indices.tolist():
            keep[f * tpf + j] = True
    if not exact:
        return keep
    flat = similarity.reshape(-1)
    target = max(t, min(int(t * tpf * retention), t * tpf))
    kept = [i for i in range(t * tpf) if keep[i]]
    free = [i for i in range(t * tpf) if not keep[i]]
    if len(kept) > target:
        for j in torch.topk(flat[kept], k=len(kept) - target, largest=True, sorted=False).indices.tolist():
            keep[kept[j]] = False
    elif len(kept) < target:
        for j in torch.topk(flat[free], k=target - len(kept), largest=False, sorted=False).indices.tolist():
            keep[free[j]] = True
    return keep


def _largest_remainder(embeds: torch.Tensor, grid: tuple[int, int, int], retention: float) -> list[bool]:
    """The control: budgets floored and apportioned by largest remainder to the same total (ties to the
    lower frame), each frame's lowest-similarity tokens by a stable sort; not what vLLM does."""
    t, tpf = grid[0], (grid[1] // MERGE) * (grid[2] // MERGE)
    similarity, distinct = _low_variance_similarity(embeds, t)
    p = torch.softmax((distinct - distinct.max()) / 0.01, dim=0)
    ideal = (torch.clamp(retention * (1.0 + p - p.mean()), max=1.0) * tpf).tolist()
    budget = [min(max(math.floor(v), 1), tpf) for v in ideal]
    missing = max(t, int(t * tpf * retention)) - sum(budget)
    by_remainder = sorted(range(t), key=lambda f: (-(ideal[f] - budget[f]) * (1 if missing > 0 else -1), f))
    while missing:
        for f in by_remainder:
            step = 1 if missing > 0 else -1
            if missing and 1 <= budget[f] + step <= tpf:
                budget[f] += step
                missing -= step
    rows = similarity.tolist()
    return [
        j in set(sorted(range(tpf), key=lambda i: (rows[f][i], i))[: budget[f]])
        for f in range(t)
        for j in range(tpf)
    ]


def _vidcom2_cases(kind: str, count: int) -> list[tuple[torch.Tensor, tuple[int, int, int], float]]:
    """``count`` seeded cases: a grid of T in 1..8 frames, 2..6 x 2..6 merged cells, a pruning rate."""
    gen = np.random.default_rng(1234 if kind == "random" else 4321)
    cases = []
    for seed in range(count):
        grid = (int(gen.integers(1, 9)), 2 * int(gen.integers(2, 7)), 2 * int(gen.integers(2, 7)))
        tpf = (grid[1] // MERGE) * (grid[2] // MERGE)
        dim = int(gen.choice([8, 16, 33]))
        q = float(gen.choice([0.1, 0.25, 0.5, 0.6, 0.75, 0.9, float(gen.uniform(0, 0.99))]))
        cases.append((_embeddings(kind, grid[0], tpf, seed=seed, dim=dim), grid, 1 - q))
    return cases


@pytest.mark.parametrize("kind", ["random", "tie-heavy"])
def test_vidcom2_masks_equal_vllm_token_for_token(kind: str) -> None:
    """vLLM v0.34.0 (and v0.33.0: ``vidcom2.py`` is byte-identical) on 120 random and 120 tie-heavy
    cases; vLLM's ``video_pruning_rate=q`` is ``retention=1 - q``. Every mask keeps the placeholder count."""
    for embeds, grid, retention in _vidcom2_cases(kind, 120):
        got = vidcom2_mask(embeds, grid, MERGE, retention)
        assert got.dtype == torch.bool and got.shape == (embeds.shape[0],)
        assert got.tolist() == _reference_vidcom2(embeds, grid, retention), (grid, retention)
        assert int(got.sum()) == vidcom2_retained_tokens(grid, MERGE, retention)
        assert vidcom2_mask(embeds, grid, MERGE, retention, method="vllm").tolist() == got.tolist()


@pytest.mark.parametrize("kind", ["random", "tie-heavy"])
def test_vidcom2_authors_method_equals_the_authors_code(kind: str) -> None:
    """The authors' ``token_compressor/vidcom2/vidcom2.py`` (xuyang-liu16/VidCom2): per-frame budgets
    only, a total that drifts from vLLM's in some cases (the control that the two are told apart)."""
    drifted = 0
    for embeds, grid, retention in _vidcom2_cases(kind, 60):
        got = vidcom2_mask(embeds, grid, MERGE, retention, method="authors").tolist()
        assert got == _reference_vidcom2(embeds, grid, retention, exact=False), (grid, retention)
        drifted += sum(got) != vidcom2_retained_tokens(grid, MERGE, retention)
    assert drifted > 0


def test_vidcom2_controls_can_fail() -> None:
    """Negative controls on the random cases: largest-remainder budgets (the same total, another
    split) and the authors' drift each disagree with vLLM's reference somewhere."""
    cases = _vidcom2_cases("random", 120)
    split = sum(_largest_remainder(e, g, r) != _reference_vidcom2(e, g, r) for e, g, r in cases)
    drift = sum(_reference_vidcom2(e, g, r, exact=False) != _reference_vidcom2(e, g, r) for e, g, r in cases)
    assert split > 0 and drift > 0


def test_vidcom2_budgets_follow_frame_distinctiveness() -> None:
    """A frame unlike the others keeps the most tokens (the softmax share); bfloat16 embeddings are
    scored in bfloat16 as vLLM does, still to the exact count."""
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(6, 16, generator=gen)
    frames = [base + 0.01 * torch.randn(6, 16, generator=gen) for _ in range(5)]
    frames[3] = torch.randn(6, 16, generator=gen) * 3
    mask = vidcom2_mask(torch.cat(frames), (5, 4, 6), MERGE, 0.4).reshape(5, 6)
    assert int(mask.sum(dim=1).argmax()) == 3 and int(mask.sum()) == 12
    half = torch.cat(frames).bfloat16()
    got = vidcom2_mask(half, (5, 4, 6), MERGE, 0.4)
    assert got.tolist() == _reference_vidcom2(half, (5, 4, 6), 0.4) and int(got.sum()) == 12


def test_bad_inputs_are_refused_clearly() -> None:
    embeds = torch.randn(12, 8)
    for bad, match in (
        (lambda: evs_retained_tokens((2, 4, 6), MERGE, 1.0), r"in \[0, 1\)"),
        (lambda: evs_retained_tokens((2, 4, 5), MERGE, 0.5), "multiples of merge_size"),
        (lambda: evs_mask(embeds, (3, 4, 6), MERGE, 0.5), "18 tokens .* 12 rows"),
        (lambda: vidcom2_mask(embeds, (2, 4, 6), MERGE, 0.0), r"in \(0, 1\]"),
        (lambda: vidcom2_mask(embeds.long(), (2, 4, 6), MERGE, 0.5), "floating-point"),
        (lambda: evs_mask(embeds, (2, 4, 6), MERGE, float("nan")), "must be a number"),
        (
            lambda: vidcom2_mask(embeds, (2, 4, 6), MERGE, 0.5, method="paper"),
            r"one of \('vllm', 'authors'\)",
        ),
        (lambda: vidcom2_rule(0.5, method="fast"), r"one of \('vllm', 'authors'\)"),
    ):
        with pytest.raises(LayoutError, match=match):
            bad()
