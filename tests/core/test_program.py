"""Position programs: ``Positions.program()`` expands to the positions exactly, in O(segments) space.

Expected values come from outside the program code: each family's own transformers 5.24
``get_rope_index`` (the tiny random-weight model's method) on random prompts, the unpruned prompt's
positions at the kept tokens for pruned prompts, and the whole conversation's positions for a continued
turn; for the two registry families without a tiny model (GLM-Image, HunyuanOCR), ``Positions.ids``.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import tracemalloc

import numpy as np
import pytest
from support import tiny_vlm as tv
from support.random_prompts import models_own, random_segments
from support.tiny_vlm import FAMILIES, NO_VIDEO

import mrope
from mrope import Image, PositionProgram, ProgramError, Text, Video
from mrope.integrations import transformers as mt
from mrope.models import names, resolve_rules

VISION = ("image", "video", "thumbnail")


def _round_trips(p: mrope.Positions, want: np.ndarray) -> PositionProgram:
    """The program of ``p``: its expansion, both codecs and random windows equal ``want``."""
    program = p.program()
    np.testing.assert_array_equal(program.expand(), want)
    assert program.expand().dtype == want.dtype
    buffer = np.full_like(want, 7)  # into the caller's buffer: the same positions
    assert program.expand(out=buffer) is buffer
    np.testing.assert_array_equal(buffer, want)
    for back in (
        PositionProgram.from_bytes(program.to_bytes()),
        PositionProgram.from_dict(json.loads(json.dumps(program.to_dict()))),
    ):
        np.testing.assert_array_equal(back.expand(), want)
        assert back.delta == p.delta and back.rules_digest == mrope.rules_digest(p.rules)
    rng = np.random.default_rng(want.shape[1])
    for _ in range(5):
        a, b = sorted(rng.integers(0, want.shape[1] + 1, 2).tolist())
        np.testing.assert_array_equal(program.window(a, b), want[:, a:b])
    return program


def _segments_for(name: str, seed: int) -> tuple[mrope.LayoutRules, list]:
    rules = mt.model_rules(tv.model(name))
    return rules, random_segments(np.random.default_rng(seed), rules, name not in NO_VIDEO)


@pytest.mark.parametrize("name", FAMILIES)
def test_expand_equals_the_models_own_positions(name: str) -> None:
    for seed in range(4):
        rules, segments = _segments_for(name, seed)
        want = models_own(name, segments)
        p = mrope.build_positions(segments, model=name, rules=rules, tokenizer=tv.tokenize)
        program = _round_trips(p, want)
        vision = sum(s.kind in VISION for s in p.spans)
        assert program.num_runs <= 2 * len(p.spans) and program.pool.size == 0, (vision, program.num_runs)
        # negative control: a program with one origin moved expands to other positions
        moved = dataclasses.replace(
            program, origin=program.origin + (np.arange(program.num_runs) == 0)[:, None]
        )
        assert not np.array_equal(moved.expand(), want)


def _pruned(segments: list, full: mrope.Positions, rng: np.random.Generator) -> tuple[list, np.ndarray]:
    """``segments`` with random keep masks on every image and video, and the unpruned columns kept."""
    keep = np.ones(full.num_tokens, dtype=bool)
    out = []
    for i, seg in enumerate(segments):
        cols = [np.arange(s.start, s.stop) for s in full.spans if s.index == i and s.kind in VISION]
        if not cols:
            out.append(seg)
            continue
        cols = np.concatenate(cols)
        mask = rng.random(cols.size) < 0.5
        keep[cols] = mask
        out.append(dataclasses.replace(seg, keep=mask))
    return out, keep


@pytest.mark.parametrize("name", FAMILIES)
def test_pruned_prompt_expands_to_the_kept_unpruned_positions(name: str) -> None:
    for seed in range(3):
        rules, segments = _segments_for(name, 10 + seed)
        want = models_own(name, segments)
        full = mrope.build_positions(segments, model=name, rules=rules, tokenizer=tv.tokenize)
        pruned_segments, keep = _pruned(segments, full, np.random.default_rng(seed))
        p = mrope.build_positions(pruned_segments, model=name, rules=rules, tokenizer=tv.tokenize)
        _round_trips(p, want[:, keep])


@pytest.mark.parametrize("name", FAMILIES)
def test_continued_turn_expands_to_the_whole_conversations_tail(name: str) -> None:
    rules, first = _segments_for(name, 20)
    _, second = _segments_for(name, 21)
    generated = [Text(tv.tokenize("answer"))]
    want = models_own(name, first + generated + second)
    p = mrope.build_positions(first, model=name, rules=rules, tokenizer=tv.tokenize)
    turn = mrope.continue_positions(p, second, generated=len("answer"), tokenizer=tv.tokenize)
    _round_trips(turn.positions, want[:, turn.offset :])


@pytest.mark.parametrize("name", [n for n in names() if n not in FAMILIES])
def test_families_without_a_tiny_model_expand_to_their_ids(name: str) -> None:
    rng = np.random.default_rng(3)
    m = mrope.models.resolve_rules(name).merge_size  # 2, or 4 (MiniCPM-V 4.6)
    for _ in range(4):
        segments = [Text(7)]
        for _ in range(int(rng.integers(1, 4))):
            segments += [Image(grid=(1, m * int(rng.integers(1, 5)), m * int(rng.integers(1, 5)))), Text(3)]
        p = mrope.build_positions(segments, model=name)
        _round_trips(p, p.ids)


def test_program_grows_with_segments_not_tokens() -> None:
    """A 100k-token video prompt's program is under 1 % of its npy, and 10x the tokens keep its size."""
    sizes = {}
    for frames in (8, 80):
        segments = [Text(50), Video(grid=(frames * 2, 56, 56), fps=2.0), Text(20)]
        p = mrope.build_positions(segments, model="qwen2.5-vl")
        sizes[p.num_tokens] = (len(p.program().to_bytes()), p.ids.nbytes)
    (small, (small_bytes, _)), (big, (big_bytes, big_npy)) = sorted(sizes.items())
    assert big > 100_000 and big_bytes < 0.01 * big_npy
    assert big_bytes == small_bytes  # the same three runs whatever the length


TIMESTAMPS = [n for n in FAMILIES if resolve_rules(n, None).temporal == "timestamps"]
"""The families whose videos put each temporal patch's block after (or before) its timestamp text."""


@pytest.mark.parametrize("name", ["qwen3-vl", "glm-4.1v"])
def test_a_timestamped_videos_program_grows_with_timestamp_lengths_not_frames(name: str) -> None:
    """A 100k-token video of 196-token frames is a few runs (one per stretch of frames whose timestamps
    have the same number of tokens): under 1 % of its npy; 5x the frames add a run per new length."""
    sizes = []
    for patches in (100, 500):
        segments = [Text(50), Video(grid=(2 * patches, 28, 28), fps=2.0), Text(20)]
        p = mrope.build_positions(segments, model=name, tokenizer=tv.tokenize)
        program = p.program()
        np.testing.assert_array_equal(program.expand(), p.ids)
        lengths = {len(tv.tokenize(p.rules.format_timestamp(float(s)))) for s in range(0, patches + 2)}
        assert program.num_runs <= 3 + len(lengths) and program.repeat.max() > patches // 2
        sizes.append((p.num_tokens, len(program.to_bytes()), p.ids.nbytes, program.num_runs))
    (_, small, _, small_runs), (tokens, big, npy, big_runs) = sizes
    assert tokens > 100_000 and big < 0.01 * npy, sizes
    assert big - small == (big_runs - small_runs) * 8 * (6 + 5 * 3) and big_runs - small_runs <= 1, sizes


@pytest.mark.parametrize("name", TIMESTAMPS)
def test_timestamped_videos_of_many_frames_expand_to_the_models_own_positions(name: str) -> None:
    """Random prompts with videos of 16-80 temporal patches (grids, fps and text at random): expansion,
    both codecs and windows straddling groups equal the family's own get_rope_index; each video is a few
    runs, not two per patch. Control: one folded run's advance moved changes the positions."""
    rules = mt.model_rules(tv.model(name))
    m, tm = rules.merge_size, rules.temporal_merge_size
    for seed in range(2):
        rng = np.random.default_rng(100 + seed)
        segments: list = [Text(tv.tokenize("x" * int(rng.integers(1, 12))))]
        patches = []
        for _ in range(int(rng.integers(1, 3))):
            patches.append(int(rng.integers(16, 81)))
            side = (m * int(rng.integers(1, 3)), m * int(rng.integers(1, 3)))
            fps = float(rng.choice([0.5, 1.0, 2.0]))
            segments += [Video(grid=(tm * patches[-1], *side), fps=fps), Text(tv.tokenize("y" * 3))]
        want = models_own(name, segments)
        p = mrope.build_positions(segments, model=name, rules=rules, tokenizer=tv.tokenize)
        program = _round_trips(p, want)
        assert program.num_runs <= 4 + 5 * len(patches) < sum(patches), (program.num_runs, patches)
        for _ in range(20):
            a = int(rng.integers(0, want.shape[1]))
            b = min(want.shape[1], a + int(rng.integers(1, 200)))
            np.testing.assert_array_equal(program.window(a, b), want[:, a:b])
        folded = int(np.argmax(program.repeat))
        assert program.repeat[folded] > 1 and program.lead[folded] > 0
        moved = dataclasses.replace(
            program, advance=program.advance + (np.arange(program.num_runs) == folded)[:, None]
        )
        assert not np.array_equal(moved.expand(), want)
        assert not np.array_equal(moved.window(0, want.shape[1]), want)


def test_equal_programs_compare_and_hash_equal() -> None:
    """Value equality: the same positions built twice, or read back from either codec, are equal programs
    with one hash; another delta, digest or origin is another program."""
    segments = [Text(9), Video(grid=(8, 4, 6), fps=2.0), Text(3)]
    a = mrope.build_positions(segments, model="qwen3-vl", tokenizer=tv.tokenize).program()
    b = mrope.build_positions(segments, model="qwen3-vl", tokenizer=tv.tokenize).program()
    copies = [
        b,
        PositionProgram.from_bytes(a.to_bytes()),
        PositionProgram.from_dict(json.loads(json.dumps(a.to_dict()))),
    ]
    for other in copies:
        assert other is not a and other == a and hash(other) == hash(a)
    assert len({a, *copies}) == 1
    others = [
        dataclasses.replace(a, delta=a.delta + 1),
        dataclasses.replace(a, rules_digest="0" * 32),
        dataclasses.replace(a, origin=a.origin + (np.arange(a.num_runs) == 1)[:, None]),
        mrope.build_positions(segments[:2], model="qwen3-vl", tokenizer=tv.tokenize).program(),
    ]
    for other in others:
        assert other != a
    assert len({a, *others}) == 1 + len(others)
    assert a != a.to_bytes() and (a == a.to_bytes()) is False


def test_irregular_sets_are_stored_and_still_exact() -> None:
    ids = np.random.default_rng(0).integers(0, 1000, (3, 500))
    p = dataclasses.replace(mrope.build_positions([Text(500)], model="qwen2-vl"), ids=ids)
    program = p.program()
    assert program.pool.shape == (3, 500)
    np.testing.assert_array_equal(program.expand(), ids)
    np.testing.assert_array_equal(
        PositionProgram.from_bytes(program.to_bytes()).window(100, 350), ids[:, 100:350]
    )


def _header_with(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


def test_expand_into_a_buffer_allocates_nothing_of_the_results_size() -> None:
    """tracemalloc (numpy reports its buffers to it): expanding a 100k-token video prompt into the caller's
    buffer peaks at a block's rows (a tenth of the result here: its last axis is added into the buffer),
    a timestamped one (runs of groups) at numpy's staging buffers (3 x 64 KiB, under a tenth of its
    3.3 MB); the allocating call (the control) holds the result."""
    for name, grid in (("qwen2.5-vl", (160, 56, 56)), ("qwen3-vl", (640, 28, 28))):
        segments = [Text(50), Video(grid=grid, fps=2.0), Text(20)]
        p = mrope.build_positions(segments, model=name, tokenizer=tv.tokenize)
        program, buffer = p.program(), np.empty_like(p.ids)
        peaks = []
        for out in (buffer, None):
            program.expand(out=out)
            tracemalloc.start()
            try:
                program.expand(out=out)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
        np.testing.assert_array_equal(buffer, p.ids)
        assert p.ids.nbytes > 2_000_000 and program.num_runs < 10
        assert peaks[0] < p.ids.nbytes // 10 and peaks[1] >= p.ids.nbytes, (name, peaks, p.ids.nbytes)


def test_malformed_and_hostile_buffers_are_refused_with_a_clear_error() -> None:
    p = mrope.build_positions([Text(5), Image(grid=(1, 4, 4)), Text(3)], model="qwen2-vl")
    good = p.program().to_bytes()
    cases = {
        "header": (good[:10], "76-byte header"),
        "magic": (b"NOPE" + good[4:], "not a position program"),
        "version": (_header_with(good, 4, (9).to_bytes(2, "little")), "version 9"),
        "flags": (_header_with(good, 6, (6).to_bytes(2, "little")), "unknown position program flags"),
        "axes": (_header_with(good, 8, (99).to_bytes(4, "little")), "1 to 8 axes"),
        "tokens": (_header_with(good, 12, (1 << 60).to_bytes(8, "little")), "at most"),
        "runs": (_header_with(good, 20, (1 << 20).to_bytes(8, "little")), "at most"),
        "truncated": (good[:-8], "takes"),
        "trailing": (good + b"\0" * 8, "takes"),
    }
    for what, (data, message) in cases.items():
        with pytest.raises(ProgramError, match=message):
            PositionProgram.from_bytes(data)
        assert what
    with pytest.raises(ProgramError, match="at most 10"):
        PositionProgram.from_bytes(good, max_tokens=10)
    # a run whose length lies: the lengths no longer sum to the tokens
    lengths_at = 76
    with pytest.raises(ProgramError, match="sum to num_tokens"):
        PositionProgram.from_bytes(_header_with(good, lengths_at, (7).to_bytes(8, "little")))
    # a block shape whose product overflows int64 still does not match its length
    runs = p.program().num_runs
    forged = _header_with(good, lengths_at + 8 * runs + 8 * 3, (1 << 40).to_bytes(8, "little"))
    with pytest.raises(ProgramError):
        PositionProgram.from_bytes(forged)
    bad = p.program().to_dict()
    for key, value, message in (
        ("version", 1, "version 2"),
        ("dtype", "int8", "'int64' or 'float32'"),
        ("origin", [[1, 2]], "origin"),
        ("lengths", "x", "lists"),
        ("lengths", [True] * len(bad["lengths"]), "'lengths' holds ints; got bool"),
        ("origin", [[0.5, 0, 0]] * len(bad["lengths"]), "'origin' holds ints; got float64"),
        ("delta", 1.5, "delta is an int"),
        ("rules_digest", "x" * 33, "at most 32 ASCII"),
    ):
        with pytest.raises(ProgramError, match=message):
            PositionProgram.from_dict({**bad, key: value})
    with pytest.raises(ProgramError, match="window needs"):
        p.program().window(0, p.num_tokens + 1)


def test_forged_groups_are_refused_with_a_clear_error() -> None:
    """A folded run whose lead no longer tiles its length, an advance on a run of one group, groups in a
    float program and a lead on a stored run are refused by both readers; the unforged form reads."""
    segments = [Text(9), Video(grid=(16, 4, 6), fps=2.0), Text(3)]
    good = mrope.build_positions(segments, model="qwen3-vl", tokenizer=tv.tokenize).program().to_dict()
    folded = int(np.argmax(np.array(good["lead"])))
    single = good["lengths"].index(good["lengths"][0])  # the first run: the prompt's text, one group
    assert PositionProgram.from_dict(good).repeat[folded] > 1
    assert PositionProgram.from_bytes(_bytes_of(good)) == PositionProgram.from_dict(good)
    lead = list(good["lead"])
    lead[folded] += 1
    advance = [list(a) for a in good["advance"]]
    advance[single][0] = 3
    irregular = mrope.build_positions([Text(50)], model="qwen2-vl").program().to_dict()
    irregular.update(explicit=[0], pool=[list(range(50))] * 3, lead=[1], shape=[[1, 1, 49]])
    cases = (
        ({**good, "lead": lead}, "whole number of groups"),
        ({**good, "advance": advance}, "one group has advance 0"),
        ({**good, "dtype": "float32", "delta": 0.0}, "float positions has runs of one group"),
        (irregular, "explicit run is one group"),
    )
    for data, message in cases:
        with pytest.raises(ProgramError, match=message):
            PositionProgram.from_dict(data)
        if data["dtype"] == "int64":
            with pytest.raises(ProgramError, match=message):
                PositionProgram.from_bytes(_bytes_of(data))


def _bytes_of(data: dict) -> bytes:
    """The binary form of a JSON form, written here from the documented layout (docs/engine.md)."""
    runs, axes, pool = len(data["lengths"]), data["num_axes"], len(data["pool"][0])
    header = struct.pack(
        "<4sHHIQQQq32s",
        b"MRPG",
        2,
        0,
        axes,
        data["num_tokens"],
        runs,
        pool,
        data["delta"],
        data["rules_digest"].encode(),
    )
    order = ("lengths", "shape", "explicit", "lead", "origin", "strides", "advance", "pool")
    return header + b"".join(np.asarray(data[k], dtype="<i8").tobytes() for k in order)
