"""image_grid: the grid of an image known only by its size (what the service's height/width segments use)."""

from __future__ import annotations

import pytest
from support.media import image_bytes

from mrope import MediaError
from mrope.media import image_grid, load_image


def test_spec_examples() -> None:
    assert image_grid(750, 1000, model="qwen2-vl") == (1, 54, 72)  # 756 x 1008 -> 972 merged tokens
    # under transformers' class-default bound 28*28*1280 (5.24
    # models/qwen2_vl/image_processing_qwen2_vl.py:96), by hand with its smart_resize (:63): 728 x 1316
    assert image_grid(1080, 1920, model="qwen2-vl", rules={"image_max_pixels": 28 * 28 * 1280}) == (1, 52, 94)
    # the released checkpoints' bounds (3136 .. 12845056): no downscale, 1092 x 1932
    assert image_grid(1080, 1920, model="qwen2-vl") == (1, 78, 138)


def test_checkpoint_bounds_issue_9_photo() -> None:
    # a 1280 x 853 (w x h) photo: 840 x 1288 px -> 30 x 46 = 1380 tokens under the checkpoint's bounds;
    # the class default 1003520 gives beta = sqrt(853 * 1280 / 1003520), 812 x 1204 -> 29 x 43 = 1247
    for model in ("qwen2-vl", "qwen2.5-vl"):
        t, h, w = image_grid(853, 1280, model=model)
        assert h * w // 4 == 1380
    t, h, w = image_grid(853, 1280, model="qwen2-vl", rules={"image_max_pixels": 28 * 28 * 1280})
    assert h * w // 4 == 1247
    assert image_grid(1080, 1920, model="qwen3-vl")[1:] == (68, 120)  # factor 32, patch 16


def test_equals_load_image_of_a_real_file() -> None:
    data = image_bytes(width=1000, height=750)
    assert load_image(data, model="qwen2-vl").grid == image_grid(750, 1000, model="qwen2-vl")


def test_bad_sizes() -> None:
    with pytest.raises(MediaError):
        image_grid(10, 3000, model="qwen2-vl")  # aspect over 200
    with pytest.raises(MediaError):
        image_grid(0, 100, model="qwen2-vl")
