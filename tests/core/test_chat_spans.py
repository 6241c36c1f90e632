"""Assistant spans of a chat template (:func:`mrope._chat.assistant_spans`) in linear time, equal to their
definition.

The definition is written out here, independently: turn ``i`` spans from the end of the conversation
before it, rendered with its generation prompt, to the end of the conversation through it, and both
renderings must be prefixes of the whole. It renders the conversation once per turn (quadratic); the
library reads the spans from one streamed rendering. They must agree on every template and conversation
below, errors included.
"""

from __future__ import annotations

import random
import time

import pytest
from support.chat_templates import QWEN2_VL_TEMPLATE

from mrope._chat import SMALL_CHAT, ChatTemplateError, assistant_spans, render_chat


def defined_spans(template: str, messages: list[dict]) -> list[tuple[int, int]] | str:
    """The spans by their definition, or ``"error"`` where turns cannot be placed."""
    full = render_chat(template, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = render_chat(template, messages[:i], add_generation_prompt=True)
        through = render_chat(template, messages[: i + 1])
        if not (through.startswith(before) and full.startswith(through)):
            return "error"
        spans.append((len(before), len(through)))
    return spans


def library_spans(template: str, messages: list[dict]) -> list[tuple[int, int]] | str:
    try:
        return assistant_spans(template, messages)
    except ChatTemplateError:
        return "error"


LLAMA3 = (  # Llama 3's shape: a BOS before the loop, contents trimmed inside a {% set %}
    "{{ '<|begin_of_text|>' }}{% for message in messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
SCAN = (  # two loops over the messages: a scan for a system message (writing nothing), then the turns
    "{% if messages|selectattr('role', 'equalto', 'system')|list %}S{% endif %}{% for m in messages %}"
    "<{{ m['role'] }}>{{ m['content'] }}</>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
STREAMING = {"qwen2-vl": QWEN2_VL_TEMPLATE, "llama3": LLAMA3, "scan": SCAN}
"""Templates that write a conversation as its turns one after the other."""

OTHERS = {
    # a separator between turns (loop.last looks one message ahead): the definition fails
    "separator": "{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% if not loop.last %}|{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
    # text after the loop: the conversation up to a turn is no prefix of the whole
    "trailing": "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<eos>"
    "{% if add_generation_prompt %}<assistant>{% endif %}",
    # the conversation's length in every turn
    "count": "{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}",
    # a last assistant turn closed differently
    "last": "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% if loop.last and m['role'] == "
    "'assistant' %}<end>{% endif %}</>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
    # a generation prompt that depends on the turn before it
    "after_tool": "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}{% if messages and messages[-1]['role'] == 'tool' %}<a-tool>{% else %}<a>"
    "{% endif %}{% endif %}",
}


def conversation(rng: random.Random, n: int) -> list[dict]:
    messages = [{"role": "system", "content": "be brief"}] if rng.random() < 0.5 else []
    for k in range(n):
        role = rng.choice(["user", "assistant", "assistant", "tool"])
        messages.append({"role": role, "content": " w" * rng.randint(0, 3) + f" {k} "})
    return messages


@pytest.mark.parametrize("name", [*STREAMING, *OTHERS])
def test_spans_equal_their_definition(name):
    template = {**STREAMING, **OTHERS}[name]
    rng = random.Random(name)
    for n in (0, 1, 2, 3, 5, 8, 13, SMALL_CHAT - 1):
        for _ in range(6):
            messages = conversation(rng, n)
            assert library_spans(template, messages) == defined_spans(template, messages), (n, messages)


@pytest.mark.parametrize("name", list(STREAMING))
def test_long_conversations_are_placed_in_one_rendering(name):
    """200 messages: the same spans as the definition; 1,500 messages (the 49 KB body that blocked the
    service 5-8 s) in a bounded time, with spans that cover exactly the assistant replies."""
    template = STREAMING[name]
    messages = conversation(random.Random(7), 200)
    assert library_spans(template, messages) == defined_spans(template, messages)
    long = [{"role": ("user", "assistant")[k % 2], "content": f"turn {k}"} for k in range(1500)]
    start = time.perf_counter()
    spans = assistant_spans(template, long)
    assert time.perf_counter() - start < 10.0  # the definition takes minutes here
    text = render_chat(template, long)
    assert [text[a:b].strip().split("turn ")[1].split("<")[0].strip() for a, b in spans] == [
        str(k) for k in range(1, 1500, 2)
    ]


@pytest.mark.parametrize("name", ["trailing", "count", "separator"])
def test_long_conversations_of_other_templates_are_refused(name):
    """Past SMALL_CHAT messages a template whose turns cannot be read from one rendering is refused,
    never placed by the quadratic route."""
    messages = [{"role": ("user", "assistant")[k % 2], "content": f"t{k}"} for k in range(SMALL_CHAT + 1)]
    with pytest.raises(ChatTemplateError, match="cannot place"):
        assistant_spans(OTHERS[name], messages)
