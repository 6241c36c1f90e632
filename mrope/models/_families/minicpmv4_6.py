"""MiniCPM-V 4.6 (``minicpmv4_6``): every token, vision tokens included, at its index in the sequence.

transformers 5.24 (models/minicpmv4_6/modeling_minicpmv4_6.py:734-741) passes ``position_ids=None`` to its
Qwen3.5 text model, which writes ``arange(seq_len)`` on every axis (models/qwen3_5/modeling_qwen3_5.py:1242-1245);
mlx-vlm (Blaizzy/mlx-vlm, PyPI ``mlx-vlm`` 0.7.10, ``mlx_vlm/models/minicpmv4_6``) does the same
(minicpmv4_6.py:254-259 ``_set_position_state``, called by ``get_input_embeddings`` at :356; deltas 0), and
its ``get_rope_index`` with an attention mask gives ``cumsum(mask) - 1`` and 1 at masked slots
(language.py:23-32): pads 1. ``positions_base="index"``. Both ignore the mask in the model path, so a padded
row's pads count on (transformers 5.24 and mlx-vlm alike): equal at the valid tokens of right-padded rows,
not expressible for left-padded ones (they start at the pad count).
Segments: each crop of a picture (thumbnail and slices) as ``Image(grid)``, markers as text; a video as
the images its processor stacks its frames into (processing_minicpmv4_6.py:603-604): ``Video`` is refused.
Merge: ``downsample_mode`` ``"16x"`` (config.py:129) merges 4x4 patches, ``"4x"`` 2x2
(minicpmv4_6.py:319-321, processing_minicpmv4_6.py:1453-1462), as MiniCPM-V 4.7's.
Sizing: the processor's slicing (processing_minicpmv4_6.py) is not in :mod:`mrope.media`; give grids.
Rotary: the text model is Qwen3.5's (language.py:5-8): interleaved [11, 11, 10], partial 0.25, theta 1e7
(mlx-vlm config.py:79-106 defaults; transformers 5.24's class default has theta 1e4 and no section);
head_dim 256 is Qwen3.5's; theta and head_dim are assumptions a checkpoint overrides. With the
same position on every axis the section layout does not change the rotation.
"""

from mrope._rules import LayoutRules
from mrope.models._families import minicpmv4_7, qwen3_5
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="minicpm-v-4.6",
    model_types=("minicpmv4_6",),
    aliases=(),
    rules=LayoutRules(
        merge_size=4,
        patch_size=14,  # config.py:37 VisionConfig.patch_size
        positions_base="index",
        image_bounds="none",  # its slicing is not in mrope.media
        video_support="none",
        **qwen3_5.QWEN3_5_IDS,  # stand-ins: positions do not depend on ids (its processor writes <unk> pads)
        pad_position=1,
    ),
    spec=qwen3_5.FAMILY.spec,
    config_partial_rotary_factor=qwen3_5.FAMILY.config_partial_rotary_factor,
    transformers5={},
    packed_input="none",
    exactness="transformers 5.24 (unpadded and right-padded rows' valid tokens) and mlx-vlm 0.7.10 "
    "get_rope_index (written out in the tests): the sequence index on every axis, pads 1",
    checkpoint_fields={
        "config:downsample_mode": minicpmv4_7.DOWNSAMPLE_MODE,
        "image:downsample_mode": minicpmv4_7.DOWNSAMPLE_MODE,
    },
)
