"""Packed rows inside every family's own transformers 5.24 model: each sample's logits in the packed row equal
its logits alone, where alone the model computes its own positions (tiny random-weight models, fp32).

The 3-row form (no text row) leaks across samples: the control that shows the check can fail.
"""

from __future__ import annotations

import pytest
import torch
from support import tiny_vlm as tv

import mrope
from mrope import Image, Text
from mrope.integrations import transformers as mt
from mrope.models import get_family

ACCEPTS = [n for n in tv.FAMILIES if get_family(n).packed_input == "text-row"]
REFUSED = [n for n in tv.FAMILIES if get_family(n).packed_input != "text-row"]
TOL = 1e-4


def _samples(name: str) -> list[list]:
    m = mt.model_rules(tv.model(name)).merge_size
    short = [Text(tv.tokenize("hi")), Image(grid=(1, 2 * m, 2 * m)), Text(tv.tokenize("ok?"))]
    return [tv.prompt(name), short]


def _alone(name: str, samples: list[list]) -> list[tuple[torch.Tensor, dict]]:
    """Each sample's logits alone (one left-padded batch with its attention mask, the model computing its
    own positions) and its slice of the batch's pixels."""
    kw = tv.inputs(name, samples)
    logits = tv.logits(name, kw, own_positions=True)
    mask = kw["attention_mask"].bool()
    rules = mt.model_rules(tv.model(name))
    grids = [mrope.build_positions(s, model=name, rules=rules, tokenizer=tv.tokenize) for s in samples]
    starts = {"pixel_values": 0, "pixel_values_videos": 0}
    out = []
    for k, positions in enumerate(grids):
        pixels = {}
        for key, grid in (
            ("pixel_values", positions.image_grid_thw),
            ("pixel_values_videos", positions.video_grid_thw),
        ):
            if key in kw:
                n = int(grid.prod(-1).sum())
                pixels[key] = kw[key][starts[key] : starts[key] + n]
                starts[key] += n
        out.append((logits[k][mask[k]], pixels))
    return out


def _packed_logits(name: str, kw: dict) -> torch.Tensor:
    net = tv.model(name)
    with torch.no_grad():
        return net(**{"use_cache": False, **kw}).logits


def _pixels(alone: list[dict]) -> dict:
    keys = {k for a in alone for k in a}
    return {k: torch.cat([a[k] for a in alone if k in a]) for k in keys}


@pytest.mark.parametrize("name", ACCEPTS)
def test_packed_logits_equal_each_sample_alone(name: str) -> None:
    net = tv.model(name)
    samples = _samples(name)
    alone = _alone(name, samples)
    row = mrope.pack(samples, model=name, rules=mt.model_rules(net), tokenizer=tv.tokenize, max_length=512)[0]
    assert row.samples == (0, 1)
    kw = {**row.model_inputs(net), **_pixels([a[1] for a in alone])}
    assert "attention_mask" not in kw and kw["position_ids"].shape[0] == 4 and kw["input_ids"].shape[0] == 1
    out = _packed_logits(name, kw)[0]
    for k, (logits, _) in enumerate(alone):
        a, b = row.cu_seqlens[k], row.cu_seqlens[k + 1]
        assert (out[a:b] - logits).abs().max() < TOL


def test_three_row_form_leaks_and_padded_rows_do_not() -> None:
    name = "qwen2-vl"
    net = tv.model(name)
    samples = _samples(name) + [[Text(tv.tokenize("one more sample"))]]
    alone = _alone(name, samples)
    batch = mrope.pack(samples, model=name, rules=mt.model_rules(net), tokenizer=tv.tokenize, max_length=40)
    assert len(batch) == 2  # 35 + 15 + 15 tokens: two rows, one padded
    pad = batch.padded()
    order = [i for row in batch for i in row.samples]
    kw = {**pad.model_inputs(net), **_pixels([alone[i][1] for i in order])}
    out = _packed_logits(name, kw)
    for r, row in enumerate(batch):
        for k, i in enumerate(row.samples):
            a, b = row.cu_seqlens[k], row.cu_seqlens[k + 1]
            assert (out[r, a:b] - alone[i][0]).abs().max() < TOL
    # the control: the same rows with the usual 3-row positions (no text row) leak across samples
    three = {**kw, "position_ids": kw["position_ids"][1:]}
    leaked = _packed_logits(name, three)
    row = max(batch, key=lambda r: len(r.samples))
    r = batch.rows.index(row)
    k = len(row.samples) - 1
    a, b = row.cu_seqlens[k], row.cu_seqlens[k + 1]
    assert (leaked[r, a:b] - alone[row.samples[k]][0]).abs().max() > 1e-2


@pytest.mark.parametrize("name", REFUSED)
def test_linear_attention_families_are_refused_with_the_requirement(name: str) -> None:
    row = mrope.pack([[Text(3)], [Text(4)]], model=name, rules=tv.CONFIG_IDS.get(name), max_length=8)[0]
    with pytest.raises(mrope.PackingError, match=f"{name}: packed input needs fla.*flash-linear-attention"):
        row.model_inputs()


def test_what_the_linear_attention_refusal_guards_against() -> None:
    """transformers 5.24's torch fallbacks cannot keep packed samples apart: given the boundaries they
    raise (transformers' own check); without them the row runs as one sequence and the second sample leaks."""
    from mrope.packing._inputs import seq_len_inputs

    name = "qwen3.5"
    net = tv.model(name)
    row = mrope.pack([[Text(tv.tokenize("abcdef"))], [Text(tv.tokenize("xyz"))]], model=name, max_length=16)[
        0
    ]
    with pytest.raises(mrope.PackingError, match="qwen3.5: packed input needs fla"):
        row.model_inputs(net)  # read from the model's config too
    kw = {
        "input_ids": torch.from_numpy(row.input_ids[None]),
        "position_ids": torch.from_numpy(row.position_ids[:, None]),
    }
    with pytest.raises(ValueError, match="can't keep packed sequences apart"):
        _packed_logits(name, {**kw, **seq_len_inputs(row.cu_seqlens, row.max_seqlen)})
    second = _packed_logits(name, kw)[0, 6:]
    with torch.no_grad():
        alone = net(input_ids=kw["input_ids"][:, 6:], use_cache=False).logits[0]
    assert (second - alone).abs().max() > 1e-3


def test_hunyuan_ocr_model_raises_with_the_text_row_so_mrope_refuses_first() -> None:
    from mrope.testing import tiny_model

    net = tiny_model("hunyuan-ocr")
    row = mrope.pack([[Text(4)], [Text(5)]], model="hunyuan-ocr", max_length=16)[0]
    with pytest.raises(mrope.PackingError, match="hunyuan-ocr: cannot take packed input"):
        row.model_inputs(net)
    ids = torch.full((1, 9), 1000)
    with pytest.raises(ValueError, match="multimodal RoPE channels"), torch.no_grad():
        net(input_ids=ids, position_ids=torch.from_numpy(row.position_ids[:, None]), use_cache=False)
