"""In-process tests of ``POST /v1/positions/upload``: real images and videos made here, results equal to
the library's, a bad-media corpus that must give 4xx, caps, temp cleanup, and no stalls."""

from __future__ import annotations

import io
import json
import os
import time

import anyio
import av
import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image as PILImage
from support import media as tm
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope.media import load_image, load_video
from mrope.service import Settings
from mrope.service import _media as media
from mrope.service.app import create_app

UPLOAD = "/v1/positions/upload"


# ------------------------------------------------------------------------------------ media makers
# Real media come from tests/support/media.py; the two makers below cover what it does not: a noisy image (for
# byte counts) and an MP4 too big for the sniff window with its index at the end.


def png(width: int, height: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    PILImage.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def noisy_mp4(frames: int = 12, fps: int = 6, width: int = 320, height: int = 240) -> bytes:
    """An MPEG-4 file of random frames (hundreds of KB), ``moov`` last as PyAV writes it."""
    rng = np.random.default_rng(1)
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for _ in range(frames):
            arr = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return buf.getvalue()


def video(tmp_path, name: str = "v.mp4", **kwargs) -> bytes:
    """:func:`media.write_video` bytes (24 frames at 12 fps unless told otherwise: 2 s)."""
    return tm.write_video(tmp_path / name, **kwargs).read_bytes()


@pytest.fixture(scope="module")
def vid(tmp_path_factory) -> bytes:
    return video(tmp_path_factory.mktemp("media"))


def make_tokenizer_file(folder) -> str:
    words = ["[UNK]", "<", ">", ".", "seconds", "hello", "world"] + [str(d) for d in range(10)]
    tok = Tokenizer(models.WordLevel({w: i + 1000 for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(True)])
    path = os.path.join(folder, "tokenizer.json")
    tok.save(path)
    return path


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def tmp_root(tmp_path):
    root = tmp_path / "spool"
    root.mkdir()
    return root


@pytest.fixture
def client(tmp_root):
    with TestClient(create_app(Settings(tmp_dir=str(tmp_root)))) as c:
        yield c
    assert list(tmp_root.iterdir()) == [], "upload temp folders must always be removed"


def post(client, files: list[tuple[str, bytes]], model: str = "qwen2-vl", headers=None, **fields):
    """An upload of ``files`` (name, bytes) with the form fields; JSON fields given as Python values."""
    data = {"model": model, **{k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}}
    parts = [("files", (name, content, "application/octet-stream")) for name, content in files]
    return client.post(UPLOAD, data=data, files=parts or None, headers=headers or {})


def assert_error(
    resp, status: int | tuple[int, ...], code: str | None = None, cap: str | None = None
) -> dict:
    statuses = status if isinstance(status, tuple) else (status,)
    assert resp.status_code in statuses, resp.text
    err = resp.json()["error"]
    assert err["code"] and err["message"]
    if code is not None:
        assert err["code"] == code, err
    if cap is not None:
        assert err["cap"] == cap and cap in err["message"], err
    return err


def expected(pos: mrope.Positions) -> dict:
    """The library's positions as a JSON answer carries them: ``to_dict()`` and each image's and video's
    media record (``null`` for one given by its grid)."""
    return {**pos.to_dict(), "media": [None if r is None else r.as_dict() for r in pos.media]}


# --------------------------------------------------------------------------------------- happy paths


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl"])
def test_image_and_video_equal_library(client, vid, model):
    img = png(640, 480)
    layout = [
        {"type": "text", "tokens": 5},
        {"type": "file", "index": 1},
        {"type": "text", "ids": [7, 8, 9]},
        {"type": "file", "index": 0, "wrap": False},
    ]
    # names and declared types lie on purpose: the kind comes from the bytes
    resp = post(client, [("video.bin", vid), ("photo.mp4", img)], model=model, layout=layout)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    video = load_video(io.BytesIO(vid), model=model, wrap=False)
    segs = [mrope.Text(5), load_image(io.BytesIO(img), model=model), mrope.Text([7, 8, 9]), video]
    files = body.pop("files")
    assert body == expected(mrope.build_positions(segs, model=model))
    by_index = {f["index"]: f for f in files}
    assert by_index[1]["kind"] == "image" and (by_index[1]["width"], by_index[1]["height"]) == (640, 480)
    assert by_index[1]["filename"] == "photo.mp4" and by_index[1]["bytes"] == len(img)
    assert by_index[0]["kind"] == "video" and by_index[0]["num_frames"] == 24
    assert by_index[0]["duration"] == pytest.approx(2.0) and by_index[0]["grid"] == list(video.grid)
    assert by_index[0]["fps"] == video.fps


def test_default_layout_is_files_in_order(client):
    a, b = png(100, 60, seed=1), png(60, 100, seed=2)
    body = post(client, [("a.png", a), ("b.png", b)]).json()
    lib = mrope.build_positions(
        [load_image(io.BytesIO(a), model="qwen2-vl"), load_image(io.BytesIO(b), model="qwen2-vl")],
        model="qwen2-vl",
    )
    body.pop("files")
    assert body == expected(lib)


def test_same_file_twice_and_video_options(client, tmp_path):
    vid = video(tmp_path, num_frames=30, fps=10)
    layout = [
        {"type": "file", "index": 0, "fps": 1.0},
        {"type": "text", "tokens": 2},
        {"type": "file", "index": 0, "nframes": 4},
        {"type": "file", "index": 0, "fps": 1.0},
    ]
    resp = post(client, [("v", vid)], model="qwen2.5-vl", layout=layout)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    one = load_video(io.BytesIO(vid), model="qwen2.5-vl", fps=1.0)
    four = load_video(io.BytesIO(vid), model="qwen2.5-vl", nframes=4)
    lib = mrope.build_positions([one, mrope.Text(2), four, one], model="qwen2.5-vl")
    files = body.pop("files")
    assert body == expected(lib)
    assert [f["sampled_frames"] for f in files] == [len(one.frame_times), len(four.frame_times)]


def test_exif_rotation_swaps_sides(client):
    img = tm.image_bytes(200, 100, "JPEG", orientation=6)  # stored 200x100 (w x h), displayed 100x200
    body = post(client, [("r.jpg", img)]).json()
    assert (body["files"][0]["width"], body["files"][0]["height"]) == (100, 200)
    assert body["image_grid_thw"] == [list(load_image(io.BytesIO(img), model="qwen2-vl").grid)]


def test_route_names_whose_loader_reads_the_upload(client, tmp_path):
    """An orientation-6 photo, stored 200x100 (w x h): qwen-vl-utils keeps the stored size, the default
    (processor) turns it upright; each file says which route read it and the size the model is given."""
    img = tm.image_bytes(200, 100, "JPEG", orientation=6)
    stored = post(client, [("r.jpg", img)], route="qwen-vl-utils").json()
    upright = post(client, [("r.jpg", img)]).json()
    for body, route, sides in [(stored, "qwen-vl-utils", (200, 100)), (upright, "processor", (100, 200))]:
        (info,) = body["files"]
        assert (info["route"], info["width"], info["height"]) == (route, *sides)
        assert body["image_grid_thw"] == [
            list(load_image(io.BytesIO(img), model="qwen2-vl", route=route).grid)
        ]
        assert info["resized"] == [info["grid"][1] * 14, info["grid"][2] * 14]
    assert stored["image_grid_thw"] != upright["image_grid_thw"]  # negative control
    assert stored["files"][0]["sources"] == {
        "min_pixels": "preset 'qwen2-vl'",
        "max_pixels": "preset 'qwen2-vl'",
    }
    assert_error(post(client, [("r.jpg", img)], route="qwen"), 422)


def test_an_uploaded_rotated_mkv_follows_the_route(client, tmp_path):
    """decord (the qwen-vl-utils route's reader) does not rotate Matroska: the upload's grid is the
    library's under each route, and the two differ."""
    vid = tm.write_video(tmp_path / "rot.mkv", 16, 8, 96, 64, rotation=90).read_bytes()
    grids = {}
    for route in ("qwen-vl-utils", "processor"):
        body = post(client, [("rot.mkv", vid)], model="qwen2.5-vl", route=route).json()
        grids[route] = body["video_grid_thw"]
        assert grids[route] == [list(load_video(io.BytesIO(vid), model="qwen2.5-vl", route=route).grid)]
    assert grids["qwen-vl-utils"] != grids["processor"]


def test_an_uploaded_video_says_what_was_read(client, tmp_path):
    """Rotation, the file's own rate and the frames sampled (30 frames at 10 fps, rotated 90)."""
    vid = tm.write_video(tmp_path / "rot.mp4", 30, 10, 96, 64, rotation=90).read_bytes()
    (info,) = post(client, [("rot.mp4", vid)], model="qwen2.5-vl").json()["files"]
    want = load_video(io.BytesIO(vid), model="qwen2.5-vl")
    assert (info["rotation"], info["native_fps"], info["num_frames"]) == (90, 10.0, 30)
    assert (info["width"], info["height"]) == (64, 96)  # the display size
    assert info["sampled_frames"] == len(want.frame_times) and info["fps"] == pytest.approx(want.fps)
    assert info["resized"] == [want.grid[1] * 14, want.grid[2] * 14] and info["route"] == "processor"
    assert info["sources"]["fps"] == "preset 'qwen2.5-vl'"


def test_moov_at_end_larger_than_sniff_window(client):
    vid = noisy_mp4()
    assert len(vid) > media.SNIFF_BYTES and vid.rfind(b"moov") > media.SNIFF_BYTES
    body = post(client, [("clip", vid)]).json()
    assert body["files"][0]["kind"] == "video"
    assert body["video_grid_thw"] == [list(load_video(io.BytesIO(vid), model="qwen2-vl").grid)]


def test_variable_rate_video(client, tmp_path):
    times = [0.0, 0.04, 0.08, 0.3, 0.34, 0.8, 0.84, 0.88, 1.5, 1.54, 1.58, 2.0]
    vid = tm.write_vfr_video(tmp_path / "vfr.mp4", times).read_bytes()
    resp = post(client, [("vfr.mp4", vid)], model="qwen2.5-vl")
    assert resp.status_code == 200, resp.text
    lib = load_video(io.BytesIO(vid), model="qwen2.5-vl")
    body = resp.json()
    assert body["video_grid_thw"] == [list(lib.grid)]
    assert body["positions"] == mrope.build_positions([lib], model="qwen2.5-vl").ids.tolist()


def test_text_layout_and_qwen3_timestamps(tmp_path, tmp_root, vid):
    tok_path = make_tokenizer_file(tmp_path)
    layout = [
        {"type": "text", "text": "hello"},
        {"type": "file", "index": 0},
        {"type": "text", "text": "world"},
    ]
    with TestClient(create_app(Settings(tmp_dir=str(tmp_root)))) as plain:
        assert_error(post(plain, [("v", vid)], model="qwen3-vl", layout=layout), 422, "tokenizer_required")
        no_text = [{"type": "file", "index": 0}]
        assert_error(post(plain, [("v", vid)], model="qwen3-vl", layout=no_text), 422, "tokenizer_required")
    with TestClient(create_app(Settings(tmp_dir=str(tmp_root), tokenizer=tok_path))) as c:
        resp = post(c, [("v", vid)], model="qwen3-vl", layout=layout)
    assert resp.status_code == 200, resp.text
    tok = Tokenizer.from_file(tok_path)
    segs = [
        mrope.Text(tok.encode("hello", add_special_tokens=False).ids),
        load_video(io.BytesIO(vid), model="qwen3-vl"),
        mrope.Text(tok.encode("world", add_special_tokens=False).ids),
    ]
    body = resp.json()
    body.pop("files")
    assert body == expected(mrope.build_positions(segs, model="qwen3-vl", tokenizer=tok))
    assert list(tmp_root.iterdir()) == []


def test_npy_upload(client):
    img = png(300, 200)
    name = "фото 😀.png"  # header values are latin-1: the JSON in them must be escaped
    js = post(client, [(name, img)]).json()
    assert js["files"][0]["filename"] == name
    resp = post(client, [(name, img)], headers={"accept": "application/x-npy"})
    assert resp.headers["x-mrope-files"].isascii()
    arr = np.load(io.BytesIO(resp.content))
    assert arr.tolist() == js["positions"]
    assert json.loads(resp.headers["x-mrope-files"]) == js["files"]
    assert json.loads(resp.headers["x-mrope-spans"]) == js["spans"]


# ----------------------------------------------------------------------------------- bad media corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, vid) -> dict[str, tuple[bytes, tuple[int, ...]]]:
    """Bad media, each with the statuses it may get."""
    d = tmp_path_factory.mktemp("bad")
    return {
        "truncated.mp4": (tm.truncated(vid, 0.5), (422,)),
        "head-only.mp4": (tm.truncated(vid, 200), (422,)),
        "random.png": (tm.random_bytes(4000, seed=7), (422,)),
        "bomb.png": (tm.forged_png(100_000, 100_000), (413, 422)),
        "forged.png": (tm.forged_png(6000, 6000), (413, 422)),
        "zero.png": (tm.forged_png(0, 0), (422,)),
        "thin.png": (tm.image_bytes(300, 1), (422,)),  # 1:300 aspect: over smart_resize's 200:1
        "audio.wav": (tm.write_audio(d / "a.wav").read_bytes(), (422,)),
        "audio.m4a": (tm.write_audio(d / "a.m4a").read_bytes(), (422,)),
        "empty.jpg": (b"", (422,)),
        "text.mp4": (b"hello, I am not a video\n" * 10, (422,)),
        "cut.jpg": (tm.truncated(tm.image_bytes(64, 64, "JPEG"), 20), (422,)),
    }


BAD_NAMES = [
    "truncated.mp4",
    "head-only.mp4",
    "random.png",
    "bomb.png",
    "forged.png",
    "zero.png",
    "thin.png",
    "audio.wav",
    "audio.m4a",
    "empty.jpg",
    "text.mp4",
    "cut.jpg",
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_media_is_4xx(client, corpus, name):
    content, statuses = corpus[name]
    err = assert_error(post(client, [("ok.png", png(32, 32)), (name, content)]), statuses)
    assert "file 1" in err["message"] and name in err["message"], err
    assert "mrope-upload-" not in err["message"], "temp paths must not leak into messages"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("seed", range(6))
def test_corrupted_video_never_5xx(client, vid, seed):
    """Random damage past the first bytes: the file may still be readable (its header intact) or not;
    either way an answer, never a server error."""
    resp = post(client, [("c.mp4", tm.corrupted(vid, seed=seed, fraction=0.05, skip=64))])
    assert resp.status_code == 200 or 400 <= resp.status_code < 500, resp.text
    if resp.status_code != 200:
        assert_error(resp, resp.status_code)


@pytest.mark.parametrize("kind", ["mkv", "webm", "h264"])
def test_headerless_videos(client, tmp_path, kind):
    """No frame count in the header (Matroska, WebM, raw H.264): sized from the packets."""
    data = tm.write_headerless_video(tmp_path / "v", kind).read_bytes()
    resp = post(client, [(f"clip.{kind}", data)])
    assert resp.status_code == 200, resp.text
    assert resp.json()["video_grid_thw"] == [list(load_video(io.BytesIO(data), model="qwen2-vl").grid)]


def test_audio_only_says_so(client, corpus):
    err = assert_error(post(client, [("a.wav", corpus["audio.wav"][0])]), 422, "invalid_media")
    assert "no video stream" in err["message"] or "audio" in err["message"], err


# ---------------------------------------------------------------------------------------- bad forms


def test_bad_forms(client):
    img = png(32, 32)
    parts = [("files", ("a.png", img, "image/png"))]
    assert_error(client.post(UPLOAD, files=parts), 422, "invalid_form")  # no model
    assert_error(client.post(UPLOAD, data={"model": "qwen9"}, files=parts), 422, "validation_error")
    assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "extra": "1"}, files=parts), 422, "invalid_form"
    )
    assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "layout": "[{"}, files=parts), 422, "invalid_form"
    )
    for name in ("layout", "rules"):  # JSON null is no value: the default is the field left out
        assert_error(
            client.post(UPLOAD, data={"model": "qwen2-vl", name: "null"}, files=parts), 422, "invalid_form"
        )
    assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "rules": '{"merge_size": "x"}'}, files=parts), 422
    )
    assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "rules": '{"merge_size": 0}'}, files=parts), 422
    )
    out_of_range = json.dumps([{"type": "file", "index": 1}])
    err = assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "layout": out_of_range}, files=parts), 422
    )
    assert "1 file(s) were sent" in err["message"]
    not_placed = json.dumps([{"type": "text", "tokens": 3}])
    err = assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl", "layout": not_placed}, files=parts), 422
    )
    assert "not placed" in err["message"]
    assert_error(
        client.post(UPLOAD, data={"model": "qwen2-vl"}, files=[("x", ("a", b"1"))]), 422, "invalid_form"
    )
    assert_error(client.post(UPLOAD, data={"model": "qwen2-vl"}), (415, 422))  # urlencoded or no files


def test_malformed_multipart(client):
    boundary = "XyZ"
    good_part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen2-vl\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode() + png(16, 16)
    ctype = {"content-type": f"multipart/form-data; boundary={boundary}"}
    ok = client.post(UPLOAD, content=good_part + f"\r\n--{boundary}--\r\n".encode(), headers=ctype)
    assert ok.status_code == 200, ok.text
    truncated = client.post(UPLOAD, content=good_part[:-10], headers=ctype)
    assert_error(truncated, 400, "invalid_multipart")
    assert_error(
        client.post(UPLOAD, content=b"garbage", headers={"content-type": "multipart/form-data"}),
        400,
        "invalid_multipart",
    )
    no_name = f"--{boundary}\r\nContent-Disposition: form-data\r\n\r\nx\r\n--{boundary}--\r\n".encode()
    assert_error(client.post(UPLOAD, content=no_name, headers=ctype), 400, "invalid_multipart")
    twice = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen2-vl\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="model"\r\n\r\nqwen2-vl\r\n--{boundary}--\r\n'
    ).encode()
    assert_error(client.post(UPLOAD, content=twice, headers=ctype), 422, "invalid_form")


# --------------------------------------------------------------------------------------------- caps


def capped(tmp_root, **limits) -> TestClient:
    return TestClient(create_app(Settings(tmp_dir=str(tmp_root), **limits)))


def test_caps(tmp_root, tmp_path, vid):
    img = png(200, 200)
    with capped(tmp_root, max_files=2) as c:
        assert_error(post(c, [("a", img)] * 3), 413, "too_many_files", "MROPE_MAX_FILES")
    with capped(tmp_root, max_upload_bytes=len(img) + 100) as c:
        assert_error(post(c, [("a", img), ("b", img)]), 413, "payload_too_large", "MROPE_MAX_UPLOAD_BYTES")
        body = b"".join([b"x" * 1000] * (len(img) // 1000 + 2))

        def chunks():
            yield body

        resp = c.post(UPLOAD, content=chunks(), headers={"content-type": "multipart/form-data; boundary=b"})
        assert_error(resp, 413, "payload_too_large", "MROPE_MAX_UPLOAD_BYTES")
    with capped(tmp_root, max_image_pixels=10_000) as c:
        assert_error(post(c, [("a", img)]), 413, "image_too_large", "MROPE_MAX_IMAGE_PIXELS")
        assert_error(
            post(c, [("v", video(tmp_path, width=128, height=96))]),
            413,
            "image_too_large",
            "MROPE_MAX_IMAGE_PIXELS",
        )
    with capped(tmp_root, max_video_seconds=1.5) as c:
        assert_error(post(c, [("v", vid)]), 413, "video_too_long", "MROPE_MAX_VIDEO_SECONDS")
    with capped(tmp_root, max_video_frames=10) as c:
        assert_error(post(c, [("v", vid)]), 413, "video_too_many_frames", "MROPE_MAX_VIDEO_FRAMES")
    with capped(tmp_root, max_tokens=50) as c:
        assert_error(post(c, [("a", img)]), 413, "too_many_tokens", "MROPE_MAX_TOKENS")
    with capped(tmp_root, max_segments=2) as c:
        layout = [{"type": "text", "tokens": 1}, {"type": "file", "index": 0}, {"type": "text", "tokens": 1}]
        assert_error(post(c, [("a", img)], layout=layout), 413, "too_many_segments", "MROPE_MAX_SEGMENTS")
    with capped(tmp_root, max_temp_bytes=len(img) // 2) as c:
        resp = post(c, [("a", img)])
        assert_error(resp, 503, "storage_busy", "MROPE_MAX_TEMP_BYTES")
        assert resp.headers["retry-after"] == "1"
        assert c.app.state.service.budget.used == 0
    assert list(tmp_root.iterdir()) == []


# ------------------------------------------------------------------------------------ time and stalls


def _slow_loader(delay: float):
    real = media.load_file

    def slow(*args, **kwargs):
        time.sleep(delay)
        return real(*args, **kwargs)

    return slow


def _multipart(img: bytes) -> tuple[bytes, str]:
    req = httpx.Request("POST", "http://t/", data={"model": "qwen2-vl"}, files=[("files", ("a.png", img))])
    return req.read(), req.headers["content-type"]


@pytest.mark.timeout(30)
def test_slow_file_does_not_stall_other_requests(monkeypatch, tmp_root):
    monkeypatch.setattr(media, "load_file", _slow_loader(1.0))
    app = create_app(Settings(tmp_dir=str(tmp_root)))
    body, ctype = _multipart(png(64, 64))
    done: dict[str, float] = {}

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            t0 = time.perf_counter()

            async def upload() -> None:
                r = await c.post(UPLOAD, content=body, headers={"content-type": ctype})
                assert r.status_code == 200, r.text
                done["upload"] = time.perf_counter() - t0

            async def health() -> None:
                await anyio.sleep(0.1)
                assert (await c.get("/healthz")).status_code == 200
                done["health"] = time.perf_counter() - t0

            async with anyio.create_task_group() as tg:
                tg.start_soon(upload)
                tg.start_soon(health)

    anyio.run(main)
    assert done["upload"] >= 1.0 and done["health"] < 0.6, done
    assert list(tmp_root.iterdir()) == []


@pytest.mark.timeout(30)
def test_media_timeout(monkeypatch, tmp_root):
    monkeypatch.setattr(media, "load_file", _slow_loader(3.0))
    with capped(tmp_root, media_timeout_s=0.3) as c:
        t0 = time.perf_counter()
        resp = post(c, [("a", png(16, 16))])
        assert time.perf_counter() - t0 < 2.0
    assert_error(resp, 422, "media_timeout", "MROPE_MEDIA_TIMEOUT_S")
    assert list(tmp_root.iterdir()) == []


@pytest.mark.timeout(30)
def test_slow_upload_body_times_out(tmp_root):
    app = create_app(Settings(tmp_dir=str(tmp_root), upload_timeout_s=0.3))
    body, ctype = _multipart(png(16, 16))

    async def trickle():
        yield body[:100]
        await anyio.sleep(5)
        yield body[100:]

    async def main() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            return await c.post(UPLOAD, content=trickle(), headers={"content-type": ctype})

    t0 = time.perf_counter()
    resp = anyio.run(main)
    assert time.perf_counter() - t0 < 3.0
    assert_error(resp, 408, "upload_timeout", "MROPE_UPLOAD_TIMEOUT_S")
    assert list(tmp_root.iterdir()) == []


@pytest.mark.timeout(30)
def test_client_disconnect_mid_upload_cleans_up(tmp_root):
    """The client goes away halfway through the body: the request ends, its temp folder and budget are
    released, and it is not logged as a server error."""
    app = create_app(Settings(tmp_dir=str(tmp_root)))
    body, ctype = _multipart(png(256, 256))
    incoming = [{"type": "http.request", "body": body[: len(body) // 2], "more_body": True}]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": UPLOAD,
        "raw_path": UPLOAD.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    anyio.run(app, scope, receive, send)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 400
    assert b"client_disconnected" in b"".join(m.get("body", b"") for m in sent[1:])
    assert list(tmp_root.iterdir()) == []
    assert app.state.service.budget.used == 0
