"""Cosmos3-Omni (``cosmos3_omni``, nvidia/Cosmos3-Nano): a Qwen3-VL language model and vision tower.

transformers 5.24: get_rope_index (modeling_cosmos3_omni.py:167) equals Qwen3-VL's; its sub-configs are
``qwen3_vl_text`` and ``qwen3_vl_vision``, so the rotary is Qwen3-VL's (read from the text config). The
unified checkpoint's generator, sound and action towers take no positions here. Processor values are
Qwen3-VL's (no released preprocessor values known to differ); its video processor is Qwen3VLVideoProcessor
(5.24 auto mapping), sized with the released Qwen3-VL values, not the class defaults.
"""

from mrope.models._families import qwen3_vl

FAMILY = qwen3_vl.FAMILY.replace(
    name="cosmos3-omni",
    model_types=("cosmos3_omni",),
    aliases=("nvidia/Cosmos3-Nano",),
    exactness="Qwen3-VL rules; its 5.24 Cosmos3Omni get_rope_index (convention='transformers5') and processor (ids, grids)",
)
