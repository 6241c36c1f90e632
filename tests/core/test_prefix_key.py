"""``Positions.prefix_key(n)``: equal keys exactly when the first ``n`` tokens fix the same positions and
the same state after them.

Expected values come from the family's own transformers ``get_rope_index`` (the tiny model's), under a
rule written out here: two prompts' first ``n`` tokens are interchangeable when, with ``n`` extended to
the end of any image or video the prefix reaches into (its remaining tokens' positions are fixed by it),
the model gives both prompts equal positions up to there, the extended lengths are equal, and the videos
reached have equal fps. Controls change one grid, one fps, the rules or a media key.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support import tiny_vlm as tv
from support.random_prompts import models_own, random_segments

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope.integrations import transformers as mt

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v", "qwen2.5-omni")
MEDIA = ("image", "video", "thumbnail", "audio")


def _mutated(segments: list, rng: np.random.Generator, merge: int) -> list:
    """``segments`` with one image or video changed (a grid side, or a video's fps), or unchanged."""
    out = list(segments)
    media = [i for i, s in enumerate(out) if isinstance(s, (Image, Video))]
    if rng.random() < 0.4 or not media:
        return out
    i = int(rng.choice(media))
    seg = out[i]
    if isinstance(seg, Video) and rng.random() < 0.5:
        out[i] = dataclasses.replace(seg, fps=seg.fps * 2)
    else:
        t, h, w = seg.grid
        out[i] = dataclasses.replace(seg, grid=(t, h + merge, w))
    return out


def _reach(p: mrope.Positions, segments: list, n: int) -> tuple[int, tuple]:
    """``n`` extended to the end of every media item the prefix reaches into, and the fps of the videos
    among them."""
    end, fps = n, []
    for idx in sorted({s.index for s in p.spans if s.kind in MEDIA and s.start < n}):
        end = max(end, max(s.stop for s in p.spans if s.index == idx))
        if isinstance(segments[idx], Video):
            fps.append(segments[idx].fps)
    return end, tuple(fps)


@pytest.mark.parametrize("name", FAMILIES)
def test_keys_are_equal_exactly_when_the_models_positions_are(name: str) -> None:
    rules = mt.model_rules(tv.model(name))
    rng = np.random.default_rng(sum(map(ord, name)))
    outcomes = []
    for _ in range(10):
        common = random_segments(rng, rules, True)
        prompts = [
            common + random_segments(rng, rules, True),
            _mutated(common, rng, rules.merge_size) + random_segments(rng, rules, True),
        ]
        refs = [models_own(name, s) for s in prompts]
        built = [mrope.build_positions(s, model=name, rules=rules, tokenizer=tv.tokenize) for s in prompts]
        shortest = min(p.num_tokens for p in built)
        cuts = {0, shortest, *rng.integers(0, shortest + 1, 6).tolist()}
        cuts |= {s.start + 1 for s in built[0].spans if s.kind in MEDIA and s.start < shortest}
        for n in sorted(cuts):
            (end_a, fps_a), (end_b, fps_b) = (_reach(p, s, n) for p, s in zip(built, prompts, strict=True))
            same = (
                end_a == end_b and fps_a == fps_b and np.array_equal(refs[0][:, :end_a], refs[1][:, :end_b])
            )
            assert (built[0].prefix_key(n) == built[1].prefix_key(n)) == same, (n, end_a, end_b)
            outcomes.append(same)
    assert sum(outcomes) > 5 and outcomes.count(False) > 5  # both sides of the rule were exercised


def test_controls_change_the_key() -> None:
    segments = [Text(10), Image(grid=(1, 4, 6)), Text(5), Video(grid=(4, 4, 4), fps=2.0), Text(3)]
    p = mrope.build_positions(segments, model="qwen2.5-vl")
    n = next(s.start for s in p.spans if s.kind == "video") + 2  # inside the video
    key = p.prefix_key(n)
    assert key == mrope.build_positions(segments, model="qwen2.5-vl").prefix_key(n)
    assert len(key) == 32 and int(key, 16) >= 0
    changes = {
        "fps": [*segments[:3], Video(grid=(4, 4, 4), fps=1.0), Text(3)],
        "grid": [*segments[:3], Video(grid=(4, 4, 6), fps=2.0), Text(3)],  # same tokens up to n
        "image grid": [Text(10), Image(grid=(1, 6, 4)), *segments[2:]],
    }
    for what, changed in changes.items():
        assert mrope.build_positions(changed, model="qwen2.5-vl").prefix_key(n) != key, what
    other_rules = mrope.build_positions(segments, model="qwen2.5-vl", convention="transformers5")
    assert other_rules.prefix_key(5) != p.prefix_key(5)  # text-only prefix: equal positions, other rules
    assert np.array_equal(other_rules.ids[:, :5], p.ids[:, :5])
    # a tail after the prefix's media does not enter
    longer = mrope.build_positions([*segments, Image(grid=(1, 4, 4))], model="qwen2.5-vl")
    assert longer.prefix_key(n) == key


def test_media_keys_enter_for_the_media_the_prefix_reaches() -> None:
    segments = [Text(10), Image(grid=(1, 4, 6)), Text(5), Image(grid=(1, 4, 4)), Text(3)]
    p = mrope.build_positions(segments, model="qwen2-vl")
    n = [s.stop for s in p.spans if s.kind == "image"][0] + 1  # past the first image, before the second
    base = p.prefix_key(n, media_keys=["a", "b"])
    assert p.prefix_key(n, media_keys=["a", b"other"]) == base  # the second image is not reached
    assert p.prefix_key(n, media_keys=["z", "b"]) != base
    assert p.prefix_key(n) != base
    for bad in (["a"], "ab", ["a", 3]):
        with pytest.raises(LayoutError, match="media_keys"):
            p.prefix_key(n, media_keys=bad)
    for bad_n in (-1, p.num_tokens + 1, 1.5, True):
        with pytest.raises(LayoutError, match="prefix"):
            p.prefix_key(bad_n)
