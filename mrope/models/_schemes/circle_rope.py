"""Circle-RoPE (``circle-rope``): image grids on a circle orthogonal to the text line, on Qwen2.5-VL's ids.

Source: Wang et al., "Circle-RoPE: Cone-like Decoupled Rotary Positional Embedding for Large
Vision-Language Models" (2025), repo lose4578/CircleRoPE at 063fb2c: positions ``code/circle_rope.py``
:6-214 (:mod:`mrope._layout.circle` writes them out), placed by ``get_rope_index`` in
``code/modular_qwen2_5_vl_circle_rope.py`` :86-189 (block start added on every row, :177; text one past
the block's largest coordinate, :164 and :181; float positions, :185); ``code/config.json`` sets
``radius 10, alpha 0.5, method circle, move_to_origin true`` and Qwen2.5-VL's ``mrope_section [16, 24,
24]``, theta 1e6. That file is Qwen2.5-VL's model with these changes, so the scheme takes Qwen2.5-VL's
rules and spec.
"""

from mrope.models._families import qwen2_5_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_5_vl.FAMILY.replace(
    name="circle-rope",
    model_types=(),
    aliases=(),
    rules=qwen2_5_vl.FAMILY.rules.replace(spatial="circle", circle_radius=10.0, circle_alpha=0.5),
    transformers5={},
    exactness="research scheme on Qwen2.5-VL's ids: lose4578/CircleRoPE circle_rope.py "
    "get_circle_rope_index (radius 10, alpha 0.5, move_to_origin) placed by its get_rope_index",
)
"""Circle-RoPE with the authors' released configuration."""
