"""Each sized media item records its route, resized size, frames read and the origin of each sizing value.

Expected sizes and frame counts come from the routes' own code run here: qwen-vl-utils 0.0.14's
``fetch_image`` / ``fetch_video`` (beside the stand-in torchvision of ``support/qwen_vl_utils_ref.py``),
and transformers 5.24's Qwen2-VL image processor fed by ``transformers.image_utils.load_image``. The
origins are written out here from the rule (record key, route constant, checkpoint file and key, preset).
Negative control: on a rotated photo the two routes' records differ (h and w swapped).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet
import pytest
from support import media
from support.checkpoints import QWEN2_5_VL_PREPROCESSOR, qwen2_5_vl_config, write_checkpoint
from support.qwen_vl_utils_ref import load_qwen_vl_utils
from transformers.image_utils import load_image as hf_load_image

import mrope
from mrope import Text, build_batch, build_positions
from mrope._cli import main
from mrope.media import MediaRecord, load_frames, load_image, load_video
from mrope.pipeline import process_batch

MODEL = "qwen2.5-vl"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("records")
    return {
        "photo": media.write_image(root / "o6.jpg", 640, 480, orientation=6),
        "clip": media.write_video(root / "clip.mp4", 24, 12, 320, 240),
        **{f"frame{i}": media.write_image(root / f"f{i}.png", 200, 120) for i in range(5)},
    }


@pytest.fixture(scope="module")
def qvu():
    return load_qwen_vl_utils()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = write_checkpoint(
        tmp_path_factory.mktemp("ckpt"), qwen2_5_vl_config(), preprocessor_config=QWEN2_5_VL_PREPROCESSOR
    )
    return folder, mrope.from_pretrained(folder)


def test_a_photo_records_the_size_each_route_gives(qvu, files) -> None:
    mine = load_image(files["photo"], model=MODEL, route="qwen-vl-utils").record
    width, height = qvu.fetch_image({"image": str(files["photo"])}).size
    assert mine == MediaRecord(
        kind="image",
        route="qwen-vl-utils",
        size=(height, width),
        frames=1,
        sources=(("min_pixels", "preset 'qwen2.5-vl'"), ("max_pixels", "preset 'qwen2.5-vl'")),
    )
    module = importlib.import_module("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    processor = module.Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056)
    grid = processor(images=[hf_load_image(str(files["photo"]))], return_tensors="np")["image_grid_thw"][0]
    upright = load_image(files["photo"], model=MODEL).record
    assert (upright.route, upright.size) == ("processor", (int(grid[1]) * 14, int(grid[2]) * 14))
    assert upright.size == mine.size[::-1] != mine.size  # negative control: the routes differ


def test_a_video_file_records_the_frames_read(qvu, files) -> None:
    video, _ = qvu.fetch_video({"video": str(files["clip"]), "fps": 1.0}, return_video_sample_fps=True)
    n, _, h, w = video.shape
    record = load_video(files["clip"], model=MODEL, route="qwen-vl-utils", fps=1.0).record
    assert (record.kind, record.route, record.size, record.frames) == ("video", "qwen-vl-utils", (h, w), n)
    sources = dict(record.sources)
    assert sources["fps"] == "record key 'fps'"
    assert sources["max_pixels"] == sources["min_frames"] == "route 'qwen-vl-utils' default"


def test_a_frame_list_records_its_frames_and_rate_key(qvu, files) -> None:
    paths = [str(files[f"frame{i}"]) for i in range(5)]
    video = qvu.fetch_video({"video": paths, "sample_fps": 1.0})
    record = load_frames(paths, model=MODEL, route="qwen-vl-utils", sample_fps=1.0).record
    assert (record.size, record.frames) == (tuple(video.shape[2:]), 5)  # 5 read, padded to 6 in the grid
    assert dict(record.sources)["fps"] == "record key 'fps'"


def test_origins_name_the_checkpoint_file_and_rules_alone(checkpoint, files) -> None:
    _, family = checkpoint
    record = load_image(files["photo"], model=family, max_pixels=200 * 28 * 28).record
    assert dict(record.sources) == {
        "min_pixels": "checkpoint preprocessor_config.json: min_pixels",
        "max_pixels": "record key 'max_pixels'",
    }
    alone = load_image(files["photo"], rules=family.rules).record
    assert dict(alone.sources)["min_pixels"] == "rules 'qwen2.5-vl'"


def test_positions_carry_one_record_per_media_item(files) -> None:
    image = load_image(files["photo"], model=MODEL)
    video = load_video(files["clip"], model=MODEL)
    grid_given = mrope.Image(grid=(1, 4, 4))
    p = build_positions([Text(2), image, grid_given, video], model=MODEL)
    assert p.media == (image.record, None, video.record)
    assert build_positions([Text(2)], model=MODEL).media == ()
    keep = np.ones(image.grid[1] * image.grid[2] // 4, dtype=bool)
    pruned = dataclasses.replace(image, keep=keep)
    for samples in ([[image], [Text(3), video]], [[pruned], [Text(3), video]]):  # plain and pruned rows
        rows = build_batch(samples, model=MODEL).sequences
        assert [r.media for r in rows] == [(image.record,), (video.record,)]


def _records(files) -> list[dict]:
    return [
        {"id": "photo", "segments": [{"type": "image", "path": str(files["photo"])}]},
        {"id": "text", "segments": [{"type": "text", "tokens": 3}]},
        {"id": "grid", "segments": [{"type": "video", "grid": [2, 4, 4], "fps": 2.0}]},
        {"id": "clip", "segments": [{"type": "video", "path": str(files["clip"])}], "route": "qwen-vl-utils"},
        {"id": "bad", "segments": [{"type": "image", "path": str(files["photo"]) + ".missing"}]},
    ]


def test_pipeline_rows_hold_the_records_as_one_string_column(checkpoint, files) -> None:
    folder, family = checkpoint
    records = _records(files)
    by_name = process_batch(records, model=MODEL)
    by_dir = process_batch(records, model_dir=str(folder))
    assert by_name.schema.field("media").type == by_dir.schema.field("media").type == pa.string()
    rows = {r["id"]: json.loads(r["media"]) for r in by_dir.to_pylist()}
    want = load_image(files["photo"], model=family).record.as_dict()
    assert rows["photo"] == [want]
    assert want["sources"]["min_pixels"] == "checkpoint preprocessor_config.json: min_pixels"
    assert json.loads(by_name.to_pylist()[0]["media"])[0]["sources"]["min_pixels"] == "preset 'qwen2.5-vl'"
    assert rows["text"] == rows["bad"] == [] and rows["grid"] == [None]
    clip = load_video(files["clip"], model=family, route="qwen-vl-utils").record.as_dict()
    assert rows["clip"] == [clip] and clip["route"] == "qwen-vl-utils"


def test_positions_json_lists_the_records(files, capsys) -> None:
    code = main(["positions", "--model", MODEL, "--text", "3", "--image", str(files["photo"]), "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["media"] == [load_image(files["photo"], model=MODEL).record.as_dict()]


def test_batch_parquet_and_manifest_hold_the_records(files, tmp_path) -> None:
    records = _records(files)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "out"
    assert (
        main(["batch", str(jsonl), "--out-dir", str(out), "--model", MODEL, "--format", "parquet", "--quiet"])
        == 1
    )
    manifest = [
        json.loads(line) for line in (out / "manifest.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    table = pa.parquet.read_table(out / "samples.parquet")
    want = json.loads(process_batch(records, model=MODEL).column("media").to_pylist()[0])
    assert want == [load_image(files["photo"], model=MODEL).record.as_dict()]
    assert json.loads(table.column("media").to_pylist()[0]) == manifest[0]["media"] == want
    assert "media" not in manifest[-1] and json.loads(table.column("media").to_pylist()[-1]) == []
