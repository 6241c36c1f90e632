"""VideoRoPE (``videorope``): diagonal layout, strided time, low frequencies for t, on Qwen2-VL's ids.

Source: Wei et al., "VideoRoPE: What Makes for Good Video Rotary Position Embedding?" (ICML 2025), repo
Wiselnn570/VideoRoPE at 7712ca3, videorope-transformer/modeling_videorope.py: positions
``get_t_scale_rope_index`` :1507-1626 (t advances by ``scale_factor`` per frame, 2.0 at :2104 and :2208;
h and w are t plus the token's offset from the frame centre, ``- (H' - 1) // 2``; text resumes one past
the last t, :1574 and :1596), frequencies ``apply_m_modify_multimodal_rotary_pos_emb`` :258-283 (the
first ``s_h + s_w`` frequencies alternate h (even) and w (odd), the lowest ``s_t`` carry t). That file is
Qwen2-VL's modeling with these changes, so the scheme takes Qwen2-VL's rules and spec.
"""

from dataclasses import replace

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="videorope",
    model_types=(),
    aliases=(),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="diagonal", advance="time", temporal_stride=2),
    spec=replace(qwen2_vl.FAMILY.spec, section_layout="hw_alternating"),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: Wiselnn570/VideoRoPE modeling_videorope.py "
    "get_t_scale_rope_index (diagonal, scale 2) and apply_m_modify_multimodal_rotary_pos_emb",
)
"""VideoRoPE with its released scale factor 2."""
