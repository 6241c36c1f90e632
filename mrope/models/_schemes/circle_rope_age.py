"""Circle-RoPE with AGE (``circle-rope-age``): even layers rotate by Circle-RoPE's positions, odd by M-RoPE's.

Source: lose4578/CircleRoPE at 063fb2c, ``code/modular_qwen2_5_vl_circle_rope.py``: ``AGE_index_dict``
:17-27 (``strategy_4``, the released ``code/config.json``'s ``AGE_mode``: layer ``i`` takes the circle
index when ``i`` is even), the two index sets :310-329 (``get_rope_index`` with and without
``use_m_index``; the M-RoPE set is Qwen2.5-VL's own block, ``_get_m_index`` :76-84) and each layer's
rotary from its set, ``Qwen2_5_VLModel_AGE_mode.forward`` :431-441. The scheme's own rules are the
circle set's, whose decode delta the authors' model uses for every layer (:283-308).
"""

from mrope._layer_sets import LayerSets
from mrope.models._family import ModelFamily
from mrope.models._schemes import circle_rope

SCHEME: ModelFamily = circle_rope.SCHEME.replace(
    name="circle-rope-age",
    layer_sets=LayerSets(
        {"circle": {"spatial": "circle"}, "mrope": {"spatial": "offset"}}, ("circle", "mrope")
    ),
    exactness="research scheme on Qwen2.5-VL's ids: lose4578/CircleRoPE AGE strategy_4 (Circle-RoPE on "
    "even layers, Qwen2.5-VL's M-RoPE on odd)",
)
"""Circle-RoPE's AGE, strategy 4 (the released configuration)."""
