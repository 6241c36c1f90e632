"""Position programs made from the counter engine's plan (mrope._layout.plan_program) against the ids the
builder fills (checked against each family's transformers code in tests/core) and against the program
compiled from those ids (mrope._program_build.compile_program): equal positions and equal bytes, for
every registry family on random prompts (text, wrapped and bare images, tiles, videos at several frame
rates, continued turns), under both conventions; the text-line cutting on random stretches with gaps;
the lazy build writes no position; negative controls."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mrope
from mrope import Image, Text, Video
from mrope._builder import build_lazy_positions, plan_sequence
from mrope._layout import engine_for
from mrope._layout.pieces import TextRun
from mrope._layout.plan_program import plan_program, text_lines, walk_pieces
from mrope._program_build import Runs, compile_program
from mrope.models import names, resolve_rules


def _tokenize(text: str) -> list[int]:
    return [1000 + ord(c) % 500 for c in text]


def _random_prompt(rng: np.random.Generator, lay: mrope.LayoutRules, rich: bool) -> list:
    """Text (counts and ids), then 1-4 images (wrapped or bare, with a crop origin; with ``rich`` also
    tiled) or (``rich``) videos (fps 0.5, 1, 2, or 1.7 whose time steps are uneven under absolute time),
    text between."""
    m, tm = lay.merge_size, lay.temporal_merge_size
    segments: list = [Text(int(rng.integers(1, 9)))] if rng.random() < 0.5 else [Text([5, 6, 7])]
    for _ in range(int(rng.integers(1, 5))):
        h, w = m * int(rng.integers(1, 6)), m * int(rng.integers(1, 6))
        roll = rng.random() if rich else 1.0
        if roll < 0.35:
            fps = float(rng.choice([0.5, 1.0, 2.0, 1.7]))
            segments.append(
                Video(grid=(tm * int(rng.integers(1, 6)), h, w), fps=fps, wrap=rng.random() < 0.8)
            )
        elif roll < 0.5:
            segments.append(Image(grid=(1, 2 * h, 2 * w), tiles=(2, 2), thumbnail=bool(rng.random() < 0.5)))
        else:
            origin = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
            segments.append(Image(grid=(1, h, w), wrap=rng.random() < 0.8, origin=origin))
        if rng.random() < 0.7:
            segments.append(Text(int(rng.integers(1, 9))))
    return segments


def _built(name: str, convention: str, seed: int) -> tuple[mrope.LayoutRules, list, mrope.Positions] | None:
    """A random prompt the family takes: with tiles and videos, or images only where its rules refuse
    those (``None`` when it refuses both)."""
    lay = resolve_rules(name, None, convention)
    if lay.positions_base == "canvas":  # its marker ids come from a checkpoint: any ids will do here
        lay = resolve_rules(name, {"slice_start_id": 11, "slice_end_id": 12, "newline_id": 13}, convention)
    for rich in (True, False):
        segments = _random_prompt(np.random.default_rng(seed), lay, rich)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return lay, segments, mrope.build_positions(segments, rules=lay, tokenizer=_tokenize)
        except mrope.MRopeError:
            continue
    return None


@pytest.mark.parametrize("convention", ["released", "transformers5"])
@pytest.mark.parametrize("name", names())
def test_plan_program_equals_the_ids_and_the_compiled_program(name: str, convention: str) -> None:
    made = 0
    for seed in range(16):
        built = _built(name, convention, seed)
        if built is None:
            continue
        lay, segments, p = built
        made += 1
        digest = mrope.rules_digest(lay)
        compiled = compile_program(p.ids, p.spans, p.delta, digest)
        program = p.program()
        np.testing.assert_array_equal(program.expand(), p.ids)
        assert program.to_bytes() == compiled.to_bytes()
        if engine_for(lay) != "counter":
            continue
        planned = plan_program(
            plan_sequence(segments, lay, _tokenize).pieces, lay.advance, 0, p.delta, digest
        )
        fps = [s.fps for s in segments if isinstance(s, Video)]
        if all(f in (0.5, 1.0, 2.0) for f in fps):  # evenly spaced frames: the plan form applies
            assert planned is not None
        if planned is not None:
            assert planned.to_bytes() == compiled.to_bytes()
            # negative control: the plan laid out one position later is not these positions
            shifted = plan_program(plan_sequence(segments, lay, _tokenize).pieces, lay.advance, 1, 0, digest)
            assert not np.array_equal(shifted.expand(), p.ids)
    assert made >= 4


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_a_continued_turns_program_is_made_from_its_plan(name: str) -> None:
    first = [Text(6), Image(grid=(1, 8, 6)), Text(3)]
    second = [Text(2), Video(grid=(4, 6, 8), fps=2.0), Text(4), Image(grid=(1, 4, 4))]
    whole = mrope.build_positions(first + [Text(5)] + second, model=name, tokenizer=_tokenize)
    p = mrope.build_positions(first, model=name, tokenizer=_tokenize)
    turn = mrope.continue_positions(p, second, generated=5, tokenizer=_tokenize)
    program = turn.positions.program()
    np.testing.assert_array_equal(program.expand(), whole.ids[:, turn.offset :])
    assert program.delta == turn.positions.delta
    compiled = compile_program(
        turn.positions.ids, turn.positions.spans, turn.positions.delta, program.rules_digest
    )
    assert program.to_bytes() == compiled.to_bytes()


def _stretch_ids(parts: list[tuple[int, int]]) -> np.ndarray:
    """Positions ``[3, n]`` of text parts ``(first position, tokens)``, written out here."""
    row = [first + k for first, count in parts for k in range(count)]
    return np.array([row, row, row], dtype=np.int64)


def test_text_stretches_are_cut_into_the_compiled_lines() -> None:
    """Random stretches of text parts with gaps (steps of 0, 2 and more, runs of one token), and many
    small parts that are stored: the plan's cut equals the lines compile_program reads off the ids."""
    rng = np.random.default_rng(5)
    kinds = set()
    for _ in range(300):
        parts, at = [], int(rng.integers(0, 50))
        for _ in range(int(rng.integers(1, 12))):
            count = int(rng.integers(1, 6)) if rng.random() < 0.6 else 1
            parts.append((at, count))
            at += count - 1 + int(rng.choice([0, 2, 3, 7, 1]))
        ids = _stretch_ids(parts)
        want = compile_program(ids, [], 0, "")
        # the same stretch as a plan: each part a text run, the counter moved to its first position
        runs = Runs(3, False)
        text_lines(parts, runs)
        got = runs.program(ids.shape[1], 0, "", np.dtype(np.int64))
        assert got.to_bytes() == want.to_bytes(), parts
        np.testing.assert_array_equal(got.expand(), ids)
        kinds.add((got.num_runs > 1, got.pool.size > 0))
    assert kinds == {(False, False), (True, False), (False, True)}  # one line, several, stored
    walked = walk_pieces([TextRun(4, 5, "text", 0), TextRun(1, 6, "wrapper", 0)], "max+1")
    assert walked is not None and walked[1] == 4  # the largest position of 5 tokens from 0


def test_the_lazy_build_writes_no_position_for_a_program() -> None:
    segments = [Text(40), Video(grid=(16, 28, 28), fps=2.0), Text(9), Image(grid=(1, 12, 16)), Text(3)]
    for name in ("qwen2.5-vl", "qwen3-vl", "glm-4.1v"):
        eager = mrope.build_positions(segments, model=name, tokenizer=_tokenize)
        lazy = build_lazy_positions(segments, name, resolve_rules(name, None), _tokenize)
        assert lazy.program().to_bytes() == eager.program().to_bytes()
        assert lazy.metadata() == eager.metadata() and lazy.num_tokens == eager.num_tokens
        assert "ids" not in vars(lazy) and "input_ids" not in vars(lazy)
        np.testing.assert_array_equal(lazy.ids, eager.ids)  # written on first read, the same values
        np.testing.assert_array_equal(lazy.input_ids, eager.input_ids)
        assert "ids" in vars(lazy)
    # control: engines that cannot defer the fill, and pruned prompts, fill at once
    assert "ids" in vars(
        build_lazy_positions([Text(3), Image(grid=(1, 4, 4))], None, resolve_rules("hunyuan-ocr", None), None)
    )
    keep = np.zeros(16, dtype=bool)
    keep[::2] = True
    pruned = build_lazy_positions(
        [Text(3), Image(grid=(1, 8, 8), keep=keep)], None, resolve_rules("qwen2-vl", None), None
    )
    assert "ids" in vars(pruned)


def test_the_lazy_build_raises_what_the_eager_one_raises() -> None:
    huge = [Text(3), Video(grid=(2, 4, 4), fps=2.0)]
    rules = {"tokens_per_second": 2**61}
    with pytest.raises(mrope.LayoutError) as eager:
        mrope.build_positions(huge, model="qwen2.5-vl", rules=rules)
    with pytest.raises(mrope.LayoutError) as lazy:
        build_lazy_positions(huge, None, resolve_rules("qwen2.5-vl", rules), None)
    assert str(lazy.value) == str(eager.value)
