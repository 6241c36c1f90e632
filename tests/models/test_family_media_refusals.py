"""mrope never sizes media by another family's rule.

- PaddleOCR-VL, GLM-Image and HunyuanOCR have no video processor in transformers 5.24: ``load_video``
  refuses (library, service, upload, CLI, pipeline: a 4xx / exit 2 / error row with the message).
  PaddleOCR-VL's get_rope_index still takes video grids (checked against it); GLM-Image's and
  HunyuanOCR's take none, so ``Video`` segments are refused there too.
- Their images are sized by their own 5.24 image processors: expected sizes come from each module's
  ``smart_resize`` called with the processor's own factor and bounds, and from ``preprocess`` on real
  pixels for a few sizes.
- MiniCPM-V 4.7 slices pictures and frames: ``load_image`` / ``image_grid`` / ``load_video`` refuse.
"""

from __future__ import annotations

import functools
import importlib
import io
import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from PIL import Image as PILImage
from support import media

import mrope
from mrope import Image, Text, Video
from mrope._cli import main as cli_main
from mrope._errors import LayoutError, MediaError
from mrope.media import image_grid, load_image, load_video, probe_video
from mrope.models import get_family
from mrope.pipeline import process_record
from mrope.service import Settings
from mrope.service.app import create_app

NO_VIDEO = ("paddleocr-vl", "glm-image", "hunyuan-ocr")
NO_VIDEO_MESSAGE = "processor takes no video"


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory):
    return media.write_video(tmp_path_factory.mktemp("refusals") / "clip.mp4", num_frames=24, fps=12)


@pytest.fixture(scope="module")
def photo(tmp_path_factory: pytest.TempPathFactory):
    return media.write_image(tmp_path_factory.mktemp("refusals") / "photo.png", 1000, 700)


# ------------------------------------------------------------------------------ videos: the library


def test_transformers_has_no_video_processor_for_them() -> None:
    """The fact the registry records: no video processor module, and no video path in the processor."""
    import transformers

    root = transformers.__path__[0]
    for module in ("paddleocr_vl", "glm_image", "hunyuan_vl"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"transformers.models.{module}.video_processing_{module}")
        processing = importlib.import_module(f"transformers.models.{module}.processing_{module}")
        assert "video_processor" not in open(processing.__file__).read(), module
        assert root in processing.__file__
    for family in NO_VIDEO:
        assert get_family(family).rules.video_support != "sized"
    assert get_family("qwen2-vl").rules.video_support == "sized"


@pytest.mark.parametrize("family", NO_VIDEO)
def test_load_video_refuses(family: str, clip) -> None:
    for source in (clip, str(clip), clip.read_bytes(), probe_video(clip)):
        with pytest.raises(MediaError, match=NO_VIDEO_MESSAGE) as err:
            load_video(source, model=family)
        assert family in str(err.value) and "load_image" in str(err.value)
    with pytest.raises(MediaError, match=NO_VIDEO_MESSAGE):  # from rules too, not only a model name
        load_video(clip, rules=get_family(family).rules)


def test_video_support_is_a_rule_not_a_name(clip) -> None:
    """A family's rules with video_support switched back size the video again (by that rule), and any
    rules with it off refuse: the decision reads the value."""
    sized = get_family("paddleocr-vl").rules.replace(video_support="sized")
    qwen = get_family("qwen2-vl").rules.replace(temporal_patch_size=sized.temporal_patch_size)
    assert load_video(clip, rules=sized).grid == load_video(clip, rules=qwen).grid  # the same Qwen rule
    with pytest.raises(MediaError, match=NO_VIDEO_MESSAGE):
        load_video(clip, rules=get_family("qwen2-vl").rules.replace(video_support="grids"))
    with pytest.raises(LayoutError, match="video_support"):
        get_family("qwen2-vl").rules.replace(video_support="maybe")


@functools.cache
def _paddle_get_rope_index():
    mod = importlib.import_module("transformers.models.paddleocr_vl.modeling_paddleocr_vl")
    cfg = importlib.import_module("transformers.models.paddleocr_vl.configuration_paddleocr_vl")

    class _Holder:
        config = cfg.PaddleOCRVLConfig()

    holder = _Holder()
    holder.get_vision_position_ids = functools.partial(mod.PaddleOCRVLModel.get_vision_position_ids, holder)
    return functools.partial(mod.PaddleOCRVLModel.get_rope_index, holder)


def test_paddleocr_video_grids_still_equal_its_get_rope_index() -> None:
    """Positions are not media sizing: PaddleOCR-VL's get_rope_index takes video_grid_thw, and mrope's
    ``Video(grid=...)`` positions equal it (5.24 convention; pads 0)."""
    samples = [
        [Text([5, 6]), Video(grid=(3, 4, 6)), Text([7]), Image(grid=(1, 6, 4)), Text([8, 9])],
        [Text([5]), Image(grid=(1, 2, 2)), Video(grid=(1, 2, 8)), Video(grid=(2, 6, 2))],
    ]
    batch = mrope.build_batch(samples, model="paddleocr-vl", convention="transformers5")
    images = np.concatenate([p.image_grid_thw for p in batch.sequences])
    videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
    assert len(videos) == 3
    want, want_delta = _paddle_get_rope_index()(
        torch.from_numpy(batch.input_ids),
        torch.from_numpy(batch.mm_token_type_ids),
        torch.from_numpy(images),
        torch.from_numpy(videos),
        attention_mask=torch.from_numpy(batch.attention_mask),
    )
    np.testing.assert_array_equal(batch.ids, want.numpy())
    np.testing.assert_array_equal(batch.deltas, want_delta.numpy()[:, 0])


@pytest.mark.parametrize("family", ["glm-image", "hunyuan-ocr"])
def test_video_grids_refused_where_get_rope_index_takes_none(family: str) -> None:
    import inspect

    module = {"glm-image": "glm_image", "hunyuan-ocr": "hunyuan_vl"}[family]
    mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    model_cls = next(
        c for name, c in vars(mod).items() if name.endswith("Model") and hasattr(c, "get_rope_index")
    )
    assert "video_grid_thw" not in inspect.signature(model_cls.get_rope_index).parameters
    with pytest.raises(LayoutError, match="images only"):
        mrope.build_positions([Text(3), Video(grid=(2, 4, 4))], model=family)


# ------------------------------------------------------------------------------------- videos: faces


def _http_server(root):
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:  # noqa: D401 - keep test output clean
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


@pytest.mark.parametrize("family", NO_VIDEO)
def test_service_positions_with_a_video_path_is_a_422(family: str, clip) -> None:
    httpd = _http_server(clip.parent)
    try:
        host = f"127.0.0.1:{httpd.server_address[1]}"
        with TestClient(create_app(Settings(media_url_hosts=host)), raise_server_exceptions=False) as client:
            body = {"model": family, "segments": [{"type": "video", "path": f"http://{host}/{clip.name}"}]}
            resp = client.post("/v1/positions", json=body)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert resp.status_code == 422, resp.text
    err = resp.json()["error"]
    assert err["code"] == "invalid_media" and NO_VIDEO_MESSAGE in err["message"]


@pytest.mark.parametrize("family", NO_VIDEO)
def test_service_upload_of_a_video_is_a_422(family: str, clip, tmp_path) -> None:
    with TestClient(create_app(Settings(tmp_dir=str(tmp_path))), raise_server_exceptions=False) as client:
        resp = client.post(
            "/v1/positions/upload",
            data={"model": family},
            files=[("files", ("clip.mp4", clip.read_bytes(), "application/octet-stream"))],
        )
    assert resp.status_code == 422, resp.text
    err = resp.json()["error"]
    assert err["code"] == "invalid_media" and NO_VIDEO_MESSAGE in err["message"]


def test_service_video_grids_follow_get_rope_index() -> None:
    """Grid videos over JSON: PaddleOCR-VL answers with its get_rope_index's positions (on the token ids
    mrope lays out; the two conventions agree here, nothing follows the video), GLM-Image and HunyuanOCR
    refuse with a 422."""
    with TestClient(create_app(Settings()), raise_server_exceptions=False) as client:
        segs = [{"type": "text", "tokens": 3}, {"type": "video", "grid": [2, 4, 4]}]
        ok = client.post("/v1/positions", json={"model": "paddleocr-vl", "segments": segs})
        assert ok.status_code == 200, ok.text
        laid = mrope.build_positions([Text(3), Video(grid=(2, 4, 4))], model="paddleocr-vl")
        want, _ = _paddle_get_rope_index()(
            torch.from_numpy(laid.input_ids[None]),
            torch.from_numpy(laid.mm_token_type_ids[None]),
            None,
            torch.tensor([[2, 4, 4]]),
            attention_mask=torch.ones(1, laid.num_tokens, dtype=torch.long),
        )
        assert ok.json()["positions"] == want[:, 0].tolist()
        for family in ("glm-image", "hunyuan-ocr"):
            resp = client.post("/v1/positions", json={"model": family, "segments": segs})
            assert resp.status_code == 422 and "images only" in resp.json()["error"]["message"], resp.text


@pytest.mark.parametrize("family", NO_VIDEO)
def test_cli_exits_2_with_the_message(family: str, clip, capsys) -> None:
    for args in (["positions", "--model", family, "--text", "3", "--video", str(clip)],):
        code = cli_main(args)
        out, err = capsys.readouterr()
        assert code == 2 and NO_VIDEO_MESSAGE in err, (code, out, err)


@pytest.mark.parametrize("family", NO_VIDEO)
def test_pipeline_records_the_refusal(family: str, clip) -> None:
    record = {"segments": [{"type": "text", "tokens": 3}, {"type": "video", "path": clip.name}]}
    row = process_record(record, model=family, base_dir=str(clip.parent))
    assert NO_VIDEO_MESSAGE in row["error"] and row["num_tokens"] == 0


# ------------------------------------------------------------------------------------------ images

# Sizes (h, w): tiny, at and around each family's pixel bounds, huge, and extreme aspect ratios.
EDGE_SIZES = [
    (1, 1), (1, 5), (5, 1), (3, 27), (27, 3), (13, 13), (15, 16), (16, 15), (16, 16), (17, 17), (27, 28),
    (28, 28), (29, 29), (10, 1500), (1500, 10), (28, 5000), (5000, 28), (20, 4000), (4000, 20),
    (24, 4826), (4826, 24), (100, 401), (100, 400), (400, 100), (401, 100), (383, 385), (384, 384),
    (385, 383), (511, 513), (512, 512), (513, 511), (1535, 1537), (1536, 1536), (1537, 1535),
    (2047, 2049), (2048, 2048), (2049, 2047), (1080, 1920), (1920, 1080), (3024, 4032), (6000, 8000),
    (12000, 9000), (14000, 3500), (3500, 14001), (7, 1401), (1401, 7), (50, 10001), (10001, 50),
]  # fmt: skip


def _random_sizes(seed: int, n: int) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        h = int(math.exp(rng.uniform(0, math.log(12000))))
        ratio = math.exp(rng.uniform(-math.log(6), math.log(6)))
        out.append((h, max(1, int(h * ratio))))
    return out


SIZES = EDGE_SIZES + _random_sizes(7, 400)


def _processor(family: str):
    """The family's 5.24 Pillow image processor with the values the registry states (class defaults for
    PaddleOCR-VL and HunyuanOCR; GLM-Image's see its registry module)."""
    if family == "paddleocr-vl":
        from transformers.models.paddleocr_vl.image_processing_pil_paddleocr_vl import (
            PaddleOCRVLImageProcessorPil as cls,
        )

        return cls()
    if family == "hunyuan-ocr":
        from transformers.models.hunyuan_vl.image_processing_pil_hunyuan_vl import HunYuanVLImageProcessorPil

        return HunYuanVLImageProcessorPil()
    import inspect

    from transformers.models.glm_image import image_processing_pil_glm_image as module
    from transformers.models.glm_image.configuration_glm_image import GlmImageConfig

    # the vision config's patch and merge, and the module's smart_resize's own edge defaults (512..2048)
    vision = GlmImageConfig().vision_config
    bounds = inspect.signature(module.smart_resize).parameters
    return module.GlmImageImageProcessorPil(
        patch_size=vision.patch_size,
        merge_size=vision.spatial_merge_size,
        temporal_patch_size=1,
        size={"shortest_edge": bounds["min_pixels"].default, "longest_edge": bounds["max_pixels"].default},
    )


def _hf_grid(family: str, height: int, width: int) -> tuple[int, int, int] | None:
    """:func:`_processor_grid` of the family's processor."""
    return _processor_grid(_processor(family), height, width)


def _processor_grid(proc: Any, height: int, width: int) -> tuple[int, int, int] | None:
    """(1, H / patch, W / patch) by the processor module's own smart_resize with the processor's factor
    and bounds, as its ``resize`` calls it; ``None`` where it raises."""
    module = importlib.import_module(type(proc).__module__)
    try:
        h, w = module.smart_resize(
            height,
            width,
            factor=proc.patch_size * proc.merge_size,
            min_pixels=proc.size["shortest_edge"],
            max_pixels=proc.size["longest_edge"],
        )
    except ValueError:
        return None
    return (1, h // proc.patch_size, w // proc.patch_size)


@pytest.mark.parametrize("family", NO_VIDEO)
def test_registry_values_are_the_processors(family: str) -> None:
    proc, rules = _processor(family), get_family(family).rules
    assert (rules.patch_size, rules.merge_size) == (proc.patch_size, proc.merge_size)
    assert (rules.image_min_pixels, rules.image_max_pixels) == (
        proc.size["shortest_edge"],
        proc.size["longest_edge"],
    )


@pytest.mark.parametrize("family", NO_VIDEO)
def test_image_grid_equals_the_processors_resize(family: str) -> None:
    refused = 0
    for height, width in SIZES:
        want = _hf_grid(family, height, width)
        if want is None:
            refused += 1
            with pytest.raises(MediaError):
                image_grid(height, width, model=family)
            continue
        assert image_grid(height, width, model=family) == want, (family, height, width)
    assert 0 < refused < len(SIZES) // 2  # both branches exercised, most sizes compared


@pytest.mark.parametrize("family", NO_VIDEO)
@pytest.mark.parametrize("size", [(20, 700), (300, 41), (480, 640), (1100, 900), (2100, 1000), (600, 2300)])
def test_load_image_equals_the_processors_grid(family: str, size: tuple[int, int]) -> None:
    """End to end: the processor's ``image_grid_thw`` on real pixels, against ``load_image`` on the same
    picture as a PNG (GLM-Image refuses 20 x 700, aspect ratio above 4, as its processor does)."""
    height, width = size
    picture = PILImage.new("RGB", (width, height), (90, 30, 200))
    buf = io.BytesIO()
    picture.save(buf, format="PNG")
    try:
        want = _processor(family)(images=[picture])["image_grid_thw"].tolist()[0]
    except ValueError:
        with pytest.raises(MediaError):
            load_image(buf.getvalue(), model=family)
        return
    assert list(load_image(buf.getvalue(), model=family).grid) == want


def test_the_old_rule_was_wrong_for_glm_image_and_paddleocr() -> None:
    """The cases these rules fix: Qwen's smart_resize with the same values gives other grids."""
    from mrope.media import smart_resize

    def qwen(family: str, h: int, w: int) -> tuple[int, int, int]:
        r = get_family(family).rules
        rh, rw = smart_resize(h, w, r.resize_factor, r.image_min_pixels, r.image_max_pixels)
        return (1, rh // r.patch_size, rw // r.patch_size)

    assert _hf_grid("glm-image", 1024, 1024) == (1, 32, 32) != qwen("glm-image", 1024, 1024)
    for h, w in ((3, 1), (3, 50), (1, 197)):  # a side under 28 px: PaddleOCR-VL scales it up first
        assert (
            image_grid(h, w, model="paddleocr-vl")
            == _hf_grid("paddleocr-vl", h, w)
            != qwen("paddleocr-vl", h, w)
        )


# ------------------------------------------------------------------------------------------ MiniCPM


def test_minicpm_refuses_to_size_media(photo, clip) -> None:
    for call in (
        lambda: load_image(photo, model="minicpm-v-4.7"),
        lambda: load_image(photo, model="minicpm-v-4.7", tiling=True),
        lambda: image_grid(700, 1000, model="minicpm-v-4.7"),
    ):
        with pytest.raises(MediaError, match="slices each image") as err:
            call()
        assert "thumbnail_grid" in str(err.value)
    with pytest.raises(MediaError, match="slices video frames") as err:
        load_video(clip, model="minicpm-v-4.7")
    assert "Video(grid" in str(err.value)


def test_minicpm_refusal_reaches_the_faces(photo, tmp_path, capsys) -> None:
    with TestClient(create_app(Settings(tmp_dir=str(tmp_path))), raise_server_exceptions=False) as client:
        resp = client.post(
            "/v1/positions/upload",
            data={"model": "minicpm-v-4.7"},
            files=[("files", ("photo.png", photo.read_bytes(), "application/octet-stream"))],
        )
    assert resp.status_code == 422 and "slices each image" in resp.json()["error"]["message"], resp.text
    code = cli_main(["positions", "--model", "minicpm-v-4.7", "--image", str(photo)])
    _, err = capsys.readouterr()
    assert code == 2 and "slices each image" in err
    row = process_record(
        {"segments": [{"type": "image", "path": photo.name}]},
        model="minicpm-v-4.7",
        base_dir=str(photo.parent),
    )
    assert "slices each image" in row["error"]
    assert json.dumps(row["error"])  # a plain string


@pytest.mark.parametrize(
    "saved",
    [
        {"patch_size": 16, "merge_size": 1},  # no size: the processor's class default bounds
        {"patch_size": 16, "merge_size": 1, "size": {"shortest_edge": 512**2, "longest_edge": 2048**2}},
        {"patch_size": 16, "merge_size": 1, "min_pixels": 300**2, "max_pixels": 1500**2},
    ],
)
def test_glm_image_checkpoint_sizes_as_its_processor_loads_it(tmp_path, saved) -> None:
    """A GLM-Image ``preprocessor_config.json`` runs ``GlmImageImageProcessorPil``'s class defaults for what
    it leaves out (56^2 .. 28^2 * 1280 px, not the registry's 512^2 .. 2048^2): grids against the processor
    ``from_pretrained`` loads from the same folder."""
    from transformers.models.glm_image import image_processing_pil_glm_image as module
    from transformers.models.glm_image.configuration_glm_image import GlmImageConfig

    (tmp_path / "config.json").write_text(json.dumps(GlmImageConfig().to_dict()))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(saved))
    family = mrope.from_pretrained(tmp_path)
    proc = module.GlmImageImageProcessorPil.from_pretrained(tmp_path)
    compared = 0
    for height, width in SIZES:
        want = _processor_grid(proc, height, width)
        if want is None:
            with pytest.raises(MediaError):
                image_grid(height, width, model=family)
            continue
        assert image_grid(height, width, model=family) == want, (height, width)
        compared += 1
    assert compared > len(SIZES) // 2
    if "size" not in saved and "min_pixels" not in saved:  # the case the registry's values got wrong
        assert image_grid(1080, 1920, model=family) != image_grid(1080, 1920, model="glm-image")


def test_glm_image_checkpoint_without_patch_size_contradicts_its_vision_config(tmp_path) -> None:
    """The processor's class default patch (14) against the vision config's 16: refused, named."""
    from transformers.models.glm_image.configuration_glm_image import GlmImageConfig

    (tmp_path / "config.json").write_text(json.dumps(GlmImageConfig().to_dict()))
    (tmp_path / "preprocessor_config.json").write_text("{}")
    with pytest.raises(LayoutError, match="patch_size not set .the processor's class default. = 14"):
        mrope.from_pretrained(tmp_path)
