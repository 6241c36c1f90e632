"""The video-generation transformers mrope rotates for: each one's diffusers config read into a VideoRope.

One reader per model, each fact cited in diffusers 0.42.1 (``diffusers/models/...``; OmniGen2, which
diffusers does not ship, in its authors' repository); a key missing from a config takes the default of the
transformer's ``__init__``, as diffusers' ``from_config`` does. The registry
(:func:`mrope.models.video_rope`) picks the reader by name or by the config's ``_class_name``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mrope._errors import SpecError
from mrope._video_rope import VideoRope


def _positive(key: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"config[{key!r}] must be a positive int; got {value!r}")
    return value


def _int(config: Mapping[str, Any], key: str, default: int) -> int:
    return _positive(key, config.get(key, default))


def _optional_int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return None if value is None else _positive(key, value)


def _three(config: Mapping[str, Any], key: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
    value = config.get(key, default)
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise SpecError(f"config[{key!r}] must be 3 positive ints; got {value!r}")
    a, b, c = (_positive(key, v) for v in value)
    return a, b, c


def _number(config: Mapping[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise SpecError(f"config[{key!r}] must be a number; got {value!r}")
    return float(value)


def wan(config: Mapping[str, Any]) -> VideoRope:
    """Wan 2.x (``WanTransformer3DModel``): h and w ``2 * (D // 6)`` channels each, t the rest
    (transformer_wan.py:368-369), theta 10000 (WanRotaryPosEmbed's default, :360; the transformer passes
    none, :597), ladders and angles in float64 (:375, :380-388), ``patch_size`` (p_t, p_h, p_w), default
    (1, 2, 2), and cos / sin rows for ``rope_max_seq_len`` tokens, default 1024 (:574-588, :398-411)."""
    d = _int(config, "attention_head_dim", 128)
    hw = 2 * (d // 6)
    return VideoRope(
        model="wan",
        head_dim=d,
        axis_dims=(d - 2 * hw, hw, hw),
        theta=10000.0,
        patch=_three(config, "patch_size", (1, 2, 2)),
        freq_dtype="float64",
        max_grid=_int(config, "rope_max_seq_len", 1024),
    )


def hunyuan_video(config: Mapping[str, Any]) -> VideoRope:
    """HunyuanVideo (``HunyuanVideoTransformer3DModel``): ``rope_axes_dim`` (16, 56, 56) channels,
    ``rope_theta`` 256, ``patch_size`` 2 and ``patch_size_t`` 1 (transformer_hunyuan_video.py:909-921,
    :946), fp32 grid and ladders (:496, :503; embeddings.py:893)."""
    d = _int(config, "attention_head_dim", 128)
    p, pt = _int(config, "patch_size", 2), _int(config, "patch_size_t", 1)
    return VideoRope(
        model="hunyuan-video",
        head_dim=d,
        axis_dims=_three(config, "rope_axes_dim", (16, 56, 56)),
        theta=_number(config, "rope_theta", 256.0),
        patch=(pt, p, p),
        freq_dtype="float32",
    )


def cogvideox(config: Mapping[str, Any]) -> VideoRope:
    """CogVideoX (``CogVideoXTransformer3DModel`` with ``use_rotary_positional_embeddings``): t ``D // 4``
    channels, h and w ``D // 8 * 3`` (embeddings.py:692-694), theta 10000 and fp32 ladders
    (embeddings.py:640, :697-700, :893); ``patch_size`` 2, ``patch_size_t`` None (1.0) or an int (1.5),
    ``sample_height`` 60, ``sample_width`` 90 (cogvideox_transformer_3d.py:224-248). 1.0 fits the grid into
    the base grid ``sample // patch_size`` (crop coordinates, pipeline_cogvideox.py:454-468); 1.5 counts
    within it (:469-481) and reshapes the latent into whole patches (embeddings.py:543-545)."""
    if not config.get("use_rotary_positional_embeddings", False):
        raise SpecError(
            "this CogVideoX transformer has no rotary embedding (config use_rotary_positional_embeddings is "
            f"{config.get('use_rotary_positional_embeddings', False)!r}; CogVideoX-2b adds sincos positions)"
        )
    d = _int(config, "attention_head_dim", 64)
    p, pt = _int(config, "patch_size", 2), _optional_int(config, "patch_size_t")
    base = (_int(config, "sample_height", 60) // p, _int(config, "sample_width", 90) // p)
    if d % 8:
        raise SpecError(f"CogVideoX splits attention_head_dim in eighths; got {d}")
    return VideoRope(
        model="cogvideox",
        head_dim=d,
        axis_dims=(d // 4, d // 8 * 3, d // 8 * 3),
        theta=10000.0,
        patch=(pt or 1, p, p),
        freq_dtype="float32",
        crop_base=base if pt is None else None,
        max_hw=base if pt is not None else None,
        whole_patches=pt is not None,
    )


def omnigen2(config: Mapping[str, Any]) -> VideoRope:
    """OmniGen2's DiT (``OmniGen2Transformer2DModel``), VectorSpaceLab/OmniGen2 at 0f72fa9,
    omnigen2/models/transformers/transformer_omnigen2.py: ``axes_dim_rope`` (32, 32, 32) channels,
    ``patch_size`` 2 and head dim ``hidden_size // num_attention_heads`` (2304 // 24, :259-282, which
    refuses a split that does not sum to it), theta 10000 (:288-293); ladders and angles in float64
    (repo.py:25-27, diffusers' ``get_1d_rotary_pos_embed`` with ``freqs_dtype=torch.float64``); the
    latent reshaped into whole ``p x p`` patches (:507, :521). An image latent has no frames: patch
    (1, p, p). Its latent's t is the position after the caption and reference images, which the builder
    gives (docs/videogen.md)."""
    hidden, heads = _int(config, "hidden_size", 2304), _int(config, "num_attention_heads", 24)
    if hidden % heads:
        raise SpecError(f"OmniGen2's hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    p = _int(config, "patch_size", 2)
    return VideoRope(
        model="omnigen2",
        head_dim=hidden // heads,
        axis_dims=_three(config, "axes_dim_rope", (32, 32, 32)),
        theta=10000.0,
        patch=(1, p, p),
        freq_dtype="float64",
        whole_patches=True,
    )


@dataclass(frozen=True)
class VideoModel:
    """One video-generation transformer: its registry name, diffusers' class name and config reader."""

    name: str
    class_name: str
    read: Callable[[Mapping[str, Any]], VideoRope]


VIDEO_MODELS: tuple[VideoModel, ...] = (
    VideoModel("wan", "WanTransformer3DModel", wan),
    VideoModel("hunyuan-video", "HunyuanVideoTransformer3DModel", hunyuan_video),
    VideoModel("cogvideox", "CogVideoXTransformer3DModel", cogvideox),
    VideoModel("omnigen2", "OmniGen2Transformer2DModel", omnigen2),
)
"""The video-generation transformers (and OmniGen2's image DiT, the same kind of rotation), in the order
:data:`mrope.models.VIDEO_MODEL_NAMES` lists them."""
