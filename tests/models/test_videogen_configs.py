"""mrope.models.video_rope: a diffusers video transformer's config read into a VideoRope.

Expected values come from diffusers 0.42.1 itself: the transformers' ``__init__`` defaults (what
``from_config`` fills in for a missing key), read with ``inspect``; Wan's axis split from a
``WanRotaryPosEmbed`` built by diffusers (transformer_wan.py:368-373); CogVideoX's split from
``get_3d_rotary_pos_embed``'s lines (embeddings.py:692-694, written out). OmniGen2, which diffusers does not
ship: its ``__init__`` defaults written out in ``support.omnigen2_ref`` (transformer_omnigen2.py:257-293 of
VectorSpaceLab/OmniGen2 at 0f72fa9).
"""

from __future__ import annotations

import inspect

import pytest
from diffusers.models.transformers.cogvideox_transformer_3d import CogVideoXTransformer3DModel
from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoTransformer3DModel
from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed, WanTransformer3DModel
from support.omnigen2_ref import DEFAULT_CONFIG, THETA

from mrope import SpecError, VideoRope
from mrope.models import VIDEO_MODEL_NAMES, video_rope


def _defaults(cls: type) -> dict:
    """The keyword defaults of a diffusers transformer's ``__init__``, with its ``_class_name``."""
    params = inspect.signature(cls.__init__).parameters.values()
    return {"_class_name": cls.__name__, **{p.name: p.default for p in params if p.default is not p.empty}}


def test_names() -> None:
    assert VIDEO_MODEL_NAMES == ("wan", "hunyuan-video", "cogvideox", "omnigen2")


@pytest.mark.parametrize("head_dim", [64, 96, 120, 128, 160])
def test_wan_axis_split_equals_diffusers(head_dim: int) -> None:
    module = WanRotaryPosEmbed(head_dim, (1, 2, 2), 1024)
    rope = video_rope({**_defaults(WanTransformer3DModel), "attention_head_dim": head_dim})
    assert rope.axis_dims == (module.t_dim, module.h_dim, module.w_dim)
    assert rope.theta == inspect.signature(WanRotaryPosEmbed.__init__).parameters["theta"].default


def test_defaults_equal_diffusers() -> None:
    """A config with only ``_class_name`` reads as the transformer's own defaults do."""
    wan = _defaults(WanTransformer3DModel)
    assert video_rope({"_class_name": "WanTransformer3DModel"}) == video_rope(wan)
    assert (
        video_rope(wan).patch == tuple(wan["patch_size"])
        and video_rope(wan).max_grid == wan["rope_max_seq_len"]
    )
    hy = _defaults(HunyuanVideoTransformer3DModel)
    rope = video_rope({"_class_name": "HunyuanVideoTransformer3DModel"})
    assert rope == video_rope(hy)
    assert rope.axis_dims == tuple(hy["rope_axes_dim"]) and rope.theta == hy["rope_theta"]
    assert rope.patch == (hy["patch_size_t"], hy["patch_size"], hy["patch_size"])
    cog = {**_defaults(CogVideoXTransformer3DModel), "use_rotary_positional_embeddings": True}
    rope = video_rope(
        {"_class_name": "CogVideoXTransformer3DModel", "use_rotary_positional_embeddings": True}
    )
    assert rope == video_rope(cog)
    p = cog["patch_size"]
    assert rope.crop_base == (cog["sample_height"] // p, cog["sample_width"] // p) and rope.max_hw is None


@pytest.mark.parametrize("head_dim", [64, 128])
def test_cogvideox_split(head_dim: int) -> None:
    """``dim_t = D // 4``, ``dim_h = dim_w = D // 8 * 3`` (embeddings.py:692-694); 1.5 counts within its
    base grid and takes whole patches."""
    config = {"use_rotary_positional_embeddings": True, "attention_head_dim": head_dim}
    rope = video_rope(config, model="cogvideox")
    assert rope.axis_dims == (head_dim // 4, head_dim // 8 * 3, head_dim // 8 * 3)
    v15 = video_rope({**config, "patch_size_t": 2, "sample_height": 96, "sample_width": 170}, "cogvideox")
    assert v15.patch == (2, 2, 2) and v15.max_hw == (48, 85) and v15.crop_base is None and v15.whole_patches


def test_omnigen2_config() -> None:
    """``axes_dim_rope`` per axis, head dim ``hidden_size // num_attention_heads`` (the model refuses any
    other split, transformer_omnigen2.py:279-283), theta 10000, patch ``(1, p, p)`` in whole patches,
    float64 ladders (repo.py:25); the defaults when only ``_class_name`` is given."""
    rope = video_rope({"_class_name": "OmniGen2Transformer2DModel"})
    assert rope == video_rope(DEFAULT_CONFIG)
    assert rope.head_dim == DEFAULT_CONFIG["hidden_size"] // DEFAULT_CONFIG["num_attention_heads"] == 96
    assert rope.axis_dims == tuple(DEFAULT_CONFIG["axes_dim_rope"]) and rope.theta == THETA
    assert rope.patch == (1, 2, 2) and rope.whole_patches and rope.angle_precision == "exact"
    other = video_rope({"hidden_size": 64, "num_attention_heads": 4, "axes_dim_rope": [4, 6, 6]}, "omnigen2")
    assert other.head_dim == 16 and other.axis_dims == (4, 6, 6)
    assert video_rope({"patch_size": 4}, "OmniGen2").patch == (1, 4, 4)


def test_lookup_by_name_or_class() -> None:
    config = {"attention_head_dim": 128}
    assert (
        video_rope(config, "Wan")
        == video_rope(config, "WanTransformer3DModel")
        == video_rope({**config, "_class_name": "WanTransformer3DModel"})
    )
    assert isinstance(video_rope(config, "hunyuan-video"), VideoRope)


@pytest.mark.parametrize(
    ("config", "model", "message"),
    [
        ({}, None, "config _class_name None"),
        ({"_class_name": "FluxTransformer2DModel"}, None, "unknown video model"),
        ({}, "sora", "model 'sora'"),
        ({"use_rotary_positional_embeddings": False}, "cogvideox", "no rotary embedding"),
        ({"use_rotary_positional_embeddings": True, "attention_head_dim": 60}, "cogvideox", "eighths"),
        ({"attention_head_dim": "128"}, "wan", "positive int"),
        ({"patch_size": [1, 2]}, "wan", "3 positive ints"),
        ({"rope_axes_dim": [16, 56, 50]}, "hunyuan-video", "summing to head_dim 128"),
        ({"rope_theta": "256"}, "hunyuan-video", "must be a number"),
        ({"hidden_size": 100, "num_attention_heads": 24}, "omnigen2", "not a multiple"),
        ({"axes_dim_rope": [32, 32, 16]}, "omnigen2", "summing to head_dim 96"),
    ],
)
def test_config_errors(config: dict, model: str | None, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        video_rope(config, model)


def test_config_must_be_a_dict() -> None:
    with pytest.raises(SpecError, match="config must be a dict"):
        video_rope([("attention_head_dim", 128)], "wan")  # type: ignore[arg-type]
