"""``Positions.spans`` of a built sequence is made on first read (the builder keeps the plan's pieces
until then): it must read, compare, pickle, copy, print and refuse assignment exactly as a field set
by the dataclass constructor does.

Expected spans are written out by hand from Qwen2-VL's expansion (an image of patch grid (1, 4, 4)
is ``<|vision_start|>``, 4 image pads (merge 2), ``<|vision_end|>``; a video of grid (2, 4, 4) (its
``video_grid_thw``: 2 temporal patches) is 2 x 2 x 2 video pads between its wrappers), not taken from the builder.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pytest

from mrope import Image, Positions, Span, Text, Video, build_batch, build_positions

SEGMENTS = [Text(3), Image(grid=(1, 4, 4)), Text([7, 8]), Video(grid=(2, 4, 4), fps=2.0), Text(1)]
EXPECTED = (
    Span("text", 0, 3, 0),
    Span("wrapper", 3, 4, 1),
    Span("image", 4, 8, 1, (1, 2, 2)),
    Span("wrapper", 8, 9, 1),
    Span("text", 9, 11, 2),
    Span("wrapper", 11, 12, 3),
    Span("video", 12, 20, 3, (2, 2, 2)),
    Span("wrapper", 20, 21, 3),
    Span("text", 21, 22, 4),
)
FIELDS = [f.name for f in dataclasses.fields(Positions)]


def eager_copy(p: Positions) -> Positions:
    """The same values through the dataclass constructor (spans given as a tuple)."""
    return Positions(**{name: getattr(p, name) for name in FIELDS})


def same(a: Positions, b: Positions) -> None:
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert type(x) is type(y), name
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        else:
            assert x == y, name


@pytest.mark.parametrize("how", ["positions", "batch"])
def test_spans_read_as_the_tuple_of_span_and_everything_else_follows(how: str) -> None:
    if how == "positions":
        p = build_positions(SEGMENTS, model="qwen2-vl")
    else:  # a shorter row first: the second row's spans count from its own first token
        p = build_batch([[Text(2)], SEGMENTS, SEGMENTS], model="qwen2-vl").sequences[1]
    pickled = pickle.loads(pickle.dumps(p))  # pickled before its spans were ever read
    assert p.spans == EXPECTED and type(p.spans) is tuple
    assert all(type(s) is Span for s in p.spans)
    assert p.spans is p.spans  # made once, then kept
    assert p.mm_token_type_ids.tolist() == [0] * 4 + [1] * 4 + [0] * 4 + [2] * 8 + [0] * 2
    assert p.metadata()["spans"][2] == {"kind": "image", "start": 4, "stop": 8, "index": 1, "grid": [1, 2, 2]}
    assert p.input_ids.tolist()[9:11] == [7, 8]
    same(p, pickled)
    same(p, copy.copy(p))
    same(p, copy.deepcopy(p))
    same(p, dataclasses.replace(p))
    assert repr(p) == repr(eager_copy(p))
    assert p == p and p != pickled  # identity equality, as before (eq=False)
    assert "_span_pieces" not in pickle.loads(pickle.dumps(p)).__dict__


def test_spans_cannot_be_assigned_before_or_after_the_first_read() -> None:
    p = build_positions(SEGMENTS, model="qwen2-vl")
    for _ in range(2):
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.spans = ()  # type: ignore[misc]
        with pytest.raises(dataclasses.FrozenInstanceError):
            del p.spans
        assert p.spans == EXPECTED
    with pytest.raises(AttributeError):
        Positions.spans  # noqa: B018  (a required field: no class default)
    assert FIELDS[:4] == ["ids", "delta", "spans", "input_ids"]
