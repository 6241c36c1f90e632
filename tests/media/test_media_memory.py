"""Media held in memory (PIL images, a file's bytes, numpy images and frames) in the library and the
pipeline: the grids and positions of the same media read from files.

Hand derivation of the expected grid (Qwen2-VL: patch 14, merge 2, so sides are multiples of 28): a
240 x 320 frame rounds to 252 x 308 (9 and 11 merged tokens), grid (18, 22) in patches; five frames pad
to six, two per temporal patch: t = 3.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from support import media

from mrope import build_positions
from mrope._errors import MediaError
from mrope.media import image_size, load_frames, load_image
from mrope.models import resolve_rules
from mrope.pipeline import Preprocessor
from mrope.schema import MediaAccess, message_segments, parse_record

pytestmark = pytest.mark.timeout(120)

MODEL = "qwen2-vl"
GRID = (1, 18, 22)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("memory")
    for i in range(5):
        media.write_image(d / f"f{i}.png", 320, 240)
    return d


def frames() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, size=(5, 240, 320, 3), dtype=np.uint8)


def png_bytes() -> bytes:
    buf = io.BytesIO()
    PILImage.new("RGB", (320, 240)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.mark.parametrize(
    "source",
    [
        pytest.param(np.zeros((240, 320, 3), np.uint8), id="numpy"),
        pytest.param(np.zeros((240, 320, 1), np.uint8), id="numpy-grey"),
        pytest.param(PILImage.new("RGB", (320, 240)), id="pil"),
        pytest.param(png_bytes(), id="bytes"),
    ],
)
def test_an_image_in_memory_has_the_grid_of_its_size(root, source) -> None:
    assert image_size(source) == (240, 320)
    assert load_image(source, model=MODEL).grid == GRID == load_image(root / "f0.png", model=MODEL).grid


def test_numpy_frames_are_a_video_of_frames(root) -> None:
    video = load_frames(frames(), model=MODEL)
    assert video.grid == (3, 18, 22)
    assert video == load_frames([root / f"f{i}.png" for i in range(5)], model=MODEL)
    assert load_frames(list(frames()), model=MODEL) == video


@pytest.mark.parametrize(
    ("bad", "phrase"),
    [
        (np.zeros((240, 320), np.uint8), "shape [240, 320]"),
        (np.zeros((240, 320, 3), np.float32), "of float32"),
        (np.zeros((240, 320, 2), np.uint8), "C in (1, 3, 4)"),
        (np.zeros((0, 320, 3), np.uint8), "zero size"),
    ],
)
def test_a_bad_numpy_image_says_what_it_takes(bad, phrase) -> None:
    with pytest.raises(MediaError) as info:
        load_image(bad, model=MODEL)
    assert phrase in str(info.value)


def test_bad_numpy_frames_say_what_they_take() -> None:
    with pytest.raises(MediaError, match=r"\[T, H, W, C\]"):
        load_frames(np.zeros((240, 320, 3), np.uint8), model=MODEL)
    with pytest.raises(MediaError, match=r"no frame"):
        load_frames(np.zeros((0, 240, 320, 3), np.uint8), model=MODEL)


def record(image_value, video_value) -> dict:
    return {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": image_value},
                    {"type": "text", "tokens": 4},
                    {"type": "video", "video": video_value},
                ],
            }
        ]
    }


IN_MEMORY = [
    pytest.param(PILImage.new("RGB", (320, 240)), frames(), id="pil+numpy-frames"),
    pytest.param(png_bytes(), [png_bytes()] * 5, id="bytes+bytes-frames"),
    pytest.param(
        np.zeros((240, 320, 3), np.uint8), [PILImage.new("RGB", (320, 240))] * 5, id="numpy+pil-frames"
    ),
]


@pytest.mark.parametrize(("image_value", "video_value"), IN_MEMORY)
def test_pipeline_records_with_media_in_memory(root, image_value, video_value) -> None:
    """The pipeline (a plain record, and a batch of columns as ``datasets`` / Ray hand them over) reads
    media in memory as the files: same positions and grids."""
    job = Preprocessor(model=MODEL, base_dir=str(root))
    files = record("f0.png", [f"f{i}.png" for i in range(5)])
    want = job.positions(files)
    got = job.positions(record(image_value, video_value))
    np.testing.assert_array_equal(got.ids, want.ids)
    assert got.image_grid_thw.tolist() == [list(GRID)] and got.video_grid_thw.tolist() == [[3, 18, 22]]
    # keep=(): media in memory are no Arrow column to copy through
    table = job.with_options(keep=()).batch({"messages": [record(image_value, video_value)["messages"]]})
    np.testing.assert_array_equal(np.asarray(table.column("positions")[0].as_py()), want.ids)


def test_library_messages_with_media_in_memory(root) -> None:
    """``mrope.schema.message_segments`` + ``build_positions``: a numpy image equals its file."""
    rules = resolve_rules(MODEL)
    segs = message_segments(
        parse_record(record(np.zeros((240, 320, 3), np.uint8), frames())).messages or [], rules
    )
    want = message_segments(
        parse_record(record(str(root / "f0.png"), [str(root / f"f{i}.png") for i in range(5)])).messages
        or [],
        rules,
        media=MediaAccess.everything(),
    )
    assert segs == want
    np.testing.assert_array_equal(
        build_positions(segs, rules=rules).ids, build_positions(want, rules=rules).ids
    )


def test_media_in_memory_needs_no_media_access() -> None:
    """A face that reads no files (the service's default) still takes media in memory: nothing is read."""
    segs = message_segments(parse_record(record(png_bytes(), frames())).messages or [], resolve_rules(MODEL))
    assert segs[0].grid == GRID


def test_the_decode_check_takes_media_in_memory() -> None:
    """``decode_check``: a numpy image is pixels already, a decoded PIL image passes, a lazily opened one
    over a truncated JPEG (and those bytes) fail as ``media_decode_failed``, as the file would."""
    buf = io.BytesIO()
    PILImage.new("RGB", (320, 240), (1, 2, 3)).save(buf, format="JPEG")
    cut = media.truncated(buf.getvalue(), 0.5)
    job = Preprocessor(model=MODEL, decode_check=True)
    ok = [PILImage.new("RGB", (320, 240)), np.zeros((240, 320, 3), np.uint8), buf.getvalue(), frames()]
    for value in ok:
        kind = "video" if isinstance(value, np.ndarray) and value.ndim == 4 else "image"
        row = job.record({"messages": [{"role": "user", "content": [{"type": kind, kind: value}]}]})
        assert row["error"] == "", row["error"]
    for value in (PILImage.open(io.BytesIO(cut)), cut):
        row = job.record({"messages": [{"role": "user", "content": [{"type": "image", "image": value}]}]})
        assert row["error_code"] == "media_decode_failed", row["error"]
