"""MHRoPE (``mhrope``): each key-head group one axis at full frequency, on Qwen3-VL's ids and sizing.

Source: Huang et al., "Revisiting Multimodal Positional Encoding in Vision-Language Models" (ICLR 2026),
repo JJJYmmm/Multimodal-RoPEs at cd413b9: frequencies multimodal_ropes/freq_allocation/mhrope.py:20-44
(key head group ``m`` of ``mrope_section`` heads takes axis ``m`` at every frequency; query heads read
their key head's, README ``apply_multihead_rotary_pos_emb``), positions entry.py:70 (MRoPE-Interleave's
``get_mrope_interleave_index``, run with ``spatial_reset True, temporal_stride 1``), defaults
configs/mhrope.py:22-23 (``mrope_section [2, 3, 3]`` over 8 key heads). The spec is per head
(``section_layout="per_head"``): its pair table has 8 heads, so q and k need a multiple of 8 heads.
"""

from dataclasses import replace

from mrope.models._schemes import mrope_interleave

SCHEME = mrope_interleave.SCHEME.replace(
    name="mhrope",
    aliases=(),
    spec=replace(mrope_interleave.SCHEME.spec, section_layout="per_head", mrope_section=(2, 3, 3)),
    exactness="research scheme on Qwen3-VL's ids: JJJYmmm/Multimodal-RoPEs freq_allocation/mhrope.py "
    "(per key-head axis) with MRoPE-Interleave's spatial-reset positions",
)
"""MHRoPE over 8 key heads: 2 for t, 3 for h, 3 for w."""
