"""mrope.media images: smart_resize, header sizes with EXIF orientation, guards, tiling and crops."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
from PIL import Image as PILImage
from support import media

import mrope
from mrope import MediaError
from mrope.media import TilePlan, detect_media_kind, image_size, load_image, smart_resize
from mrope.media._image import DEFAULT_MAX_IMAGE_PIXELS
from mrope.media._tiling import plan_tiles

pytestmark = pytest.mark.timeout(30)


# ----------------------------------------------------------------------------------- smart_resize


def _qwen_smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    """transformers' Qwen2-VL ``smart_resize``, verbatim (the reference)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
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


def test_smart_resize_spec_examples():
    assert smart_resize(750, 1000) == (756, 1008)
    assert smart_resize(1080, 1920) == (728, 1316)
    # Python round: 14 / 28 = 0.5 rounds to 0 (even), 42 / 28 = 1.5 rounds to 2
    assert smart_resize(42, 4200, min_pixels=1) == (56, 4200)


@pytest.mark.parametrize("factor,lo,hi", [(28, 3136, 1003520), (32, 65536, 16777216), (28, 100352, 602112)])
def test_smart_resize_matches_reference(factor, lo, hi):
    rng = np.random.default_rng(factor + lo)
    sizes = [(int(h), int(w)) for h, w in rng.integers(1, 5000, size=(400, 2))]
    sizes += [(1, 150), (13, 2600), (4000, 3000), (3, 3), (28, 28), (14, 14)]
    for h, w in sizes:
        if max(h, w) / min(h, w) > 200:
            continue
        assert smart_resize(h, w, factor, lo, hi) == _qwen_smart_resize(h, w, factor, lo, hi), (h, w)


def test_smart_resize_errors():
    with pytest.raises(MediaError, match="aspect ratio must be at most 200"):
        smart_resize(10, 2010)
    smart_resize(10, 2000)  # exactly 200 is allowed
    with pytest.raises(MediaError, match="positive"):
        smart_resize(0, 100)
    with pytest.raises(MediaError, match="min_pixels"):
        smart_resize(100, 100, min_pixels=5000, max_pixels=4000)
    with pytest.raises(MediaError, match="max_pixels"):
        smart_resize(100, 100, max_pixels=float("nan"))


# --------------------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
def test_image_size_applies_exif_orientation(fmt):
    # a phone photo: stored landscape 40 x 30 (w x h), EXIF says rotate 90 degrees
    for orientation, expected in [
        (None, (30, 40)),
        (1, (30, 40)),
        (3, (30, 40)),
        (6, (40, 30)),
        (8, (40, 30)),
    ]:
        data = media.image_bytes(40, 30, fmt, orientation=orientation)
        assert image_size(data) == expected, (fmt, orientation)


def test_image_size_tiff_orientation_not_applied_twice():
    buf = io.BytesIO()
    PILImage.new("RGB", (40, 30)).save(buf, "TIFF", tiffinfo={0x0112: 6})
    assert image_size(buf.getvalue()) == (40, 30)


def test_image_size_png_exif_after_pixel_data():
    assert image_size(media.png_eXIf_after_idat(40, 30, 6)) == (40, 30)
    assert image_size(media.png_eXIf_after_idat(40, 30, 1)) == (30, 40)


def test_image_size_sources(tmp_path):
    data = media.image_bytes(40, 30, "JPEG", orientation=6)
    path = tmp_path / "photo.jpg"
    path.write_bytes(data)
    assert image_size(path) == image_size(str(path)) == image_size(data) == (40, 30)
    assert image_size(io.BytesIO(data)) == (40, 30)
    assert image_size(bytearray(data)) == (40, 30)
    with PILImage.open(io.BytesIO(data)) as im:
        assert image_size(im) == (40, 30)
    assert image_size(PILImage.new("RGB", (7, 5))) == (5, 7)


def test_image_size_reads_only_the_header():
    # a JPEG cut in the middle of its entropy-coded data still has a header and a size
    data = media.image_bytes(400, 300, "JPEG")
    assert image_size(media.truncated(data, 0.5)) == (300, 400)


def test_decompression_bomb_and_absurd_sizes():
    with pytest.raises(MediaError, match="decompression bomb"):
        image_size(media.forged_png(100_000, 100_000))  # 10 G pixels in 68 bytes
    with pytest.raises(MediaError, match="deflate expands at most"):
        image_size(media.forged_png(3000, 3000))  # under the pixel cap but impossible for 68 bytes
    with pytest.raises(MediaError, match="at most 1000"):
        image_size(media.image_bytes(40, 30), max_pixels=1000)
    assert DEFAULT_MAX_IMAGE_PIXELS == 178_956_970


def test_deflate_bound_accepts_maximally_compressed_png():
    buf = io.BytesIO()
    PILImage.new("L", (3000, 3000)).save(buf, "PNG", compress_level=9)
    data = buf.getvalue()
    assert len(data) * 1000 < 3000 * 3001  # near deflate's limit, still legal
    assert image_size(data) == (3000, 3000)


def test_bad_images(tmp_path):
    png = media.image_bytes(40, 30, "PNG")
    bad = {
        "empty": b"",
        "random": media.random_bytes(),
        "header cut": media.truncated(png, 20),
        "signature only": media.truncated(png, 8),
        "cut before pixel data": media.truncated(png, 33),
        "corrupt header": media.corrupted(png, seed=1, fraction=0.5, skip=8)[:60] + png[60:],
        "zero size png": media.forged_png(0, 0),
        "text": b"hello, this is not an image\n" * 10,
    }
    for name, data in bad.items():
        with pytest.raises(MediaError):
            image_size(data)
        with pytest.raises(MediaError):
            load_image(data, model="qwen2-vl")
        if name != "empty":
            with pytest.raises(MediaError):
                detect_media_kind(data)
    fake = tmp_path / "photo.png"
    fake.write_bytes(media.random_bytes(2048, seed=3))
    with pytest.raises(MediaError, match="not an image"):
        load_image(fake, model="qwen2-vl")
    with pytest.raises(MediaError, match="zero size"):
        image_size(PILImage.new("RGB", (0, 0)))
    with pytest.raises(MediaError, match="no such file"):
        image_size(tmp_path / "missing.png")
    with pytest.raises(MediaError, match="directory"):
        image_size(tmp_path)
    with pytest.raises(MediaError, match="binary"):
        image_size(io.StringIO("text"))
    with pytest.raises(MediaError, match="path, bytes or a binary file"):
        image_size(12345)


def test_aspect_ratio_over_200_is_an_error():
    data = media.image_bytes(250, 1, "PNG")
    assert image_size(data) == (1, 250)
    with pytest.raises(MediaError, match="aspect ratio"):
        load_image(data, model="qwen2-vl")


# --------------------------------------------------------------------------------------- load_image


def test_load_image_grids(tmp_path):
    data = media.image_bytes(1000, 750, "PNG")
    assert load_image(data, model="qwen2-vl").grid == (1, 54, 72)
    assert load_image(data, model="qwen3-vl").grid == (1, 46, 62)  # factor 32: 736 x 992
    # rotated phone photo: stored 1000 x 750 (w x h), orientation 6 -> displayed 750 wide, 1000 high
    rotated = media.image_bytes(1000, 750, "JPEG", orientation=6)
    assert load_image(rotated, model="qwen2-vl").grid == (1, 72, 54)
    path = media.write_image(tmp_path / "a.png", 1920, 1080)
    img = load_image(path, model="qwen2-vl")
    assert img.grid == (1, 78, 138) and img.tiles is None and img.origin == (0, 0) and img.wrap  # 1092 x 1932
    assert load_image(path, wrap=False, model="qwen2-vl").wrap is False
    tight = load_image(path, rules={"image_max_pixels": 28 * 28 * 16}, model="qwen2-vl")
    assert tight.grid[1] * tight.grid[2] // 4 <= 16


# --------------------------------------------------------------------------------------------- tiling


def _internvl_tiles(width, height, min_num=1, max_num=12, image_size=448):
    """InternVL's ``dynamic_preprocess`` ratio choice, verbatim (the reference)."""

    def find_closest_aspect_ratio(aspect_ratio, target_ratios, width, height, image_size):
        best_ratio_diff = float("inf")
        best_ratio = (1, 1)
        area = width * height
        for ratio in target_ratios:
            target_aspect_ratio = ratio[0] / ratio[1]
            ratio_diff = abs(aspect_ratio - target_aspect_ratio)
            if ratio_diff < best_ratio_diff:
                best_ratio_diff = ratio_diff
                best_ratio = ratio
            elif ratio_diff == best_ratio_diff:
                if area > 0.5 * image_size * image_size * ratio[0] * ratio[1]:
                    best_ratio = ratio
        return best_ratio

    aspect_ratio = width / height
    target_ratios = set(
        (i, j)
        for n in range(min_num, max_num + 1)
        for i in range(1, n + 1)
        for j in range(1, n + 1)
        if i * j <= max_num and i * j >= min_num
    )
    target_ratios = sorted(target_ratios, key=lambda x: x[0] * x[1])
    return find_closest_aspect_ratio(aspect_ratio, target_ratios, width, height, image_size)


def test_plan_tiles_tie_breaks():
    # square images: (1,1), (2,2), (3,3) tie on aspect; the larger grid wins only for large images
    assert plan_tiles(500, 500) == (1, 1)  # 250000 <= 0.5 * 448^2 * 4
    assert plan_tiles(800, 800) == (2, 2)  # 640000 > 401408 but <= 903168
    assert plan_tiles(1000, 1000) == (3, 3)  # 1e6 > 903168
    # w/h = 1.5 is exactly between 1 and 2 when at most 2 tiles are allowed
    assert plan_tiles(400, 600, max_tiles=2) == (2, 1)  # 240000 > 0.5 * 448^2 * 2
    assert plan_tiles(200, 300, max_tiles=2) == (1, 1)
    # only (1, 2) and (2, 1), equally far from w/h = 1.25: the set order InternVL sees decides
    assert plan_tiles(1000, 1250, min_tiles=2, max_tiles=2) == (2, 1) == _internvl_tiles(1250, 1000, 2, 2)
    assert plan_tiles(100, 125, min_tiles=2, max_tiles=2) == (1, 2) == _internvl_tiles(125, 100, 2, 2)
    # no tie: a wide strip
    assert plan_tiles(448, 448 * 4) == (4, 1)


def test_plan_tiles_matches_internvl():
    rng = np.random.default_rng(7)
    for h, w in rng.integers(16, 4000, size=(300, 2)):
        for lo, hi in [(1, 12), (1, 6), (2, 9)]:
            assert plan_tiles(int(h), int(w), 448, lo, hi) == _internvl_tiles(int(w), int(h), lo, hi), (
                h,
                w,
                lo,
                hi,
            )


def test_tile_plan_options():
    assert TilePlan.coerce(None) is None and TilePlan.coerce(False) is None
    assert TilePlan.coerce(True) == TilePlan()
    assert TilePlan.coerce({"max_tiles": 4}) == TilePlan(max_tiles=4)
    with pytest.raises(MediaError, match="unknown tiling options"):
        TilePlan.coerce({"tiles": 4})
    with pytest.raises(MediaError, match="min_tiles"):
        TilePlan(min_tiles=5, max_tiles=4)
    with pytest.raises(MediaError, match="max_tiles"):
        plan_tiles(100, 100, max_tiles=1000)
    assert TilePlan().has_thumbnail(2, 1) and not TilePlan().has_thumbnail(1, 1)
    assert not TilePlan(thumbnail=False).has_thumbnail(3, 3)


def _global_tile_check(tiled: mrope.Image, model: str = "qwen2-vl") -> None:
    rules = mrope.models.get_family(model).rules
    cols, rows = tiled.tiles
    prefix = [mrope.Text(5)]
    pt = mrope.build_positions(prefix + [tiled], model=model)
    pu = mrope.build_positions(prefix + [mrope.Image(grid=tiled.grid)], model=model)
    _, hh, ww = (tiled.grid[0], tiled.grid[1] // rules.merge_size, tiled.grid[2] // rules.merge_size)
    th, tw = hh // rows, ww // cols
    whole = next(s for s in pu.spans if s.kind == "image")
    grid_ids = pu.ids[:, whole.start : whole.stop].reshape(3, hh, ww)
    tiles = [s for s in pt.spans if s.kind == "image"]
    assert len(tiles) == cols * rows
    for span in tiles:
        r, c = span.tile
        got = pt.ids[:, span.start : span.stop].reshape(3, th, tw)
        want = grid_ids[:, r * th : (r + 1) * th, c * tw : (c + 1) * tw]
        np.testing.assert_array_equal(got, want)
    thumbs = [s for s in pt.spans if s.kind == "thumbnail"]
    assert len(thumbs) == int(tiled.thumbnail)
    if thumbs:
        assert thumbs[0].stop - thumbs[0].start == th * tw


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen3-vl"])
def test_load_image_tiling_keeps_the_global_grid(model):
    data = media.image_bytes(1000, 1000, "PNG")
    tiled = load_image(data, model=model, tiling=True)
    patch = mrope.models.get_family(model).rules.patch_size
    assert tiled.tiles == (3, 3) and tiled.thumbnail
    assert tiled.grid == (1, 3 * 448 // patch, 3 * 448 // patch)
    _global_tile_check(tiled, model)
    wide = load_image(media.image_bytes(1200, 400, "PNG"), model=model, tiling={"max_tiles": 6})
    assert wide.tiles == plan_tiles(400, 1200, max_tiles=6)
    _global_tile_check(wide, model)
    single = load_image(media.image_bytes(300, 300, "PNG"), model=model, tiling=TilePlan())
    assert single.tiles == (1, 1) and not single.thumbnail


def test_tile_size_must_be_whole_merged_tokens():
    data = media.image_bytes(1000, 1000, "PNG")
    with pytest.raises(MediaError, match="multiple of 28"):
        load_image(data, tiling={"tile_size": 450}, model="qwen2-vl")
    assert load_image(data, tiling={"tile_size": 224}, model="qwen2-vl").grid == (
        1,
        16 * plan_tiles(1000, 1000, 224)[1],
        48,
    )


# ---------------------------------------------------------------------------------------------- crops


def _block(pos: mrope.Positions) -> np.ndarray:
    span = next(s for s in pos.spans if s.kind == "image")
    return pos.ids[:, span.start : span.stop]


def test_crop_keep_and_reset():
    data = media.image_bytes(896, 896, "PNG")  # sized 896 x 896: no resize, merged grid 32 x 32
    whole = load_image(data, model="qwen2-vl")
    assert whole.grid == (1, 64, 64)
    crop = load_image(data, crop=(224, 448, 448, 448), model="qwen2-vl")  # rows 224.., cols 448.. in pixels
    assert crop.grid == (1, 32, 32) and crop.origin == (8, 16)
    prefix = [mrope.Text(4)]
    keep = {"crop": "keep"}
    w = _block(mrope.build_positions(prefix + [whole], rules=keep, model="qwen2-vl")).reshape(3, 32, 32)
    k = _block(mrope.build_positions(prefix + [crop], rules=keep, model="qwen2-vl")).reshape(3, 16, 16)
    np.testing.assert_array_equal(k, w[:, 8:24, 16:32])  # exactly the whole image's coordinates
    r = _block(mrope.build_positions(prefix + [crop], rules={"crop": "reset"}, model="qwen2-vl")).reshape(
        3, 16, 16
    )
    s = prefix[0].num_tokens + 1  # block start: after the text and vision_start
    np.testing.assert_array_equal(r[1], s + np.arange(16)[:, None] + np.zeros(16, int))
    np.testing.assert_array_equal(r[2], s + np.arange(16)[None, :] + np.zeros((16, 1), int))
    # reset = keep minus the origin
    np.testing.assert_array_equal(r[1:], k[1:] - np.array([8, 16])[:, None, None])


def test_crop_origin_at_the_crops_scale():
    data = media.image_bytes(2000, 2000, "PNG")
    # under transformers' class-default bound (28*28*1280) a 1000 px crop is resized to 980 px (scale
    # 0.98): an offset of 1000 px is 35 merged tokens
    bound = {"image_max_pixels": 28 * 28 * 1280}
    crop = load_image(data, crop=(1000, 1000, 1000, 1000), model="qwen2-vl", rules=bound)
    assert crop.grid == (1, 70, 70) and crop.origin == (35, 35)
    with pytest.raises(MediaError, match="aligned to the merge grid.*multiple of 200 source pixels") as err:
        load_image(data, crop=(500, 0, 1000, 1000), model="qwen2-vl", rules=bound)
    # the error names the nearest aligned box of the same size, and that box loads (at 400 px: 14 tokens)
    assert str(err.value).endswith("the nearest aligned box is (400, 0, 1000, 1000)")
    assert load_image(data, crop=(400, 0, 1000, 1000), model="qwen2-vl", rules=bound).origin == (14, 0)
    with pytest.raises(MediaError, match=r"nearest aligned box is \(600, 800, 1000, 1000\)"):
        load_image(data, crop=(610, 900, 1000, 1000), model="qwen2-vl", rules=bound)
    with pytest.raises(MediaError, match="inside"):
        load_image(data, crop=(1500, 0, 1000, 1000), model="qwen2-vl")
    with pytest.raises(MediaError, match="4 ints"):
        load_image(data, crop=(0, 0, 10), model="qwen2-vl")


def test_crop_with_tiling():
    data = media.image_bytes(1792, 896, "PNG")
    img = load_image(
        data, tiling=True, crop=(0, 896, 896, 896), model="qwen2-vl"
    )  # the right half: 2 x 2 tiles, no resize
    assert img.tiles == (2, 2) and img.grid == (1, 64, 64) and img.origin == (0, 32)


# --------------------------------------------------------------------------------------------- detect


def test_detect_media_kind_images():
    for fmt in ("PNG", "JPEG", "WEBP", "GIF"):
        assert detect_media_kind(media.image_bytes(32, 24, fmt)) == "image"
    with pytest.raises(MediaError, match="empty"):
        detect_media_kind(b"")
    with pytest.raises(MediaError, match="bytes"):
        detect_media_kind("not bytes")  # type: ignore[arg-type]
