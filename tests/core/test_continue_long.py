"""Continued conversations at length: a turn is laid out from where the conversation stands, at the cost
of its own tokens, and a state is tied to the exact rules it was made under.

Expected values: the whole conversation built at once by ``mrope.build_positions`` and cut (itself
checked against each family's transformers 5.24 ``get_rope_index`` in tests/core/test_continue_turns.py
and tests/models); where the history is too long to build (a turn after 10**9 tokens), the same turn
after a short text history shifted by the difference: a longer leading text run moves everything after
it by its extra length on every axis (the counter's ``1 + max``, MiniCPM-V's canvas counter, the omni
timeline), and under HunyuanOCR's sequence positions moves the token index (axis 0, and every axis of a
text token) while an image's (column, row, image index) stay.
"""

from __future__ import annotations

import tracemalloc
import warnings
from dataclasses import replace

import numpy as np
import pytest

import mrope
from mrope import Audio, Image, LayoutError, Text, Video
from mrope._continuation import ConversationState, continue_positions, conversation_state
from mrope._grid import MAX_POSITION
from mrope._rules import rules_digest
from mrope.models import resolve_rules

CANVAS_IDS = {"slice_start_id": 248060, "slice_end_id": 248061, "newline_id": 198}
"""MiniCPM-V 4.7's marker ids where no checkpoint gives them (the rules only compare ids)."""

ENGINES = [
    ("qwen2-vl", "released"),  # counter, max+1 advance
    ("qwen2-vl", "transformers5"),  # counter, spatial advance
    ("hunyuan-ocr", "released"),  # sequence
    ("minicpm-v-4.7", "released"),  # canvas
    ("qwen2.5-omni", "released"),  # omni, integer time
    ("qwen3-omni", "released"),  # omni, fractional time
]


def _rules(name: str, convention: str):
    return resolve_rules(name, CANVAS_IDS if name == "minicpm-v-4.7" else None, convention)


def _turn(rules) -> list:
    m = rules.merge_size
    return [Text(3), Image(grid=(1, 2 * m, 2 * m)), Text(3)]


def _cut_spans(whole, a: int, first_index: int) -> list:
    return [
        s._replace(start=s.start - a, stop=s.stop - a, index=s.index - first_index)
        for s in whole.spans
        if s.start >= a
    ]


@pytest.mark.parametrize(("name", "convention"), ENGINES)
def test_a_turn_after_a_long_history_is_the_whole_conversation_cut(name: str, convention: str) -> None:
    """About 100k tokens of history (text and images), an answer, then a turn: the turn equals the
    whole conversation's tail (ids, token ids, spans from the turn's first token and segment 0), and
    the state after it is the whole conversation's."""
    rules = _rules(name, convention)
    m = rules.merge_size
    history = [
        seg for k in range(48) for seg in (Text(2000 + k), Image(grid=(1, 2 * m, (2 + k % 3) * m)), Text(5))
    ]
    turn = _turn(rules)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mrope.MRopeWarning)
        whole = mrope.build_positions([*history, Text(17), *turn], rules=rules)
        previous = mrope.build_positions(history, rules=rules)
        out = continue_positions(conversation_state(previous), turn, generated=17, rules=rules)
    a = previous.num_tokens + 17
    assert a > 96_000 and out.offset == a and out.offset + out.positions.num_tokens == whole.num_tokens
    assert out.positions.ids.dtype == whole.ids.dtype
    assert np.array_equal(out.positions.ids, whole.ids[:, a:])
    assert np.array_equal(out.positions.input_ids, whole.input_ids[a:])
    assert list(out.positions.spans) == _cut_spans(whole, a, len(history) + 1)
    assert out.state.num_tokens == whole.num_tokens and out.state.delta == whole.delta
    assert out.state == conversation_state(whole)
    # negative control: the turn after one generated token fewer is not the tail
    other = continue_positions(conversation_state(previous), turn, generated=16, rules=rules)
    assert not np.array_equal(other.positions.ids, whole.ids[:, a:])


def _shifted(positions, cut: int, shift: int, rules) -> np.ndarray:
    """``positions.ids`` from token ``cut`` on, after a leading text run ``shift`` tokens longer (see the
    module docstring)."""
    moves = np.ones_like(positions.ids, dtype=np.int64)
    if rules.positions_base == "sequence":
        for span in positions.spans:
            if span.grid is not None:  # an image block's (column, row, image index) stay
                moves[1:, span.start : span.stop] = 0
    return (positions.ids.astype(np.int64) + shift * moves)[:, cut:]


@pytest.mark.parametrize("start", [10**9, MAX_POSITION - 32])
@pytest.mark.parametrize(("name", "convention"), [e for e in ENGINES if e[0] != "qwen3-omni"])
def test_a_turn_costs_its_own_tokens_whatever_the_history(name: str, convention: str, start: int) -> None:
    """A turn of a few tokens (12, 16 under HunyuanOCR) after ``start`` tokens of text (up to the
    largest position there is) allocates only the turn's arrays, and equals the turn after a short
    history, shifted."""
    rules = _rules(name, convention)
    turn = _turn(rules)
    small = 40
    whole = mrope.build_positions([Text(small), *turn], rules=rules)
    state = conversation_state(mrope.build_positions([Text(small)], rules=rules))
    far = replace(state, num_tokens=start, next_start=start, top=start - 1)
    continue_positions(far, turn, rules=rules)  # warm the plan caches and templates
    tracemalloc.start()
    try:
        out = continue_positions(far, turn, rules=rules)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    n = out.positions.num_tokens
    assert n == whole.num_tokens - small and n <= 32
    assert peak < 64 * 1024, f"{peak:,} bytes traced for a {n}-token turn"
    expected = _shifted(whole, small, start - small, rules)
    assert np.array_equal(out.positions.ids, expected)
    assert np.array_equal(out.positions.input_ids, whole.input_ids[small:])
    assert out.state.num_tokens == start + n and out.state.delta == whole.delta


@pytest.mark.parametrize(("name", "convention"), [e for e in ENGINES if e[0] != "qwen3-omni"])
def test_positions_past_the_largest_are_refused(name: str, convention: str) -> None:
    rules = _rules(name, convention)
    state = conversation_state(mrope.build_positions([Text(4)], rules=rules))
    for start in (MAX_POSITION - 5, MAX_POSITION, 2**80):
        far = replace(state, num_tokens=start, next_start=start, top=start - 1)
        with pytest.raises(LayoutError, match="overflow"):
            continue_positions(far, _turn(rules), rules=rules)
    at = replace(state, num_tokens=MAX_POSITION - 9, next_start=MAX_POSITION - 9, top=MAX_POSITION - 10)
    with pytest.raises(LayoutError, match="overflow"):  # ... and by the tokens generated before the turn
        continue_positions(at, [Text(1)], generated=9, rules=rules)
    last = continue_positions(at, [Text(1)], generated=8, rules=rules)  # the control: just below
    assert last.positions.ids.max() == MAX_POSITION - 1


def test_fractional_time_continues_from_its_float_start() -> None:
    """Qwen3-Omni's float32 timeline: a turn after a million-token history that starts at a fractional
    position equals the whole conversation's tail, and one past float32's exact range is refused."""
    rules = _rules("qwen3-omni", "released")
    video = Video(grid=(3, 4, 4), second_per_grid=0.37, audio=Audio(mel_frames=40))
    history = [Text(3), video, Text(10**6)]
    turn = _turn(rules)
    whole = mrope.build_positions([*history, *turn], rules=rules)
    state = conversation_state(mrope.build_positions(history, rules=rules))
    assert isinstance(state.next_start, float) and state.next_start != int(state.next_start)
    out = continue_positions(state, turn, rules=rules)
    a = out.offset
    assert out.positions.ids.dtype == whole.ids.dtype == np.float32
    assert np.array_equal(out.positions.ids, whole.ids[:, a:]) and out.state == conversation_state(whole)
    far = replace(state, num_tokens=2**24, next_start=float(2**24 - 2), top=float(2**24 - 3))
    with pytest.raises(LayoutError, match="fractional"):
        continue_positions(far, turn, rules=rules)


def test_a_state_is_tied_to_the_exact_rules() -> None:
    """A state made under convention="transformers5" (or rules overrides) has the rules' name and
    engine of the default convention's, yet its digest differs: the library refuses it under the
    default convention (it was accepted when states held the name alone)."""
    t5 = mrope.build_positions([Text(3), Image(grid=(1, 4, 8))], model="qwen2-vl", convention="transformers5")
    state = conversation_state(t5)
    released = resolve_rules("qwen2-vl")
    assert (state.rules, state.engine) == (released.name, "counter")
    assert state.rules_digest == rules_digest(t5.rules) != rules_digest(released)
    with pytest.raises(LayoutError, match=r"rules_digest .* than the 'qwen2-vl' rules given .*rules_digest"):
        continue_positions(state, [Text(2)], model="qwen2-vl")
    with pytest.raises(LayoutError, match="rules_digest"):
        continue_positions(state, [Text(2)], model="qwen2-vl", rules={"tokens_per_second": 4})
    # the control: under its own rules it continues, from the state and from its JSON
    ok = continue_positions(state, [Text(2)], model="qwen2-vl", convention="transformers5")
    again = ConversationState.from_dict(ok.state.to_dict())
    assert again == ok.state and again.rules_digest == state.rules_digest
    # a state saved before states carried a digest is read, and refused until its digest is set
    bare = ConversationState.from_dict({k: v for k, v in state.to_dict().items() if k != "rules_digest"})
    assert bare.rules_digest is None
    with pytest.raises(LayoutError, match="no rules_digest"):
        continue_positions(bare, [Text(2)], model="qwen2-vl", convention="transformers5")
    fixed = replace(bare, rules_digest=rules_digest(t5.rules))
    same = continue_positions(fixed, [Text(2)], model="qwen2-vl", convention="transformers5")
    assert np.array_equal(same.positions.ids, ok.positions.ids)
    with pytest.raises(LayoutError, match="16 hex digits"):
        ConversationState.from_dict({**state.to_dict(), "rules_digest": "xyz"})
