"""mrope.pipeline: records -> positions, single process, through ``datasets.map`` and on a local Ray.

Every dataset here is generated: real images and videos written by tests/support/media.py, records that mix the
JSON-segment form and the chat-message form, and records that must fail (recorded, never raised).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import media
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope import Image, Text, Video
from mrope._batches import plain
from mrope._errors import RecordError
from mrope._result_rows import RESULT_COLUMNS, arrow_schema
from mrope.media import load_image, load_video
from mrope.pipeline import QWEN_TURN, process_batch, process_record, record_positions

pytestmark = pytest.mark.timeout(120)

MODEL = "qwen2.5-vl"


def chars(text: str) -> list[int]:
    """A tokenizer whose token count is the character count (exact expectations)."""
    return [ord(c) for c in text]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pipeline")
    media.write_image(d / "a.png", 448, 336)
    media.write_image(d / "b.jpg", 640, 480)
    media.write_image(d / "wide.png", 896, 448)
    media.write_video(d / "clip.mp4", num_frames=48, fps=12)
    media.write_vfr_video(d / "vfr.mp4", [0.0, 0.1, 0.35, 0.5, 0.9, 1.0, 1.6, 1.7])
    vocab = {"[UNK]": 0, "describe": 1, "this": 2, "<": 3, ">": 4, "seconds": 5}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    return d


def records() -> list[dict[str, Any]]:
    """Mixed samples, with two that must fail."""
    return [
        {"id": "r0", "segments": [{"type": "text", "tokens": 12}, {"type": "image", "path": "a.png"}]},
        {
            "id": "r1",
            "messages": [
                {"role": "system", "content": [{"type": "text", "tokens": 7}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "image": "b.jpg"},
                        {"type": "text", "text": "describe this"},
                        {"type": "video", "video": "clip.mp4", "fps": 1.0},
                    ],
                },
            ],
        },
        {
            "id": "r2",
            "segments": [
                {"type": "image", "path": "wide.png", "tiling": True},
                {"type": "text", "ids": [151644, 77091, 198]},
                {"type": "video", "path": "vfr.mp4", "nframes": 4},
            ],
        },
        {
            "id": "r3",
            "segments": [
                {"type": "image", "grid": [1, 16, 24], "tiles": [3, 2], "thumbnail": True},
                {"type": "image", "height": 480, "width": 640},
                {"type": "video", "grid": [2, 8, 8], "frame_times": [0.0, 0.5, 1.0, 1.5]},
                {"type": "text", "tokens": 2},
            ],
        },
        {"id": "bad-file", "segments": [{"type": "image", "path": "missing.png"}]},
        {"id": "bad-field", "segments": [{"type": "video", "grid": [2, 8, 8], "speed": 2}]},
    ]


def jsonl(root: Path) -> Path:
    """The records as a JSONL file."""
    path = root / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records()))
    return path


def expected_r1(root: Path, tokenizer: Any) -> mrope.Positions:
    ids = tokenizer.encode("describe this", add_special_tokens=False).ids
    return mrope.build_positions(
        [
            Text(7),
            load_image(root / "b.jpg", model=MODEL),
            Text(ids),
            load_video(root / "clip.mp4", model=MODEL, fps=1.0),
        ],
        model=MODEL,
    )


def options(root: Path) -> dict[str, Any]:
    return {"model": MODEL, "base_dir": str(root), "tokenizer": str(root / "tokenizer.json")}


def test_single_process_equals_the_library(root) -> None:
    recs = {r["id"]: r for r in records()}
    opts = options(root)
    got = process_record(recs["r0"], **opts)
    expected = mrope.build_positions([Text(12), load_image(root / "a.png", model=MODEL)], model=MODEL)
    np.testing.assert_array_equal(got["positions"], expected.ids)
    assert (got["delta"], got["num_tokens"], got["error"]) == (expected.delta, expected.num_tokens, "")
    np.testing.assert_array_equal(got["image_grid_thw"], expected.image_grid_thw)

    got = process_record(recs["r1"], **opts)
    expected = expected_r1(root, Tokenizer.from_file(opts["tokenizer"]))
    np.testing.assert_array_equal(got["positions"], expected.ids)
    np.testing.assert_array_equal(got["video_grid_thw"], expected.video_grid_thw)
    np.testing.assert_array_equal(got["second_per_grid_ts"], expected.second_per_grid_ts)

    got = record_positions(recs["r2"], **opts)
    vfr = load_video(root / "vfr.mp4", model=MODEL, nframes=4)
    assert vfr.frame_times is not None
    expected = mrope.build_positions(
        [load_image(root / "wide.png", model=MODEL, tiling=True), Text([151644, 77091, 198]), vfr],
        model=MODEL,
    )
    np.testing.assert_array_equal(got.ids, expected.ids)
    assert [s.tile for s in got.spans if s.tile] == [(0, 0), (0, 1)]

    got = record_positions(recs["r3"], **opts)
    expected = mrope.build_positions(
        [
            Image(grid=(1, 16, 24), tiles=(3, 2), thumbnail=True),
            load_image(root / "b.jpg", model=MODEL),  # 640 x 480 px, sized like the file
            Video(grid=(2, 8, 8), frame_times=(0.0, 0.5, 1.0, 1.5)),
            Text(2),
        ],
        model=MODEL,
    )
    np.testing.assert_array_equal(got.ids, expected.ids)


def test_failures_are_recorded_per_record(root) -> None:
    recs = {r["id"]: r for r in records()}
    for rid, phrase in (("bad-file", "no such file"), ("bad-field", "segment 0: unknown field 'speed'")):
        row = process_record(recs[rid], **options(root))
        assert phrase in row["error"]
        assert set(row) == {*RESULT_COLUMNS, "input_ids"}  # the job has a tokenizer: the row has ids
        assert row["positions"].shape == (3, 0) and row["positions"].dtype == np.int64
        assert row["image_grid_thw"].shape == (0, 3) and row["second_per_grid_ts"].dtype == np.float64
        assert (row["delta"], row["num_tokens"]) == (0, 0)
    row = process_record(object(), model=MODEL)  # type: ignore[arg-type]
    assert row["error"] == "a record must be an object; got object"


BAD_RECORDS = [
    ({"segments": [{"type": "text", "tokens": 1}]}, {}, "no model: pass model="),
    ({"segments": [], "messages": []}, {"model": MODEL}, "exactly one of 'segments' and 'messages'"),
    ({"id": 1}, {"model": MODEL}, "exactly one of 'segments' and 'messages'"),
    ({"segments": {"type": "text"}}, {"model": MODEL}, "segments: Input should be a valid list"),
    (
        {"segments": [{"type": "sound"}]},
        {"model": MODEL},
        "segment 0: type must be one of 'text', 'image', 'video', 'audio'; got 'sound'",
    ),
    ({"segments": [{"type": "text"}]}, {"model": MODEL}, "exactly one of tokens, ids, text; got none"),
    (
        {"segments": [{"type": "text", "tokens": 2, "ids": [1]}]},
        {"model": MODEL},
        "exactly one of tokens, ids",
    ),
    (
        {"segments": [{"type": "text", "tokens": -1}]},
        {"model": MODEL},
        "segment 0 tokens: Input should be greater than or equal to 0",
    ),
    (
        {"segments": [{"type": "text", "ids": [1, "x"]}]},
        {"model": MODEL},
        "segment 0 ids 1: Input should be a valid integer",
    ),
    ({"segments": [{"type": "text", "text": "hi"}]}, {"model": MODEL}, "segment 0: text needs a tokenizer"),
    ({"segments": [{"type": "image", "path": "memory://nowhere/cat.jpg"}]}, {"model": MODEL}, "no such file"),
    (
        {"segments": [{"type": "image", "path": "a.png", "grid": [1, 4, 4]}]},
        {"model": MODEL},
        "takes one of grid, height+width, path; got grid and path",
    ),
    ({"segments": [{"type": "image", "height": 480}]}, {"model": MODEL}, "both height and width"),
    (
        {"segments": [{"type": "image", "grid": [1, 4, 4], "tile_order": "01"}]},
        {"model": MODEL},
        "segment 0 tile_order: Input should be a valid list",
    ),
    (
        {"segments": [{"type": "image", "grid": [1, 4, 4], "wrap": "no"}]},
        {"model": MODEL},
        "segment 0 wrap: Input should be a valid boolean",
    ),
    (
        {"segments": [{"type": "video", "grid": [2, 4, 4], "fps": 0}]},
        {"model": MODEL},
        "segment 0 fps: Input should be greater than or equal to 0.001",
    ),
    (
        {"segments": [{"type": "video", "path": "clip.mp4", "nframes": 0}]},
        {"model": MODEL},
        "segment 0 nframes: Input should be greater than or equal to 1",
    ),
    (
        {"segments": [{"type": "video", "fps": 2.0}]},
        {"model": MODEL},
        "a video segment takes a grid [t, h, w] or a path",
    ),
    (
        {"segments": [{"type": "image", "path": "a.png", "crop": "0,0"}]},
        {"model": MODEL},
        "segment 0 crop: Input should be a valid list",
    ),
    ({"messages": "hi"}, {"model": MODEL}, "messages: Input should be a valid list"),
    (
        {"messages": [{"role": "user", "content": 3}]},
        {"model": MODEL},
        "message 0 content: Input should be a valid list",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "image", "image": "a.png", "path": "b.jpg"}]}]},
        {"model": MODEL},
        "not both",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        {"model": MODEL},
        "message 0 item 0: a text item takes a 'text' string or a 'tokens' count",
    ),
    ({"messages": [{"content": "hello"}]}, {"model": MODEL}, "message 0 item 0: text needs a tokenizer"),
    ({"model": 3, "segments": []}, {}, "model: Input should be a valid string"),
    (
        {"model": "qwen9", "segments": []},
        {},
        "model: unknown model 'qwen9'; expected a model family name (qwen2-vl",
    ),
    ({"segments": [], "rules": ["crop"]}, {"model": MODEL}, "rules: Input should be a valid dictionary"),
    ({"segments": [], "rules": {"colour": 1}}, {"model": MODEL}, "rules: unknown field 'colour'"),
]


@pytest.mark.parametrize(("record", "opts", "phrase"), BAD_RECORDS, ids=[p for _, _, p in BAD_RECORDS])
def test_bad_records_say_what_is_wrong(root, record, opts, phrase) -> None:
    with pytest.raises(mrope.MRopeError) as err:
        record_positions(record, base_dir=str(root), **opts)
    assert phrase in str(err.value)
    assert phrase in process_record(record, base_dir=str(root), **opts)["error"]


def test_messages_with_turns_and_generation_prompt(root) -> None:
    record = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi "}, {"type": "image", "image": "a.png"}],
            },
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [{"type": "text", "tokens": 4}, {"type": "text", "text": "more"}]},
        ]
    }
    got = record_positions(
        record,
        model=MODEL,
        base_dir=root,
        tokenizer=chars,
        turn_format=QWEN_TURN,
        generation_prompt="<|im_start|>assistant\n",
    )
    expected = mrope.build_positions(
        [
            Text(chars("<|im_start|>user\nhi ")),
            load_image(root / "a.png", model=MODEL),
            # adjacent strings are tokenized as one text, as a chat template renders them
            Text(chars("<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\n")),
            Text(4),
            Text(chars("more<|im_end|>\n<|im_start|>assistant\n")),
        ],
        model=MODEL,
    )
    np.testing.assert_array_equal(got.ids, expected.ids)
    np.testing.assert_array_equal(got.input_ids, expected.input_ids)


def test_token_cap_is_checked_before_building() -> None:
    huge = {"segments": [{"type": "video", "grid": [100_000, 2_000, 2_000]}]}  # 1e11 tokens: a typo
    row = process_record(huge, model=MODEL)
    assert "makes 100,000,000,002 tokens, over max_tokens=16,777,216" in row["error"]
    small = {"segments": [{"type": "text", "tokens": 40}]}
    assert "over max_tokens=39" in process_record(small, model=MODEL, max_tokens=39)["error"]
    assert process_record(small, model=MODEL, max_tokens=None)["num_tokens"] == 40


def test_model_and_rules_precedence(root) -> None:
    record = {
        "model": "qwen2-vl",
        "rules": {"spatial": "centered"},
        "segments": [{"type": "image", "grid": [1, 4, 8]}],
    }
    own = record_positions(record)
    assert own.rules.name == "qwen2-vl" and own.rules.spatial == "centered"
    job = record_positions(record, model="qwen3-vl", rules={"spatial": "reset", "crop": "keep"})
    assert (job.rules.name, job.rules.spatial, job.rules.crop) == ("qwen3-vl", "reset", "keep")
    fixed = mrope.models.get_family("glm-4.1v").rules
    assert record_positions(record, rules=fixed).rules is fixed


def test_arrow_filled_records_and_numpy_values(root) -> None:
    # what a JSONL read through Arrow looks like: every struct field present, absent ones None, numpy values
    record = {
        "id": "x",
        "messages": None,
        "segments": np.array(
            [
                {"type": "text", "tokens": np.int64(3), "path": None, "grid": None, "fps": None},
                {"type": "image", "tokens": None, "path": "a.png", "grid": None, "fps": None},
                {
                    "type": "video",
                    "tokens": None,
                    "path": None,
                    "grid": np.array([2, 4, 4]),
                    "fps": np.float64(2.0),
                },
            ],
            dtype=object,
        ),
    }
    assert plain(record["segments"])[2]["grid"] == [2, 4, 4]
    got = record_positions(record, model=MODEL, base_dir=root)
    expected = mrope.build_positions(
        [Text(3), load_image(root / "a.png", model=MODEL), Video(grid=(2, 4, 4), fps=2.0)], model=MODEL
    )
    np.testing.assert_array_equal(got.ids, expected.ids)


def table_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def as_lists(row: dict[str, Any]) -> dict[str, Any]:
    return {k: plain(v) for k, v in row.items() if k in RESULT_COLUMNS}


def single_process(root: Path, **extra: Any) -> dict[str, dict[str, Any]]:
    return {r["id"]: as_lists(process_record(r, **options(root), **extra)) for r in records()}


def test_process_batch_any_batch_form(root) -> None:
    recs = records()
    frame = pd.DataFrame(recs)
    columns = {k: [r.get(k) for r in recs] for k in ("id", "segments", "messages")}
    arrow = pa.Table.from_struct_array(pa.array(recs))  # fields unified over all rows: absent ones None
    tables = [process_batch(b, **options(root), keep=("id",)) for b in (columns, frame, arrow)]
    for t in tables:
        assert t.schema.remove(0) == arrow_schema(input_ids=True)  # "id", then the fixed result types
        assert t.column_names[0] == "id"
    assert table_rows(tables[0]) == table_rows(tables[1]) == table_rows(tables[2])
    want = single_process(root)
    for row in table_rows(tables[2]):
        assert as_lists(row) == want[row["id"]], row["id"]
    # by default only "id" is carried: the input columns may not fit one Arrow type
    assert process_batch(arrow, **options(root)).column_names == ["id", *RESULT_COLUMNS, "input_ids"]
    asked = process_batch(arrow, **options(root), keep=("id", "segments", "messages"))
    assert asked.column_names == ["id", "segments", "messages", *RESULT_COLUMNS, "input_ids"]
    # input_ids come with a tokenizer; without one (token counts only) they are absent unless asked for
    counted = {k: v[:1] for k, v in columns.items()}  # r0: a token count and an image
    assert "input_ids" not in process_batch(counted, model=MODEL, base_dir=str(root)).column_names
    asked_ids = process_batch(counted, model=MODEL, base_dir=str(root), input_ids=True)
    assert asked_ids.schema.field("input_ids").type == pa.list_(pa.int64())
    assert "input_ids" not in process_batch(columns, **options(root), input_ids=False).column_names
    with pytest.raises(RecordError, match="a batch must be"):
        process_batch([1, 2], model=MODEL)


def test_datasets_map(root, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local JSON file needs no network; never try it
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    # read the way a job reads its samples: the JSON reader unifies every row's fields (absent ones None)
    ds = datasets.load_dataset("json", data_files=str(jsonl(root)), split="train", cache_dir=str(root / "hf"))
    out = ds.map(process_record, fn_kwargs=options(root), remove_columns=["segments", "messages"])
    assert out.column_names == ["id", *RESULT_COLUMNS, "input_ids"]  # input_ids: the job has a tokenizer
    want = single_process(root)
    for row in out:
        assert as_lists(row) == want[row["id"]], row["id"]
    assert [row["id"] for row in out if row["error"]] == ["bad-file", "bad-field"]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray's own DataContext fields
def test_ray_map_batches_equals_single_process(root, ray_local) -> None:
    import ray.data

    want = single_process(root)
    # Arrow's JSON reader (it unifies the fields) and pandas' line reader (lines=True: the documented
    # recipe, for fields whose types differ between records) give the same rows
    for lines in (False, True):
        ds = ray.data.read_json(str(jsonl(root)), lines=lines)
        out = ds.map_batches(process_batch, fn_kwargs=options(root), batch_format="pandas", batch_size=2)
        rows = sorted(out.take_all(), key=lambda r: r["id"])
        assert out.schema().names == ["id", *RESULT_COLUMNS, "input_ids"]  # only the id is carried
        assert [r["id"] for r in rows] == sorted(want)
        for row in rows:
            assert as_lists(row) == want[row["id"]], (lines, row["id"])
        assert sorted(r["id"] for r in rows if r["error"]) == ["bad-field", "bad-file"]
    # the numpy batch format gives the same
    rows_np = ray.data.from_items(records()).map_batches(process_batch, fn_kwargs=options(root), batch_size=3)
    assert sorted((as_lists(r) for r in rows_np.take_all()), key=lambda r: r["num_tokens"]) == sorted(
        want.values(), key=lambda r: r["num_tokens"]
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray's own DataContext fields
def test_ray_map_batches_pack_batch_equals_the_plain_loop(root, ray_local) -> None:
    """pack_batch packs within each batch: one Ray batch of the records gives the plain loop's rows."""
    import ray.data

    from mrope.pipeline import pack_batch

    opts = {"max_length": 2048, **options(root)}
    want = pack_batch(records(), **opts).to_pylist()
    ds = ray.data.from_items(records(), override_num_blocks=1)
    got = ds.map_batches(pack_batch, fn_kwargs=opts, batch_size=len(records()), batch_format="pyarrow")
    rows = got.take_all()
    assert [r["ids"] for r in rows] == [r["ids"] for r in want]
    for row, exp in zip(rows, want, strict=True):
        assert {k: plain(v) for k, v in row.items()} == exp, exp["ids"]
    assert [r["error_code"] for r in want if r["error"]] == ["invalid_media", "invalid_request"]


_KEYS = [
    "type",
    "tokens",
    "ids",
    "text",
    "grid",
    "height",
    "width",
    "tiles",
    "thumbnail",
    "tile_order",
    "origin",
]
_KEYS += [
    "wrap",
    "fps",
    "second_per_grid",
    "frame_times",
    "path",
    "tiling",
    "crop",
    "nframes",
    "role",
    "content",
]
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4)
    ),
    max_leaves=10,
)
_ITEM = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image", "video", "audio"])},
    optional={k: _VALUES for k in _KEYS if k not in ("type", "path")},
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(_ITEM, max_size=3),
    form=st.sampled_from(["segments", "messages"]),
    rules=st.one_of(
        st.none(), st.dictionaries(st.sampled_from(["crop", "fps", "tiles", "colour"]), _SCALARS)
    ),
)
def test_any_record_gives_positions_or_a_library_error(items, form, rules) -> None:
    """Whatever a record holds, the result is positions or an MRopeError: never a crash of another type
    (which process_record would record as 'TypeError: ...' and the CLI as an internal error)."""
    record: dict[str, Any] = {"rules": rules}
    record[form] = items if form == "segments" else [{"role": "user", "content": items}]
    try:
        p = record_positions(record, model=MODEL, tokenizer=chars, max_tokens=100_000)
    except mrope.MRopeError:
        return
    assert p.ids.shape == (3, p.num_tokens)
