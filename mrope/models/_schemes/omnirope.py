"""OmniRoPE (``omnirope``): spatial-reset positions with chunked frequencies, on Qwen3-VL's ids and sizing.

Positions: OmniGen2's (Wu et al., arXiv 2506.18871), repo VectorSpaceLab/OmniGen2 at 0f72fa9,
omnigen2/models/transformers/repo.py:53-101: caption token ``i`` at ``(i, i, i)``, then each image's
tokens at ``(shift, row, col)``, the shift starting at the caption length and growing by
``max(rows, cols)`` after each reference image. The MRoPE-Interleave authors' re-implementation (repo
JJJYmmm/Multimodal-RoPEs at cd413b9, multimodal_ropes/pos_design/omnirope.py:30-121) writes the same rule
for Qwen3-VL's prompts (wrapper tokens, videos: t the running shift plus ``frame * temporal_stride``, the
shift advancing by ``max(temporal extent, H', W')``); those positions equal MRoPE-Interleave's with
spatial reset (the token after a block lands on the same shift either way), so the rules are
``mrope-interleave``'s. Unwrapped images merged by OmniGen2's patch size give OmniGen2's own sequence.
Frequencies: the re-implementation's, entry.py:90 -> freq_allocation/mrope.py:44-56 (chunked sections,
configs/omnirope.py:17-18 ``[16, 24, 24]``) on the model's theta (freq_allocation/vanilla.py:39-52);
OmniGen2's own DiT rotation is the ``"omnigen2"`` VideoRope (mrope.models._video_models).
"""

from dataclasses import replace

from mrope.models._schemes import mrope_interleave

SCHEME = mrope_interleave.SCHEME.replace(
    name="omnirope",
    aliases=("omni-rope",),
    spec=replace(mrope_interleave.SCHEME.spec, section_layout="chunked", mrope_section=(16, 24, 24)),
    exactness="research scheme on Qwen3-VL's ids: positions of VectorSpaceLab/OmniGen2 repo.py (unwrapped "
    "images) and JJJYmmm/Multimodal-RoPEs pos_design/omnirope.py (spatial reset), frequencies of "
    "freq_allocation/mrope.py (chunked 16/24/24)",
)
"""OmniRoPE with the re-implementation's default sections."""
