"""The pipeline contract: positions built outside the model by mrope.build_batch, passed as position_ids
(and the deltas for decode), give the logits the model computes with its own positions.

The models here are NOT patched: the expected values are the transformers 5.24 model computing its own
positions (get_rope_index in forward, _prepare_position_ids_for_generation in generate). mrope's side is
build_batch under the default convention for a model (``model_rules``: transformers5, the config's ids).
"""

from __future__ import annotations

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import FAMILIES

import mrope
from mrope.integrations import transformers as mt


def _rows(name: str) -> list[list[object]]:
    rules = mt.model_rules(tv.model(name))
    m = rules.merge_size
    return [
        tv.prompt(name),
        [mrope.Text(tv.tokenize("a")), mrope.Image(grid=(1, 2 * m, 2 * m)), mrope.Text(tv.tokenize("bc"))],
    ]


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("name", FAMILIES)
def test_build_batch_positions_give_the_models_own_logits(name: str, side: str) -> None:
    net = tv.model(name)
    kw = tv.inputs(name, _rows(name), padding_side=side)
    net.model.rope_deltas = None
    with torch.no_grad():
        own = net(**tv.forward_kwargs(kw, own_positions=True), use_cache=False).logits
    own_deltas = net.model.rope_deltas
    net.model.rope_deltas = None
    with torch.no_grad():
        ours = net(**tv.forward_kwargs(kw, own_positions=False), use_cache=False).logits
    assert net.model.rope_deltas is None  # with position_ids given the model computed nothing
    assert torch.equal(kw["deltas"], own_deltas)
    assert torch.equal(ours, own)


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_and_decode_with_precomputed_positions(name: str) -> None:
    """generate(position_ids=...) equals generate computing its own; a manual decode loop that places
    token j of row b at ``n_b + j + delta_b`` gives generate's logits step by step."""
    net = tv.model(name)
    kw = tv.inputs(name, _rows(name), padding_side="left")
    steps = 4
    options = {"max_new_tokens": steps, "min_new_tokens": steps, "do_sample": False}
    with torch.no_grad():
        net.model.rope_deltas = None
        own = net.generate(
            **tv.forward_kwargs(kw, own_positions=True),
            **options,
            output_logits=True,
            return_dict_in_generate=True,
        )
        net.model.rope_deltas = None
        ours = net.generate(**tv.forward_kwargs(kw, own_positions=False), **options)
    assert torch.equal(ours, own.sequences)

    # the decode call, by hand: prefill with the built positions, then n_valid + delta per row
    net.model.rope_deltas = None
    prompt = kw["input_ids"].shape[1]
    mask = kw["attention_mask"]
    with torch.no_grad():
        out = net(**tv.forward_kwargs(kw, own_positions=False), use_cache=True)
        cache = out.cache
        for j in range(steps):
            torch.testing.assert_close(out.logits[:, -1], own.logits[j], rtol=0, atol=1e-5)
            token = own.sequences[:, prompt + j : prompt + j + 1]
            position = (mask.sum(-1, keepdim=True) + kw["deltas"]).expand(3, -1, -1)  # [3, B, 1]
            mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
            out = net(
                input_ids=token, attention_mask=mask, position_ids=position, cache=cache, use_cache=True
            )
            cache = out.cache
    net.model.rope_deltas = None


@pytest.mark.parametrize("name", ["qwen2.5-vl", "qwen2.5-omni"])
def test_fractional_seconds_per_patch_match_the_models_float32_time(name: str) -> None:
    """Videos sampled at rates where float32 and float64 time disagree (second_per_grid 0.9, 0.7, ...):
    build_batch's positions and the patched model both give the model's own logits."""
    from mrope.integrations.transformers import patch, unpatch

    net = tv.model(name)
    m = mt.model_rules(net).merge_size
    samples = [
        [
            mrope.Text(tv.tokenize("a")),
            mrope.Video(grid=(12, 2 * m, 2 * m), fps=fps),
            mrope.Text(tv.tokenize("b")),
        ]
        for fps in (2 / 0.9, 2 / 0.7, 3.3)
    ]
    kw = tv.inputs(name, samples, with_pixels=False)
    own = tv.logits(name, kw)
    assert torch.equal(tv.logits(name, kw, own_positions=False), own)
    patch(net)
    try:
        patched = tv.logits(name, kw)
    finally:
        unpatch(net)
    torch.testing.assert_close(patched, own, rtol=0, atol=2e-6)


def test_positions_from_the_service_give_the_models_own_logits() -> None:
    """The service's JSON positions (``POST /v1/positions``, the app in process) for one sample, fed as
    position_ids, give the logits of the unpatched Qwen2-VL model computing its own; the decode delta
    too. ``rules: {"advance": "spatial"}`` asks for transformers 5.x's advance (the model under test)."""
    from fastapi.testclient import TestClient

    from mrope.service import Settings
    from mrope.service.app import create_app

    name = "qwen2-vl"
    net = tv.model(name)
    m = mt.model_rules(net).merge_size
    text = tv.tokenize("look")
    body = {
        "model": name,
        "rules": {"advance": "spatial"},
        "segments": [
            {"type": "text", "ids": text},
            {"type": "image", "grid": [1, 2 * m, 3 * m]},
            {"type": "video", "grid": [6, 2 * m, 2 * m], "fps": 2.0},
            {"type": "text", "ids": text},
        ],
    }
    with TestClient(create_app(Settings())) as client:
        response = client.post("/v1/positions", json=body)
    assert response.status_code == 200, response.text
    served = response.json()
    sample = [
        mrope.Text(text),
        mrope.Image(grid=(1, 2 * m, 3 * m)),
        mrope.Video(grid=(6, 2 * m, 2 * m), fps=2.0),
        mrope.Text(text),
    ]
    kw = tv.inputs(name, [sample])
    kw["position_ids"] = torch.tensor(served["positions"])[:, None, :]
    net.model.rope_deltas = None
    with torch.no_grad():
        own = net(**tv.forward_kwargs(kw, own_positions=True), use_cache=False).logits
        own_deltas = net.model.rope_deltas
        net.model.rope_deltas = None
        ours = net(**tv.forward_kwargs(kw, own_positions=False), use_cache=False).logits
    net.model.rope_deltas = None
    assert torch.equal(ours, own)
    assert served["delta"] == int(own_deltas)
