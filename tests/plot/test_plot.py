"""mrope._plot: the picture shows the coordinates it claims to (strip colours, kinds, shared tokens, maps)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image as PILImage

import mrope
from mrope import Image, LayoutError, Text, Video
from mrope._plot import KIND_COLOURS, MIN_SEGMENT_PX, colourise, render_layout, save_layout, vision_maps
from mrope._plot.style import AXIS_COLOURS, SHARED

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
    cols = np.asarray(geo["columns"])
    assert cols[0] == 0 and np.all(np.diff(cols) >= 0) and cols[-1] < p.num_tokens
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
    np.testing.assert_array_equal(marked, shared[np.asarray(geo["columns"])])


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


def test_empty_sequence() -> None:
    empty = render_layout(mrope.build_positions([], model="qwen2-vl"), width=600)
    assert empty.width == 600


def long_prompt(video_patches: int) -> tuple[mrope.Positions, list]:
    """Short text and images around one long video: the shape of a real long prompt."""
    segments = [Text(12), Image(grid=(1, 64, 64)), Text(1), Video(grid=(video_patches, 40, 100), fps=2.0)]
    segments += [Text(3), Image(grid=(1, 8, 8)), Text(2)]
    return mrope.build_positions(segments, model="qwen2.5-vl"), segments


@pytest.mark.parametrize("video_patches", [8, 1000])  # about 10k and 1M tokens
def test_long_prompts_keep_every_segment_visible_and_labelled(video_patches: int) -> None:
    p, segments = long_prompt(video_patches)
    assert (p.num_tokens > 9_000) if video_patches == 8 else (p.num_tokens > 1_000_000)
    img = render_layout(p, width=1200)
    geo = img.info["mrope_layout"]
    arr = np.asarray(img)
    top, bottom = geo["rows"]["span"]
    # every segment: at least MIN_SEGMENT_PX columns, its kind's colour in the span bar, a label
    assert [g["segment"] for g in geo["segments"]] == list(range(len(segments)))
    for g in geo["segments"]:
        assert g["x1"] - g["x0"] >= MIN_SEGMENT_PX - 1, g
        kind = (
            "video"
            if isinstance(segments[g["segment"]], Video)
            else "image"
            if isinstance(segments[g["segment"]], Image)
            else "text"
        )
        colours = {tuple(c) for c in arr[top + 2, g["x0"] + 1 : g["x1"] - 1]}
        assert tuple(KIND_COLOURS[kind]) in colours, (g, kind)
    labels = {lab["segment"]: lab for lab in geo["labels"]}
    assert sorted(labels) == list(range(len(segments)))
    for lab in labels.values():
        assert lab["text"].split()[0] == str(lab["segment"])
        box = arr[lab["y0"] : lab["y1"], lab["x0"] : lab["x1"]]
        assert (box.sum(axis=2) < 200).any(), lab  # ink: the label is drawn
    for a in geo["labels"]:  # no two labels of a row overlap
        for b in geo["labels"]:
            if a is not b and a["row"] == b["row"]:
                assert a["x1"] < b["x0"] or b["x1"] < a["x0"], (a, b)
    # the strips show each column's first token on one scale
    cols = np.asarray(geo["columns"])
    vmax = float(p.ids.max())
    for row, name in enumerate("thw"):
        t0, t1 = geo["rows"][name]
        drawn = arr[(t0 + t1) // 2, geo["x0"] : geo["x0"] + geo["width"]]
        np.testing.assert_array_equal(drawn, colourise(p.ids[row][cols], 0, vmax), err_msg=name)
    # the chart: every segment's t line is drawn inside the segment's own columns
    c0, c1 = geo["rows"]["chart"]
    chart = arr[c0 : c1 + 1]
    red = np.all(chart == np.array(AXIS_COLOURS["t"], np.uint8), axis=2)
    for g in geo["segments"]:
        assert red[:, g["x0"] + 1 : g["x1"] - 1].any(), g
    # and h / w stand apart from t in the first image's columns (a legible chart, not one band)
    image = geo["segments"][1]
    rows_t = np.nonzero(red[:, image["x0"] + 2 : image["x1"] - 2].any(axis=1))[0]
    spatial = np.zeros(red.shape, dtype=bool)
    for name in "hw":
        spatial |= np.all(chart == np.array(AXIS_COLOURS[name], np.uint8), axis=2)
    rows_w = np.nonzero(spatial[:, image["x0"] + 2 : image["x1"] - 2].any(axis=1))[0]
    assert rows_w.size and rows_t.size and rows_w.min() < rows_t.min() - 5  # h, w climb above the image's t


def test_many_short_segments_all_labelled() -> None:
    segments = [Text(1) if k % 2 else Image(grid=(1, 2, 2), wrap=False) for k in range(80)]
    p = mrope.build_positions([*segments, Video(grid=(40, 20, 20), fps=2.0)], model="qwen2-vl")
    img = render_layout(p, width=1000)
    geo = img.info["mrope_layout"]
    assert sorted(lab["segment"] for lab in geo["labels"]) == list(range(81))
    assert all(g["x1"] - g["x0"] >= MIN_SEGMENT_PX - 1 for g in geo["segments"])
    rows = {}
    for lab in geo["labels"]:
        rows.setdefault(lab["row"], []).append((lab["x0"], lab["x1"]))
    for spans in rows.values():
        spans.sort()
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans
    top, bottom = geo["rows"]["labels"]
    assert bottom - top == 15 * len(rows) and img.height > bottom


@pytest.mark.parametrize("width", [100, 599, 1200.5, True])
def test_bad_width(width) -> None:
    with pytest.raises(LayoutError, match="width must be an int >= 600"):
        render_layout(sample(), width=width)


def test_colour_scale_ends() -> None:
    lut = colourise(np.array([0, 5, 10]), 0, 10)
    assert tuple(lut[0]) == (68, 1, 84) and tuple(lut[-1]) == (253, 231, 37)
    assert tuple(lut[1]) not in (tuple(lut[0]), tuple(lut[-1]))
