"""image_grid: the grid of an image known only by its size (what the service's height/width segments use)."""

from __future__ import annotations

import pytest
from media import image_bytes

from mrope import MediaError
from mrope.vision import image_grid, load_image


def test_spec_examples() -> None:
    assert image_grid(750, 1000, model="qwen2-vl") == (1, 54, 72)  # 756 x 1008 -> 972 merged tokens
    assert image_grid(1080, 1920, model="qwen2-vl") == (1, 52, 94)  # 728 x 1316
    assert image_grid(1080, 1920, model="qwen3-vl")[1:] == (68, 120)  # factor 32, patch 16


def test_equals_load_image_of_a_real_file() -> None:
    data = image_bytes(width=1000, height=750)
    assert load_image(data, model="qwen2-vl").grid == image_grid(750, 1000, model="qwen2-vl")


def test_bad_sizes() -> None:
    with pytest.raises(MediaError):
        image_grid(10, 3000, model="qwen2-vl")  # aspect over 200
    with pytest.raises(MediaError):
        image_grid(0, 100, model="qwen2-vl")
