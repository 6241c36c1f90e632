"""Positions, deltas and decode positions against vLLM v0.34.0 and v0.33.0, restated here from their sources.

Read from the released wheels (``vllm-0.33.0`` / ``vllm-0.34.0``, ``cp38-abi3`` manylinux): every model's
``get_mrope_input_positions`` is the same function in both releases (``minicpmv4_7.py`` changed only how
it builds its input tensor; ``keye*.py`` left in 0.34, ``unlimited_ocr.py`` arrived), and so are
``vllm/multimodal/video_prune/evs.py`` and ``vidcom2.py`` (tests/core/test_evs_masks.py). What changed is
where decode positions come from: v0.33.0's ``vllm/v1/worker/gpu_model_runner.py``
(``_calc_mrope_positions``, line 2542) copies the prompt's part of a scheduled chunk from the stored
positions and writes the rest with ``MRotaryEmbedding.get_next_input_positions_tensor``
(``vllm/model_executor/layers/rotary_embedding/mrope.py`` line 556: ``delta + context_len + i`` on every
row); v0.34.0 removed both, and its runner (``vllm/v1/worker/gpu/mm/rope.py``,
``_prepare_rope_positions_kernel`` line 145) reads a request's stored positions for its whole chunk while
``num_computed < prefill_len`` and otherwise writes ``num_computed + i + delta`` (int32 storage of the
prefill positions and the delta, line 46 and 56). Pruned video positions (EVS / VidCom2 masks alike):
Qwen3-VL's ``_get_expanded_positions`` with ``evs.py``'s ``recompute_mrope_positions``, unchanged.
Each reference below says which release it follows.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.vllm_runners import v033_schedule, v034_schedule

import mrope
from mrope.models import resolve_rules

VLLM_F64 = {"seconds_grouping": "i*(spg*tps) f64"}


def _vllm_qwen_positions(n: int, media: list[tuple[int, int, int, int, float]]) -> tuple[np.ndarray, int]:
    """vLLM v0.34.0 = v0.33.0 ``qwen2_vl.py`` ``get_mrope_input_positions`` (line 1354) with
    ``iter_mm_grid_thw`` (line 1310), the same code in ``qwen2_5_vl.py`` (lines 1371 / 1328): per media
    item ``(offset, T', H', W', t_factor)`` in offset order, the text before it from one past the largest
    position so far, the grid's ``(t, h, w)`` indices from there with ``t`` multiplied by ``t_factor``
    (``second_per_grid_ts.item() * tokens_per_second``, float64) and cast to int64 unless it is 1.0; the
    delta is ``max + 1 - n``."""
    columns: list[list[int]] = [[], [], []]
    start = 0
    for offset, t, h, w, t_factor in sorted(media):
        base = max(max(row) for row in columns) + 1 if columns[0] else 0
        for k in range(offset - start):
            for row in columns:
                row.append(base + k)
        base += offset - start
        for ti in range(t):
            tt = int(ti * t_factor) if t_factor != 1.0 else ti
            for hi in range(h):
                for wi in range(w):
                    columns[0].append(base + tt)
                    columns[1].append(base + hi)
                    columns[2].append(base + wi)
        start = offset + t * h * w
    base = max(max(row) for row in columns) + 1 if columns[0] else 0
    for k in range(n - start):
        for row in columns:
            row.append(base + k)
    positions = np.array(columns, dtype=np.int64)
    return positions, int(positions.max()) + 1 - n


def _prompts(family: str, count: int, fractional: bool, seed: int) -> list[dict]:
    """Random prompts: 1-4 images / videos (wrapped in vision start / end) between text runs of 0-5 tokens;
    grids up to (29, 8, 8); seconds per temporal patch from common and random rates when ``fractional``."""
    lay = resolve_rules(family)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        ids: list[int] = []
        media, images, videos, seconds = [], [], [], []
        for _ in range(int(rng.integers(1, 5))):
            ids += [int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]
            video = bool(rng.random() < 0.5)
            t = int(rng.integers(1, 30)) if video else 1
            h, w = 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5))
            spg = 1.0
            if video and fractional:
                spg = float(rng.choice([0.04, 0.08, 0.1, 1 / 3, 0.5, 1.0, 1.2, float(rng.uniform(0.01, 2))]))
            ids.append(lay.vision_start_id)
            tokens = t * (h // 2) * (w // 2)
            t_factor = (
                float(np.float32(spg)) * (lay.tokens_per_second if fractional else 1.0) if video else 1.0
            )
            media.append((len(ids), t, h // 2, w // 2, t_factor))
            ids += [lay.video_pad_id if video else lay.image_pad_id] * tokens + [lay.vision_end_id]
            (videos if video else images).append((t, h, w))
            if video:
                seconds.append(spg)
        ids += [int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]
        out.append({"ids": ids, "media": media, "images": images, "videos": videos, "seconds": seconds})
    return out


def _mrope(family: str, p: dict, rules: dict | None = None) -> tuple[np.ndarray, int]:
    pos, deltas = mrope.numpy_rope_index(
        np.array([p["ids"]]),
        np.array(p["images"]).reshape(-1, 3) if p["images"] else None,
        np.array(p["videos"]).reshape(-1, 3) if p["videos"] else None,
        model=family,
        rules=rules,
        second_per_grid_ts=p["seconds"] or None,
    )
    return pos[:, 0], int(deltas[0])


def test_qwen2_vl_positions_and_deltas_equal_vllm() -> None:
    """vLLM v0.34.0 and v0.33.0 (the same ``get_mrope_input_positions``): Qwen2-VL under mrope's
    released rules, 200 random prompts, positions and delta."""
    for p in _prompts("qwen2-vl", 200, fractional=False, seed=0):
        want, delta = _vllm_qwen_positions(len(p["ids"]), p["media"])
        got, got_delta = _mrope("qwen2-vl", p)
        assert np.array_equal(got, want) and got_delta == delta


def test_qwen2_5_vl_seconds_equal_vllm_in_float64() -> None:
    """vLLM v0.34.0 and v0.33.0: Qwen2.5-VL videos at fractional seconds per patch (``tokens_per_second``
    2) multiply in float64; ``seconds_grouping="i*(spg*tps) f64"`` gives vLLM's positions on all 300
    random prompts. Control: the released float32 grouping parts from vLLM on some of them."""
    prompts = _prompts("qwen2.5-vl", 300, fractional=True, seed=1)
    differs = 0
    for p in prompts:
        want, delta = _vllm_qwen_positions(len(p["ids"]), p["media"])
        got, got_delta = _mrope("qwen2.5-vl", p, VLLM_F64)
        assert np.array_equal(got, want) and got_delta == delta
        differs += not np.array_equal(_mrope("qwen2.5-vl", p)[0], want)
    assert differs > 0


def test_float64_time_differs_from_float32_where_documented() -> None:
    """26 patches at 0.04 s, 2 tokens per second: 0.04 as float32 is 0.0399999991, so the last patch's
    float64 product (vLLM) is 1.99999996 (t = 1) where the released float32 one rounds to 2.0 (t = 2).
    The expected values are the two products truncated, computed here."""
    lay = resolve_rules("qwen2.5-vl")
    spg32 = float(np.float32(0.04))
    f64 = [int(i * (spg32 * 2.0)) for i in range(26)]
    f32 = [int(np.float32(np.float32(i) * np.float32(0.04)) * np.float32(2.0)) for i in range(26)]
    assert f64 != f32
    p = {
        "ids": [lay.vision_start_id] + [lay.video_pad_id] * 26 + [lay.vision_end_id],
        "images": [],
        "videos": [(26, 2, 2)],
        "seconds": [0.04],
    }
    assert _mrope("qwen2.5-vl", p, VLLM_F64)[0][0, 1:27].tolist() == [1 + t for t in f64]
    assert _mrope("qwen2.5-vl", p)[0][0, 1:27].tolist() == [1 + t for t in f32]


@pytest.mark.parametrize("schedule", [v033_schedule, v034_schedule], ids=["v0.33.0", "v0.34.0"])
def test_decode_positions_equal_vllm_runners(schedule) -> None:
    """A prompt prefilled in random chunks, then decoded one token (or a few, as a speculative step) at
    a time: each runner's positions equal mrope's prompt positions followed by ``next_positions``.
    Control: a delta off by one is caught."""
    rng = np.random.default_rng(7)
    for p in _prompts("qwen2-vl", 40, fractional=False, seed=3):
        prompt, delta = _mrope("qwen2-vl", p)
        n = prompt.shape[1]
        chunks, left = [], n
        while left:
            chunks.append(int(rng.integers(1, left + 1)))
            left -= chunks[-1]
        decode = [int(rng.integers(1, 4)) for _ in range(6)]
        want = np.concatenate([prompt, mrope.next_positions(delta, n, sum(decode))], axis=1)
        assert np.array_equal(schedule(prompt, delta, chunks + decode), want)
        assert not np.array_equal(schedule(prompt, delta + 1, chunks + decode), want)


def test_v033_chunk_straddling_the_prompt_end_equals_next_positions() -> None:
    """v0.33.0 splits a chunk that runs past the prompt (a resumed request): its tail comes from the
    delta, and equals mrope's ``next_positions`` there."""
    p = _prompts("qwen2-vl", 1, fractional=False, seed=11)[0]
    prompt, delta = _mrope("qwen2-vl", p)
    n = prompt.shape[1]
    got = v033_schedule(prompt, delta, [n - 1, 5])
    assert np.array_equal(got[:, n:], mrope.next_positions(delta, n, 4))


def _vllm_frame_blocks(ids: list[int], blocks: list[tuple[int, int, int]]) -> tuple[np.ndarray, int]:
    """vLLM's per-frame rule, the same in v0.33.0 and v0.34.0: ``qwen3_vl.py``
    ``_get_mrope_input_positions`` (v0.34.0 line 2904, v0.33.0 line 2888) over ``_iter_mm_grid_hw``
    (2812; 2796), and ``glm4_1v.py`` ``get_mrope_input_positions`` (v0.34.0 line 2525, v0.33.0 line
    2276) over ``iter_mm_grid_thw`` (a video whose placeholder has one embed range per frame gives one
    block per frame). An image is one ``(1, H', W')`` block, a video one per frame; timestamp text and
    wrappers are ordinary text. The text before a block runs from one past the largest position so far,
    the block's ``(h, w)`` from there. Unpruned frames only. ``blocks``: ``(offset, H', W')`` in order."""
    columns: list[list[int]] = [[], [], []]
    start = 0
    for offset, h, w in blocks:
        base = max(max(row) for row in columns) + 1 if columns[0] else 0
        text = offset - start
        for k in range(text):
            for row in columns:
                row.append(base + k)
        for hi in range(h):
            for wi in range(w):
                columns[0].append(base + text)
                columns[1].append(base + text + hi)
                columns[2].append(base + text + wi)
        start = offset + h * w
    base = max(max(row) for row in columns) + 1 if columns[0] else 0
    for k in range(len(ids) - start):
        for row in columns:
            row.append(base + k)
    positions = np.array(columns, dtype=np.int64)
    return positions, int(positions.max()) + 1 - len(ids)


def _frame_prompt(family: str, rng: np.random.Generator) -> tuple[list[int], list, list, list]:
    """One random prompt of 1-3 images / videos: Qwen3-VL puts each frame's 1-4 timestamp tokens before
    its vision start; GLM-4.1V wraps a video in begin / end of video and puts them after each frame."""
    lay = resolve_rules(family)
    glm = lay.video_start_id is not None
    ids: list[int] = []
    blocks, images, videos = [], [], []

    def words(low: int, high: int) -> list[int]:
        return [int(v) for v in rng.integers(10, 1000, int(rng.integers(low, high)))]

    for _ in range(int(rng.integers(1, 4))):
        ids += words(0, 5)
        h, w = 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5))
        frames = int(rng.integers(1, 6)) if rng.random() < 0.5 else 0
        ids += [lay.video_start_id] if glm and frames else []
        for _ in range(max(frames, 1)):
            ids += words(1, 5) if frames and not glm else []
            ids.append(lay.vision_start_id)
            blocks.append((len(ids), h // 2, w // 2))
            ids += [lay.video_pad_id if frames else lay.image_pad_id] * ((h // 2) * (w // 2))
            ids += [lay.vision_end_id] + (words(1, 4) if frames and glm else [])
        ids += [lay.video_end_id] if glm and frames else []
        (videos if frames else images).append((frames or 1, h, w))
    ids += words(0, 5)
    return ids, blocks, images, videos


@pytest.mark.parametrize("family", ["qwen3-vl", "glm-4.1v"])
def test_per_frame_families_positions_and_deltas_equal_vllm(family: str) -> None:
    """vLLM v0.34.0 and v0.33.0: Qwen3-VL and GLM-4.1V, 150 random prompts each of images and
    multi-frame videos with their timestamp text, positions and delta. Control: the reference with
    every block's ``H'`` and ``W'`` swapped parts from mrope on some of them."""
    rng = np.random.default_rng(5)
    differs = 0
    for _ in range(150):
        ids, blocks, images, videos = _frame_prompt(family, rng)
        want, delta = _vllm_frame_blocks(ids, blocks)
        grids = (
            np.array(images).reshape(-1, 3) if images else None,
            np.array(videos).reshape(-1, 3) if videos else None,
        )
        pos, deltas = mrope.numpy_rope_index(np.array([ids]), *grids, model=family)
        assert np.array_equal(pos[:, 0], want) and int(deltas[0]) == delta
        swapped, _ = _vllm_frame_blocks(ids, [(o, w, h) for o, h, w in blocks])
        differs += not np.array_equal(pos[:, 0], swapped)
    assert differs > 0


def _vllm_evs_qwen3(
    prefix: tuple[list[int], list], video: tuple[list[int], list], keep: np.ndarray, suffix: list[int]
) -> tuple[list[int], np.ndarray, int]:
    """vLLM's pruned Qwen3-VL video, the same in v0.33.0 and v0.34.0: ``qwen3_vl.py``
    ``_get_expanded_positions`` (v0.34.0 line 2771 / v0.33.0 line 2755: the unpruned video's own
    positions from 0, its kept video columns and all of its text columns) placed by ``evs.py``
    ``recompute_mrope_positions`` (line 323: the media starts at its first timestamp token; line 329:
    ``base`` one past the last row of the token before; line 343: the text after runs from one past
    the media's largest position). Returns ``(pruned ids, positions, delta)``."""
    pad = resolve_rules("qwen3-vl").video_pad_id
    (before, before_blocks), (repl, repl_blocks) = prefix, video
    own, _ = _vllm_frame_blocks(repl, repl_blocks)
    is_video = np.array(repl) == pad
    columns = np.sort(np.concatenate([np.flatnonzero(~is_video), np.flatnonzero(is_video)[keep]]))
    head, _ = _vllm_frame_blocks(before, before_blocks)
    media = own[:, columns] + head[-1, -1] + 1
    tail = np.arange(len(suffix)) + media.max() + 1
    positions = np.concatenate([head, media, np.broadcast_to(tail, (3, tail.size))], axis=1)
    ids = before + [repl[c] for c in columns] + suffix
    return ids, positions, int(positions.max()) + 1 - len(ids)


def test_pruned_qwen3_vl_video_equals_vllm_evs_positions() -> None:
    """vLLM v0.34.0 and v0.33.0 (``evs.py`` byte-identical, ``qwen3_vl.py``'s pruning path unchanged):
    a Qwen3-VL prompt (text, maybe an image, text, a video, text) whose video is pruned by EVS at rates
    0.3-0.95 (frames can lose every token and keep their timestamp and wrappers): mrope's positions of
    the pruned ids (``video_keep``) and its delta equal vLLM's recomputed ones on 60 prompts. Control:
    resuming the text after the video at the media's start plus its kept length parts from them."""
    lay = resolve_rules("qwen3-vl")
    rng = np.random.default_rng(9)
    differs = 0
    for case in range(60):
        before = [int(v) for v in rng.integers(10, 1000, int(rng.integers(1, 5)))]
        images, before_blocks = [], []
        if rng.random() < 0.5:
            ih, iw = 2 * int(rng.integers(1, 4)), 2 * int(rng.integers(1, 4))
            before.append(lay.vision_start_id)
            before_blocks.append((len(before), ih // 2, iw // 2))
            before += [lay.image_pad_id] * ((ih // 2) * (iw // 2)) + [lay.vision_end_id]
            before += [int(v) for v in rng.integers(10, 1000, int(rng.integers(1, 4)))]
            images.append((1, ih, iw))
        t, h, w = int(rng.integers(2, 7)), 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5))
        repl, repl_blocks = [], []
        for _ in range(t):
            repl += [int(v) for v in rng.integers(10, 1000, int(rng.integers(1, 4)))] + [lay.vision_start_id]
            repl_blocks.append((len(repl), h // 2, w // 2))
            repl += [lay.video_pad_id] * ((h // 2) * (w // 2)) + [lay.vision_end_id]
        suffix = [int(v) for v in rng.integers(10, 1000, int(rng.integers(1, 6)))]
        embeds = torch.randn(t * (h // 2) * (w // 2), 16, generator=torch.Generator().manual_seed(case))
        keep = mrope.evs_mask(embeds, (t, h, w), 2, float(rng.choice([0.3, 0.6, 0.8, 0.95]))).numpy()
        ids, want, delta = _vllm_evs_qwen3((before, before_blocks), (repl, repl_blocks), keep, suffix)
        pos, deltas = mrope.numpy_rope_index(
            np.array([ids]),
            np.array(images).reshape(-1, 3) if images else None,
            np.array([(t, h, w)]),
            model="qwen3-vl",
            video_keep=[keep],
        )
        assert np.array_equal(pos[:, 0], want) and int(deltas[0]) == delta
        start = len(before)
        media_len = len(ids) - len(suffix) - start
        early = want.copy()
        early[:, start + media_len :] = want[-1, start - 1] + 1 + media_len + np.arange(len(suffix))
        differs += not np.array_equal(pos[:, 0], early)
    assert differs > 0
