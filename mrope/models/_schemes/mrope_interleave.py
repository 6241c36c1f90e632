"""MRoPE-Interleave with spatial reset (``mrope-interleave``) on Qwen3-VL's token ids and sizing.

Source: Huang et al., "Revisiting Multimodal Positional Encoding in Vision-Language Models" (ICLR 2026),
repo JJJYmmm/Multimodal-RoPEs at cd413b9: positions multimodal_ropes/pos_design/mrope_i.py:104-132 (t
strided from the block start, h and w from 0, the vision end token one past the block counted as if it
were anchored), frequencies freq_allocation/mrope_i.py:19-24 (interleaved, Qwen3-VL's own layout).
The authors' code is written against Qwen3-VL (pos_design/mrope_i.py:17-23: a video is split into
one-frame blocks after timestamps), so the scheme takes Qwen3-VL's rules; their README runs it with
``mrope_section [24, 20, 20], temporal_stride 1, spatial_reset True`` and Qwen3-VL's theta 5e6.

IL-RoPE (arXiv 2505.05472) is this scheme as the same repository implements it: configs/ilrope.py:4-28
is MRoPE-Interleave's config with spatial reset required, entry.py:90 its interleaved frequencies, and
pos_design/ilrope.py:4-5 OmniRoPE's positions, which equal these; hence the alias ``il-rope``.
"""

from mrope.models._families import qwen3_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen3_vl.FAMILY.replace(
    name="mrope-interleave",
    model_types=(),
    aliases=("mrope-i", "il-rope", "ilrope"),
    rules=qwen3_vl.FAMILY.rules.replace(spatial="reset", advance="block", temporal_stride=1),
    transformers5={},
    exactness="research scheme on Qwen3-VL's ids: JJJYmmm/Multimodal-RoPEs pos_design/mrope_i.py "
    "(spatial reset) and freq_allocation/mrope_i.py (interleaved)",
)
"""MRoPE-Interleave with spatial reset."""
