"""mrope.models.spec_from_config against each family's own transformers 5.24 rotary embedding and apply function.

For every model type the registry accepts, the test builds the family's text config class with released
values (written out here, independently of mrope's family modules), turns it into the dict that
``config.json`` would hold (``to_dict()``, nested under the top-level model type where there is one), reads
it with ``mrope.models.spec_from_config``, and compares ``mrope.apply_mrope`` (torch path, fp32) with the
family's ``*RotaryEmbedding`` + ``apply_rotary_pos_emb`` on random q, k and M-RoPE positions, pass-through
channels included.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from support.hf_reference import hy_v4_vl_apply
from transformers import CONFIG_MAPPING

import mrope
from mrope import SpecError
from mrope.models import families, get_family, model_types, spec_from_config

# Released text-config values (the released checkpoints' config.json files). Where the 5.24 class default
# cannot run (glm4v_text: no partial factor, so whole heads rotate, which its default sections [8, 12, 12]
# do not fill; glm4v_moe_text: no head_dim; cohere_compass_text: rope_parameters {}), these released values
# are what makes the family's own rotary runnable.
_QWEN2 = {
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]},
}
_QWEN3 = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5e6,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
_QWEN3_5 = {
    "hidden_size": 4096,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 1e7,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
        "partial_rotary_factor": 0.25,
    },
}
_GLM4V = {
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "partial_rotary_factor": 0.5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 12, 12]},
}
TEXT_CONFIGS: dict[str, dict] = {
    "qwen2_vl_text": _QWEN2,
    "qwen2_5_vl_text": _QWEN2,
    "qwen3_vl_text": _QWEN3,
    "qwen3_vl_moe_text": {**_QWEN3, "hidden_size": 2048},
    "qwen3_5_text": _QWEN3_5,
    "qwen3_5_moe_text": {**_QWEN3_5, "hidden_size": 2048},
    # Qwen4-Exp: no partial factor in the class, so all 256 channels rotate; no released config known
    "qwen4_exp_text": {
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "head_dim": 256,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [11, 11, 10]},
    },
    "cosmos3_edge_text": {
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e8, "mrope_section": [24, 20, 20]},
    },
    "cohere_compass_text": {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [24, 20, 20]},
            "sliding_attention": None,
        },
    },
    "glm4v_text": _GLM4V,
    "glm4v_moe_text": {**_GLM4V, "num_attention_heads": 96, "head_dim": 128},
    "glm_ocr_text": {
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 12, 12]},
    },
    "glm_image_text": {**_GLM4V, "num_attention_heads": 32, "head_dim": 128},
    "qwen2_5_omni_text": _QWEN2,
    # Qwen3-ASR-1.7B: a plain Qwen3 text model (1-D rotary), head_dim 128, rope_theta 1e6
    # EXAONE 4.5's text model is EXAONE 4.0's (configuration_exaone4_5.py:68): 1-D rotary; no released
    # config known offline: the family's assumed values (head_dim 128, theta 1e6)
    "exaone4": {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    },
    "qwen3": {
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
    },
    "qwen3_omni_moe_text": {
        **_QWEN3,
        "hidden_size": 2048,
        "rope_parameters": {**_QWEN3["rope_parameters"], "rope_theta": 1e6},
    },
    # class defaults are the released rotary here (ERNIE: theta 5e5, head_dim 128, (22, 22, 20) as (h, w, t);
    # HY-V4-VL: a 64-channel rope slice after 192 pass-through channels, interleaved [12, 10, 10])
    "ernie4_5_vl_moe_text": {},
    "hy_v4_vl_text": {},
    # HunyuanOCR config.json: head_dim 128, rope_theta 1e4, {"type": "dynamic", "alpha": 1000,
    # "xdrope_section": [16, 16, 16, 16]}
    "hunyuan_vl_text": {
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "head_dim": 128,
        "rope_parameters": {
            "rope_type": "dynamic",
            "rope_theta": 1e4,
            "alpha": 1000.0,
            "factor": 1.0,
            "mrope_section": [16, 16, 16, 16],
        },
    },
    # MiniMax-M3-VL (Megatron-Bridge's toy config mirrors the released text config's keys,
    # tests/unit_tests/models/minimax_m3/test_minimax_m3_bridge.py:46-86): a 1-D rotary on 64 of 128 channels
    "minimax_m3_vl_text": {
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "rotary_dim": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5},
    },
    "paddleocr_vl_text": {
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e5, "mrope_section": [16, 24, 24]},
    },
}
# top-level model type -> its text config's model type (what the released config.json nests)
TOP_TO_TEXT = {
    "qwen2_vl": "qwen2_vl_text",
    "qwen2_5_vl": "qwen2_5_vl_text",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "cosmos3_omni": "qwen3_vl_text",
    "cosmos3_edge": "cosmos3_edge_text",
    "cohere_compass": "cohere_compass_text",
    "glm4v": "glm4v_text",
    "glm4v_moe": "glm4v_moe_text",
    "glm46v": "glm4v_text",
    "glm_ocr": "glm_ocr_text",
    "paddleocr_vl": "paddleocr_vl_text",
    "glm_image": "glm_image_text",
    "qwen2_5_omni": "qwen2_5_omni_text",
    "qwen2_5_omni_thinker": "qwen2_5_omni_text",
    "qwen3_omni_moe": "qwen3_omni_moe_text",
    "qwen3_omni_moe_thinker": "qwen3_omni_moe_text",
    "ernie4_5_vl_moe": "ernie4_5_vl_moe_text",
    "hy_v4_vl": "hy_v4_vl_text",
    "hunyuan_vl": "hunyuan_vl_text",
    "minicpmv4_7": "qwen3_5_text",
    "minicpmv4_6": "qwen3_5_text",
    "qwen3_asr": "qwen3",
    "exaone4_5": "exaone4",
    "minimax_m3_vl": "minimax_m3_vl_text",
    "qwen4_exp": "qwen4_exp_text",
}
# 5.24's HunyuanOCR rotary pairs channels of different axes (transformers 5.24
# models/hunyuan_vl/modeling_hunyuan_vl.py:181-190); the family follows Tencent's layout
# (tests/models/test_family_hunyuan_vl.py), so here only its frequencies are compared with 5.24's
LAYOUT_NOT_5_24 = {"hunyuan_vl_text"}
# 5.24's Qwen3-ASR, EXAONE 4.5 and MiniMax-M3-VL rotate one position per token (models/qwen3/modeling_qwen3.py,
# models/exaone4/modeling_exaone4.py, models/minimax_m3_vl/modeling_minimax_m3_vl.py); the family's M-RoPE
# equals it where every axis holds the same position, as all of its positions do
# (tests/models/test_family_qwen3_asr.py, test_family_exaone45.py, test_family_minimax_m3_vl.py), not on the
# random 3-D positions here
ONE_AXIS_TEXT = {"qwen3", "exaone4", "minimax_m3_vl_text"}
# the text rotary where a module has several
ROTARY_CLASS = {
    "qwen2_5_omni_text": "Qwen2_5OmniRotaryEmbedding",
    "qwen3_omni_moe_text": "Qwen3OmniMoeThinkerTextRotaryEmbedding",
}
_CACHE: dict[str, tuple] = {}


def _hf_text(text_type: str):
    """The family's text config (released values), its rotary embedding and its apply function."""
    if text_type not in _CACHE:
        config = CONFIG_MAPPING[text_type](**TEXT_CONFIGS[text_type])
        name = text_type.removesuffix("_text")
        module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        rotary = [
            obj
            for attr, obj in vars(module).items()
            if attr == ROTARY_CLASS.get(text_type, attr)
            and attr.endswith("RotaryEmbedding")
            and "Vision" not in attr
            and obj.__module__ == module.__name__
        ]
        assert len(rotary) == 1, rotary
        apply = hy_v4_vl_apply if text_type == "hy_v4_vl_text" else module.apply_rotary_pos_emb
        _CACHE[text_type] = (config, rotary[0](config), apply)
    return _CACHE[text_type]


def _config_dict(model_type: str) -> dict:
    """What config.json holds for a model of this model type."""
    text_type = TOP_TO_TEXT.get(model_type, model_type)
    text = _hf_text(text_type)[0].to_dict()
    if model_type.endswith("omni") or model_type.endswith("omni_moe"):  # top -> thinker -> text
        thinker = {"model_type": f"{model_type}_thinker", "text_config": text}
        return {"model_type": model_type, "thinker_config": thinker}
    if model_type in TOP_TO_TEXT:
        return {"model_type": model_type, "text_config": text}
    return text


def _hf_rotate(text_type: str, q, k, positions):
    config, rotary, apply = _hf_text(text_type)
    if text_type == "hy_v4_vl_text":  # the attention splits (q_pass, q_rot) and rotates the rope slice only
        nope = config.qk_nope_head_dim
        cos, sin = rotary(q[..., nope:], positions)
        q_rot, k_rot = apply(q[..., nope:], k[..., nope:], cos, sin)
        return torch.cat([q[..., :nope], q_rot], -1), torch.cat([k[..., :nope], k_rot], -1)
    cos, sin = (
        rotary(q, positions, "full_attention") if text_type == "cohere_compass_text" else rotary(q, positions)
    )
    return apply(q, k, cos, sin)


def _positions(b: int, s: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 40_000, (3, b, s), generator=g)  # t, h and w all differ


# model types transformers has no config class for: their configs are read in their family's tests
# (Falcon-OCR: falcon-perception's config keys, tests/models/test_family_falcon_ocr.py)
OUTSIDE_TRANSFORMERS = {"falcon_ocr"}


def test_every_accepted_model_type_has_a_released_config_here() -> None:
    known = set(TOP_TO_TEXT) | set(TEXT_CONFIGS) | OUTSIDE_TRANSFORMERS
    assert set(model_types()) <= known, set(model_types()) - known
    now_in = OUTSIDE_TRANSFORMERS & set(CONFIG_MAPPING)
    assert not now_in, f"transformers now has config classes for {now_in}: their exemption must go"


_ROTATING = sorted(
    t
    for t in set(model_types()) & (set(TOP_TO_TEXT) | set(TEXT_CONFIGS))
    if TOP_TO_TEXT.get(t, t) not in LAYOUT_NOT_5_24 | ONE_AXIS_TEXT
)


@pytest.mark.parametrize("model_type", _ROTATING)
def test_from_hf_config_rotates_like_the_family(model_type: str) -> None:
    text_type = TOP_TO_TEXT.get(model_type, model_type)
    spec = spec_from_config(_config_dict(model_type))
    head_dim = spec.head_dim
    g = torch.Generator().manual_seed(len(model_type))
    q = torch.randn(2, 4, 9, head_dim, generator=g)
    k = torch.randn(2, 2, 9, head_dim, generator=g)
    positions = _positions(2, 9, len(model_type))
    want_q, want_k = _hf_rotate(text_type, q, k, positions)
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, layout="bhsd", backend="torch")
    for got, want in ((got_q, want_q), (got_k, want_k)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    passed = torch.ones(head_dim, dtype=torch.bool)
    passed[spec.rotary_offset : spec.rotary_offset + spec.rotary_dim] = False
    assert int(passed.sum()) == head_dim - spec.rotary_dim
    torch.testing.assert_close(got_q[..., passed], q[..., passed], rtol=0, atol=0)  # pass-through untouched


def test_family_spec_is_what_its_released_config_reads() -> None:
    # the registry's default spec of a family equals what its released config reads to
    for fam in families():
        top = next((t for t in fam.model_types if t in TOP_TO_TEXT), None)
        if top is None or fam.name in ("cohere-compass", "cosmos3-omni"):
            continue  # cohere: no released rotary known; cosmos3-omni: Qwen3-VL's text config here
        assert spec_from_config(_config_dict(top)) == fam.spec, fam.name


@pytest.mark.parametrize("model_type", ["hunyuan_vl", "hunyuan_vl_text"])
def test_hunyuan_frequencies_are_5_24s_and_layout_is_the_familys(model_type: str) -> None:
    spec = spec_from_config(_config_dict(model_type))
    assert spec == get_family("hunyuan_vl").spec  # 4 axes, Tencent's xdrope layout, NTK-alpha 1000
    _, rotary, _ = _hf_text("hunyuan_vl_text")
    assert rotary.rope_type == "ntk_alpha"
    torch.testing.assert_close(torch.from_numpy(spec.inv_freq()).float(), rotary.inv_freq, rtol=1e-6, atol=0)


def test_hunyuan_released_xdrope_section_key() -> None:
    released = {
        "model_type": "hunyuan_vl",
        "text_config": {
            "model_type": "hunyuan_vl_text",
            "head_dim": 128,
            "rope_theta": 10000.0,
            "rope_scaling": {"type": "dynamic", "alpha": 1000, "xdrope_section": [16, 16, 16, 16]},
        },
    }
    assert spec_from_config(released) == get_family("hunyuan_vl").spec


def test_ernie_config_section_order_is_h_w_t() -> None:
    spec = spec_from_config(_config_dict("ernie4_5_vl_moe"))
    assert spec.mrope_section == (20, 22, 22) and spec == get_family("ernie4_5_vl_moe").spec


def test_pairing_follows_the_text_config() -> None:
    # GLM-4.6V: glm46v on top, glm4v_text inside: adjacent pairs; GLM-4.5V: split halves
    assert spec_from_config(_config_dict("glm46v")).pairing == "gptj"
    assert spec_from_config(_config_dict("glm4v_moe")).pairing == "neox"
    assert spec_from_config(_config_dict("glm4v")).pairing == "gptj"
    # without a model_type in the text config, the top-level family decides
    bare = {"model_type": "glm46v", "text_config": {k: v for k, v in _GLM4V.items()}}
    assert spec_from_config(bare).pairing == "gptj"


def test_legacy_rope_scaling_form() -> None:
    config = {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    }
    assert spec_from_config(config) == get_family("qwen2-vl").spec


def test_thinker_text_config_is_read() -> None:
    config = {
        "model_type": "qwen3_vl",
        "thinker_config": {"model_type": "qwen3_vl", "text_config": _config_dict("qwen3_vl_text")},
    }
    assert spec_from_config(config) == spec_from_config(_config_dict("qwen3_vl_text"))


def test_per_layer_type_rope_parameters() -> None:
    text = {
        "model_type": "cohere_compass_text",
        "head_dim": 128,
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 2e6, "mrope_section": [24, 20, 20]},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [24, 20, 20]},
            "nope_attention": None,
        },
    }
    assert spec_from_config(text).theta == 2e6  # full attention by default
    assert spec_from_config(text, layer_type="sliding_attention").theta == 1e4
    with pytest.raises(SpecError, match="'nope_attention' has no rotary"):
        spec_from_config(text, layer_type="nope_attention")
    with pytest.raises(SpecError, match="not in rope_parameters"):
        spec_from_config(text, layer_type="chunked_attention")
    del text["rope_parameters"]["full_attention"]
    assert spec_from_config(text).theta == 1e4  # the only layer type with a rotary
    text["rope_parameters"]["local_attention"] = {"rope_theta": 3e4, "mrope_section": [24, 20, 20]}
    with pytest.raises(SpecError, match="pass layer_type="):
        spec_from_config(text)


def test_yarn_and_errors() -> None:
    config = {
        "model_type": "qwen2_5_vl",
        "head_dim": 128,
        "max_position_embeddings": 128000,
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": 1e6,
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
            "mrope_section": [16, 24, 24],
        },
    }
    spec = spec_from_config(config)
    assert spec.scaling == mrope.RopeScaling(type="yarn", factor=4.0, original_max_position_embeddings=32768)
    with pytest.raises(SpecError, match="not a registered M-RoPE family.*qwen2_vl"):
        spec_from_config({"model_type": "llama", "head_dim": 128, "rope_theta": 1e4})
    with pytest.raises(SpecError, match="model_type missing"):
        spec_from_config({"head_dim": 128, "rope_theta": 1e4})
    with pytest.raises(SpecError, match="unsupported rope type 'longrope'"):
        spec_from_config(
            {"model_type": "qwen2_vl", "head_dim": 128, "rope_scaling": {"rope_type": "longrope"}}
        )
    with pytest.raises(SpecError, match="must be a dict.*from_pretrained"):
        spec_from_config("/some/checkpoint")
    with pytest.raises(SpecError, match="mrope_interleaved=False.*qwen3-vl"):
        spec_from_config(
            {"model_type": "qwen3_vl", "head_dim": 128, "rope_parameters": {"mrope_interleaved": False}}
        )
    # a family may be named when the config's model type is not a registered one
    assert (
        spec_from_config({"model_type": "llama", **_QWEN2}, family="qwen2-vl") == get_family("qwen2-vl").spec
    )
