"""The invariance kit on real media: crops and shuffled tiles of a generated image, and one video
sampled at 1 and 2 fps, read through mrope.media."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from support.media import write_image, write_video

from mrope import Image, Text, build_positions
from mrope.media import load_image, load_video
from mrope.testing import assert_crop_invariant, assert_tile_invariant, assert_time_aligned


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> str:
    # 560 x 672 (h x w): multiples of 28, inside Qwen2-VL's pixel bounds, so it is not rescaled
    return str(write_image(tmp_path_factory.mktemp("inv") / "photo.jpg", width=672, height=560))


@pytest.mark.parametrize("rule", ["keep", "reset"])
def test_crop_of_a_real_image(photo: str, rule: str) -> None:
    whole = load_image(photo, model="qwen2-vl")
    crop = load_image(photo, model="qwen2-vl", crop=(112, 168, 224, 280))
    assert whole.grid == (1, 40, 48) and crop.grid == (1, 16, 20)
    assert crop.origin == (4, 6)  # pixel (112, 168) at 28 px per merged token
    rules = {"crop": rule}
    p_whole = build_positions([Text(3), whole], rules=rules, model="qwen2-vl")
    p_crop = build_positions([Text(3), crop], rules=rules, model="qwen2-vl")
    found = assert_crop_invariant(p_whole, p_crop)
    assert found == (crop.origin if rule == "keep" else None)


def test_shuffled_tiles_of_a_real_image(tmp_path) -> None:
    path = write_image(tmp_path / "wide.png", width=1300, height=900)
    tiled = load_image(path, model="qwen2-vl", tiling={"tile_size": 448, "max_tiles": 6, "thumbnail": False})
    cols, rows = tiled.tiles
    assert cols * rows > 1
    untiled = Image(grid=tiled.grid)  # the same resized image, not cut
    ref = build_positions([Text(2), untiled], model="qwen2-vl")
    order = tuple(int(i) for i in np.random.default_rng(0).permutation(cols * rows))
    for image in (tiled, dataclasses.replace(tiled, tile_order=order)):
        assert_tile_invariant(build_positions([Text(2), image], model="qwen2-vl"), ref)


def test_one_video_sampled_at_1_and_2_fps_is_time_aligned(tmp_path) -> None:
    path = write_video(tmp_path / "clip.mp4", num_frames=80, fps=10, width=112, height=112)
    low = load_video(path, model="qwen2.5-vl", fps=1.0)
    high = load_video(path, model="qwen2.5-vl", fps=2.0)
    assert low.fps == pytest.approx(1.0) and high.fps == pytest.approx(2.0)
    assert high.grid[0] == 2 * low.grid[0]
    pair = lambda model: [build_positions([v], model=model) for v in (low, high)]  # noqa: E731
    assert_time_aligned(*pair("qwen2.5-vl"))
    with pytest.raises(AssertionError, match="not time-aligned"):
        assert_time_aligned(*pair("qwen2-vl"))
