"""Falcon-OCR (``falcon_ocr``): a whole image one step on t, float (h, w) on its patches, golden-gate RoPE.

TII's ``falcon-perception`` 1.0.0 (PyPI; tiiuae/Falcon-Perception) is the released code; mlx-vlm 0.7.10
(``mlx_vlm/models/falcon_ocr``) ports it. Not in transformers 5.24 or 5.25 (no ``get_rope_index`` to patch).

Positions: ``positions_base="image_step"`` (:mod:`mrope._layout.image_step`, exact against ``data.py``
``get_pos_thw`` :407-458): an image block ``<|image_cls|>``, four registers, ``H x W`` patch tokens,
``<|end_of_image|>`` (``tokenize_inputs`` :514-521) sits on one t, the patches get float (h, w) spread over
``[-sqrt(H/W), sqrt(H/W)] x [-sqrt(W/H), sqrt(W/H)]`` (:330-357), pads 0 (:455). Patch 16, no merge, one
frame (``get_model_args("ocr")``, ``__init__.py``:45-46, 83-84); ids of the released config (mlx-vlm
``config.py``:44-51: ``img_id`` 227, ``img_end_id`` 230, ``image_cls_token_id`` 244, registers 245-248, the
cls id's next four: the engine reads them so). Images only: its processor first brings the sides into
[64, 1024] px, which mrope does not size (``image_bounds="none"``): give ``Image(grid=(1, h // 16, w // 16))``.

Rotation (``rope.py`` :88-104 ``apply_3d_rotary_emb``): the first half of each head is 1-D RoPE by t on
adjacent pairs at ``theta ** (-2 i / (D/2))`` (``precompute_freqs_cis(head_dim // 2, ...)``,
model.py:334-335): ``spec`` below, every pair on axis 0 of 32 rotary channels of 64. The second half turns
by the learned ``freqs_cis_golden`` ``[n_heads, D/4, 2]`` (model.py:336-340), which only a checkpoint has:
``learned_rotary``. ``head_dim`` 64, 16 heads, 8 kv heads, theta 10000 (``get_model_args("ocr")``;
mlx-vlm config.py:22-29).
"""

from mrope._learned_rotary import LearnedRotary
from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="falcon-ocr",
    model_types=("falcon_ocr",),  # mlx-vlm config.py:11, 19, 41 (its loader picks the module by it)
    aliases=("tiiuae/Falcon-OCR",),  # falcon_perception/__init__.py:236 OCR_MODEL_ID
    rules=LayoutRules(
        positions_base="image_step",
        vision_start_id=244,
        vision_registers=4,
        vision_end_id=230,
        image_pad_id=227,
        video_pad_id=229,
        patch_size=16,
        merge_size=1,
        temporal_patch_size=1,
        video_support="none",
        image_bounds="none",
        pad_position=0,
    ),
    spec=RopeSpec(
        head_dim=64,
        rotary_dim=32,
        theta=10000.0,
        mrope_section=(16, 0, 0),
        section_layout="chunked",
        pairing="gptj",
    ),
    transformers5={},
    packed_input="none",
    exactness="falcon-perception 1.0.0 data.py get_pos_thw (written out in the tests): unpadded and "
    "right-padded rows, t and float32 (h, w) bit for bit; rotation: golden-gate RoPE with the checkpoint's "
    "freqs_cis_golden (rope.py, written out)",
    config_ids={
        "img_id": "image_pad_id",
        "img_end_id": "vision_end_id",
        "image_cls_token_id": "vision_start_id",
    },
    checkpoint_fields={
        "config:spatial_patch_size": "patch_size",
        "config:temporal_patch_size": "temporal_patch_size",
    },
    config_partial_rotary_factor=0.5,
    learned_rotary=LearnedRotary(kind="golden_gate", buffer="freqs_cis_golden"),
)
