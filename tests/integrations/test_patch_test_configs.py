"""patch on models built from transformers' own test configs: read as transformers reads them, never refused.

transformers' model test files (tests/models/<family>/test_modeling_*.py) build tiny models whose configs
give no ``partial_rotary_factor`` (GLM-4.1V, GLM-4.6V, GLM-Image: transformers 5.24 then rotates whole
heads) and declare more interleaved rotary sections than the head has (Qwen3-VL, Qwen3-VL-MoE, Qwen3.5,
Cosmos3-Omni, Qwen4-Exp: ``[16, 8, 8]`` for 4 frequencies, which the interleaved rotary cuts where the
frequencies end); Qwen4-Exp's test config turns on its per-layer n-gram embeddings. The text configs below
are those test files' values. Expected values: the unpatched transformers 5.24 model's logits on a prompt
with an image and a video (left-padded, two rows), against the patched model's.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers

import mrope
from mrope._errors import PatchError
from mrope.integrations import transformers as mt
from mrope.integrations.transformers import _rotation as rotation
from mrope.models import _config

ATOL = 2e-6  # fp32 logits: the same rotation arithmetic, fused differently

_GLM_TEXT = {
    "vocab_size": 99,
    "hidden_size": 16,
    "intermediate_size": 22,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "hidden_act": "silu",
    "max_position_embeddings": 512,
    "rope_parameters": {"type": "default", "mrope_section": [2, 1, 1]},
    "rope_theta": 10000,
    "tie_word_embeddings": True,
    "bos_token_id": 0,
    "eos_token_id": 0,
    "pad_token_id": 0,
}
_GLM_VISION = {
    "depth": 2,
    "hidden_act": "silu",
    "hidden_size": 48,
    "out_hidden_size": 16,
    "intermediate_size": 22,
    "patch_size": 14,
    "spatial_merge_size": 1,
    "temporal_patch_size": 2,
}
_GLM_IDS = {
    "image_token_id": 7,
    "video_token_id": 8,
    "video_start_token_id": 3,
    "video_end_token_id": 4,
    "image_start_token_id": 5,
    "image_end_token_id": 6,
}
_QWEN_TEXT = {
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
    "hidden_act": "silu",
    "head_dim": 8,
    "hidden_size": 32,
    "vocab_size": 99,
    "intermediate_size": 37,
    "max_position_embeddings": 512,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "rope_theta": 10000,
    "tie_word_embeddings": True,
    "rope_parameters": {"rope_type": "default", "mrope_section": [16, 8, 8], "mrope_interleaved": True},
}
_HYBRID = {  # Qwen3.5's and Qwen4-Exp's linear-attention layers
    "layer_types": ["full_attention", "linear_attention"],
    "linear_conv_kernel_dim": 2,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
}
_MOE = {"moe_intermediate_size": 16, "num_experts_per_tok": 2, "num_experts": 4}
_QWEN4_EXP = {
    "moe_intermediate_size": 8,
    "shared_expert_intermediate_size": 8,
    "num_experts_per_tok": 2,
    "num_experts": 4,
    "output_gate_type": "sigmoid",
    "hc_count": 2,
    "hc_lowrank": 8,
    "layer_types": ["linear_attention", "full_attention"],  # 5.24: per-layer embeddings on linear layers
    "ple_layer_ids": [1],
    "ple_embed_dim": 16,
    "ple_conv_kernel_size": 2,
    "ngram_size": 3,
    "heads_per_ngram": 2,
    "ngram_vocab_size_base": 31,
    "make_ngram_vocab_size_divisible_by": 8,
    "split_ngram_parts": 4,
    "indexer_n_heads": 2,  # its test file's QSA indexer (5.24's full-attention layers need one)
    "indexer_kv_heads": 1,
    "indexer_head_dim": 8,
    "indexer_budget": 4,
    "indexer_compress_ratio": 2,
}
_QWEN_VISION = {
    "depth": 2,
    "hidden_act": "gelu_pytorch_tanh",
    "intermediate_size": 32,
    "out_hidden_size": 32,
    "hidden_size": 32,
    "num_heads": 4,
    "patch_size": 16,
    "spatial_merge_size": 1,
    "temporal_patch_size": 2,
    "num_position_embeddings": 16,
    "deepstack_visual_indexes": [0, 1],
}
_QWEN_IDS = {"image_token_id": 3, "video_token_id": 4, "vision_start_token_id": 5, "vision_end_token_id": 6}


# config classes write their defaults into the rope_parameters they are given: each build gets copies


def _glm(cls: str) -> Callable[[], Any]:
    return lambda: getattr(transformers, cls)(
        text_config=copy.deepcopy(_GLM_TEXT), vision_config=dict(_GLM_VISION), **_GLM_IDS
    )


def _qwen(cls: str, **text: Any) -> Callable[[], Any]:
    return lambda: getattr(transformers, cls)(
        text_config=copy.deepcopy({**_QWEN_TEXT, **text}), vision_config=dict(_QWEN_VISION), **_QWEN_IDS
    )


def _glm_image() -> Any:
    text = {**copy.deepcopy(_GLM_TEXT), "vision_vocab_size": 99, "n_routed_experts": 8, "n_shared_experts": 1}
    text.update(n_group=1, topk_group=1, num_experts_per_tok=8)
    vision = {
        **_GLM_VISION,
        "hidden_act": "gelu",
        "hidden_size": 32,
        "patch_size": 16,
        "temporal_patch_size": 1,
    }
    vq = {
        "embed_dim": 48,
        "in_channels": 3,
        "initializer_range": 0.02,
        "latent_channels": 32,
        "num_embeddings": 32,
    }
    return transformers.GlmImageConfig(
        text_config=text,
        vision_config=vision,
        vq_config=vq,
        image_token_id=7,
        image_start_token_id=85,
        image_end_token_id=86,
    )


CONFIGS: dict[str, Callable[[], Any]] = {
    "glm4v": _glm("Glm4vConfig"),
    "glm46v": _glm("Glm46VConfig"),
    "glm_image": _glm_image,
    "qwen3_vl": _qwen("Qwen3VLConfig"),
    "qwen3_vl_moe": _qwen("Qwen3VLMoeConfig", **_MOE),
    "qwen3_5": _qwen("Qwen3_5Config", **_HYBRID),
    "cosmos3_omni": _qwen("Cosmos3OmniConfig"),
    "qwen4_exp": _qwen("Qwen4ExpConfig", **{**_HYBRID, **_QWEN4_EXP}),
}
"""model_type -> the config of transformers' test file for it (its tester's text config values)."""

_BUILD_CLASS = {"glm_image": "GlmImageForConditionalGeneration"}


def _model(model_type: str) -> Any:
    config = CONFIGS[model_type]()
    torch.manual_seed(0)
    if model_type in _BUILD_CLASS:
        return getattr(transformers, _BUILD_CLASS[model_type])._from_config(config).eval()
    return transformers.AutoModelForImageTextToText.from_config(config).eval()


def _tokenize(text: str) -> list[int]:
    """Text ids 10..59: inside the test configs' 99-token vocabularies, clear of their special ids."""
    return [10 + ord(c) % 50 for c in text]


def _inputs(net: Any) -> dict[str, torch.Tensor]:
    """Two left-padded rows: text, an image, text, a video, text; and text, an image, text (where the rules
    generate images, GLM-Image: the video and the last text give way to an image to generate, which ends
    both rows). No pixels: the placeholders keep their token embeddings (the positions and the rotation,
    what mrope replaces, do not depend on them)."""
    rules = mt.model_rules(net)
    m = rules.merge_size
    samples = [
        [
            mrope.Text(_tokenize("look")),
            mrope.Image(grid=(1, 2 * m, 3 * m)),
            mrope.Text(_tokenize("and")),
            mrope.Video(grid=(2, 2 * m, 2 * m), fps=2.0),
            mrope.Text(_tokenize("say?")),
        ],
        [mrope.Text(_tokenize("hi")), mrope.Image(grid=(1, 2 * m, 2 * m)), mrope.Text(_tokenize("ok"))],
    ]
    if rules.generates_images:
        samples[0][3:] = [mrope.Image(grid=(1, 2 * m, 2 * m), generate=True)]
        samples[1].append(mrope.Image(grid=(1, m, m), generate=True))
    batch = mrope.build_batch(samples, model=rules.name, rules=rules, tokenizer=_tokenize)
    kw = mt.model_inputs(batch, net)
    kw.pop("position_ids", None)  # the model computes its own
    return kw


def _logits(net: Any, kw: dict[str, torch.Tensor]) -> torch.Tensor:
    net.model.rope_deltas = None
    with torch.no_grad():
        out = net(**kw, use_cache=False).logits
    net.model.rope_deltas = None
    return out


@contextlib.contextmanager
def _counting_apply(monkeypatch: pytest.MonkeyPatch) -> Any:
    calls: list[int] = []
    real = rotation.apply_mrope

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(rotation, "apply_mrope", counting)
        yield calls


_MODELS: dict[str, Any] = {}


def _cached(model_type: str) -> Any:
    if model_type not in _MODELS:
        _MODELS[model_type] = _model(model_type)
    return _MODELS[model_type]


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_test_config_patches_and_gives_the_unpatched_logits(
    model_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    net = _cached(model_type)
    kw = _inputs(net)
    want = _logits(net, kw)
    with _counting_apply(monkeypatch) as calls:
        mt.patch(net)
        try:
            calls.clear()  # patch's own probes
            got = _logits(net, kw)
        finally:
            mt.unpatch(net)
    assert calls  # mrope's rotation ran in the patched forward
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("model_type", ["glm4v", "glm46v", "glm_image"])
def test_no_partial_factor_rotates_whole_heads(model_type: str) -> None:
    net = _cached(model_type)
    spec = mt.patch_info(mt.patch(net))["spec"]
    mt.unpatch(net)
    rotary = net.model.language_model.rotary_emb
    assert spec.rotary_dim == spec.head_dim == 8  # hidden 16 / 2 heads, whole
    assert 2 * rotary.inv_freq.numel() == spec.rotary_dim  # the model's own rotary: every channel
    assert spec.mrope_section == (2, 1, 1)


@pytest.mark.parametrize("model_type", ["qwen3_vl", "qwen3_vl_moe", "cosmos3_omni", "qwen4_exp"])
def test_long_interleaved_section_is_cut_where_the_frequencies_end(model_type: str) -> None:
    net = _cached(model_type)
    spec = mt.patch_info(mt.patch(net))["spec"]
    mt.unpatch(net)
    assert (spec.rotary_dim, spec.mrope_section) == (8, (2, 1, 1))  # [16, 8, 8] over 4 frequencies
    assert spec.axis_map().tolist() == [0, 1, 2, 0]


def test_a_wrong_cut_is_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    # negative control: the patch's own rotary probe tells a wrong reading of the long section
    net = _cached("qwen3_vl")
    monkeypatch.setattr(_config, "_interleaved_as_read", lambda section, num_freqs: (num_freqs, 0, 0))
    with pytest.raises(PatchError, match="does not reproduce"):
        mt.patch(net)
    assert not mt.is_patched(net)


def test_the_released_partial_factor_is_refused_on_a_whole_head_model() -> None:
    # negative control: read with GLM-4.1V's released 0.5, the test config's sections do not fit
    data = _cached("glm4v").config.to_dict()
    data["text_config"]["rope_parameters"]["partial_rotary_factor"] = 0.5
    with pytest.raises(mrope.SpecError, match="sums to 4 frequency pairs"):
        mrope.models.spec_from_config(data)


def test_per_layer_embeddings_need_token_ids_not_random_embeddings() -> None:
    # the real cause of the old refusal: the unpatched Qwen4-Exp text model itself rejects random
    # embeddings (its n-gram embeddings recover token ids only from exact rows of its table)
    net = _cached("qwen4_exp")
    text = net.model.language_model
    assert text.config.ple_layer_ids
    width = text.get_input_embeddings().weight.shape[1]
    with torch.no_grad(), pytest.raises(RuntimeError, match="inputs_embeds"):
        text(inputs_embeds=torch.randn(1, 5, width), use_cache=False)
    mt.unpatch(mt.patch(net))  # the probe runs on token ids
