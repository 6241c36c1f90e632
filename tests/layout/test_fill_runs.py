"""The token scan's one-pass row filler equals planning the row's pieces and filling them.

``mrope._layout.token_scan.fill_runs`` writes the counter rule out inline (for speed); the reference here
is the general path it replaces, ``fill_pieces(run_pieces(...))``, which the segment builder also
uses, on random rows of text and vision runs under every counter-engine family's rules (both
conventions) and rule variants no family ships (spatial advance, centred and reset spatial offsets,
row newlines, frame blocks, temporal merging, second-based time, VRoPE's four symmetric rows).
"""

from __future__ import annotations

import dataclasses
import random
import zlib

import numpy as np
import pytest

import mrope
from mrope._errors import LayoutError
from mrope._layout import engine_for
from mrope._layout.pieces import fill_pieces
from mrope._layout.token_scan import GridQueue, fill_runs, run_pieces
from mrope._rules import LayoutRules
from mrope.models import families, resolve_rules

COUNTER_RULES = [
    pytest.param(resolve_rules(f.name, None, convention), id=f"{f.name}-{convention}")
    for f in families()
    for convention in ("released", "transformers5")
    if engine_for(resolve_rules(f.name, None, convention)) == "counter"
]


def _variants() -> list:
    base = resolve_rules("qwen2.5-vl", None, "released")
    changes = {
        "spatial-advance": {"advance": "spatial"},
        "centered": {"spatial": "centered"},
        "reset": {"spatial": "reset"},
        "row-newline": {"row_newline": True},
        "frame-block": {"frame_block": True},
        "temporal-merge-2": {"temporal_merge_size": 2},
        "index-time": {"temporal": "index"},
        # the research schemes' rules (mrope.models._schemes): VideoRoPE's and MRoPE-Interleave's
        "diagonal-time": {
            "temporal": "index",
            "spatial": "diagonal",
            "advance": "time",
            "temporal_stride": 2,
        },
        "reset-block": {"temporal": "index", "spatial": "reset", "advance": "block", "temporal_stride": 3},
        "fractional-stride": {
            "temporal": "index",
            "spatial": "diagonal",
            "advance": "time",
            "temporal_stride": 0.3,
        },
        "token-time": {"temporal": "index", "spatial": "token_time"},  # TAD-RoPE's half steps
        "symmetric": {"temporal": "index", "spatial": "symmetric", "num_axes": 4},  # VRoPE's four rows
    }
    out = []
    for name, change in changes.items():
        try:
            rules = dataclasses.replace(base, **change)
        except (TypeError, ValueError) as exc:  # a combination the rules refuse is a test bug
            raise AssertionError(f"variant {name}: {exc}") from None
        out.append(pytest.param(rules, id=name))
    return out


def _random_row(rules: LayoutRules, rng: random.Random) -> tuple[tuple, list, list, list[float]]:
    """Runs ``(starts, stops, kinds)`` of a random row and the image / video grids (and seconds per
    grid) that fill its vision runs, one grid a run."""
    merge, tm, newline = rules.merge_size, rules.temporal_merge_size, int(rules.row_newline)
    starts, stops, kinds, images, videos, spg = [], [], [], [], [], []
    at = 0
    last = -1
    for _ in range(rng.randint(1, 9)):
        kind = rng.choice([k for k in (0, 1, 2) if k != last])
        if kind == 0:
            n = rng.choice([1, 2, rng.randint(3, 300)])
        else:
            t = rng.randint(1, 4) * (tm if kind == 2 else 1)
            if kind == 1:
                t = 1
            h, w = merge * rng.randint(1, 6), merge * rng.randint(1, 6)
            n = t // (tm if kind == 2 else 1) * (h // merge) * (w // merge + newline)
            (images if kind == 1 else videos).append([t, h, w])
            if kind == 2:
                spg.append(rng.choice([0.5, 1.0, 2.0, 1.7]))
        starts.append(at)
        stops.append(at + n)
        kinds.append(kind)
        at += n
        last = kind
    return (starts, stops, kinds), images, videos, spg


def _both(rules: LayoutRules, runs: tuple, images: list, videos: list, spg: list[float]) -> tuple:
    n = runs[1][-1]
    dtype = np.float32 if rules.fractional_time else np.int64
    got, want = np.full((rules.num_axes, n), -7, dtype=dtype), np.full((rules.num_axes, n), -7, dtype=dtype)
    queues = []
    for _ in range(2):
        tm, newline = rules.temporal_merge_size, int(rules.row_newline)
        queues.append(
            (
                GridQueue("image_grid_thw", images, rules.merge_size, None, 1, newline),
                GridQueue("video_grid_thw", videos, rules.merge_size, spg, tm, newline),
            )
        )
    top_got = fill_runs(got, runs, 0, *queues[0], rules)
    pieces = run_pieces(runs, 0, *queues[1], rules)
    top_want = fill_pieces(pieces, want, None, None, rules.advance)
    return got, top_got, want, top_want, queues


def _check(rules: LayoutRules, seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(25):
        runs, images, videos, spg = _random_row(rules, rng)
        if rules.temporal == "timestamps":  # the scan splits videos into (1, H, W) frames first
            spg = [x for (t, _, _), x in zip(videos, spg, strict=True) for _ in range(t)]
            videos = [[1, h, w] for t, h, w in videos for _ in range(t)]
            runs = _split_frames(runs, videos, rules)
        got, top_got, want, top_want, queues = _both(rules, runs, images, videos, spg)
        np.testing.assert_array_equal(got, want)
        assert top_got == top_want
        assert [q.next for q in queues[0]] == [q.next for q in queues[1]] == [len(images), len(videos)]


def _split_frames(runs: tuple, frames: list, rules: LayoutRules) -> tuple:
    """Runs with each video run cut into one run per frame (a timestamp rule keeps text between
    them; here the frames' runs are separated by one text token each)."""
    starts, stops, kinds = [], [], []
    at, f = 0, 0
    per_frame = [
        (h // rules.merge_size) * (w // rules.merge_size + int(rules.row_newline)) for _, h, w in frames
    ]
    for a, z, kind in zip(*runs, strict=True):
        if kind != 2:
            if kinds and kinds[-1] == kind == 0:  # merge with the separator before it
                stops[-1] += z - a
            else:
                starts.append(at)
                stops.append(at + z - a)
                kinds.append(kind)
            at = stops[-1]
            continue
        left = z - a
        while left:
            if kinds and kinds[-1] == 2:
                starts.append(at)
                stops.append(at + 1)
                kinds.append(0)
                at += 1
            n = per_frame[f]
            starts.append(at)
            stops.append(at + n)
            kinds.append(2)
            at += n
            left -= n
            f += 1
    return starts, stops, kinds


@pytest.mark.parametrize("rules", COUNTER_RULES)
def test_fill_runs_equals_pieces_for_every_family(rules: LayoutRules) -> None:
    _check(rules, seed=zlib.crc32(f"{rules.name} {rules.advance}".encode()))


@pytest.mark.parametrize("rules", _variants())
def test_fill_runs_equals_pieces_for_rule_variants(rules: LayoutRules) -> None:
    _check(rules, seed=7)


def test_the_comparison_separates_conventions() -> None:
    """Negative control: the same rows under the two conventions of Qwen2-VL (whose advance differs
    after a video longer in time than wide) fill differently, so equal outputs above mean something."""
    released = resolve_rules("qwen2-vl", None, "released")
    t5 = resolve_rules("qwen2-vl", None, "transformers5")
    runs = ([0, 10, 42, 43], [10, 42, 43, 53], [0, 2, 0, 1])  # text, video (8, 4, 4), text, image (1, 4, 10)
    args = ([[1, 4, 10]], [[8, 4, 4]], [1.0])
    got_released = _both(released, runs, *args)[0]
    got_t5 = _both(t5, runs, *args)[0]
    assert not np.array_equal(got_released, got_t5)


def test_overflow_names_the_row_and_grid() -> None:
    """A video whose time would pass the position bound is refused, naming the row, grid and token:
    each video's time alone is within the bound (its own check), the second one's start is not."""
    rules = resolve_rules("qwen2.5-vl", None, "released")
    video = [rules.video_pad_id] * 8  # grid (2, 4, 4): 2 x 2 x 2 tokens
    ids = np.array([[1, 2, *video, 3, *video, 4]])
    spg = [2.0**61 * 0.999] * 2  # seconds per grid: time offsets just under 2**62 at 2 tokens a second
    with pytest.raises(LayoutError, match=r"row 0, video_grid_thw\[1\] at token 11: positions overflow"):
        mrope.numpy_rope_index(ids, None, [[2, 4, 4]] * 2, model="qwen2.5-vl", second_per_grid_ts=spg)
