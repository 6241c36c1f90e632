"""``POST /v1/positions`` with messages where the service has a chat template (next to ``MROPE_TOKENIZER``):
the request's ``chat_template`` field turns it off, and the message of a request the template cannot
render says how (the request field, the CLI flag and the pipeline option, each spelled as it is).

Expected positions: text alone counts ``0..n-1`` on every axis (the rule written out here), and the plain
turns of a request equal the pipeline's ``chat_template=None`` on the same messages.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from tokenizers import Tokenizer, models, pre_tokenizers

from mrope.pipeline import Preprocessor
from mrope.service import Settings
from mrope.service.app import create_app

MODEL = "qwen2-vl"
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% else %}{{ c['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endfor %}"
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tokenizer folder with a ``chat_template.jinja`` beside its ``tokenizer.json``."""
    d = tmp_path_factory.mktemp("templated")
    words = ["hello", "there", "<|im_start|>", "<|im_end|>", "user"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *words])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(d / "tokenizer.json"))
    (d / "chat_template.jinja").write_text(TEMPLATE)
    return d


def post(folder: Path, body: dict) -> tuple[int, dict]:
    with TestClient(create_app(Settings(tokenizer=str(folder / "tokenizer.json")))) as client:
        resp = client.post("/v1/positions", json=body)
    return resp.status_code, resp.json()


def test_chat_template_none_reads_the_plain_turns(folder) -> None:
    counted = [{"role": "user", "content": [{"type": "text", "tokens": 5}]}]
    status, doc = post(folder, {"model": MODEL, "messages": counted})
    assert status == 422, doc
    message = doc["error"]["message"]
    assert "a 'tokens' count cannot be rendered by a chat template" in message
    assert '"chat_template": "none"' in message and "--chat-template none" in message
    assert "--no-chat-template" not in message  # no such flag
    status, doc = post(folder, {"model": MODEL, "messages": counted, "chat_template": "none"})
    assert status == 200, doc
    assert doc["positions"] == [list(range(5))] * 3  # the plain turns: five text tokens
    # words: the template's turn wrapping counts; 'none' gives the pipeline's plain turns
    words = [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    rendered = post(folder, {"model": MODEL, "messages": words})[1]
    plain = post(folder, {"model": MODEL, "messages": words, "chat_template": "none"})[1]
    expected = Preprocessor(model=MODEL, tokenizer=str(folder / "tokenizer.json"), chat_template=None)
    np.testing.assert_array_equal(np.array(plain["positions"]), expected.positions({"messages": words}).ids)
    assert len(rendered["positions"][0]) > len(plain["positions"][0])  # the negative control
    assert post(folder, {"model": MODEL, "messages": words, "chat_template": "auto"})[1] == rendered


def test_chat_template_takes_auto_or_none(folder) -> None:
    status, doc = post(folder, {"model": MODEL, "segments": [], "chat_template": "off"})
    assert status == 422, doc
    assert "chat_template" in doc["error"]["message"]
