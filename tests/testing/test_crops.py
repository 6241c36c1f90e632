"""Crops of real images: the alignment rule, snap=, crop_segment, and the crop invariance they pass.

60 JPEG files of varied sizes, a natural centre-half crop of each, two families. Expected values come
from outside mrope: the resize is transformers' ``smart_resize`` (transformers 5.24
models/qwen2_vl/image_processing_qwen2_vl.py:63, written out below: importing it needs torchvision)
with each checkpoint's processor bounds, and the
aligned box is found by brute force over every corner from the rule written out below.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.media import write_image

from mrope import Image, Text, build_positions
from mrope._errors import MediaError
from mrope.media import crop_segment, load_image
from mrope.models import get_family
from mrope.testing import assert_crop_invariant

# (patch, merge, min_pixels, max_pixels) of the checkpoints' preprocessor_config.json:
# Qwen/Qwen2-VL-7B-Instruct (min_pixels 3136, max_pixels 12845056, patch 14) and
# Qwen/Qwen3-VL-8B-Instruct (size.shortest_edge 65536, size.longest_edge 16777216, patch 16)
FAMILIES = {"qwen2-vl": (14, 2, 3136, 12845056), "qwen3-vl": (16, 2, 65536, 16777216)}
N_IMAGES = 60


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py:63, verbatim but for the ratio check."""
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[tuple[str, int, int]]:
    """60 JPEGs of web-dataset sizes (long side 320 to 800 px, COCO-like; landscape and portrait)."""
    root = tmp_path_factory.mktemp("crops")
    rng = np.random.default_rng(24)
    out = []
    for k in range(N_IMAGES):
        long_side = int(rng.integers(320, 801))
        aspect = float(rng.choice([4 / 3, 3 / 2, 16 / 9, 1.0, 5 / 4])) * float(rng.uniform(0.95, 1.05))
        h, w = long_side, max(240, int(long_side / aspect))
        if k % 3:  # two in three landscape
            h, w = w, h
        out.append((str(write_image(root / f"img{k}.jpg", width=w, height=h)), h, w))
    return out


def _centre_half(h: int, w: int) -> tuple[int, int, int, int]:
    return (h // 4, w // 4, h // 2, w // 2)


def _expected(family: str, full: tuple[int, int], box: tuple[int, int, int, int]):
    """The aligned box, the crop's grid and its origin, from the rule: at the crop's scale ``H / h`` the
    corner ``top`` must sit on the merge grid, ``top * H / (h * factor)`` whole (every corner tried)."""
    patch, merge, lo, hi = FAMILIES[family]
    factor = patch * merge
    top, left, h, w = box
    rh, rw = smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi)

    def nearest(offset: int, side: int, resized: int, limit: int) -> int:
        ok = [o for o in range(limit + 1) if (o * resized) % (side * factor) == 0]
        return min(ok, key=lambda o: (abs(o - offset), o))

    t, le = nearest(top, h, rh, full[0] - h), nearest(left, w, rw, full[1] - w)
    origin = (t * rh // (h * factor), le * rw // (w * factor))
    return (t, le, h, w), (1, rh // patch, rw // patch), origin


def test_snapped_centre_crops_of_60_images_pass_the_crop_invariance(images) -> None:
    refused, snapped, checked = 0, 0, 0
    for family in FAMILIES:
        for k, (path, h, w) in enumerate(images):
            box = _centre_half(h, w)
            try:  # the control: today's path without snap
                load_image(path, model=family, crop=box)
            except MediaError as err:
                assert "not aligned to the merge grid" in str(err)
                refused += 1
            want_box, want_grid, want_origin = _expected(family, (h, w), box)
            crop = crop_segment(path, box, model=family)
            assert crop.requested == box and crop.box == want_box, (path, family)
            assert crop.image.grid == want_grid and crop.image.origin == want_origin, (path, family)
            assert crop.snapped == (want_box != box)
            snapped += crop.snapped
            # the box returned is one the strict path accepts, with the same segment
            assert load_image(path, model=family, crop=crop.box) == crop.image
            assert load_image(path, model=family, crop=box, snap=True) == crop.image
            # keep: the crop has exactly its coordinates in the whole image; reset (every released model;
            # translation only, the same check for every image) on the first four
            for rule in ("keep", "reset") if k < 4 else ("keep",):
                rules = {"crop": rule}
                whole = build_positions([Text(3), crop.whole], model=family, rules=rules)
                part = build_positions([Text(3), crop.image], model=family, rules=rules)
                found = assert_crop_invariant(whole, part, heads=1)
                assert found == (want_origin if rule == "keep" else None)
                checked += 1
    print(f"refused without snap: {refused} of {2 * N_IMAGES}; snapped {snapped}; checked {checked}")
    assert refused > N_IMAGES  # most natural crops are off the grid (the issue counted 111 of 120)
    assert refused == snapped  # exactly the refused ones moved
    assert checked == 2 * (N_IMAGES + 4)


def test_the_crop_assertion_fails_where_the_crop_is_placed_wrong(images) -> None:
    path, h, w = images[0]
    crop = crop_segment(path, _centre_half(h, w), model="qwen2-vl")
    keep = {"crop": "keep"}
    whole = build_positions([Text(3), crop.whole], model="qwen2-vl", rules=keep)
    r, c = crop.image.origin
    off = Image(grid=crop.image.grid, origin=(r, c + 1))  # one merged token to the right
    # the assertion reports where the coordinates put the crop: not where the pixels came from
    assert assert_crop_invariant(whole, build_positions([Text(3), off], model="qwen2-vl", rules=keep)) == (
        r,
        c + 1,
    )
    far = Image(grid=crop.image.grid, origin=(r, c + crop.whole.grid[2]))  # past the right edge
    with pytest.raises(AssertionError, match="does not fit"):
        assert_crop_invariant(whole, build_positions([Text(3), far], model="qwen2-vl", rules=keep))
    bent = build_positions([Text(3), crop.image], model="qwen2-vl", rules=keep)
    bent.ids[1, bent.spans[2].start + 3] += 1  # one token moved down a row
    with pytest.raises(AssertionError, match="crop='keep': crop token 3"):
        assert_crop_invariant(whole, bent)


def test_snap_false_refuses_and_names_the_box_crop_segment_returns(images) -> None:
    path, h, w = next(
        im for im in images if crop_segment(im[0], _centre_half(im[1], im[2]), model="qwen3-vl").snapped
    )
    box = _centre_half(h, w)
    with pytest.raises(MediaError, match="snap=True") as err:
        crop_segment(path, box, model="qwen3-vl", snap=False)
    assert str(err.value).endswith(
        f"the nearest aligned box is {crop_segment(path, box, model='qwen3-vl').box}"
    )


def test_a_canvas_image_is_refused_with_a_reason_not_a_type_error() -> None:
    """MiniCPM-V's canvas lays an image out as slices without one merged grid: the crop assertion says so."""
    rules = get_family("minicpm-v-4.7").rules.replace(
        slice_start_id=248060, slice_end_id=248061, newline_id=198
    )
    whole = build_positions([Image(grid=(1, 28, 28))], rules=rules)
    with pytest.raises(AssertionError, match="canvas of slices"):
        assert_crop_invariant(whole, whole)
