"""The dataset formats people have give the positions and token ids of the equivalent ``messages`` record.

Each case builds a record in a format (TRL's vision format, LLaVA / ShareGPT, Hugging Face ``Image``
feature values from a real ``datasets.Dataset``, OpenAI chat ``image_url`` with ``data:`` and ``http``
URLs, the Responses API's items, items without ``type``) and the ``messages`` record it stands for,
written out here by the format's rule (for TRL: by TRL's own ``prepare_multimodal_messages``, run here),
and checks that both give the same positions, token ids and grids through :mod:`mrope.pipeline`. A
negative control (the images swapped) shows the comparison tells records apart. Refusals name the
format and what came.
"""

from __future__ import annotations

import base64
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import media
from tokenizers import Tokenizer, models, pre_tokenizers
from trl.data_utils import prepare_multimodal_messages

from mrope.pipeline import QWEN_TURN, Preprocessor
from mrope.schema import RequestError, parse_record, parse_request

pytestmark = pytest.mark.timeout(180)

MODEL = "qwen2-vl"
WORDS = ["what", "is", "this", "?", "a", "cat", ".", "and", "dog", "describe", "the", "clip"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("formats")
    media.write_image(d / "a.jpg", 320, 240)
    media.write_image(d / "b.png", 200, 400)
    media.write_video(d / "clip.mp4", num_frames=24, fps=12)
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    return d


def job(root: Path, **options: Any) -> Preprocessor:
    return Preprocessor(
        model=MODEL, tokenizer=str(root / "tokenizer.json"), base_dir=str(root), input_ids=True, **options
    )


def result(root: Path, record: dict[str, Any], **options: Any) -> dict[str, Any]:
    row = job(root, **options).record(record)
    assert row["error"] == "", row["error"]
    return row


def assert_same(
    root: Path, record: dict[str, Any], expected: dict[str, Any], **options: Any
) -> dict[str, Any]:
    """``record`` and the ``messages`` record ``expected`` give the same row: positions, ids, grids."""
    got, want = result(root, record, **options), result(root, expected, **options)
    assert want["num_tokens"] > 0
    for key in ("positions", "input_ids", "image_grid_thw", "video_grid_thw", "delta"):
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=key)
    return got


def user(*items: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(items)}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def image(path: Any) -> dict[str, Any]:
    return {"type": "image", "image": path}


REPLY = {"role": "assistant", "content": [text("a cat .")]}


def test_the_comparison_tells_records_apart(root) -> None:
    """Negative control: the images of a record swapped give other positions."""
    one = {"messages": [user(image("a.jpg"), text("and"), image("b.png")), REPLY]}
    two = {"messages": [user(image("b.png"), text("and"), image("a.jpg")), REPLY]}
    with pytest.raises(AssertionError):
        assert_same(root, one, two)


# ------------------------------------------------------------------------------------------------ TRL


TRL_RECORDS = [
    pytest.param(
        {
            "images": ["a.jpg", "b.png"],
            "messages": [
                user({"type": "image"}, text("what is this ?"), {"type": "image"}),
                {"role": "assistant", "content": [text("a cat .")]},
            ],
        },
        id="placeholders",
    ),
    pytest.param(
        {"images": ["a.jpg"], "messages": [{"role": "user", "content": "what is this ?"}, REPLY]},
        id="string-content",
    ),
    pytest.param(
        {"image": "b.png", "messages": [user({"type": "image"}, text("describe the clip")), REPLY]},
        id="single-image-key",
    ),
]


@pytest.mark.parametrize("record", TRL_RECORDS)
@pytest.mark.parametrize("wrap", [None, QWEN_TURN], ids=["plain", "qwen-turns"])
def test_trl_vision_records_equal_trls_own_messages(root, record, wrap) -> None:
    """The expected messages are what TRL's collator passes to ``apply_chat_template``:
    ``prepare_multimodal_messages(messages, images)`` (trl/data_utils.py), run here."""
    images = record.get("images", [record.get("image")])
    expected = {"messages": prepare_multimodal_messages(record["messages"], images=images)}
    got = assert_same(root, record, expected, turn_format=wrap)
    assert len(got["image_grid_thw"]) == len(images)


def test_trl_prompt_completion(root) -> None:
    """TRL's conversational prompt-completion records (``_collate_prompt_completion``: the images go to
    the prompt) are the prompt's messages then the completion's."""
    record = {
        "images": ["a.jpg"],
        "prompt": [user({"type": "image"}, text("what is this ?"))],
        "completion": [{"role": "assistant", "content": "a cat ."}],
    }
    expected = {
        "messages": prepare_multimodal_messages(record["prompt"], images=record["images"])
        + prepare_multimodal_messages(record["completion"])
    }
    assert_same(root, record, expected, labels=True)
    labels = result(root, record, labels=True)["labels"]
    assert any(v != -100 for v in labels)  # the completion is the assistant's


def test_trl_dataset_with_image_features(root) -> None:
    """A real ``datasets.Dataset`` with a list-of-``Image()`` column: decoded (PIL images) and not
    (``{"bytes", "path"}`` dicts) give the record of the files."""
    rows = {
        "images": [[str(root / "a.jpg"), str(root / "b.png")]],
        "messages": [[user({"type": "image"}, text("what is this ?"), {"type": "image"}), REPLY]],
    }
    ds = datasets.Dataset.from_dict(rows).cast_column("images", datasets.List(datasets.Image()))
    decoded = ds[0]
    assert type(decoded["images"][0]).__module__.startswith("PIL.")
    raw = ds.cast_column("images", datasets.List(datasets.Image(decode=False)))[0]
    assert set(raw["images"][0]) == {"bytes", "path"}
    expected = {"messages": [user(image("a.jpg"), text("what is this ?"), image("b.png")), REPLY]}
    assert_same(root, decoded, expected)
    assert_same(root, raw, expected)
    inline = {"bytes": (root / "a.jpg").read_bytes(), "path": None}  # an Image() value with bytes only
    assert_same(
        root, {"messages": [user(image(inline), text("a"))]}, {"messages": [user(image("a.jpg"), text("a"))]}
    )


def test_datasets_map_over_a_trl_dataset(root) -> None:
    """``Dataset.map`` hands the records over as Arrow rows: the result equals the messages record's."""
    ds = datasets.Dataset.from_dict(
        {
            "images": [[str(root / "b.png")]],
            "messages": [[user({"type": "image"}, text("describe the clip")), REPLY]],
        }
    ).cast_column("images", datasets.List(datasets.Image()))
    pre = job(root)
    out = ds.map(pre.record, remove_columns=ds.column_names)
    want = result(root, {"messages": [user(image("b.png"), text("describe the clip")), REPLY]})
    assert out[0]["error"] == ""
    np.testing.assert_array_equal(np.asarray(out[0]["positions"]), want["positions"])
    np.testing.assert_array_equal(np.asarray(out[0]["input_ids"]), want["input_ids"])


def test_batches_of_an_image_feature_dataset_in_every_shape(root) -> None:
    """The Arrow table of an ``Image()`` dataset (``{"bytes", "path"}`` structs), and its pandas and numpy
    batches (Ray's ``batch_format`` choices), give the row of the messages record."""
    ds = datasets.Dataset.from_dict(
        {
            "id": ["x"],
            "images": [[str(root / "a.jpg"), str(root / "b.png")]],
            "messages": [[user({"type": "image"}, text("what is this ?"), {"type": "image"}), REPLY]],
        }
    ).cast_column("images", datasets.List(datasets.Image()))
    table = ds.with_format("arrow")[:]
    want = result(root, {"messages": [user(image("a.jpg"), text("what is this ?"), image("b.png")), REPLY]})
    columns = {k: table.column(k).to_numpy(zero_copy_only=False) for k in table.column_names}
    for batch in (table, table.to_pandas(), columns):
        row = job(root, keep=("id",)).batch(batch).to_pylist()[0]
        assert row["error"] == "" and row["id"] == "x", row["error"]
        np.testing.assert_array_equal(np.asarray(row["positions"]), want["positions"])
        np.testing.assert_array_equal(np.asarray(row["input_ids"]), want["input_ids"])


# ---------------------------------------------------------------------------------------------- LLaVA


LLAVA_RECORDS = [
    pytest.param(
        {
            "id": "1",
            "image": "a.jpg",
            "conversations": [
                {"from": "human", "value": "<image>\nwhat is this ?"},
                {"from": "gpt", "value": "a cat ."},
            ],
        },
        {"messages": [user(image("a.jpg"), text("\nwhat is this ?")), REPLY]},
        id="llava",
    ),
    pytest.param(
        {
            "images": ["a.jpg", "b.png"],
            "videos": ["clip.mp4"],
            "conversations": [
                {"from": "system", "value": "describe"},
                {"from": "human", "value": "what is <image> and <image> ? <video>"},
                {"from": "gpt", "value": "a cat ."},
            ],
        },
        {
            "messages": [
                {"role": "system", "content": [text("describe")]},
                user(
                    text("what is "),
                    image("a.jpg"),
                    text(" and "),
                    image("b.png"),
                    text(" ? "),
                    {"type": "video", "video": "clip.mp4"},
                ),
                REPLY,
            ]
        },
        id="sharegpt-images-videos",
    ),
]


@pytest.mark.parametrize(("record", "expected"), LLAVA_RECORDS)
@pytest.mark.parametrize("wrap", [None, QWEN_TURN], ids=["plain", "qwen-turns"])
def test_llava_records_equal_their_messages(root, record, expected, wrap) -> None:
    """Roles by ``from`` (human, gpt, system), each tag replaced in place by the next file."""
    assert_same(root, record, expected, turn_format=wrap, labels=True)


# --------------------------------------------------------------------------------------------- OpenAI


@pytest.fixture(scope="module")
def http_root(root):
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def data_url(path: Path, mime: str) -> str:
    return f"data:{mime};base64," + base64.b64encode(path.read_bytes()).decode()


def test_openai_chat_image_url_data_and_http(root, http_root) -> None:
    """OpenAI chat ``image_url`` items: a base64 ``data:`` URL and an ``http`` URL (served on loopback)."""
    record = {
        "messages": [
            user(
                {
                    "type": "image_url",
                    "image_url": {"url": data_url(root / "a.jpg", "image/jpeg"), "detail": "high"},
                },
                {"type": "text", "text": "and"},
                {"type": "image_url", "image_url": {"url": f"{http_root}/b.png"}},
            ),
            REPLY,
        ]
    }
    expected = {"messages": [user(image("a.jpg"), text("and"), image("b.png")), REPLY]}
    assert_same(root, record, expected)


def test_openai_responses_items(root, http_root) -> None:
    """The Responses API's ``input_text`` / ``input_image`` (``image_url`` a string, ``detail``) /
    ``output_text`` items and ``{"type": "message"}`` messages."""
    record = {
        "messages": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "input_image",
                        "image_url": data_url(root / "a.jpg", "image/jpeg"),
                        "detail": "auto",
                    },
                    {"type": "input_text", "text": "what is this ?"},
                    {"type": "input_image", "image_url": f"{http_root}/b.png"},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "a cat .", "annotations": []}]},
        ]
    }
    expected = {"messages": [user(image("a.jpg"), text("what is this ?"), image("b.png")), REPLY]}
    assert_same(root, record, expected, turn_format=QWEN_TURN)


def test_items_without_type_are_told_apart_by_their_key(root) -> None:
    """As the Qwen2-VL chat template and qwen-vl-utils read them: ``image`` / ``image_url`` / ``video`` /
    ``text`` keys."""
    record = {
        "messages": [
            user({"image": "a.jpg"}, {"text": "describe the clip"}, {"video": "clip.mp4", "fps": 1.0}),
            {"role": "assistant", "content": [{"text": "a cat ."}]},
        ]
    }
    expected = {
        "messages": [
            user(
                image("a.jpg"), text("describe the clip"), {"type": "video", "video": "clip.mp4", "fps": 1.0}
            ),
            REPLY,
        ]
    }
    got = assert_same(root, record, expected)
    assert len(got["video_grid_thw"]) == 1


# ------------------------------------------------------------------------------------------- refusals


REFUSED = [
    pytest.param(
        {"images": ["a.jpg"], "messages": [user({"type": "image"}, {"type": "image"})]},
        ["TRL's vision format", '2 {"type": "image"} placeholder(s)', "holds 1 image(s)"],
        id="trl-count",
    ),
    pytest.param(
        {"messages": [user({"type": "image"}, text("hi"))]},
        ["placeholder of TRL's vision format", "'images'"],
        id="bare-placeholder",
    ),
    pytest.param(
        {"image": "a.jpg", "conversations": [{"from": "human", "value": "no tag"}]},
        ["LLaVA / ShareGPT", "0 <image> tag(s)", "1 image(s)"],
        id="llava-tags",
    ),
    pytest.param(
        {"conversations": [{"from": "bot", "value": "hi"}]},
        ["LLaVA / ShareGPT", "turn 0", "human, gpt, system", "'bot'"],
        id="llava-from",
    ),
    pytest.param(
        {"conversations": [{"role": "user", "content": "hi"}]},
        ["LLaVA / ShareGPT", "turn 0", '{"from": ..., "value": "text"}', "['content', 'role']"],
        id="llava-turn-shape",
    ),
    pytest.param(
        {"messages": [user({"picture": "a.jpg"})]},
        ["message 0", "item 0", "needs a 'type'", "got keys ['picture']"],
        id="untyped-unknown",
    ),
    pytest.param(
        {"messages": [user({"image": "a.jpg", "text": "hi"})]},
        ["item without 'type'", "image and text"],
        id="untyped-two-kinds",
    ),
    pytest.param(
        {"messages": [user({"type": "input_image", "file_id": "file-123"})]},
        ["file_id", "uploaded to OpenAI", "image_url"],
        id="responses-file-id",
    ),
    pytest.param(
        {"segments": [{"grid": [1, 2, 2]}]}, ["segment 0", "no 'type' key"], id="segment-without-type"
    ),
    pytest.param({"messages": []}, ["no content", "an empty list"], id="empty-messages"),
    pytest.param(
        {"messages": [{"role": "user", "content": []}]}, ["no content", "without content"], id="empty-content"
    ),
]


@pytest.mark.parametrize(("record", "phrases"), REFUSED)
def test_refusals_name_the_format_and_what_came(record, phrases) -> None:
    with pytest.raises(RequestError) as info:
        parse_record(record)
    message = str(info.value)
    assert "Unable to extract tag" not in message
    for phrase in phrases:
        assert phrase in message, message


def test_empty_messages_is_an_invalid_request_under_pack(root) -> None:
    """``{"messages": []}`` is an error row (invalid_request), not a 0-token sample or sample_too_long."""
    table = (
        job(root)
        .with_options(pack=64)
        .packed([{"id": "e", "messages": []}, {"id": "ok", "messages": [REPLY]}])
    )
    rows = table.to_pylist()
    failed = [r for r in rows if r["error"]]
    assert [r["error_code"] for r in failed] == ["invalid_request"]
    assert "no content" in failed[0]["error"]
    row = job(root).record({"id": "e", "messages": []})
    assert row["error_code"] == "invalid_request" and row["num_tokens"] == 0


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from(["", "x", "<image>", "image", "human", "user"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "image",
                    "images",
                    "video",
                    "text",
                    "from",
                    "value",
                    "role",
                    "content",
                    "image_url",
                    "file_id",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)
KEYS = st.sampled_from(["messages", "conversations", "images", "image", "prompt", "completion", "videos"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEYS, JSON, min_size=1, max_size=3))
def test_any_malformed_format_record_is_a_request_error(record) -> None:
    """Whatever shape the format keys hold, a record is read or refused as a RequestError (never another
    exception, which the service would answer with a 500)."""
    for parse in (parse_record, lambda r: parse_request({"model": MODEL, **r})):
        try:
            parse(record)
        except RequestError:
            pass
