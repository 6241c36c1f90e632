"""EXAONE 4.5 (``exaone4_5``): every token at its sequence index; sliding-window layers rotate, global ones not.

Released code: transformers 5.24 (models/exaone4_5, the ``LGAI-EXAONE/EXAONE-4.5-33B`` checkpoint of
configuration_exaone4_5.py:28) and NVIDIA Megatron-Bridge at 067f987df
(``src/megatron/bridge/models/exaone/exaone45``).

Positions: transformers 5.24 gives the text model ``arange(seq_len) + past_seen_tokens`` when no position
ids are passed (modeling_exaone4_5.py:779-783, "Differ from Qwen") and its generation step passes none
(:929-933); the text model is EXAONE 4.0's ``exaone4`` (configuration_exaone4_5.py:68) with a 1-D rotary
(models/exaone4/modeling_exaone4.py:106-113). Megatron-Bridge's bridge configures
``position_embedding_type="rope"`` (exaone45_bridge.py:92, asserted in
tests/unit_tests/models/exaone45/test_exaone45_bridge.py:170), so its model passes no position ids
(modelling_exaone45/model.py:417-430) and Megatron's 1-D ``RotaryEmbedding`` (text_model.py:99-110) counts
the sequence. Its ``get_rope_index`` (rope.py:139-286, Qwen3-VL's rule with per-frame video grids) and
multimodal rotary (rope.py:30-136) run only under ``position_embedding_type="mrope"``, which the bridge
never sets. So ``positions_base="index"``: the sequence index on every axis, vision tokens included, as
MiniCPM-V 4.6. transformers ignores the attention mask (pads count on): equal at the valid tokens of
right-padded rows; pads 1 as the house's index families.

Per-layer rotary: EXAONE 4.x rotates only its sliding-window layers; global layers are NoPE
(models/exaone4/modeling_exaone4.py:234 ``if self.sliding_window is None or self.is_sliding``; the bridge's
``no_rope_freq`` is 1 for every layer whose type is not ``"sliding_attention"``, exaone45_bridge.py:77-85).
The layer types are the text config's ``layer_types`` or, absent, every ``sliding_window_pattern``-th layer
global (configuration_exaone4.py:99-108; defaults 32 layers, pattern 4, window 4096 at :81, :95-96): the
registry's pattern is those defaults, an assumption a checkpoint's config overrides
(:func:`layer_sets_of_config`, read by :func:`mrope.from_pretrained`). With ``sliding_window`` null
transformers rotates every layer (:234) while the bridge makes every non-sliding layer NoPE
(test_exaone45_bridge.py:191-201); mrope follows transformers, the checkpoint's own code.

Rotary: 1-D neox (``rotate_half``, modeling_exaone4.py:116-120), the whole head (no partial factor), head_dim
128 (Exaone4Config 4096 / 32, configuration_exaone4.py:79-82), theta 1e6 (the bridge provider's
``rotary_base``, exaone45_provider.py:74). With the same position on every axis the section layout does not
change the rotation; the sections are the bridge's multimodal default [24, 20, 20] interleaved (rope.py:70-90).
Theta and head_dim are assumptions a checkpoint overrides.

Ids: image 67, video 68 (configuration_exaone4_5.py:73-74), vision start 73 and end 74 (the bridge's
defaults, exaone45_bridge.py:144-145; exaone45_provider.py:65-69); a checkpoint's config overrides them.
Sizing: its processors are Qwen2-VL's classes (models/auto/image_processing_auto.py:96,
video_processing_auto.py:61), whose class defaults apply here (patch 14, merge 2, temporal 2 as
configuration_exaone4_5.py:51-53); a checkpoint's preprocessor config overrides them. Each image and each
video is one run of placeholders, ``prod(grid) / merge**2`` tokens (processing_exaone4_5.py:45-53).
"""

from collections.abc import Mapping
from typing import Any

from mrope._errors import LayoutError
from mrope._layer_sets import NOPE, LayerSets
from mrope._rule_checks import NO_CLIP_BUDGET
from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._families.qwen2_vl import QWEN2_VIDEO_FIELDS, QWEN_CONFIG_IDS
from mrope.models._family import ModelFamily

ROPE = "rope"
"""The one rotating position set: the sliding-window layers'."""
_LAYER_TYPES = {"sliding_attention": ROPE, "full_attention": NOPE}
"""Each EXAONE 4.x layer type -> its position set (modeling_exaone4.py:201-202, :234)."""
_DEFAULTS = {"num_hidden_layers": 32, "sliding_window": 4096, "sliding_window_pattern": 4}
"""Exaone4Config's class defaults for what a text config leaves out (configuration_exaone4.py:81, :95-96)."""


def _whole(value: Any, key: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise LayoutError(f"EXAONE text config: {key} must be an int >= {low}; got {value!r}")
    return value


def layer_sets_of_config(text_config: Mapping[str, Any]) -> LayerSets:
    """The layer sets of an EXAONE 4.5 text config (``config.json``'s ``text_config``, a dict).

    Layer ``i`` reads ``"rope"`` when it is a sliding-window layer or the config has no sliding window,
    else ``"nope"`` (modeling_exaone4.py:234). The types are ``layer_types`` (one per
    ``num_hidden_layers``), else derived as Exaone4Config does (configuration_exaone4.py:102-108: layer
    ``i`` is global when ``(i + 1) % sliding_window_pattern == 0``).

    Raises:
        LayoutError: a ``layer_types`` that is not a list of known types, one per layer, or a
            non-integer layer count or pattern.
    """
    values = {**_DEFAULTS, **{k: text_config[k] for k in _DEFAULTS if k in text_config}}
    layers = _whole(values["num_hidden_layers"], "num_hidden_layers", 1)
    types = text_config.get("layer_types")
    if types is None:
        pattern = _whole(values["sliding_window_pattern"], "sliding_window_pattern", 1)
        types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    if not isinstance(types, list | tuple) or len(types) != layers:
        raise LayoutError(
            f"EXAONE text config: layer_types must be a list of {layers} layer types (num_hidden_layers); "
            f"got {types!r}"
        )
    unknown = sorted({str(t) for t in types if t not in _LAYER_TYPES})
    if unknown:
        raise LayoutError(
            f"EXAONE text config: layer_types holds {unknown}; expected only {sorted(_LAYER_TYPES)}"
        )
    if values["sliding_window"] is None:  # no window: every layer rotates (modeling_exaone4.py:234)
        return LayerSets({ROPE: {}}, (ROPE,) * layers)
    return LayerSets({ROPE: {}}, tuple(_LAYER_TYPES[t] for t in types))


FAMILY = ModelFamily(
    name="exaone-4.5",
    model_types=("exaone4_5",),
    aliases=("LGAI-EXAONE/EXAONE-4.5-33B",),
    rules=LayoutRules(
        positions_base="index",
        pad_position=1,
        image_pad_id=67,
        video_pad_id=68,
        vision_start_id=73,
        vision_end_id=74,
        patch_size=14,
        merge_size=2,
        temporal_patch_size=2,
        # Qwen2VLVideoProcessor's class defaults: every frame kept (do_sample_frames False), no clip budget
        frame_sampling="qwen2-vl",
        video_total_pixels=NO_CLIP_BUDGET,
    ),
    spec=RopeSpec(head_dim=128, theta=1e6, mrope_section=(24, 20, 20), section_layout="interleaved"),
    transformers5={},
    packed_input="none",
    exactness="transformers 5.24 (unpadded and right-padded rows' valid tokens; NoPE on its global layers) "
    "and Megatron-Bridge 067f987df's configured rope path (written out in the tests): the sequence index "
    "on every axis, pads 1",
    config_ids=QWEN_CONFIG_IDS,
    checkpoint_fields=QWEN2_VIDEO_FIELDS,
    layer_sets=layer_sets_of_config({}),
    config_layer_sets=layer_sets_of_config,
)
