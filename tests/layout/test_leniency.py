"""The token-id reader's strict / lenient switch: strict everywhere but inside ``lenient_reading``."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import mrope
from mrope._layout.leniency import lenient_reading, tolerate


def test_outside_lenient_reading_a_tolerated_input_is_refused() -> None:
    with pytest.raises(mrope.TokenError, match="what came"):
        tolerate("what came", "what the model did")


def test_inside_each_note_is_kept_once_and_the_switch_ends_with_the_block() -> None:
    with lenient_reading() as notes:
        tolerate("a", "the model ignores it")
        tolerate("b", "the model ignores it")
        tolerate("c", "the model reads it as text")
    assert notes == ["the model ignores it", "the model reads it as text"]
    with pytest.raises(mrope.TokenError):
        tolerate("a", "the model ignores it")


def test_another_thread_reads_strictly_while_one_reads_leniently() -> None:
    seen: list[str] = []

    def other() -> None:
        try:
            tolerate("refused", "note")
        except mrope.TokenError:
            seen.append("refused")

    with lenient_reading():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == ["refused"]


def test_the_reader_goes_through_the_switch() -> None:
    """An unused grid row: refused by mrope.get_rope_index, read (and noted) inside the switch with the
    positions of the same ids without the extra row (a rule written out here: an unused row changes
    nothing)."""
    ids = np.array([[5, 151652, *[151655] * 4, 151653, 7]])
    grids = np.array([[1, 4, 4], [1, 4, 4]])
    with pytest.raises(mrope.TokenError, match="rows given but the placeholder runs use 1"):
        mrope.get_rope_index(ids, grids, model="qwen2-vl")
    with lenient_reading() as notes:
        pos, deltas = mrope.get_rope_index(ids, grids, model="qwen2-vl")
    want, want_deltas = mrope.get_rope_index(ids, grids[:1], model="qwen2-vl")
    assert np.array_equal(pos, want) and np.array_equal(deltas, want_deltas)
    assert len(notes) == 1 and "ignored" in notes[0]
