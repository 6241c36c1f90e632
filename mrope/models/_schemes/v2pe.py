"""V2PE (``v2pe``): vision tokens a fractional step apart on one line, text on whole numbers, on Qwen2-VL's ids.

Source: Ge et al., "V2PE: Improving Multimodal Long-Context Capability of Vision-Language Models with
Variable Visual Position Encoding" (2024), repo OpenGVLab/V2PE at f96f189,
internvl/model/internvl_chat/modeling_internvl_chat.py ``get_rope_pos_id`` :637-709: text (``<img>``
included) advances by 1 (:659-663); the image's ``N`` tokens follow ``<img>`` at ``p + k * delta`` for
``k = 1 .. N`` with ``delta = rope_pos_id_stride / 256`` (``v2pe_fix``, :665-670; float32 ids from a
float64 ``torch.arange``); ``</img>`` and the text after it resume at ``ceil(last) + 1`` (:670, :696).
Training draws the stride per image from 1 .. 256 (``v2pe_rnd``, :671-677); the README evaluates with 64
(README.md:498-499), so ``delta = 1/4`` here (``rules={"vision_step": ...}`` for another). The rotation
(internvl/model/internlm2/modeling_internlm2.py, class ``V2PE`` :269-309) is 1-D RoPE of the float
positions (fp32 ``torch.outer(pos_id, inv_freq)``, :295): M-RoPE with every row equal, so any section
split reads the same angle. InternVL (InternLM2 ids, 256 tokens per 448-pixel tile) is not in mrope; the
scheme takes Qwen2-VL's token ids, sizing and spec (theta 1e6, head dim 128), laying each of its vision
blocks out as V2PE lays out an image.
"""

from mrope.models._families import qwen2_vl
from mrope.models._family import ModelFamily

SCHEME: ModelFamily = qwen2_vl.FAMILY.replace(
    name="v2pe",
    model_types=(),
    aliases=(),
    rules=qwen2_vl.FAMILY.rules.replace(spatial="sequential", advance="ceil", vision_step=0.25),
    transformers5={},
    exactness="research scheme on Qwen2-VL's ids: OpenGVLab/V2PE modeling_internvl_chat.py "
    "get_rope_pos_id (v2pe_fix, stride 64 of 256: delta 1/4), float32 positions",
)
"""V2PE with its README's evaluation stride (64 of 256 tokens: 1/4 position per vision token)."""
