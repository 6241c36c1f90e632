"""mrope.models.spec_from_config reads what a config leaves out, or declares past the head, as transformers 5.24 does.

Two readings checked against transformers' own config classes and rotary code: a config without
``partial_rotary_factor`` gets its config class's default (what the rotary's
``config.rope_parameters.get("partial_rotary_factor", 1.0)`` then reads), not the released checkpoints'
fraction; an interleaved ``mrope_section`` longer than the head's frequencies is cut where they end, as the
interleaved rotary's ``recomposition_frequencies`` slices it. Chunked sections are not cut (transformers'
split raises on them too).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from transformers import CONFIG_MAPPING, AutoConfig

import mrope
from mrope import SpecError
from mrope.models import families, get_family, spec_from_config


def _text_config(model_type: str):  # noqa: ANN202 - a transformers config
    return AutoConfig.for_model(model_type).get_text_config(decoder=True)


IN_TRANSFORMERS = [f.name for f in families() if f.model_types[0] in CONFIG_MAPPING]


def test_only_falcon_ocr_has_no_transformers_config_class() -> None:
    """Falcon-OCR is not in transformers (its config is falcon-perception's, read in
    tests/models/test_family_falcon_ocr.py); every other family's is checked below."""
    assert [f.name for f in families() if f.name not in IN_TRANSFORMERS] == ["falcon-ocr"]


@pytest.mark.parametrize("name", IN_TRANSFORMERS)
def test_the_family_default_partial_factor_is_its_config_class_default(name: str) -> None:
    fam = get_family(name)
    text = _text_config(fam.model_types[0])
    assert fam.config_partial_rotary_factor == text.rope_parameters.get("partial_rotary_factor", 1.0)


@pytest.mark.parametrize(
    ("model_type", "extra", "rotary_dim"),
    [
        ("glm4v_text", {}, 16),  # whole heads, though the released GLM-4.1V says 0.5
        ("glm_image_text", {}, 16),
        ("glm4v_moe_text", {}, 8),  # its config class sets 0.5
        ("qwen3_5_text", {"head_dim": 16}, 4),  # its config class sets 0.25
        ("qwen4_exp_text", {"head_dim": 16}, 16),  # Qwen3.5's rotary, but no class default
        ("glm4v_text", {"partial_rotary_factor": 0.5}, 8),  # a config's own value wins
    ],
)
def test_a_file_without_partial_factor_reads_as_its_class_default(
    model_type: str, extra: dict, rotary_dim: int
) -> None:
    raw = {"model_type": model_type, "hidden_size": 32, "num_attention_heads": 2, **extra}
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [1, 1, 0]}
    spec = spec_from_config(raw)
    assert spec.rotary_dim == rotary_dim
    loaded = CONFIG_MAPPING[model_type](**raw)  # transformers loading the same file
    partial = loaded.rope_parameters.get("partial_rotary_factor", 1.0)
    assert int(spec.head_dim * partial) == rotary_dim


_INTERLEAVED = ["qwen3_vl_text", "qwen3_vl_moe_text", "qwen3_5_text", "qwen4_exp_text"]
"""Text config classes that take a section longer than the head (Cosmos3-Edge's validator refuses one that
does not fill it exactly; Cosmos3-Omni's text config is Qwen3-VL's)."""


def _rotary_and_apply(config):  # noqa: ANN001, ANN202 - transformers objects
    name = config.model_type.removesuffix("_text")
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    (rotary,) = [
        obj
        for attr, obj in vars(module).items()
        if attr.endswith("TextRotaryEmbedding") and obj.__module__ == module.__name__
    ]
    return rotary(config), module.apply_rotary_pos_emb


@pytest.mark.parametrize("model_type", _INTERLEAVED)
@pytest.mark.parametrize("head_dim", [4, 6, 8, 10, 14, 16, 24])
def test_long_interleaved_section_rotates_as_transformers_cuts_it(model_type: str, head_dim: int) -> None:
    rope = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [16, 8, 8], "mrope_interleaved": True}
    raw = {"model_type": model_type, "hidden_size": 32, "num_attention_heads": 2, "head_dim": head_dim}
    raw.update(rope_parameters=rope, partial_rotary_factor=1.0)
    spec = spec_from_config(raw)
    assert spec.rotary_dim == head_dim and sum(spec.mrope_section) <= head_dim // 2
    rotary, apply = _rotary_and_apply(CONFIG_MAPPING[model_type](**raw))
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(2, 2, 7, head_dim, generator=g)
    k = torch.randn(2, 1, 7, head_dim, generator=g)
    positions = torch.randint(0, 5000, (3, 2, 7), generator=g)  # t, h and w all differ
    with torch.no_grad():
        want = apply(q, k, *rotary(q, positions))
    got = mrope.apply_mrope(q, k, positions, spec, layout="bhsd", backend="torch")
    for g_, w_ in zip(got, want, strict=True):
        torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)


def test_the_cut_keeps_the_slots_the_head_has() -> None:
    raw = {"model_type": "qwen3_vl_text", "head_dim": 8, "hidden_size": 32, "num_attention_heads": 4}
    raw["rope_parameters"] = {"rope_type": "default", "mrope_section": [16, 8, 8], "mrope_interleaved": True}
    spec = spec_from_config(raw)
    assert spec.mrope_section == (2, 1, 1)
    assert spec.axis_map().tolist() == [0, 1, 2, 0]  # frequency 3 is past h's and w's first slots: t
    released = {**raw, "head_dim": 128}
    released["rope_parameters"] = {**raw["rope_parameters"], "mrope_section": [24, 20, 20]}
    assert spec_from_config(released).mrope_section == (24, 20, 20)  # a section that fits is unchanged


def test_long_chunked_section_is_refused_as_the_model_refuses_it() -> None:
    # negative control: a chunked rotary splits by the sections and cannot run a longer one
    raw = {"model_type": "glm4v_text", "hidden_size": 16, "num_attention_heads": 2}
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e4, "mrope_section": [8, 12, 12]}
    with pytest.raises(SpecError, match="sums to 32 frequency pairs"):
        spec_from_config(raw)
    rotary, _ = _rotary_and_apply(CONFIG_MAPPING["glm4v_text"](**raw))
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(RuntimeError, match="split"):
        rotary(q, torch.zeros(3, 1, 3, dtype=torch.long))
