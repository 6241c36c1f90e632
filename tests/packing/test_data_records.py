"""Records as users write them, on every face: qwen-vl-utils' item keys, ``image_url`` / ``url``, a video as
a list of frames, ``messages`` on ``/v1/positions``, ``convention`` / ``frame_size``, ``error_code``, job-level
errors, Parquet output and the decode check.

Expected values come from qwen-vl-utils' documented rules, written out below from its
``vision_process.py`` (``smart_resize``, ``smart_nframes``, ``calculate_video_frame_range``, ``fetch_video``
of a frame list), and from the library's own answer for the plain form of the same record (the face
must not change it).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from support import media
from support.service_proc import serve
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope._cli import main
from mrope._errors import JobError
from mrope.pipeline import Preprocessor, process_batch, process_record, record_positions

MODEL = "qwen2.5-vl"
FACTOR = 28  # patch 14 x merge 2


# ------------------------------------------------------------------ qwen-vl-utils' rules, written out


def round_by(x: float, f: int) -> int:
    return round(x / f) * f


def ceil_by(x: float, f: int) -> int:
    return math.ceil(x / f) * f


def floor_by(x: float, f: int) -> int:
    return math.floor(x / f) * f


def smart_resize(
    h: int, w: int, factor: int = FACTOR, min_pixels: int = 4 * 784, max_pixels: int = 16384 * 784
):
    h_bar, w_bar = max(factor, round_by(h, factor)), max(factor, round_by(w, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar, w_bar = max(factor, floor_by(h / beta, factor)), max(factor, floor_by(w / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar, w_bar = ceil_by(h * beta, factor), ceil_by(w * beta, factor)
    return h_bar, w_bar


def frame_range(total: int, video_fps: float, start: float | None, end: float | None) -> tuple[int, int]:
    duration = total / video_fps
    first = 0 if start is None else math.ceil(max(0.0, min(start, duration)) * video_fps)
    last = total - 1 if end is None else min(math.floor(max(0.0, min(end, duration)) * video_fps), total - 1)
    return first, last


def smart_nframes(
    total: int, video_fps: float, fps: float = 2.0, min_frames: int = 4, max_frames: int = 768
) -> int:
    lo, hi = ceil_by(min_frames, 2), floor_by(min(max_frames, total), 2)
    return floor_by(min(max(total / video_fps * fps, lo), hi, total), 2)


def video_ceiling(n: int, min_pixels: int, total_pixels: int = int(128000 * 784 * 0.9)) -> int:
    return max(min(768 * 784, total_pixels / n * 2), int(min_pixels * 1.05))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("records")
    media.write_image(d / "b.jpg", 640, 480)
    media.write_image(d / "a.png", 448, 336)
    media.write_video(d / "clip.mp4", num_frames=48, fps=12)  # 64 x 48, 4 s
    data = (d / "b.jpg").read_bytes()
    (d / "half.jpg").write_bytes(media.truncated(data, 0.5))
    vocab = {"[UNK]": 0, "describe": 1, "this": 2, "please": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    return d


def one(root: Path, item: dict, model: str = MODEL, route: str = "processor") -> mrope.Positions:
    record = {"messages": [{"role": "user", "content": [item]}]}
    return record_positions(record, model=model, base_dir=root, route=route)


def test_image_keys_follow_qwen_vl_utils(root) -> None:
    cases = [
        ({"max_pixels": 50_000}, smart_resize(480, 640, min_pixels=3136, max_pixels=50_000)),
        ({"min_pixels": 1_000_000}, smart_resize(480, 640, min_pixels=1_000_000)),
        ({"resized_height": 300, "resized_width": 200}, smart_resize(300, 200)),  # bounds: the defaults
    ]
    for keys, (h, w) in cases:
        got = one(root, {"type": "image", "image": "b.jpg", **keys})
        assert got.image_grid_thw.tolist() == [[1, h // 14, w // 14]], keys
        # the same keys on an image given by size, and through the segments form
        sized = record_positions(
            {"segments": [{"type": "image", "height": 480, "width": 640, **keys}]}, model=MODEL
        )
        assert sized.image_grid_thw.tolist() == [[1, h // 14, w // 14]], keys
    # negative control: the keys change the answer (the plain file gives another grid)
    assert one(root, {"type": "image", "image": "b.jpg"}).image_grid_thw.tolist() != [[1, 17, 22]]
    plain = one(root, {"type": "image", "image": "b.jpg"})
    for form in (
        {"type": "image_url", "image_url": {"url": "b.jpg"}},
        {"type": "image_url", "image_url": "b.jpg"},
        {"type": "image", "url": "b.jpg"},
        {"type": "image", "image_url": "b.jpg"},
        {"type": "image", "path": "b.jpg"},
    ):
        np.testing.assert_array_equal(one(root, form).ids, plain.ids)


def test_video_keys_and_frame_lists_follow_qwen_vl_utils(root) -> None:
    # video files under the model-card route (its keys, its sampling and bounds)
    # a trimmed file: frames 12..36 of 48 at 12 fps, 4 sampled at 2 fps, upscaled to min_pixels
    first, last = frame_range(48, 12.0, 1.0, 3.0)
    n = smart_nframes(last - first + 1, 12.0)
    ceiling = min(150_000, video_ceiling(n, 50_000))
    h, w = smart_resize(48, 64, min_pixels=50_000, max_pixels=ceiling)
    item = {"type": "video", "video": "clip.mp4", "video_start": 1.0, "video_end": 3.0}
    got = one(root, {**item, "min_pixels": 50_000, "max_pixels": 150_000}, route="qwen-vl-utils")
    assert (first, last, n) == (12, 36, 4)
    assert got.video_grid_thw.tolist() == [[n // 2, h // 14, w // 14]]
    np.testing.assert_allclose(got.second_per_grid_ts, [2 / (n / (last - first + 1) * 12.0)])
    untrimmed = one(root, {"type": "video", "video": "clip.mp4"}, route="qwen-vl-utils")
    assert untrimmed.video_grid_thw[0, 0] != n // 2  # negative control: the trim is what changed it
    # total_pixels: the budget shared by the frames caps each one
    n_all = smart_nframes(48, 12.0)
    h2, w2 = smart_resize(48, 64, min_pixels=100_352, max_pixels=video_ceiling(n_all, 100_352, 2_000_000))
    capped = one(
        root, {"type": "video", "video": "clip.mp4", "total_pixels": 2_000_000}, route="qwen-vl-utils"
    )
    assert capped.video_grid_thw.tolist() == [[n_all // 2, h2 // 14, w2 // 14]]
    # a video as its frames (the processor route): each sized as an image, the count padded to even, at
    # the item's fps
    fh, fw = smart_resize(336, 448)
    frames = one(root, {"type": "video", "video": ["a.png", "a.png", "a.png"], "fps": 1.0})
    assert frames.video_grid_thw.tolist() == [[2, fh // 14, fw // 14]]
    np.testing.assert_allclose(frames.second_per_grid_ts, [2.0])
    rh, rw = smart_resize(100, 150)
    resized = one(
        root, {"type": "video", "video": ["a.png", "a.png"], "resized_height": 100, "resized_width": 150}
    )
    assert resized.video_grid_thw.tolist() == [[1, rh // 14, rw // 14]]


@pytest.mark.parametrize(
    ("item", "model", "phrase"),
    [
        ({"type": "video", "video": "clip.mp4", "video_start": 1.0}, "qwen3-vl", "qwen-vl-utils keys"),
        ({"type": "image", "image": "b.jpg", "resized_height": 100}, MODEL, "go together"),
        ({"type": "image", "grid": [1, 4, 4], "max_pixels": 9000}, MODEL, "already sized"),
        ({"type": "image", "image": "b.jpg", "url": "a.png"}, MODEL, "not both"),
        ({"type": "video", "video": ["a.png"], "nframes": 2}, MODEL, "a video given as frames takes fps"),
        ({"type": "video", "video": ["a.png", "b.jpg"]}, MODEL, "resize to different sizes"),
    ],
)
def test_bad_keys_say_what_is_wrong(root, item, model, phrase) -> None:
    row = process_record({"messages": [{"role": "user", "content": [item]}]}, model=model, base_dir=root)
    assert phrase in row["error"] and row["error_code"] in ("invalid_request", "invalid_media"), row["error"]
    assert "Input should be a valid string" not in row["error"]


def test_error_codes_convention_and_the_job_level_stop(root) -> None:
    rows = process_batch(
        {
            "id": [1, 2, 3, 4],
            "segments": [
                [{"type": "image", "path": "missing.png"}],
                [{"type": "image", "path": "half.jpg"}],
                [{"type": "text", "tokens": 5}],
                [{"type": "image", "grid": [1, 3, 4]}],
            ],
        },
        model=MODEL,
        base_dir=root,
        decode_check=True,
    )
    codes = rows.column("error_code").to_pylist()
    assert codes == ["invalid_media", "media_decode_failed", "", "layout_error"], rows.column(
        "error"
    ).to_pylist()
    # without the decode check the cut JPEG sizes like the whole file (only its header is read)
    assert (
        process_record({"segments": [{"type": "image", "path": "half.jpg"}]}, model=MODEL, base_dir=root)[
            "error"
        ]
        == ""
    )
    # convention: the schema field and the job option give the family's transformers 5.24 rules
    record = {
        "segments": [
            {"type": "text", "tokens": 2},
            {"type": "video", "grid": [8, 4, 4], "fps": 2.0},
            {"type": "text", "tokens": 2},
        ]
    }
    segs = [mrope.Text(2), mrope.Video(grid=(8, 4, 4), fps=2.0), mrope.Text(2)]
    t5 = mrope.build_positions(segs, model=MODEL, convention="transformers5")
    assert not np.array_equal(t5.ids, mrope.build_positions(segs, model=MODEL).ids)  # the check can fail
    for got in (
        record_positions({**record, "convention": "transformers5"}, model=MODEL),
        record_positions(record, model=MODEL, convention="transformers5"),
    ):
        np.testing.assert_array_equal(got.ids, t5.ids)
    # no tokenizer for text: one error for the job, naming the option, not one per record
    batch = {"messages": [[{"role": "user", "content": "describe this"}]] * 50}
    with pytest.raises(JobError, match="pass tokenizer=") as err:
        process_batch(batch, model=MODEL)
    assert err.value.option == "tokenizer" and err.value.code == "tokenizer_required"


def test_cli_parquet_job_error_and_frame_size(root, tmp_path, capsys) -> None:
    records = [
        {
            "id": "t",
            "messages": [
                {"role": "user", "content": "describe this"},
                {"role": "assistant", "content": " please"},
            ],
        },
        {"id": "cut", "segments": [{"type": "image", "path": "half.jpg"}]},
        {"id": "img", "segments": [{"type": "image", "image_url": {"url": "b.jpg"}, "max_pixels": 50_000}]},
    ]
    jsonl = root / "in.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "out"
    argv = ["batch", str(jsonl), "--out-dir", str(out), "--model", MODEL, "--quiet"]
    assert (
        main([*argv, "--format", "parquet", "--decode-check", "--tokenizer", str(root / "tokenizer.json")])
        == 1
    )
    table = pq.read_table(out / "samples.parquet").to_pylist()
    assert [r["id"] for r in table] == ["t", "cut", "img"]
    assert [r["error_code"] for r in table] == ["", "media_decode_failed", ""]
    pre = Preprocessor(model=MODEL, tokenizer=str(root / "tokenizer.json"), base_dir=root, labels=True)
    p, labels = pre.sample(records[0])
    assert table[0]["input_ids"] == p.input_ids.tolist() and table[0]["labels"] == labels.tolist()
    assert table[0]["positions"] == p.ids.tolist()
    assert table[0]["labels"] == [-100, -100, 3]  # the assistant's one token ("please"), plain turns
    assert table[2]["image_grid_thw"] == [[1, *[s // 14 for s in smart_resize(480, 640, max_pixels=50_000)]]]
    capsys.readouterr()
    # the job-level error: stops at the first record, names --tokenizer, exit code 2
    assert main([*argv, "--format", "npy"]) == 2
    err = capsys.readouterr().err
    assert "--tokenizer" in err and err.count("text needs a tokenizer") == 1, err
    # frame_size: a rotated video's h and w swap between the two readings (display is the default)
    media.write_video(tmp_path / "rot.mp4", num_frames=8, fps=4, width=64, height=32, rotation=90)
    rec = {"segments": [{"type": "video", "path": str(tmp_path / "rot.mp4")}]}
    shown = record_positions(rec, model=MODEL).video_grid_thw[0]
    coded = record_positions(rec, model=MODEL, frame_size="coded").video_grid_thw[0]
    per_item = record_positions(
        {"segments": [{**rec["segments"][0], "frame_size": "coded"}]}, model=MODEL
    ).video_grid_thw[0]
    assert (shown[1], shown[2]) == (coded[2], coded[1]) and shown[1] != shown[2]
    np.testing.assert_array_equal(per_item, coded)


def test_service_reads_messages_as_the_pipeline_does(root) -> None:
    """One record, two faces: the service (``MROPE_TOKENIZER`` next to a chat template) and the pipeline
    (the same tokenizer path) give the same positions."""
    chat = root / "chat"
    chat.mkdir()
    tok = Tokenizer(
        models.WordLevel({"[UNK]": 0, "describe": 1, "this": 2, "please": 3, "user": 4}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"])
    tok.save(str(chat / "tokenizer.json"))
    template = (
        "{% for m in messages %}{{ m['role'] }} {% for c in m['content'] %}{% if c['type'] == 'text' %}"
        "{{ c['text'] }} {% elif c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% else %}<|vision_start|><|video_pad|><|vision_end|>{% endif %}{% endfor %}{% endfor %}"
    )
    (chat / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    ids = {k: tok.token_to_id(f"<|{k}|>") for k in ("vision_start", "vision_end", "image_pad", "video_pad")}
    record = {
        "model": MODEL,
        "rules": {f"{k}_id": v for k, v in ids.items()},
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "describe this"},
                    {"type": "image", "height": 480, "width": 640, "max_pixels": 50_000},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "please"}]},
            {"role": "user", "content": [{"type": "video", "grid": [4, 28, 28], "fps": 2.0}]},
        ],
    }
    expected = record_positions(record, tokenizer=str(chat / "tokenizer.json"))
    plain = record_positions(record, tokenizer=str(chat / "tokenizer.json"), chat_template=None)
    assert expected.num_tokens != plain.num_tokens  # the template is what both faces render
    with serve(env={"MROPE_TOKENIZER": str(chat / "tokenizer.json")}) as srv:
        got = httpx.post(f"{srv.base}/v1/positions", json=record, timeout=30)
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["positions"] == expected.ids.tolist()
        assert body["image_grid_thw"] == expected.image_grid_thw.tolist()
        # the same refusals as the other faces: a local file is not read by the service
        local = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "b.jpg"}}]}]
        refused = httpx.post(f"{srv.base}/v1/positions", json={**record, "messages": local}, timeout=30)
        assert refused.status_code == 422 and "local file" in refused.text
        both = httpx.post(f"{srv.base}/v1/positions", json={**record, "segments": []}, timeout=30)
        assert both.status_code == 422 and "exactly one of 'segments' and 'messages'" in both.text
