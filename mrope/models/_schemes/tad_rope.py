"""TAD-RoPE (``tad-rope``): sequence index plus frame index on every axis, in half steps, on Qwen2-VL's ids.

Source: TAD-RoPE (Temporal-Aware Dual RoPE) is from TC-LLaVA (Gao et al., "TC-LLaVA: Rethinking the
Transfer from Image to Video Understanding with Temporal Considerations", 2024, arXiv 2409.03206), whose
own code was not found; the code run is VideoRoPE's port on Qwen2-VL (repo Wiselnn570/VideoRoPE at
7712ca3, videorope-transformer/modeling_videorope.py), the same as hrlics/HoPE's (modeling_hope.py at
85b76c0, :1663-1765, :1888-1989, :2380-2396):

- positions: ``get_vanilla_rope_index`` :1628-1729 (every token its index in the sequence) plus
  ``get_time_rope_index`` :1732-1833 (text one per token; every token of frame ``f`` of a block at ``s``
  has ``s + f`` on every axis, text resumes at ``s + T'``), summed at :2108-2115 and :2216-2223. Text
  steps by 2, and decoding too: ``2 * cache_position + delta`` (:2230-2233; the vLLM port,
  videorope-vllm/rotary_embedding.py:1372-1375).
- rotation: Qwen2-VL's (``apply_multimodal_rotary_pos_emb``, equal rows: 1-D RoPE).

mrope keeps one position per text token (its decode rule, ``cache_position + delta``), so the scheme's
positions are TAD-RoPE's halves (``spatial="token_time"``: float32, exact below 2**23) and its spec
doubles every frequency (``linear`` scaling, factor 0.5: ``inv_freq / 0.5``, exact in fp32), so each
angle ``(p / 2) * (2 inv_freq)`` is the fp32 value of TAD-RoPE's ``p * inv_freq``. Positions read from
this scheme are half the authors'; a model's own rotary needs the scheme's spec with them.
"""

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="tad-rope",
    model_types=(),
    aliases=("tad",),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="token_time"),
    spec=qwen2_vl.FAMILY.spec.with_scaling(type="linear", factor=0.5),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: Wiselnn570/VideoRoPE modeling_videorope.py tad_rope "
    "(sequence index plus frame index), positions in half steps with doubled frequencies",
)
"""TAD-RoPE as VideoRoPE's and HoPE's code runs it."""
