"""VRoPE (``vrope``): four symmetric index maps per frame on four position rows, on Qwen2-VL's ids.

Source: Liu et al., "VRoPE: Rotary Position Embedding for Video Large Language Models" (EMNLP 2025), repo
johncaged/VRoPE at 1bb9363, vrope.py: positions ``VRoPE.generate_nd_positions`` :106-154 (per frame the
(h, w) grid summed four ways, ``i + j``, ``i + (W' - 1 - j)``, ``(H' - 1 - i) + j`` and
``(H' - 1 - i) + (W' - 1 - j)``, :117-138; frame ``f`` shifted by ``f (H' + W' - 1)``, :141-142; the
counter then moves on by ``T' (H' + W' - 1)``, :153, so the text after a block is one past its largest
position; an image is one frame, :40-42), text ``generate_1d_positions`` :98-104 (one position on every
channel), channel allocation :148-152 (frequency pair ``p`` reads map ``p % 4``; ``half_time_dim`` is
forced to 0 at :80, so no channel carries time). The file computes positions per channel for any LLM;
the scheme takes Qwen2-VL's ids, sizing and rotary (theta 1e6, head_dim 128, neox), with
``mrope_section (16, 16, 16, 16)`` interleaved: pair ``p`` on row ``p % 4``.
"""

from dataclasses import replace

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="vrope",
    model_types=(),
    aliases=(),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="symmetric", num_axes=4),
    spec=replace(qwen2_vl.FAMILY.spec, mrope_section=(16, 16, 16, 16), section_layout="interleaved"),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: johncaged/VRoPE vrope.py generate_nd_positions "
    "(four symmetric maps, frame shift H'+W'-1) and its channel allocation (pair p on map p % 4)",
)
"""VRoPE as released (no time channels)."""
