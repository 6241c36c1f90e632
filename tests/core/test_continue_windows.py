"""Truncation windows that drop the middle of a conversation.

Two ways, both checked against something independent of the window: (1) the kept tokens keep their
logical positions: a tiny patched model's logits on the kept tokens equal its logits on the whole
conversation in which no token attends a dropped one (a 4-D mask); (2) the tokens after the gap move
down (cached keys re-rotated with ``mrope.rerotate``): their positions are those of the conversation
built without the dropped segments, and the moved keys equal keys rotated there by ``mrope.apply_mrope``.
"""

from __future__ import annotations

import numpy as np
import torch
from support import tiny_vlm as tv

import mrope
from mrope import Image, Text
from mrope._continuation import conversation_state
from mrope.integrations import transformers as mt


def _conversation(m: int) -> tuple[list, list, list]:
    head = [Text(tv.tokenize("system: be brief")), Image(grid=(1, 2 * m, 2 * m)), Text(tv.tokenize("hi"))]
    middle = [Text(tv.tokenize("old turn")), Image(grid=(1, 2 * m, 4 * m)), Text(tv.tokenize("answer"))]
    tail = [Text(tv.tokenize("new question")), Image(grid=(1, 4 * m, 2 * m)), Text(tv.tokenize("?"))]
    return head, middle, tail


def test_logical_positions_keep_the_logits_of_the_masked_whole() -> None:
    name = "qwen2-vl"
    net = tv.model(name)
    rules = mt.model_rules(net, "released")
    head, middle, tail = _conversation(rules.merge_size)
    batch = mrope.build_batch([head + middle + tail], rules=rules, tokenizer=tv.tokenize)
    kw = mt.model_inputs(batch, net)
    whole = batch.sequences[0]
    a = mrope.build_positions(head, rules=rules, tokenizer=tv.tokenize).num_tokens
    b = a + mrope.build_positions(middle, rules=rules, tokenizer=tv.tokenize).num_tokens
    n = whole.num_tokens
    kept = torch.from_numpy(np.r_[0:a, b:n])
    embeds = net.get_input_embeddings()(kw["input_ids"])
    mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
    mask[:, a:b] = False
    mask[torch.arange(n), torch.arange(n)] = True  # a dropped row still attends itself (its output is unused)
    with tv.patched(net), torch.no_grad():
        full = net(
            inputs_embeds=embeds,
            position_ids=kw["position_ids"],
            attention_mask=mask[None, None],
            use_cache=False,
        ).logits[0, kept]
        window = net(
            inputs_embeds=embeds[:, kept],
            position_ids=kw["position_ids"][:, :, kept],
            attention_mask=torch.ones(1, kept.numel(), dtype=torch.long),
            use_cache=False,
        ).logits[0]
        recounted = net(  # control: positions counted as if the kept tokens were the whole conversation
            inputs_embeds=embeds[:, kept],
            position_ids=torch.from_numpy(
                mrope.build_positions(head + tail, rules=rules, tokenizer=tv.tokenize).ids
            )[:, None],
            attention_mask=torch.ones(1, kept.numel(), dtype=torch.long),
            use_cache=False,
        ).logits[0]
    torch.testing.assert_close(window, full, rtol=1e-5, atol=1e-5)
    assert (recounted[a:] - full[a:]).abs().max() > 1e-3
    state = conversation_state(whole).after_window(b - a)
    assert state.num_tokens == kept.numel()
    # the next token (cache slot kept.numel()) gets the position it has after the whole conversation
    assert kept.numel() + state.delta == n + whole.delta


def test_moving_the_tail_down_equals_the_conversation_without_the_middle() -> None:
    spec = mrope.models.resolve_spec("qwen2-vl")
    for convention in ("released", "transformers5"):
        rules = mrope.models.resolve_rules("qwen2-vl", None, convention)
        head, middle, tail = _conversation(rules.merge_size)
        whole = mrope.build_positions(head + middle + tail, rules=rules, tokenizer=tv.tokenize)
        short = mrope.build_positions(head + tail, rules=rules, tokenizer=tv.tokenize)
        a = mrope.build_positions(head, rules=rules, tokenizer=tv.tokenize).num_tokens
        b = a + mrope.build_positions(middle, rules=rules, tokenizer=tv.tokenize).num_tokens
        moved = whole.ids[:, b:] - short.ids[:, a:]
        assert (moved == moved[0, 0]).all()  # one shift on every axis and token
        shift = int(moved[0, 0])
        state = conversation_state(whole).after_window(b - a, shift, images=1)
        assert state == conversation_state(short)
        gen = torch.Generator().manual_seed(0)
        raw = torch.randn(whole.num_tokens - b, 2, spec.head_dim, generator=gen, dtype=torch.float64)
        q = torch.zeros_like(raw)
        _, cached = mrope.apply_mrope(q, raw, torch.from_numpy(whole.ids[:, b:]), spec)
        mrope.rerotate(cached, torch.from_numpy(whole.ids[:, b:]), torch.from_numpy(short.ids[:, a:]), spec)
        _, direct = mrope.apply_mrope(q, raw, torch.from_numpy(short.ids[:, a:]), spec)
        torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)  # fp32 angles
        _, unmoved = mrope.apply_mrope(q, raw, torch.from_numpy(whole.ids[:, b:]), spec)
        assert (unmoved - direct).abs().max() > 1e-3  # control: moving matters
