"""HoPE (``hope``): VideoRoPE's diagonal layout at a temporal scale, t's frequencies NoPE, on Qwen2-VL's ids.

Source: Li et al., "HoPE: Hybrid of Position Embedding for Long Context Vision-Language Models" (NeurIPS
2025, arXiv 2505.20444), repo hrlics/HoPE at 85b76c0, modeling_hope.py: transformers 4.45.2's Qwen2-VL
modeling with the scheme's changes marked ``# MODIFIED`` (README.md:51-55), so the scheme takes Qwen2-VL's
token ids, sizing and spec.

- positions, Dynamic Temporal Scaling (``get_dynamic_rope_index`` :1539-1661): VideoRoPE's diagonal
  layout (h and w offset from t around the frame centre, text one past the last t, the delta one past the
  last t, :1638) with frame ``i`` at ``t = s + scale * i``. Training draws ``scale`` per image or video
  from ``[0.5, 0.75, 1.0, 1.25, 1.5]`` (:2257, ``random.choice`` at :1619); inference takes one scale the
  user chooses (:2366-2367 refuse to run without one). The scheme's ``temporal_stride`` is that scale:
  0.75, the value of the authors' V-NIAH evaluation (vision_niah/eval_vision_niah.py:193-195); another is
  ``rules={"temporal_stride": s}``. Positions are float32 (a stride that is not a whole number).
- rotation, Hybrid Frequency Allocation (``apply_hybrid_multimodal_rotary_pos_emb`` :266-293): VideoRoPE's
  frequencies (the first ``s_h + s_w`` alternate h and w) with t's lowest ``s_t`` frequencies NoPE (cos 1,
  sin 0): ``section_layout="hw_alternating"``, ``nope_axes=(0,)``.
"""

from dataclasses import replace

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="hope",
    model_types=(),
    aliases=(),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="diagonal", advance="time", temporal_stride=0.75),
    spec=replace(qwen2_vl.FAMILY.spec, section_layout="hw_alternating", nope_axes=(0,)),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: hrlics/HoPE modeling_hope.py get_dynamic_rope_index "
    "(diagonal, inference scale 0.75) and apply_hybrid_multimodal_rotary_pos_emb (t frequencies NoPE)",
)
"""HoPE at the inference scale of the authors' V-NIAH evaluation, 0.75."""
