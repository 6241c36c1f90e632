"""``POST /v1/positions`` takes each dataset format as the ``messages`` request it stands for (the same
response), and refuses a malformed one, or ``"messages": []``, with a 422 in the JSON error shape that
names the format and what came.

Media travel as ``data:`` URLs: the service reads those once its URL allowlist is set (it reads no local
file), and each request's response is compared with that of its ``messages`` form.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image as PILImage
from tokenizers import Tokenizer, models, pre_tokenizers

from mrope.service._settings import Settings
from mrope.service.app import create_app

pytestmark = pytest.mark.timeout(120)


def data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    PILImage.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


A, B = data_url(320, 240), data_url(200, 400)
REPLY = {"role": "assistant", "content": [{"type": "text", "text": "a cat ."}]}
EXPECTED = {
    "model": "qwen2-vl",
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "image", "image": A},
                {"type": "text", "text": "what is this ?"},
                {"type": "image", "image": B},
            ],
        },
        REPLY,
    ],
}


def ask(*content: dict[str, Any], reply: dict[str, Any] = REPLY, **top: Any) -> dict[str, Any]:
    return {"model": "qwen2-vl", **top, "messages": [{"role": "user", "content": list(content)}, reply]}


FORMATS = {
    "trl": ask(
        {"type": "image"}, {"type": "text", "text": "what is this ?"}, {"type": "image"}, images=[A, B]
    ),
    "llava": {
        "model": "qwen2-vl",
        "images": [A, B],
        "conversations": [
            {"from": "human", "value": "<image>what is this ?<image>"},
            {"from": "gpt", "value": "a cat ."},
        ],
    },
    "openai-chat": ask(
        {"type": "image_url", "image_url": {"url": A, "detail": "low"}},
        {"type": "text", "text": "what is this ?"},
        {"type": "image_url", "image_url": {"url": B}},
    ),
    "openai-responses": {
        "model": "qwen2-vl",
        "messages": [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": A, "detail": "auto"},
                    {"type": "input_text", "text": "what is this ?"},
                    {"type": "input_image", "image_url": B},
                ],
            },
            {"role": "assistant", "content": [{"type": "output_text", "text": "a cat .", "annotations": []}]},
        ],
    },
    "untyped": ask({"image": A}, {"text": "what is this ?"}, {"image_url": B}),
}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    vocab = {"[UNK]": 0, "what": 1, "is": 2, "this": 3, "?": 4, "a": 5, "cat": 6, ".": 7}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(path))
    # an allowlist (of a host nothing is served from) lets the service read data: URLs
    with TestClient(create_app(Settings(tokenizer=str(path), media_url_hosts="127.0.0.1:9"))) as c:
        yield c


def test_the_messages_form_has_media(client) -> None:
    body = client.post("/v1/positions", json=EXPECTED).json()
    assert body["image_grid_thw"] == [[1, 18, 22], [1, 28, 14]] and body["num_tokens"] > 0


@pytest.mark.parametrize("name", list(FORMATS))
def test_each_format_gives_the_response_of_its_messages(client, name) -> None:
    want = client.post("/v1/positions", json=EXPECTED)
    got = client.post("/v1/positions", json=FORMATS[name])
    assert got.status_code == 200, got.text[:2000]
    assert got.json() == want.json()


def test_negative_control_other_order_differs(client) -> None:
    swapped = ask(
        {"type": "image"}, {"type": "text", "text": "what is this ?"}, {"type": "image"}, images=[B, A]
    )
    assert (
        client.post("/v1/positions", json=swapped).json()
        != client.post("/v1/positions", json=EXPECTED).json()
    )


@pytest.mark.parametrize(
    ("body", "phrases"),
    [
        (ask({"type": "image"}, images=[A, B]), ["TRL's vision format", "holds 2 image(s)"]),
        (
            {"model": "qwen2-vl", "image": A, "conversations": [{"from": "robot", "value": "<image>"}]},
            ["LLaVA / ShareGPT", "'robot'"],
        ),
        (ask({"picture": A}), ["message 0", "needs a 'type'", "['picture']"]),
        ({"model": "qwen2-vl", "messages": []}, ["no content"]),
    ],
    ids=["trl-count", "llava-from", "untyped", "empty"],
)
def test_malformed_formats_are_a_422_naming_the_format(client, body, phrases) -> None:
    resp = client.post("/v1/positions", json=body)
    assert resp.status_code == 422, resp.text[:2000]
    message = resp.json()["error"]["message"]
    assert "Unable to extract tag" not in message
    for phrase in phrases:
        assert phrase in message, message
