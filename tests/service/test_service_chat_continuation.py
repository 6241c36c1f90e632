"""Continued ``messages`` under a chat template on a real server process: a turn sent with ``state`` is
rendered as the template renders it at the end of the whole conversation, so its positions are the
tail of the whole conversation's; a template for which that is not a suffix is a 422 saying why.

Expected values: the same server's answer for the whole conversation sent at once (a fresh request,
rendered by the template as transformers' ``apply_chat_template`` renders it), cut where the first
turn's own rendering ends; the token counts are checked against a whitespace split written here.
"""

from __future__ import annotations

import httpx
import pytest
from support.service_proc import serve
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

pytestmark = pytest.mark.timeout(120)

QWEN_LIKE = (
    "{%- if messages[0].role != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% for c in m.content %}{% if c.type == 'text' %}{{ c.text }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endfor %}"
)
"""Qwen's shape: a default system prompt when the conversation opens without one, then every message."""

LAST_MARKED = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{% for c in m.content %}{{ c.text }}{% endfor %}"
    "{% if loop.last %} (last){% endif %}<|im_end|>\n{% endfor %}"
)
"""A template that writes its last message differently: a turn's text depends on what follows it."""

TURN_1 = [{"role": "user", "content": "Describe the weather today please"}]
TURN_2 = [
    {"role": "assistant", "content": "It is sunny"},
    {"role": "user", "content": "And tomorrow"},
]


def words(text: str) -> int:
    """Tokens of the word-level tokenizer below: runs of word characters and runs of other non-space
    characters (``tokenizers``' Whitespace pre-tokenizer, ``\\w+|[^\\w\\s]+``)."""
    import re

    return len(re.findall(r"\w+|[^\w\s]+", text))


def server_with(tmp_path, template: str):
    folder = tmp_path / "tok"
    folder.mkdir()
    tokenizer = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(template)
    return serve(env={"MROPE_TOKENIZER": str(folder / "tokenizer.json")})


def post(client, **body) -> httpx.Response:
    return client.post("/v1/positions", json={"model": "qwen2-vl", **body})


def test_a_continued_turn_is_the_tail_of_the_whole_conversation(tmp_path):
    with server_with(tmp_path, QWEN_LIKE) as srv, httpx.Client(base_url=srv.base, timeout=30) as client:
        whole = post(client, messages=TURN_1 + TURN_2)
        first = post(client, messages=TURN_1, return_state=True)
        assert whole.status_code == first.status_code == 200, (whole.text, first.text)
        n_whole = len(whole.json()["positions"][0])
        n_first = len(first.json()["positions"][0])
        system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        turn_2 = "<|im_start|>assistant\nIt is sunny<|im_end|>\n<|im_start|>user\nAnd tomorrow<|im_end|>\n"
        assert n_whole - n_first == words(turn_2)  # the whole's tail: no second system prompt
        resp = post(client, messages=TURN_2, state=first.json()["state"])
        assert resp.status_code == 200, resp.text
        tail = [row[n_first:] for row in whole.json()["positions"]]
        assert resp.json()["positions"] == tail
        assert len(tail[0]) == words(turn_2)
        # the negative control: the same turn sent as a new conversation opens with the system prompt again
        # (what a continued turn got before: 14 tokens where the tail has 5, in the example)
        fresh = post(client, messages=TURN_2[1:])
        assert fresh.status_code == 200, fresh.text
        user = "<|im_start|>user\nAnd tomorrow<|im_end|>\n"
        assert len(fresh.json()["positions"][0]) == words(system + user) > words(user)


def test_a_template_that_is_not_a_suffix_is_refused(tmp_path):
    with server_with(tmp_path, LAST_MARKED) as srv, httpx.Client(base_url=srv.base, timeout=30) as client:
        first = post(client, messages=TURN_1, return_state=True)
        assert first.status_code == 200, first.text
        resp = post(client, messages=TURN_2, state=first.json()["state"])
        assert resp.status_code == 422, resp.text
        message = resp.json()["error"]["message"]
        assert "not render this turn as the tail" in message and "without 'state'" in message
