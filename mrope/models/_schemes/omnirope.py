"""OmniRoPE (``omnirope``): spatial-reset positions with chunked frequencies, on Qwen3-VL's ids and sizing.

Source: OmniGen2's layout (Wu et al., arXiv 2506.18871) as the MRoPE-Interleave authors re-implement it;
OmniGen2's own code was not read. Repo JJJYmmm/Multimodal-RoPEs at cd413b9: positions
multimodal_ropes/pos_design/omnirope.py:30-121 (every visual block's h and w from 0, t the running shift
plus ``frame * temporal_stride``, the shift then advancing by ``max(temporal extent, H', W')``),
frequencies entry.py:90 -> freq_allocation/mrope.py:44-56 (chunked sections, configs/omnirope.py:17-18
``[16, 24, 24]``) on the model's theta (freq_allocation/vanilla.py:39-52). Those positions equal
MRoPE-Interleave's with spatial reset (the token after a block lands on the same shift either way), so the
rules are ``mrope-interleave``'s; only the rotation differs.
"""

from dataclasses import replace

from mrope.models._schemes import mrope_interleave

SCHEME = mrope_interleave.SCHEME.replace(
    name="omnirope",
    aliases=("omni-rope",),
    spec=replace(mrope_interleave.SCHEME.spec, section_layout="chunked", mrope_section=(16, 24, 24)),
    exactness="research scheme on Qwen3-VL's ids: JJJYmmm/Multimodal-RoPEs pos_design/omnirope.py "
    "(spatial reset) and freq_allocation/mrope.py (chunked 16/24/24)",
)
"""OmniRoPE with the re-implementation's default sections."""
