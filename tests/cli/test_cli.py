"""The ``mrope`` command line: results equal the library's, bad input is one line on stderr with exit 2.

Commands run in-process through :func:`mrope._cli.main`; one test runs the installed ``mrope`` script and
``python -m mrope`` as subprocesses. Media are generated (tests/support/media.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import media
from support.checkpoints import qwen2_5_vl_config, write_checkpoint
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope import Image, Text, Video
from mrope._cli import _progress as progress_mod
from mrope._cli import main
from mrope.media import load_image, load_video
from mrope.media._sampling import sampled_times

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli_media")
    words = ["<", ">", "seconds", "describe", "this", "picture", ".", "0", "1", "2", "3", "4", "5", "6", "7"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(root / "tokenizer.json"))
    (root / "notes.txt").write_text("not an image\n")
    (root / "garbage.json").write_text('{"this is": "not a tokenizer"}')
    return {
        "root": root,
        "image": media.write_image(root / "cat.jpg", 640, 480),
        "png": media.write_image(root / "wide.png", 896, 448),
        "video": media.write_video(root / "clip.mp4", num_frames=48, fps=12),
        "tokenizer": root / "tokenizer.json",
        "text": root / "notes.txt",
        "garbage": root / "garbage.json",
    }


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------ positions


def test_positions_table_and_saved_files_equal_the_library(files, capsys, tmp_path) -> None:
    npy, js = tmp_path / "pos.npy", tmp_path / "pos.json"
    args = ["positions", "--model", "qwen2.5-vl", "--text", 12, "--image", files["image"], "--text", 5]
    args += ["--video", files["video"], "--fps", 2]
    code, out, err = run(capsys, *args, "--out", npy)
    assert (code, err) == (0, "")
    expected = mrope.build_positions(
        [
            Text(12),
            load_image(files["image"], model="qwen2.5-vl"),
            Text(5),
            load_video(files["video"], model="qwen2.5-vl", fps=2.0),
        ],
        model="qwen2.5-vl",
    )
    np.testing.assert_array_equal(np.load(npy), expected.ids)
    assert f"delta {expected.delta}:" in out
    assert f"the next one gets {expected.num_tokens + expected.delta}" in out
    # one row per span, with the token range and the t / h / w ranges of that span
    lines = out.splitlines()
    assert lines[-1] == f"positions int64 [3, {expected.num_tokens}] -> {npy}"
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[3:-2]]
    assert len(rows) == len(expected.spans)
    image = expected.spans[2]
    cells = next(r for r in rows if r[2] == "image")
    block = expected.ids[:, image.start : image.stop]
    assert cells[:3] == ["1", "cat.jpg", "image"]
    assert rows[0][:3] == ["0", "12 tokens", "text"]
    assert cells[3] == f"{image.start}..{image.stop - 1}"
    assert cells[4:7] == [
        f"{lo}..{hi}" if lo != hi else str(lo) for lo, hi in zip(block.min(1), block.max(1), strict=True)
    ]
    assert cells[7] == "x".join(map(str, image.grid))

    code, out, _ = run(capsys, *args, "--out", js, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc == json.loads(js.read_text())
    assert doc["positions"] == expected.ids.tolist()
    assert doc["delta"] == expected.delta
    assert doc["spans"] == [s.to_dict() for s in expected.spans]
    assert doc["video_grid_thw"] == expected.video_grid_thw.tolist()
    assert doc["second_per_grid_ts"] == expected.second_per_grid_ts.tolist()


def test_modifiers_apply_to_the_segment_before_them(files, capsys) -> None:
    code, out, _ = run(
        capsys,
        "positions",
        "--model",
        "qwen2-vl",
        "--json",
        "--rule",
        "crop=keep",
        "--image",
        files["png"],
        "--crop",
        "0,448,448,448",
        "--image",
        files["png"],
        "--tiles",
        "--image-grid",
        "1,16,24",
        "--tiles",
        "3x2",
        "--thumbnail",
        "--image-grid",
        "1,8,8",
        "--origin",
        "2,3",
        "--no-wrap",
        "--video-grid",
        "8,12,16",
        "--fps",
        "1.5",
        "--video-grid",
        "4,4,4",
        "--second-per-grid",
        "0.25",
        "--video",
        files["video"],
        "--nframes",
        "6",
        "--text",
        "3",
    )
    assert code == 0
    rules = {"crop": "keep"}
    crop = load_image(files["png"], model="qwen2-vl", rules=rules, crop=(0, 448, 448, 448))
    assert crop.origin == (0, 16)
    tiled = load_image(files["png"], model="qwen2-vl", rules=rules, tiling=True)
    assert tiled.tiles is not None
    expected = mrope.build_positions(
        [
            crop,
            tiled,
            Image(grid=(1, 16, 24), tiles=(3, 2), thumbnail=True),
            Image(grid=(1, 8, 8), origin=(2, 3), wrap=False),
            Video(grid=(8, 12, 16), fps=1.5),
            Video(grid=(4, 4, 4), second_per_grid=0.25),
            load_video(files["video"], model="qwen2-vl", rules=rules, nframes=6),
            Text(3),
        ],
        model="qwen2-vl",
        rules=rules,
    )
    assert json.loads(out)["positions"] == expected.ids.tolist()


def test_spec_file_is_the_service_body(files, capsys, tmp_path) -> None:
    body = {
        "model": "qwen2.5-vl",
        "segments": [
            {"type": "text", "tokens": 4},
            {"type": "image", "grid": [1, 28, 28]},
            {"type": "image", "height": 480, "width": 640},
            {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
            {"type": "text", "ids": [151644, 77091, 198]},
            {"type": "image", "path": "cat.jpg"},
        ],
        "rules": {"spatial": "centered"},
    }
    spec = files["root"] / "spec.json"
    spec.write_text(json.dumps(body))
    expected = mrope.build_positions(
        [
            Text(4),
            Image(grid=(1, 28, 28)),
            load_image(files["image"], model="qwen2.5-vl"),  # 480x640 px, as the cat is
            Video(grid=(8, 28, 28), fps=2.0),
            Text([151644, 77091, 198]),
            load_image(files["image"], model="qwen2.5-vl"),
        ],
        model="qwen2.5-vl",
        rules={"spatial": "centered"},
    )
    code, out, _ = run(capsys, "positions", "--spec", spec, "--json")
    assert code == 0
    doc = json.loads(out)
    assert (doc["model"], doc["positions"]) == ("qwen2.5-vl", expected.ids.tolist())
    # --model and --rule override the file
    code, out, _ = run(
        capsys, "positions", "--spec", spec, "--json", "--model", "qwen2-vl", "--rule", "spatial=offset"
    )
    assert code == 0
    cat = load_image(files["image"], model="qwen2-vl")
    segments = [
        Text(4),
        Image(grid=(1, 28, 28)),
        cat,
        Video(grid=(8, 28, 28), fps=2.0),
        Text([151644, 77091, 198]),
        cat,
    ]
    assert json.loads(out)["positions"] == mrope.build_positions(segments, model="qwen2-vl").ids.tolist()


def test_tokenizer_for_words_and_qwen3_timestamps(files, capsys) -> None:
    tok = Tokenizer.from_file(str(files["tokenizer"]))
    code, out, err = run(
        capsys,
        "positions",
        "--model",
        "qwen3-vl",
        "--tokenizer",
        files["tokenizer"],
        "--text",
        "describe this picture .",
        "--video",
        files["video"],
        "--json",
    )
    assert (code, err) == (0, "")
    words = tok.encode("describe this picture .", add_special_tokens=False).ids
    expected = mrope.build_positions(
        [Text(words), load_video(files["video"], model="qwen3-vl")], model="qwen3-vl", tokenizer=tok
    )
    doc = json.loads(out)
    assert doc["positions"] == expected.ids.tolist()
    assert any(s["kind"] == "timestamp" for s in doc["spans"])


# ------------------------------------------------------------------------------------------ bad input

BAD = [
    (
        ["positions", "--model", "qwen9", "--text", "3"],
        "--model: unknown model 'qwen9'; expected a model family name (qwen2-vl",
    ),
    (
        ["positions", "--text", "3"],
        "no model given: pass --model (or --model-dir); name one of qwen2-vl, qwen2.5-vl",
    ),
    (["probe", "{video}"], "no model given: pass --model (or --model-dir); name one of qwen2-vl"),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--fps", "2"],
        "--fps applies to the segment right before it",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--fps", "2", "--video-grid", "4,4,4"],
        "it came before any segment",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--video-grid", "4,4,4", "--fps", "2", "--fps", "3"],
        "--fps is given twice",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--image-grid", "1,2"],
        "--image-grid must be 3 comma-separated ints",
    ),
    (["positions", "--model", "qwen2-vl", "--image-grid", "1,15,16"], "multiples of the merge size 2"),
    (
        ["positions", "--model", "qwen2-vl", "--image-grid", "1,16,16", "--tiles"],
        "--tiles after --image-grid needs COLSxROWS",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--image-grid", "1,16,16", "--tiles", "3x3"],
        "does not split into 3 rows",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--video-grid", "4,4,4", "--fps", "0"],
        "--fps must be a finite number > 0",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--video-grid", "4,4,4", "--fps", "nan"],
        "--fps must be a finite number > 0",
    ),
    (["positions", "--model", "qwen2-vl", "--text", "-3"], "token count >= 0"),
    (
        ["positions", "--model", "qwen2-vl", "--image-grid", "1,200000,200000"],
        "makes 10,000,000,002 tokens, over max_tokens=16,777,216",
    ),
    (["positions", "--model", "qwen2-vl", "--text", "30", "--max-tokens", "20"], "over max_tokens=20"),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--max-tokens", "0"],
        "--max-tokens must be an int >= 1",
    ),
    (["positions", "--model", "qwen2-vl", "--text", "hello there"], "needs a tokenizer"),
    (["positions", "--model", "qwen2-vl", "--image", "{root}/missing.jpg"], "no such file"),
    (["positions", "--model", "qwen2-vl", "--image", "{text}"], "is not an image PIL can identify"),
    (
        ["positions", "--model", "qwen2-vl", "--image", "{image}", "--tiles", "2x2"],
        "--tiles after an --image file takes no value",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--image", "{image}", "--crop", "10,10,200,200"],
        "aligned to the merge grid",
    ),
    (["positions", "--model", "qwen2-vl", "--image", "{image}", "--crop", "0,0,9999,10"], "must lie inside"),
    (["positions", "--model", "qwen2-vl", "--video", "{image}"], "still image"),
    (
        ["positions", "--model", "qwen2-vl", "--video", "{video}", "--nframes", "999"],
        "cannot sample 1000 frames",
    ),
    (["positions", "--model", "qwen3-vl", "--video", "{video}"], "--tokenizer TOKENIZER_JSON"),
    (["positions", "--model", "qwen2-vl", "--text", "3", "--tokenizer", "{root}/nope.json"], "is not a file"),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--tokenizer", "{garbage}"],
        "cannot load tokenizer",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--rule", "colour=red"],
        "unknown LayoutRules field",
    ),
    (["positions", "--model", "qwen2-vl", "--text", "3", "--rule", "crop"], "--rule takes KEY=VALUE"),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--rule", "crop=sideways"],
        "LayoutRules.crop must be one of",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--out", "{root}/pos.txt"],
        "the suffix must be .npy",
    ),
    (
        ["positions", "--model", "qwen2-vl", "--text", "3", "--out", "{root}/no/such/dir/pos.npy"],
        "cannot write",
    ),
    (["positions", "--model", "qwen2-vl"], "no segments"),
    (["positions", "--model", "qwen2-vl", "--spec", "{root}/missing.json"], "cannot read"),
    (
        ["positions", "--model", "qwen2-vl", "--spec", "{text}"],
        "is not valid JSON: Expecting value at line 1 column 1",
    ),
    (["positions", "--model", "qwen2-vl", "--spec", "{garbage}"], "exactly one of 'segments' and 'messages'"),
    (["positions", "--model", "qwen2-vl", "--spec", "{spec_bad_field}"], "segment 0: unknown field 'colour'"),
    (["positions", "--model", "qwen2-vl", "--spec", "{spec_list}"], "expected a JSON object"),
    (["positions", "--model", "qwen2-vl", "--spec", "{garbage}", "--text", "3"], "not both"),
    (["probe", "{image}", "--model", "qwen2-vl"], "still image"),
    (["probe", "{root}/missing.mp4", "--model", "qwen2-vl"], "no such file"),
    (["probe", "{video}", "--model", "qwen2-vl", "--fps", "-1"], "--fps must be a finite number > 0"),
    (["probe", "{video}", "--model", "qwen2-vl", "--fps", "1", "--nframes", "4"], "not both"),
    (
        ["plot", "--model", "qwen2-vl", "--text", "3", "--png", "{root}/x.png", "--width", "100"],
        "at least 600",
    ),
    (["plot", "--model", "qwen2-vl", "--text", "3", "--png", "{root}/x.jpg"], "must end in .png"),
    (["plot", "--model", "qwen2-vl", "--text", "3"], "required: --png"),
    (["batch", "{root}/missing.jsonl", "--out-dir", "{root}/out"], "no such file or folder"),
    (["batch", "{root}/empty.jsonl", "--out-dir", "{root}/out"], "holds no samples"),
    (["serve", "--port", "70000"], "--port must be an int in [0, 65535]"),
    (["serve", "--workers", "0"], "--workers must be an int >= 1"),
    ([], "required: COMMAND"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
]


@pytest.mark.parametrize(
    ("argv", "phrase"), BAD, ids=[" ".join(a[:3]) + f" #{i}" for i, (a, _) in enumerate(BAD)]
)
def test_bad_input_is_one_line_and_exit_2(files, capsys, argv: list[str], phrase: str) -> None:
    root = files["root"]
    (root / "spec_bad.json").write_text(
        json.dumps({"segments": [{"type": "text", "tokens": 1, "colour": 1}]})
    )
    (root / "spec_list.json").write_text("[1, 2]")
    (root / "empty.jsonl").write_text("\n\n")
    names = {k: str(v) for k, v in files.items()}
    names.update(spec_bad_field=str(root / "spec_bad.json"), spec_list=str(root / "spec_list.json"))
    code, out, err = run(capsys, *[a.format(**names) for a in argv])
    assert code == 2, (out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert phrase in err


def test_help_and_version_exit_0(capsys) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out.strip()) == (0, f"mrope {mrope.__version__}")
    code, out, _ = run(capsys, "positions", "--help")
    assert code == 0 and "--image-grid" in out and "--spec" in out


# ---------------------------------------------------------------------------------------------- probe


def test_probe_lists_the_sampled_frames_with_times(files, capsys) -> None:
    code, out, err = run(capsys, "probe", files["video"], "--model", "qwen2.5-vl", "--fps", "2")
    assert (code, err) == (0, "")
    info = mrope.media.probe_video(files["video"])
    # Qwen2.5-VL's video processor asked to sample at 2 fps: transformers' own sample_frames
    from support.hf_reference import compiled_class
    from transformers.video_utils import VideoMetadata

    proc = compiled_class(
        "transformers.models.qwen2_vl",
        "video_processing_qwen2_vl.py",
        "Qwen2VLVideoProcessor",
        {"temporal_patch_size", "min_frames", "max_frames"},
        {"sample_frames"},
        {},
    )()
    proc.fps = proc.num_frames = None
    meta = VideoMetadata(total_num_frames=info.num_frames, fps=info.fps, duration=info.duration)
    idx = np.asarray(proc.sample_frames(meta, fps=2.0), dtype=np.int64)
    times = sampled_times(info, idx)
    lines = out.splitlines()
    assert "48 frames, 12.000 fps, 4.000 s, 64x48 px" in lines[1]
    table = [line.split() for line in lines[4:]]
    assert [int(r[1]) for r in table] == idx.tolist()
    np.testing.assert_allclose([float(r[2]) for r in table], times, atol=5e-4)
    assert [int(r[3]) for r in table] == [k // 2 for k in range(idx.size)]
    # t offset of each patch under Qwen2.5-VL: floor(i * second_per_grid * 2) = 2i at 2 fps
    assert [int(r[4]) for r in table if len(r) == 5] == [2 * i for i in range(idx.size // 2)]

    # --json gives numbers as numbers: t offsets are ints, nothing numeric hides in a string
    code, out, _ = run(capsys, "probe", files["video"], "--model", "qwen2.5-vl", "--fps", "2", "--json")
    doc = json.loads(out)
    assert [p["t_offset"] for p in doc["patches"]] == [2 * i for i in range(idx.size // 2)]

    def strings(value):
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        if isinstance(value, list):
            return [s for v in value for s in strings(v)]
        return [value] if isinstance(value, str) else []

    for text in strings(doc):
        with pytest.raises(ValueError):
            float(text)

    code, out, _ = run(capsys, "probe", files["video"], "--model", "qwen3-vl", "--nframes", "6", "--json")
    doc = json.loads(out)
    video = load_video(files["video"], model="qwen3-vl", nframes=6)
    assert doc["sampling"]["grid"] == list(video.grid)
    assert [f["time"] for f in doc["frames"]] == pytest.approx(list(video.frame_times))
    stamps = [p["timestamp"] for p in doc["patches"]]
    assert stamps == [f"<{x:.1f} seconds>" for x in video.patch_times(2, 2.0)]


# ---------------------------------------------------------------------------------------------- plot


def test_plot_writes_a_png(files, capsys, tmp_path) -> None:
    png = tmp_path / "layout.png"
    code, out, _ = run(
        capsys,
        "plot",
        "--model",
        "qwen2-vl",
        "--text",
        "4",
        "--image",
        files["image"],
        "--video-grid",
        "4,8,8",
        "--png",
        png,
        "--width",
        900,
    )
    assert code == 0 and str(png) in out
    from PIL import Image as PILImage

    with PILImage.open(png) as im:
        assert im.format == "PNG" and im.width == 900 and im.height > 400


# ---------------------------------------------------------------------------------------------- batch


def test_batch_reports_failures_by_id_and_keeps_going(files, capsys, tmp_path) -> None:
    root = files["root"]
    lines = [
        {
            "id": "ok-1",
            "model": "qwen2-vl",
            "segments": [{"type": "text", "tokens": 3}, {"type": "image", "path": "cat.jpg"}],
        },
        {"id": "missing", "model": "qwen2-vl", "segments": [{"type": "image", "path": "nope.png"}]},
        "{not json",
        {
            "id": "ok-2",
            "model": "qwen2.5-vl",
            "messages": [{"role": "user", "content": [{"type": "video", "video": "clip.mp4"}]}],
        },
        {"id": "ok-1", "model": "qwen2-vl", "segments": [{"type": "text", "tokens": 1}]},
        {"id": "odd/../name", "model": "qwen2-vl", "segments": [{"type": "text", "tokens": 2}]},
        {"id": "no-model", "segments": [{"type": "text", "tokens": 2}]},
    ]
    jsonl = root / "samples.jsonl"
    jsonl.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "batch", jsonl, "--out-dir", out_dir)
    assert code == 1
    assert "sample 'missing' (samples.jsonl:2) failed: no such file" in err
    assert "sample 'samples.jsonl-3' (samples.jsonl:3) failed: not valid JSON" in err
    assert "sample 'ok-1' (samples.jsonl:5) failed: its output name 'ok-1' is taken" in err
    assert "sample 'no-model' (samples.jsonl:7) failed: no model: pass model= to the job" in err
    assert err.strip().splitlines()[-1].startswith("mrope batch: 7 samples, 3 ok, 4 failed")
    manifest = [json.loads(x) for x in (out_dir / "manifest.jsonl").read_text().splitlines()]
    assert [m["id"] for m in manifest] == [
        "ok-1",
        "missing",
        "samples.jsonl-3",
        "ok-2",
        "ok-1",
        "odd/../name",
        "no-model",
    ]
    assert [bool(m["error"]) for m in manifest] == [False, True, True, False, True, False, True]
    first = mrope.build_positions([Text(3), load_image(files["image"], model="qwen2-vl")], model="qwen2-vl")
    np.testing.assert_array_equal(np.load(out_dir / "ok-1.npy"), first.ids)
    second = mrope.build_positions([load_video(files["video"], model="qwen2.5-vl")], model="qwen2.5-vl")
    np.testing.assert_array_equal(np.load(out_dir / "ok-2.npy"), second.ids)
    assert manifest[3]["video_grid_thw"] == second.video_grid_thw.tolist()
    assert (out_dir / "odd_.._name.npy").exists()  # ids become safe file names
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "manifest.jsonl",
        "odd_.._name.npy",
        "ok-1.npy",
        "ok-2.npy",
    ]


def test_batch_folder_json_format_and_quiet(files, capsys, tmp_path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    shutil.copy(files["image"], folder / "cat.jpg")
    (folder / "one.json").write_text(json.dumps({"segments": [{"type": "image", "path": "cat.jpg"}]}))
    (folder / "more.jsonl").write_text(
        json.dumps({"id": "t", "segments": [{"type": "text", "tokens": 5}]}) + "\n"
    )
    code, out, err = run(
        capsys,
        "batch",
        folder,
        "--out-dir",
        tmp_path / "o",
        "--format",
        "json",
        "--quiet",
        "--model",
        "qwen2_vl",
    )
    assert (code, out, err) == (0, "", "")
    doc = json.loads((tmp_path / "o" / "one.json").read_text())
    expected = mrope.build_positions([load_image(files["image"], model="qwen2-vl")], model="qwen2-vl")
    assert doc["positions"] == expected.ids.tolist() and doc["model"] == "qwen2-vl"
    assert json.loads((tmp_path / "o" / "t.json").read_text())["num_tokens"] == 5


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_choice(monkeypatch) -> None:
    stream = FakeTTY()
    assert type(progress_mod.progress(3, "x", stream=io.StringIO())) is progress_mod.LineProgress  # not a TTY
    assert type(progress_mod.progress(3, "x", quiet=True, stream=stream)) is progress_mod.Progress
    with progress_mod.progress(3, "x", stream=stream) as bar:
        assert isinstance(bar, progress_mod.TqdmBar)
        bar.update()
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm not installed
    stream = FakeTTY()
    with progress_mod.progress(4, "work", stream=stream) as bar:
        assert isinstance(bar, progress_mod.PlainBar)
        for _ in range(4):
            bar.update()
        bar.write("sample 'b' failed")
    text = stream.getvalue()
    assert "work [" + "#" * 30 + "] 4/4" in text
    assert "sample 'b' failed\n" in text and text.endswith("\n")


def test_progress_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    bar = progress_mod.LineProgress(4, "mrope batch", stream, every_s=0.0)
    for _ in range(4):
        bar.update()
    assert stream.getvalue().splitlines() == [
        "mrope batch: 1/4 (25%)",
        "mrope batch: 2/4 (50%)",
        "mrope batch: 3/4 (75%)",
    ]


def test_batch_bar_on_a_terminal_that_reports_no_size(files, tmp_path) -> None:
    """A pty of 0 x 0 (what `script`, many CI runners and editor shells give): the bar still shows."""
    import pty

    jsonl = tmp_path / "two.jsonl"
    jsonl.write_text(
        "".join(json.dumps({"id": i, "segments": [{"type": "text", "tokens": 2}]}) + "\n" for i in "ab")
    )
    main_fd, child_fd = pty.openpty()  # a fresh pty reports 0 columns and 0 lines
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [
        sys.executable,
        "-m",
        "mrope",
        "batch",
        str(jsonl),
        "--out-dir",
        str(tmp_path / "o"),
        "--model",
        "qwen2-vl",
    ]
    proc = subprocess.Popen(cmd, stdin=child_fd, stdout=child_fd, stderr=child_fd, env=env, close_fds=True)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 4096)
        except OSError:  # the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main_fd)
    text = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, text
    assert "mrope batch: 100%" in text and "2/2" in text, text


# ---------------------------------------------------------------------------------------------- serve


def test_serve_passes_its_options_to_the_service(monkeypatch, capsys) -> None:
    import mrope.service._server as server  # the module `mrope serve` calls run from

    calls = []
    monkeypatch.setattr(server, "run", lambda **kw: calls.append(kw))
    code, _, _ = run(capsys, "serve", "--port", "0", "--workers", "3", "--host", "127.0.0.2")
    assert code == 0
    assert calls == [{"host": "127.0.0.2", "port": 0, "workers": 3, "log_level": "info"}]


# ------------------------------------------------------------------------------------------ installed


def test_installed_script_and_python_m(files, tmp_path) -> None:
    script = shutil.which("mrope") or str(Path(sys.executable).with_name("mrope"))
    assert os.path.exists(script), "the console script 'mrope' is not installed (pip install -e .)"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [script, "positions", "--model", "qwen2-vl", "--text", "3", "--image-grid", "1,4,4", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    expected = mrope.build_positions([Text(3), Image(grid=(1, 4, 4))], model="qwen2-vl")
    assert json.loads(done.stdout)["positions"] == expected.ids.tolist()
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "mrope",
            "positions",
            "--model",
            "qwen2-vl",
            "--image",
            str(tmp_path / "nope.png"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert bad.returncode == 2
    assert bad.stdout == "" and bad.stderr.count("\n") == 1 and "no such file" in bad.stderr


# ------------------------------------------------------------------------------ model names, checkpoints


def write_qwen25_checkpoint(folder: Path, max_pixels: int) -> Path:
    """A Qwen2.5-VL checkpoint folder with the released config values and a fine-tune's pixel bound."""
    pre = {
        "min_pixels": 3136,
        "max_pixels": max_pixels,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
    }
    return write_checkpoint(folder, qwen2_5_vl_config(), preprocessor_config=pre)


def test_model_aliases_and_model_dir(files, capsys, tmp_path) -> None:
    base = ["positions", "--json", "--text", "4", "--image", files["image"]]
    want = mrope.build_positions(
        [Text(4), load_image(files["image"], model="qwen2.5-vl")], model="qwen2.5-vl"
    )
    for name in ("qwen2.5-vl", "qwen2_5_vl", "Qwen/Qwen2.5-VL-7B-Instruct"):  # name, model_type, repo id
        code, out, err = run(capsys, *base, "--model", name)
        assert (code, err) == (0, ""), err
        doc = json.loads(out)
        assert doc["model"] == "qwen2.5-vl" and doc["positions"] == want.ids.tolist()
    # a fine-tune whose processor caps images at 200704 pixels: the 640 x 480 cat becomes 504 x 364 px
    # (by hand: beta = sqrt(640 * 480 / 200704); floor(480 / beta / 28) = 13, floor(640 / beta / 28) = 18,
    # times 28), so its grid is (1, 26, 36) in patches of 14 px
    ckpt = write_qwen25_checkpoint(tmp_path / "ckpt", max_pixels=200704)
    code, out, err = run(capsys, *base, "--model-dir", ckpt)
    assert (code, err) == (0, ""), err
    doc = json.loads(out)
    expected = mrope.build_positions([Text(4), Image(grid=(1, 26, 36))], model="qwen2.5-vl")
    assert doc["positions"] == expected.ids.tolist() and doc["image_grid_thw"] == [[1, 26, 36]]
    assert doc["model"] == f"qwen2.5-vl ({ckpt})"
    # the pipeline takes the loaded checkpoint as its model, or its folder (a path travels to workers)
    from mrope.pipeline import record_positions

    record = {"segments": [{"type": "text", "tokens": 4}, {"type": "image", "path": str(files["image"])}]}
    np.testing.assert_array_equal(
        record_positions(record, model=mrope.from_pretrained(ckpt)).ids, expected.ids
    )
    np.testing.assert_array_equal(record_positions(record, model_dir=str(ckpt)).ids, expected.ids)
    jsonl = tmp_path / "one.jsonl"
    jsonl.write_text(
        json.dumps({"id": "x", "segments": [{"type": "image", "path": str(files["image"])}]}) + "\n"
    )
    code, _, _ = run(capsys, "batch", jsonl, "--out-dir", tmp_path / "o", "--model-dir", ckpt, "--quiet")
    assert code == 0
    assert json.loads((tmp_path / "o" / "manifest.jsonl").read_text())["image_grid_thw"] == [[1, 26, 36]]
    code, out, _ = run(capsys, "probe", files["video"], "--model-dir", ckpt, "--json")
    assert code == 0 and json.loads(out)["model"] == f"qwen2.5-vl ({ckpt})"
    for argv, phrase in (
        ([*base, "--model", "qwen2.5-vl", "--model-dir", ckpt], "give --model or --model-dir, not both"),
        ([*base, "--model-dir", tmp_path / "nowhere"], "no checkpoint at"),
    ):
        code, out, err = run(capsys, *argv)
        assert code == 2 and phrase in err, err
