"""The usual RoPE validation checks (relativity, prefill-decode, padding, pairing, length boundary), at
model level, on patched tiny models.

| check           | here                                                                              |
|-----------------|-----------------------------------------------------------------------------------|
| prefill-decode  | full-sequence logits == prefill + token-by-token decode with the KV cache          |
| batch padding   | left and right padding give the same valid-token logits (and == each row alone)    |
| (cache/chunks)  | chunked prefill with sliced positions == one prefill                               |
| relativity/text | a text-only prompt == plain 1-D RoPE (a rotary written out here, unpatched model)  |
| pairing         | every layer's rotated q and k == the model's own apply_rotary_pos_emb, elementwise |
| relativity      | every position + 10^6 gives the same logits (exact angles; one family per layout)  |
| length boundary | dynamic NTK: decode at L0 - 1, L0, L0 + 1 == the unpatched model (both backends)   |

Vision placeholders carry their token embeddings in the decode and chunk checks (no pixels): the
positions and the rotation are what is checked; pixels would only change the embeddings.
"""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import FAMILIES, patched, recording

import mrope
from mrope._errors import PatchError
from mrope.integrations import transformers as mt
from mrope.integrations.transformers import _patching as patching
from mrope.testing import tiny_model

ATOL = 1e-5


def _decode_logits(net: torch.nn.Module, kw: dict[str, torch.Tensor], prompt: int) -> torch.Tensor:
    """Logits of a single row: prefill ``prompt`` tokens (the model computes their positions), then one
    token per call with the KV cache (the model places it from its rope_deltas)."""
    ids = kw["input_ids"]
    first = {
        k: v[:, :prompt] if k in ("input_ids", "mm_token_type_ids", "attention_mask") else v
        for k, v in kw.items()
    }
    net.model.rope_deltas = None
    out = net(**tv.forward_kwargs(first, own_positions=True), use_cache=True)
    pieces, cache = [out.logits], out.cache
    for j in range(prompt, ids.shape[1]):
        out = net(input_ids=ids[:, j : j + 1], cache=cache, use_cache=True)
        pieces.append(out.logits)
        cache = out.cache
    net.model.rope_deltas = None
    return torch.cat(pieces, dim=1)


def _with_continuation(
    name: str, convention: str | None, video_t: int
) -> tuple[dict[str, torch.Tensor], int]:
    rules = mt.model_rules(tv.model(name), convention)
    sample = tv.prompt(name, video_t=video_t, convention=convention)
    prompt = mrope.build_positions(sample, model=name, rules=rules, tokenizer=tv.tokenize).num_tokens
    sample.append(mrope.Text(tv.tokenize("gen")))  # three "generated" text tokens
    return tv.inputs(name, [sample], convention=convention, with_pixels=False), prompt


@pytest.mark.parametrize("name", FAMILIES)
def test_full_sequence_equals_token_by_token_decode(name: str) -> None:
    net = tv.model(name)
    kw, prompt = _with_continuation(name, None, video_t=2)
    with patched(net), torch.no_grad():
        full = tv.logits(name, kw)
        decoded = _decode_logits(net, kw, prompt)
    torch.testing.assert_close(decoded, full, rtol=0, atol=ATOL)


def test_after_a_long_video_decode_matches_full_only_under_the_released_convention() -> None:
    """transformers 5.x resumes text after a video at s + max(H', W') but decodes at max + 1: after a
    video longer in time than in space the two disagree (by the video's excess length). The released
    rule (max + 1 everywhere) keeps prefill and decode in one coordinate system."""
    name = "qwen2-vl"
    net = tv.model(name)
    kw, prompt = _with_continuation(name, "released", video_t=12)
    with patched(net, convention="released"), torch.no_grad():
        torch.testing.assert_close(_decode_logits(net, kw, prompt), tv.logits(name, kw), rtol=0, atol=ATOL)
    kw5, prompt5 = _with_continuation(name, None, video_t=12)
    with patched(net), torch.no_grad():
        gap = (_decode_logits(net, kw5, prompt5) - tv.logits(name, kw5))[:, prompt5:].abs().max()
    assert gap > 1e-3


@pytest.mark.parametrize("name", FAMILIES)
def test_left_and_right_padding_give_the_same_valid_logits(name: str) -> None:
    net = tv.model(name)
    rules = mt.model_rules(net)
    m = rules.merge_size
    rows = [tv.prompt(name), [mrope.Text(tv.tokenize("x")), mrope.Image(grid=(1, 2 * m, 2 * m))]]
    with patched(net):
        per_side = {}
        for side in ("left", "right"):
            kw = tv.inputs(name, rows, padding_side=side, with_pixels=False)
            valid = kw["attention_mask"].bool()
            out = tv.logits(name, kw)
            per_side[side] = [out[b][valid[b]] for b in range(len(rows))]
        alone = [tv.logits(name, tv.inputs(name, [row], with_pixels=False))[0] for row in rows]
    for b in range(len(rows)):
        torch.testing.assert_close(per_side["left"][b], per_side["right"][b], rtol=0, atol=ATOL)
        torch.testing.assert_close(per_side["left"][b], alone[b], rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", FAMILIES)
def test_chunked_prefill_equals_one_prefill(name: str) -> None:
    net = tv.model(name)
    kw = tv.inputs(name, [tv.prompt(name)], with_pixels=False)
    length = kw["input_ids"].shape[1]
    cuts = [0, 5, length // 2, length]  # the second cut falls inside the image or the video
    with patched(net), torch.no_grad():
        full = tv.logits(name, kw, own_positions=False)
        cache, pieces = None, []
        for a, z in zip(cuts, cuts[1:], strict=False):
            out = net(
                input_ids=kw["input_ids"][:, a:z],
                attention_mask=kw["attention_mask"][:, :z],
                position_ids=kw["position_ids"][..., a:z],  # slice the prompt's positions, never rebuild
                cache=cache,
                use_cache=True,
            )
            cache = out.cache
            pieces.append(out.logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=ATOL)


def _plain_rope(net: torch.nn.Module, pairing: str, cat_table: bool = False):  # noqa: ANN202
    """A standard 1-D rotary (transformers' Llama formula, or its adjacent-pair form for gptj), written out
    here: ``inv_freq[i] = theta ** (-2i / d_r)``, angle = position * inv_freq. The table is ``cat(a, a)``
    for neox, ``a`` with each entry repeated twice for gptj, or ``cat(a, a)`` for a gptj model whose
    apply_rotary_pos_emb interleaves the first half itself (``cat_table``). Per-layer-type rope_parameters
    (Cohere-Compass) take the layer type's entry."""
    text = net.config.text_config
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads

    def forward(
        x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rope = text.rope_parameters if layer_type is None else text.rope_parameters[layer_type]
        rotary = int(head_dim * rope.get("partial_rotary_factor", 1.0))
        inv_freq = 1.0 / (rope["rope_theta"] ** (torch.arange(0, rotary, 2, dtype=torch.float32) / rotary))
        pos = position_ids[0] if position_ids.dim() == 3 else position_ids  # [B, S]
        assert position_ids.dim() == 2 or bool((position_ids == pos).all())  # text: t = h = w
        angle = pos[..., None].float() * inv_freq
        cat = pairing == "neox" or cat_table
        emb = torch.cat((angle, angle), -1) if cat else angle.repeat_interleave(2, -1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    return forward


PAIRING = {
    "qwen2-vl": "neox",
    "qwen2.5-vl": "neox",
    "qwen3-vl": "neox",
    "glm-4.1v": "gptj",
    "qwen2.5-omni": "neox",
    "qwen3-omni": "neox",
    "qwen3-vl-moe": "neox",
    "qwen3.5": "neox",
    "qwen3.5-moe": "neox",
    "cosmos3-omni": "neox",
    "cosmos3-edge": "neox",
    "glm-4.5v": "neox",
    "glm-4.6v": "gptj",
    "glm-ocr": "gptj",
    "paddleocr-vl": "neox",
    "ernie-4.5-vl": "gptj",
    "hy-v4-vl": "gptj",
    "cohere-compass": "neox",
    "minicpm-v-4.7": "neox",
    "qwen4-exp": "neox",
}
"""Released pairings (each family's 5.24 apply_rotary_pos_emb): GLM-4.1V, GLM-4.6V, GLM-OCR, ERNIE-4.5-VL
and HY-V4-VL rotate adjacent channels (models/glm4v/modeling_glm4v.py:493 rotate_half_llm, glm_ocr:130,
ernie4_5_vl_moe:171 rotate_half_text, hy_v4_vl:71); the Qwen models, GLM-4.5V (glm4v_moe:157 rotate_half),
Cosmos3, PaddleOCR-VL, Cohere-Compass and MiniCPM-V 4.7 (a Qwen3.5 text model) and Qwen4-Exp split
halves."""

CAT_TABLE = frozenset({"hy-v4-vl"})
"""gptj families whose rotary module still returns a ``cat(f, f)`` table: HY-V4-VL's apply_rotary_pos_emb
(modeling_hy_v4_vl.py:71) repeats the first half of it pairwise itself."""


@pytest.mark.parametrize("name", FAMILIES)
def test_text_only_prompt_equals_plain_1d_rope(name: str) -> None:
    net = tv.model(name)
    ids = torch.tensor([tv.tokenize("a text-only prompt")])
    with patched(net), torch.no_grad():
        got = net(input_ids=ids, use_cache=False).logits
    rotary = net.model.language_model.rotary_emb
    rotary.forward = _plain_rope(net, PAIRING[name], name in CAT_TABLE)
    try:
        with torch.no_grad():
            want = net(input_ids=ids, use_cache=False).logits
    finally:
        del rotary.forward
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)


@pytest.mark.parametrize("name", FAMILIES)
def test_pairing_equals_the_models_own_rotation_elementwise(name: str) -> None:
    net = tv.model(name)
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    kw = tv.inputs(name, [tv.prompt(name)])
    own: list[tuple[torch.Tensor, ...]] = []
    got: list[tuple[torch.Tensor, ...]] = []
    with recording(module, own):
        tv.logits(name, kw)
    with patched(net), recording(module, got):  # the recorder wraps the hook: it sees the Rotation path
        tv.logits(name, kw)
    assert len(own) == len(got) >= 1  # one per attention layer (hybrid stacks have fewer)
    for own_call, got_call in zip(own, got, strict=True):
        assert len(got_call) == len(own_call)
        for got_heads, own_heads in zip(got_call, own_call, strict=True):
            torch.testing.assert_close(got_heads, own_heads, rtol=0, atol=1e-5)


# ------------------------------------------------------------------------------------------ dynamic NTK

DYNAMIC_L0 = 24
"""max_position_embeddings (the original length L0) of the dynamic-NTK tiny model: its prompt ends at
position 19, then the tokens at positions 20 .. L0 + 1 are decoded one by one."""


def test_dynamic_ntk_decode_across_the_original_length_equals_the_unpatched_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Dynamic NTK (``rope_type="dynamic"``, factor 4): transformers' rotary recomputes its frequencies
    from ``max(position_ids) + 1`` once that exceeds L0, keeping the grown table between calls
    (``dynamic_rope_update``); apply_mrope computes them per call from the positions it rotates. Expected
    values: the unpatched transformers 5.24 model. Token-by-token decode with the KV cache across L0, the
    whole sequence in one prefill, and a shorter prefill above L0 after it (where 5.24 reuses its grown
    table and mrope does not: the documented difference). The decode runs on both backends (the Triton
    kernel in its interpreter)."""
    name = "qwen2-vl"
    net = tiny_model(
        name,
        text={
            "rope_parameters": {"rope_type": "dynamic", "factor": 4.0},
            "max_position_embeddings": DYNAMIC_L0,
        },
    )
    plain = tv.model(name)  # the same weights (seed 0) without scaling
    rules = mt.model_rules(net)
    sample = tv.prompt(name)
    prompt = mrope.build_positions(sample, model=name, rules=rules, tokenizer=tv.tokenize).num_tokens
    kw = tv.inputs(name, [sample], with_pixels=False)
    first = int(kw["position_ids"][0, 0, -1]) + 1  # position of the first decoded token
    sample.append(mrope.Text(tv.tokenize("x" * (DYNAMIC_L0 + 2 - first))))
    kw = tv.inputs(name, [sample], with_pixels=False)
    positions = kw["position_ids"][0, 0, prompt:]
    assert {DYNAMIC_L0 - 1, DYNAMIC_L0, DYNAMIC_L0 + 1} <= set(positions.tolist())
    grown = torch.cat([torch.zeros(prompt, dtype=torch.bool), positions >= DYNAMIC_L0])  # seq_len > L0

    def full(model: torch.nn.Module, width: int | None = None) -> torch.Tensor:
        cut = ("input_ids", "attention_mask", "mm_token_type_ids", "position_ids")
        part = {k: v[..., :width] if k in cut else v for k, v in kw.items()}
        with torch.no_grad():
            return model(**tv.forward_kwargs(part, own_positions=False), use_cache=False).logits

    with torch.no_grad():
        own = _decode_logits(net, kw, prompt)
        own_full = full(net)
        stale = full(net, -1)  # after the longer call: 5.24 keeps the grown table
        full(net, prompt)  # a call shorter than L0 resets it
        fresh = full(net, -1)
        with patched(net):
            got = _decode_logits(net, kw, prompt)
            got_full = full(net)
            got_after = full(net, -1)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        with patched(net, backend="triton"):
            got_triton = _decode_logits(net, kw, prompt)
        no_scaling = _decode_logits(plain, kw, prompt)
    torch.testing.assert_close(got, own, rtol=0, atol=ATOL)
    torch.testing.assert_close(got_triton, own, rtol=0, atol=ATOL)
    torch.testing.assert_close(got_full, own_full, rtol=0, atol=ATOL)
    torch.testing.assert_close(got_after, fresh, rtol=0, atol=ATOL)
    assert (stale - fresh).abs().max() > 2e-5  # transformers' stateful table, which mrope does not copy
    # the decode crossed the threshold: positions < L0 rotate as without scaling, >= L0 do not
    torch.testing.assert_close(own[:, ~grown], no_scaling[:, ~grown], rtol=0, atol=ATOL)
    assert ((own - no_scaling)[:, grown].abs().amax(-1) > 1e-5).all()


def test_patch_probes_dynamic_ntk_past_the_original_length_and_restores_the_rotary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With L0 above the plain probe's positions (as in real checkpoints), a dynamic spec mrope reads wrong
    (factor 2 where the model has 4) only shows past L0: patch probes there, refuses, and leaves the
    rotary's table as it was (its probe grew it)."""
    net = tiny_model(
        "qwen2-vl",
        text={"rope_parameters": {"rope_type": "dynamic", "factor": 4.0}, "max_position_embeddings": 2000},
    )
    rotary = net.model.language_model.rotary_emb
    table = rotary.inv_freq
    mt.patch(net)
    mt.unpatch(net)
    assert rotary.inv_freq is table and rotary.max_seq_len_cached == 2000
    real = patching.spec_of

    def wrong_factor(config, layer_type=None):  # noqa: ANN001, ANN202
        spec = real(config, layer_type)
        return dataclasses.replace(spec, scaling=dataclasses.replace(spec.scaling, factor=2.0))

    monkeypatch.setattr(patching, "spec_of", wrong_factor)
    with pytest.raises(PatchError, match="does not reproduce"):
        mt.patch(net)
    assert not mt.is_patched(net) and rotary.inv_freq is table and rotary.max_seq_len_cached == 2000


LAYOUTS = ("qwen2-vl", "qwen3-vl", "glm-4.1v", "ernie-4.5-vl", "hy-v4-vl", "cohere-compass")
"""One family per rotary layout: chunked / interleaved / (h, w)-alternating sections, neox / gptj pairing,
an MLA rope slice, a per-layer-type rotary with a NoPE layer."""


@pytest.mark.parametrize("name", LAYOUTS)
def test_shifting_every_position_by_a_million_keeps_the_logits_with_exact_angles(name: str) -> None:
    """Relativity at model level: attention sees only position differences, so adding 10^6 to every axis of
    every position leaves the logits unchanged; with exact angles (patch(angle_precision="exact")) to fp32
    rounding. (transformers' fp32 angles are off by up to 0.03 rad at 10^6, but these tiny random models'
    near-uniform attention hides that: their logits move by about 1e-5.)"""
    net = tv.model(name)
    kw = tv.inputs(name, [tv.prompt(name)], with_pixels=False)
    shifted = {**kw, "position_ids": kw["position_ids"] + 10**6}
    with torch.no_grad(), patched(net, angle_precision="exact"):
        base = tv.logits(name, kw, own_positions=False)
        moved = tv.logits(name, shifted, own_positions=False)
        flipped = tv.logits(name, {**kw, "position_ids": kw["position_ids"].flip(-1)}, own_positions=False)
    assert (flipped - base).abs().max() > 10 * ATOL  # the logits do depend on the positions
    torch.testing.assert_close(moved, base, rtol=0, atol=ATOL)
