"""Qwen2.5-Omni, Qwen3-Omni and ERNIE-4.5-VL positions, deltas and decode positions against vLLM v0.34.0
and v0.33.0, restated here from their sources.

Read from the released wheels (``vllm-0.34.0`` / ``vllm-0.33.0``, ``cp38-abi3`` manylinux,
``vllm/model_executor/models/``): ``get_mrope_input_positions`` and the helpers it calls are the same code
in both releases, at other lines (cited as v0.34.0 / v0.33.0). vLLM computes them from each multimodal
item's placeholder range (``mm_position.offset``: the first token of the item's whole prompt
replacement, ``vllm/multimodal/processing/processor.py`` ``_apply_token_matches_with_placeholders`` line
878 and ``PlaceholderFeaturesInfo.to_range`` line 590, both releases) and its data. What
the replacement holds (``_get_prompt_updates``): the placeholder ids of an image, a video without audio
or an audio clip (their start / end tokens stay prompt text); for a video with its audio
(``use_audio_in_video``) ``<|audio_start|>``, the interleaved ids, ``<|audio_end|>``
(``omni_get_updates_use_audio_in_video``, qwen2_5_omni_thinker.py 822 / 739;
``get_updates_use_audio_in_video``, qwen3_omni_moe_thinker.py 1377 / 1373).

Released config values: Qwen2.5-Omni ``vision_config.tokens_per_second`` 25, ``seconds_per_chunk`` 2;
Qwen3-Omni ``position_id_per_seconds`` 13; ERNIE-4.5-VL ``spatial_conv_size`` and ``temporal_conv_size`` 2.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.vllm_runners import v033_schedule, v034_schedule

import mrope
from mrope import Audio, Image, Text, Video
from mrope.models import resolve_rules

F64 = {"seconds_grouping": "i*(spg*tps) f64"}
"""vLLM's video time (``second_per_grid_ts.item() * tokens_per_second`` in float64, times ``i``)."""
Q3_VLLM = {**F64, "time_rounding": "trunc"}
"""Qwen3-Omni as vLLM runs it: the float64 product cast to int64 (``.astype(np.int64)``)."""
TPS = {"qwen2.5-omni": 25.0, "qwen3-omni": 13.0}


def _pieces(positions: list[np.ndarray]) -> int:
    """``llm_pos_ids_list[-1].max() + 1`` (0 before the first piece), as every reference below starts a
    piece."""
    return int(positions[-1].max()) + 1 if positions else 0


def _line(start: int, n: int) -> np.ndarray:
    return np.broadcast_to(np.arange(n), (3, n)) + start


def _grid(t_values: np.ndarray, h: int, w: int, start: int) -> np.ndarray:
    """``np.indices((t, h, w))`` with its t row replaced by ``t_values``, plus ``start``."""
    grid = np.indices((len(t_values), h, w)).reshape(3, -1)
    grid[0] = np.repeat(t_values, h * w)
    return grid + start


def _q25_audio_tokens(frames: int) -> int:
    """``_compute_audio_token_count`` (qwen2_5_omni_thinker.py 1344 / 1261)."""
    return ((frames - 1) // 2 + 1 - 2) // 2 + 1


def _q3_audio_tokens(frames: int) -> int:
    """``_get_feat_extract_output_lengths`` (qwen3_omni_moe_thinker.py 156 / 154)."""
    feat = (frames % 100 - 1) // 2 + 1
    return ((feat - 1) // 2 + 1 - 1) // 2 + 1 + (frames // 100) * 13


def _q25_interleaved(start: int, item: dict) -> np.ndarray:
    """``_compute_interleaved_positions`` (qwen2_5_omni_thinker.py 1421 / 1338): the video's time values
    split into chunks of 50 (``int(25 * 2)``); each non-empty chunk's vision positions, then up to 50 of
    the audio's, the rest of the audio at the end; video and audio both start at ``start``."""
    per = int(TPS["qwen2.5-omni"] * 2.0)
    t_index = (np.arange(item["t"]) * item["t_factor"]).astype(np.int64)
    chunks: list[list[int]] = [[] for _ in range(int(t_index.max()) // per + 1)]
    for v in t_index:
        chunks[int(v) // per].append(int(v))
    audio, added, out = _q25_audio_tokens(item["audio"]), 0, []
    for chunk in chunks:
        if not chunk:
            continue
        out.append(_grid(np.array(chunk), item["h"], item["w"], start))
        size = min(per, audio - added)
        if size > 0:
            out.append(_line(start + added, size))
            added += size
    if added < audio:
        out.append(_line(start + added, audio - added))
    return np.concatenate(out, axis=1)


def _carries_audio(item: dict) -> bool:
    return item["kind"] == "vision" and item.get("audio") is not None


def _text_before(pos: list[np.ndarray], st: int, offset: int) -> int:
    """The text before an item (``offset - st`` tokens from one past the last piece); where the item
    starts."""
    start = _pieces(pos)
    if offset > st:
        pos.append(_line(start, offset - st))
    return start + max(offset - st, 0)


def _plain(item: dict, start: int, audio_tokens) -> tuple[np.ndarray, int]:
    """An audio clip's piece (its tokens from ``start``), or an image's or a video's without audio
    (``np.indices`` with ``t`` times ``t_factor``, cast to int64 unless 1.0), and its token count: the
    same code in both omni files."""
    if item["kind"] == "audio":
        tokens = audio_tokens(item["audio"])
        return _line(start, tokens), tokens
    t_index = np.arange(item["t"])
    if item["t_factor"] != 1.0:
        t_index = (t_index * item["t_factor"]).astype(np.int64)
    return _grid(t_index, item["h"], item["w"], start), item["t"] * item["h"] * item["w"]


def _trailing(pos: list[np.ndarray], st: int, n: int) -> tuple[np.ndarray, int]:
    """The text after the last item, the positions and ``max + 1 - n``."""
    if st < n:
        pos.append(_line(_pieces(pos), n - st))
    out = np.concatenate(pos, axis=1)
    assert out.shape[1] == n  # Qwen3-Omni's raises on a length mismatch
    return out, int(out.max()) + 1 - n


def _vllm_q25(n: int, items: list[dict]) -> tuple[np.ndarray, int]:
    """``get_mrope_input_positions`` (qwen2_5_omni_thinker.py 1500 / 1417) over ``iter_mm_features``
    (1348 / 1265): items in offset order; the text before each from one past the last piece; an audio
    clip, an image or a video :func:`_plain`; a video with audio the interleaved piece of ``V + A``
    columns, after which the text resumes at ``offset + V + A``."""
    pos: list[np.ndarray] = []
    st = 0
    for item in items:
        start = _text_before(pos, st, item["offset"])
        if _carries_audio(item):
            pos.append(_q25_interleaved(start, item))
            tokens = item["t"] * item["h"] * item["w"] + _q25_audio_tokens(item["audio"])
        else:
            piece, tokens = _plain(item, start, _q25_audio_tokens)
            pos.append(piece)
        st = item["offset"] + tokens
    return _trailing(pos, st, n)


def _q3_interleaved(start: int, item: dict) -> np.ndarray:
    """``_compute_interleaved_positions`` (qwen3_omni_moe_thinker.py 2118 / 2114): the video's positions
    (time ``(i * t_factor).astype(int64)``) and the audio's, both from ``start``, merged one token at a
    time by their t value, video first on ties, then the rest of either."""
    t_index = (np.arange(item["t"]) * item["t_factor"]).astype(np.int64)
    video = _grid(t_index, item["h"], item["w"], start)
    audio = _line(start, _q3_audio_tokens(item["audio"]))
    out, v, a = [], 0, 0
    while v < video.shape[1] and a < audio.shape[1]:
        if video[0, v] <= audio[0, a]:
            out.append(video[:, v : v + 1])
            v += 1
        else:
            out.append(audio[:, a : a + 1])
            a += 1
    return np.concatenate([*out, video[:, v:], audio[:, a:]], axis=1)


def _vllm_q3(n: int, items: list[dict]) -> tuple[np.ndarray, int]:
    """``get_mrope_input_positions`` (qwen3_omni_moe_thinker.py 2246 / 2242) over ``iter_mm_features``
    (2050 / 2046): as Qwen2.5-Omni's, but every item also places the end token after it (one past its
    largest position), and a video with audio starts at its ``<|audio_start|>`` (one position), then the
    interleaved piece, then two end tokens; the text resumes at ``offset + 1 + V + A + 2``."""
    pos: list[np.ndarray] = []
    st = 0
    for item in items:
        start = _text_before(pos, st, item["offset"])
        if _carries_audio(item):
            pos += [_line(start, 1), _q3_interleaved(start + 1, item)]
            pos.append(_line(_pieces(pos), 1))
            tokens = 1 + item["t"] * item["h"] * item["w"] + _q3_audio_tokens(item["audio"]) + 1
        else:
            piece, tokens = _plain(item, start, _q3_audio_tokens)
            pos.append(piece)
        pos.append(_line(_pieces(pos), 1))
        st = item["offset"] + tokens + 1
    return _trailing(pos, st, n)


def _omni_prompt(family: str, rng: np.random.Generator, with_audio: bool) -> list:
    """1-4 items between text runs of 0-5 tokens: images, videos (2-24 temporal patches, 0.01-2 s each,
    common fractional rates among them) and audio clips (40-700 mel frames). ``with_audio``: every video carries its audio, and clips stand
    alone only after the last video (vLLM pairs a request's videos with its audio items in order,
    ``_get_audio_for_video_mapping``, qwen2_5_omni_thinker.py 1309 / 1226)."""
    segs: list = []
    kinds = [str(rng.choice(["image", "video", "audio"])) for _ in range(int(rng.integers(1, 5)))]
    if with_audio:
        kinds = sorted(kinds, key=lambda k: k == "audio")
    m = resolve_rules(family).merge_size
    for kind in kinds:
        segs.append(Text([int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]))
        h, w = m * int(rng.integers(1, 5)), m * int(rng.integers(1, 5))
        if kind == "image":
            segs.append(Image(grid=(1, h, w)))
        elif kind == "audio":
            segs.append(Audio(mel_frames=int(rng.integers(40, 700))))
        else:
            spg = float(
                rng.choice([0.04, 0.08, 0.1, 1 / 3, 0.5, 1.0, 1.2, 2.0, float(rng.uniform(0.01, 2.0))])
            )
            audio = Audio(mel_frames=int(rng.integers(40, 900))) if with_audio else None
            segs.append(Video(grid=(2 * int(rng.integers(1, 13)), h, w), second_per_grid=spg, audio=audio))
    segs.append(Text([int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]))
    return segs


def _vllm_items(family: str, segs: list, p: mrope.Positions) -> list[dict]:
    """Each item's ``mm_position.offset`` (from the spans mrope gives the segment) and its feature data
    as ``iter_mm_features`` reads it: grids merged by 2, ``t_factor`` the float32 seconds per grid as a
    Python float times the clock, audio as mel frames."""
    items = []
    for index, seg in enumerate(segs):
        spans = [s for s in p.spans if s.index == index]
        if isinstance(seg, Text):
            continue
        if isinstance(seg, Audio):
            first = next(s for s in spans if s.kind == "audio")
            items.append({"kind": "audio", "offset": first.start, "audio": seg.mel_frames})
            continue
        m = p.rules.merge_size
        t, h, w = seg.grid
        item = {"kind": "vision", "t": t, "h": h // m, "w": w // m}
        spg = 1.0 if isinstance(seg, Image) else float(np.float32(seg.second_per_grid))
        item["t_factor"] = spg * TPS[family]
        if isinstance(seg, Video) and seg.audio is not None:
            item |= {"audio": seg.audio.mel_frames, "offset": spans[1].start}  # <|audio_start|>
        else:
            item["offset"] = next(s for s in spans if s.kind in ("image", "video")).start
        items.append(item)
    return items


def _q25_vllm_layout(p: mrope.Positions, items: list[dict]) -> np.ndarray:
    """The difference documented in docs/engine.md, applied to mrope's released Qwen2.5-Omni positions.
    vLLM places a video-with-audio's ``V + A`` interleaved positions from its placeholder's first token,
    ``<|audio_start|>``: one token early, so each token of the block takes its successor's position. The
    text after the interleaved piece (the block's last audio token and the two end tokens, in vLLM)
    resumes one past the block's largest position ``M``: ``M + 1, M + 2, M + 3``; the released code puts
    both end tokens at ``E``, one past the largest position of the last chunk it appended (below ``M``
    when that chunk is audio and the video reaches later). Every later position moves by ``M + 3 - E``."""
    ids = p.ids.copy()
    for item in sorted((i for i in items if _carries_audio(i)), key=lambda i: -i["offset"]):
        o, k = item["offset"], item["t"] * item["h"] * item["w"] + _q25_audio_tokens(item["audio"])
        top, end = int(ids[:, o + 1 : o + 1 + k].max()), int(ids[0, o + 1 + k])
        ids[:, o + k + 3 :] += top + 3 - end
        ids[:, o : o + k] = ids[:, o + 1 : o + 1 + k]
        ids[:, o + k : o + k + 3] = top + 1 + np.arange(3)
    return ids


def test_qwen2_5_omni_equals_vllm_without_audio_in_video() -> None:
    """vLLM v0.34.0 and v0.33.0: Qwen2.5-Omni prompts of images, videos and audio clips (150 random),
    positions and delta under ``rules={"seconds_grouping": "i*(spg*tps) f64"}`` (vLLM's float64 video
    time), by ``build_positions`` and by ``get_rope_index`` from the ids. Control: the released float32
    time parts from vLLM on some of them."""
    rng = np.random.default_rng(21)
    differs = 0
    for _ in range(150):
        segs = _omni_prompt("qwen2.5-omni", rng, with_audio=False)
        p = mrope.build_positions(segs, model="qwen2.5-omni", rules=F64)
        want, delta = _vllm_q25(p.num_tokens, _vllm_items("qwen2.5-omni", segs, p))
        assert np.array_equal(p.ids, want) and p.delta == delta
        pos, deltas = mrope.numpy_rope_index(
            p.input_ids[None],
            p.image_grid_thw if len(p.image_grid_thw) else None,
            p.video_grid_thw if len(p.video_grid_thw) else None,
            model="qwen2.5-omni",
            rules=F64,
            second_per_grid_ts=p.second_per_grid_ts if len(p.second_per_grid_ts) else None,
            audio_seqlens=[s.mel_frames for s in segs if isinstance(s, Audio)] or None,
        )
        assert np.array_equal(pos[:, 0], want) and int(deltas[0]) == delta
        differs += not np.array_equal(mrope.build_positions(segs, model="qwen2.5-omni").ids, want)
    assert differs > 0


def test_qwen2_5_omni_audio_in_video_is_one_token_early_in_vllm() -> None:
    """vLLM v0.34.0 and v0.33.0, videos carrying their audio (150 random prompts): vLLM's positions equal
    mrope's released ones (float64 time) moved as docs/engine.md says (:func:`_q25_vllm_layout`), its
    delta at least 2 higher per such video. Control: mrope's positions unmoved part from vLLM's in every
    prompt with such a video."""
    rng = np.random.default_rng(22)
    for _ in range(150):
        segs = _omni_prompt("qwen2.5-omni", rng, with_audio=True)
        p = mrope.build_positions(segs, model="qwen2.5-omni", rules=F64)
        items = _vllm_items("qwen2.5-omni", segs, p)
        want, delta = _vllm_q25(p.num_tokens, items)
        assert np.array_equal(_q25_vllm_layout(p, items), want)
        with_audio = sum(map(_carries_audio, items))
        assert delta >= p.delta + 2 * with_audio
        assert not with_audio or not np.array_equal(p.ids, want)


def test_qwen3_omni_equals_vllm_with_truncated_time() -> None:
    """vLLM v0.34.0 and v0.33.0: Qwen3-Omni prompts with and without audio in their videos (200 random),
    positions and delta under ``rules={"seconds_grouping": "i*(spg*tps) f64", "time_rounding":
    "trunc"}`` (vLLM truncates the time the released model keeps fractional). Where every video's
    ``second_per_grid * 13`` is whole, the released (float32) positions equal vLLM's too; control: on
    the others they part from vLLM on some prompts."""
    rng = np.random.default_rng(23)
    whole = differs = 0
    for case in range(200):
        segs = _omni_prompt("qwen3-omni", rng, with_audio=case % 2 == 1)
        p = mrope.build_positions(segs, model="qwen3-omni", rules=Q3_VLLM)
        items = _vllm_items("qwen3-omni", segs, p)
        want, delta = _vllm_q3(p.num_tokens, items)
        assert np.array_equal(p.ids, want) and p.delta == delta
        released = mrope.build_positions(segs, model="qwen3-omni")
        if all(float(i["t_factor"]).is_integer() for i in items if i["kind"] == "vision"):
            assert np.array_equal(released.ids, want) and released.delta == delta
            whole += 1
        else:
            differs += not np.array_equal(released.ids, want)
    assert whole > 20 and differs > 0


def _ernie_prompt(rng: np.random.Generator) -> list:
    segs: list = []
    for _ in range(int(rng.integers(1, 5))):
        segs.append(Text([int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]))
        h, w = 2 * int(rng.integers(1, 6)), 2 * int(rng.integers(1, 6))
        video = bool(rng.random() < 0.5)
        segs.append(
            Video(grid=(2 * int(rng.integers(1, 12)), h, w), fps=2.0) if video else Image(grid=(1, h, w))
        )
    segs.append(Text([int(v) for v in rng.integers(10, 1000, int(rng.integers(0, 6)))]))
    return segs


def _vllm_ernie(n: int, items: list[tuple[int, int, int, int]]) -> tuple[np.ndarray, int]:
    """``get_mrope_input_positions`` (ernie45_vl.py 1496, both releases) over ``iter_mm_grid_thw`` (1533):
    per item ``(offset, t, h, w)`` (a video's ``t`` divided by ``temporal_conv_size``, ``h`` and ``w`` by
    ``spatial_conv_size``), the text before it from one past the last piece, the grid's ``np.indices``
    after that text; the delta ``max + 1 - n``."""
    pos: list[np.ndarray] = []
    st = 0
    for offset, t, h, w in items:
        start = _pieces(pos)
        pos.append(_line(start, offset - st))
        pos.append(np.indices((t, h, w)).reshape(3, -1) + (offset - st) + start)
        st = offset + t * h * w
    if st < n:
        pos.append(_line(_pieces(pos), n - st))
    out = np.concatenate(pos, axis=1)
    return out, int(out.max()) + 1 - n


def test_ernie_4_5_vl_equals_vllm() -> None:
    """vLLM v0.34.0 and v0.33.0: ERNIE-4.5-VL prompts of images and videos (200 random), positions and
    delta under its released rules (``max+1``; vLLM's items start at their first placeholder, the video
    wrappers are text). Control: the transformers 5.24 convention (``s + max(H', W')`` after a video)
    parts from vLLM on some of them."""
    rng = np.random.default_rng(24)
    differs = 0
    for _ in range(200):
        segs = _ernie_prompt(rng)
        p = mrope.build_positions(segs, model="ernie-4.5-vl")
        items = []
        for index, seg in enumerate(segs):
            if isinstance(seg, Text):
                continue
            first = next(s for s in p.spans if s.index == index and s.kind in ("image", "video"))
            t = seg.grid[0] // 2 if isinstance(seg, Video) else seg.grid[0]
            items.append((first.start, t, seg.grid[1] // 2, seg.grid[2] // 2))
        want, delta = _vllm_ernie(p.num_tokens, items)
        assert np.array_equal(p.ids, want) and p.delta == delta
        other = mrope.build_positions(segs, model="ernie-4.5-vl", convention="transformers5")
        differs += not np.array_equal(other.ids, want)
    assert differs > 0


@pytest.mark.parametrize("schedule", [v033_schedule, v034_schedule], ids=["v0.33.0", "v0.34.0"])
def test_decode_positions_equal_vllm_runners(schedule) -> None:
    """Each family's prompt (vLLM's positions and delta, as above) prefilled in random chunks, then
    decoded a few tokens at a time: each runner's positions equal the prompt's followed by mrope's
    ``next_positions`` from mrope's delta. Control: a delta off by one is caught."""
    rng = np.random.default_rng(25)
    for case in range(30):
        family = ("qwen2.5-omni", "qwen3-omni", "ernie-4.5-vl")[case % 3]
        if family == "ernie-4.5-vl":
            p = mrope.build_positions(_ernie_prompt(rng), model=family)
        else:
            rules = F64 if family == "qwen2.5-omni" else Q3_VLLM
            p = mrope.build_positions(_omni_prompt(family, rng, with_audio=False), model=family, rules=rules)
        n = p.num_tokens
        chunks, left = [], n
        while left:
            chunks.append(int(rng.integers(1, left + 1)))
            left -= chunks[-1]
        decode = [int(rng.integers(1, 4)) for _ in range(5)]
        want = np.concatenate([p.ids, mrope.next_positions(p.delta, n, sum(decode))], axis=1)
        assert np.array_equal(schedule(p.ids, p.delta, chunks + decode), want)
        assert not np.array_equal(schedule(p.ids, p.delta + 1, chunks + decode), want)
