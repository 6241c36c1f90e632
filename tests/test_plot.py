"""mrope.plot: the picture shows the coordinates it claims to (strip colours, kinds, shared tokens, maps)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PIL import Image as PILImage

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope.plot import KIND_COLOURS, SHARED, colourise, render_layout, save_layout, vision_maps

pytestmark = pytest.mark.timeout(60)


def sample(**rules: str) -> mrope.Positions:
    return mrope.build_positions(
        [
            Text(12),
            Image(grid=(1, 16, 24)),
            Text(5),
            Image(grid=(1, 16, 16), tiles=(2, 2), thumbnail=True, tile_order=(3, 1, 0, 2)),
            Video(grid=(8, 12, 16), fps=2.0),
            Text(3),
        ],
        model="qwen2.5-vl",
        rules=rules or None,
    )


def columns(n: int, width: int) -> np.ndarray:
    return np.minimum((np.arange(width) * n) // width, n - 1)


def test_png_of_the_requested_width_with_real_content(tmp_path) -> None:
    p = sample()
    path = tmp_path / "layout.png"
    img = save_layout(p, path, width=1000, labels=["", "cat.jpg", "", "tiles", "clip.mp4", ""])
    with PILImage.open(path) as saved:
        assert saved.format == "PNG"
        assert saved.size == img.size
        assert saved.width == 1000 and 700 < saved.height < 2000
        pixels = np.asarray(saved.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(pixels, axis=0)) > 200  # strips, maps, text: far from blank


def test_strips_show_each_tokens_coordinates_on_one_scale() -> None:
    p = sample()
    img = render_layout(p, width=1200)
    geo = img.info["mrope_layout"]
    x0, width = geo["x0"], geo["width"]
    arr = np.asarray(img)
    cols = columns(p.num_tokens, width)
    vmax = int(p.ids.max())
    for row, name in enumerate("thw"):
        top, bottom = geo["rows"][name]
        drawn = arr[(top + bottom) // 2, x0 : x0 + width]
        np.testing.assert_array_equal(drawn, colourise(p.ids[row][cols], 0, vmax), err_msg=name)
    # the span bar: each column has its token's kind colour (separators and segment numbers aside)
    top, bottom = geo["rows"]["span"]
    kinds = np.empty(p.num_tokens, dtype=object)
    for s in p.spans:
        kinds[s.start : s.stop] = s.kind
    want = np.array([KIND_COLOURS[k] for k in kinds[cols]], dtype=np.uint8)
    drawn = arr[top + 1, x0 : x0 + width]
    assert np.mean(np.all(drawn == want, axis=1)) > 0.97


def shared_pixels(img: PILImage.Image) -> int:
    return int(np.all(np.asarray(img) == np.array(SHARED, np.uint8), axis=2).sum())


def test_shared_coordinates_are_marked_only_where_they_exist() -> None:
    clean = render_layout(sample(), width=800)
    assert shared_pixels(clean) == 0
    # independent tiles that each restart at 0, and a fast video whose patches share t: collisions
    with pytest.warns(mrope.MRopeWarning, match="share t offset"):
        p = mrope.build_positions(
            [Text(4), Image(grid=(1, 8, 8), tiles=(2, 1)), Video(grid=(8, 4, 4), fps=8.0)],
            model="qwen2.5-vl",
            rules={"tiles": "independent", "spatial": "reset"},
        )
    _, inverse, counts = np.unique(p.ids.T, axis=0, return_inverse=True, return_counts=True)
    shared = counts[inverse.reshape(-1)] > 1
    assert shared.any() and not shared.all()
    img = render_layout(p, width=800)
    geo = img.info["mrope_layout"]
    top, _ = geo["rows"]["shared"]
    row = np.asarray(img)[top + 1, geo["x0"] : geo["x0"] + geo["width"]]
    marked = np.all(row == np.array(SHARED, np.uint8), axis=1)
    np.testing.assert_array_equal(marked, shared[columns(p.num_tokens, geo["width"])])


def test_tile_maps_sit_in_the_untiled_geometry() -> None:
    untiled = vision_maps(mrope.build_positions([Text(3), Image(grid=(1, 16, 24))], model="qwen2-vl"))
    for order in (None, (5, 0, 3, 1, 4, 2)):
        tiled = vision_maps(
            mrope.build_positions(
                [Text(3), Image(grid=(1, 16, 24), tiles=(3, 2), tile_order=order)], model="qwen2-vl"
            )
        )
        assert len(tiled) == 1
        np.testing.assert_array_equal(tiled[0].h, untiled[0].h)
        np.testing.assert_array_equal(tiled[0].w, untiled[0].w)
        emitted = order or tuple(range(6))
        # (row0, col0) of the k-th emitted tile is where tile emitted[k] lies in the 2 x 3 tile grid
        assert [(r, c, k) for r, c, _, _, k in tiled[0].tiles] == [
            ((i // 3) * 4, (i % 3) * 4, k) for k, i in enumerate(emitted)
        ]
    independent = vision_maps(
        mrope.build_positions(
            [Image(grid=(1, 8, 8), tiles=(2, 2))],
            rules={"tiles": "independent", "spatial": "reset"},
            model="qwen2-vl",
        )
    )
    h = independent[0].h
    np.testing.assert_array_equal(h[:2, :2], h[2:, 2:])  # every tile restarts: the overlap is visible
    assert h.min() == 0


def test_video_map_shows_the_first_patch_and_every_t() -> None:
    p = mrope.build_positions([Video(grid=(6, 4, 8), fps=1.0, wrap=False)], model="qwen2.5-vl")
    (vmap,) = vision_maps(p, ["clip.mp4"])
    assert "clip.mp4" in vmap.caption and "6 patches" in vmap.caption
    np.testing.assert_array_equal(vmap.w, p.ids[2, :8].reshape(2, 4))
    assert vmap.t_values == [int(v) for v in p.ids[0, ::8]] == [0, 4, 8, 12, 16, 20]


def test_empty_and_long_sequences() -> None:
    empty = render_layout(mrope.build_positions([], model="qwen2-vl"), width=600)
    assert empty.width == 600
    long = mrope.build_positions(
        [Text(5000), Image(grid=(1, 64, 64)), Text(10000), Video(grid=(20, 28, 28))], model="qwen2-vl"
    )
    start = time.perf_counter()
    img = render_layout(long, width=1400)
    assert time.perf_counter() - start < 10
    assert img.width == 1400


@pytest.mark.parametrize("width", [100, 599, 1200.5, True])
def test_bad_width(width) -> None:
    with pytest.raises(LayoutError, match="width must be an int >= 600"):
        render_layout(sample(), width=width)


def test_colour_scale_ends() -> None:
    lut = colourise(np.array([0, 5, 10]), 0, 10)
    assert tuple(lut[0]) == (68, 1, 84) and tuple(lut[-1]) == (253, 231, 37)
    assert tuple(lut[1]) not in (tuple(lut[0]), tuple(lut[-1]))
