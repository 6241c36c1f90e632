"""MiniMax-M3-VL (``minimax_m3_vl``): every token, image and video tokens included, at its index in the sequence.

transformers 5.24 (models/minimax_m3_vl/modeling_minimax_m3_vl.py:1459-1466) hands the positions it is
given, none by default, to its text model, which counts ``arange(seq_len) + past`` over the whole row
(:757-760): a 1-D rotary, no ``get_rope_index``. NVIDIA Megatron-Bridge
(``src/megatron/bridge/models/minimax_m3/modeling_minimax_m3_vl.py``:515-517, "standard 1D RoPE",
:566-569) passes its step's ``position_ids`` to a Megatron GPT model with ``position_embedding_type="rope"``
(minimax_m3_bridge.py:314). mlx-vlm (PyPI ``mlx-vlm`` 0.7.10, ``mlx_vlm/models/minimax_m3_vl/language.py``
:1938-1956 ``get_rope_index``) gives ``arange(seq_len) - left_pad``, deltas 0: a left-padded row's valid
tokens start at 0 and its pads sit at ``-left_pad .. -1``, a constant no rule writes; transformers 5.24
ignores the mask, so its pads count on (a left-padded row starts at its pad count). ``positions_base="index"``:
equal to all three on unpadded rows and at the valid tokens of right-padded rows, and to mlx-vlm at the
valid tokens of left-padded rows. Pads 1 (no reference writes one value there).
Segments: images as Qwen2-VL's (image_processing_minimax_m3_vl.py:57-83 ``smart_resize``, size
``shortest_edge`` 4 * 28 * 28 .. ``longest_edge`` 451584 at :90, patch 14, merge 2, temporal 2 at :97-99),
wrapped in ``]<]start of image[>[`` / ``]<]end of image[>[`` (processing_minimax_m3_vl.py:42-43; ids
200029 / 200030, mlx-vlm config.py:290-293); a video (processing_minimax_m3_vl.py:59-83) is one wrapped
block per temporal patch, each after ``]<]{t:.1f} seconds[>[`` with ``t`` its first frame's time
(``frames_indices[min(i * temporal_patch_size, n - 1)] / fps``: the timestamps rule, ``timestamp_time="first"``).
Its video processor (video_processing_minimax_m3_vl.py) neither samples nor, called by the processor,
resizes frames, and splits a clip's grid into chunks of 4 temporal patches (one clip's tokens all the
same): mrope does not size its videos (``video_support="grids"``), give ``Video(grid)``.
Rotary: 1-D neox (``rotate_half``, modeling_minimax_m3_vl.py:365-405) on the first ``rotary_dim`` 64 of 128
channels, theta 5e6 (configuration_minimax_m3_vl.py:79, :87, :108; Megatron-Bridge ``rotary_percent =
rotary_dim / head_dim``, minimax_m3_bridge.py:333-337; mlx-vlm config.py:66-68). One section on axis 0:
every axis holds the same position, so it rotates as the 1-D rotary. transformers 5.24 reads only
``rope_parameters.partial_rotary_factor`` (modeling_minimax_m3_vl.py:309), not ``rotary_dim``: a text
config without the factor rotates whole heads there (``config_partial_rotary_factor`` 1.0).
"""

from mrope._rules import LayoutRules
from mrope._spec import RopeSpec
from mrope.models._family import ModelFamily

FAMILY = ModelFamily(
    name="minimax-m3-vl",
    model_types=("minimax_m3_vl", "minimax_m3_vl_text"),
    aliases=("MiniMaxAI/MiniMax-M3",),
    rules=LayoutRules(
        merge_size=2,
        patch_size=14,
        temporal_patch_size=2,
        temporal="timestamps",
        timestamp_format="]<]{:.1f} seconds[>[",
        timestamp_position="before",
        timestamp_time="first",
        positions_base="index",
        pad_position=1,
        vision_start_id=200029,
        vision_end_id=200030,
        image_pad_id=200025,  # configuration_minimax_m3_vl.py:200 image_token_index
        video_pad_id=200026,  # :201 video_token_index
        image_min_pixels=4 * 28 * 28,
        image_max_pixels=451584,
        video_support="grids",
    ),
    spec=RopeSpec(head_dim=128, rotary_dim=64, theta=5e6, mrope_section=(32, 0, 0), section_layout="chunked"),
    transformers5={},
    packed_input="none",
    exactness="transformers 5.24 (its processor's text expansion; its text model's arange: unpadded rows, "
    "right-padded rows' valid tokens) and mlx-vlm 0.7.10 get_rope_index (written out in the tests; valid "
    "tokens of padded rows): the sequence index on every axis, pads 1; 1-D rotary as 5.24's and "
    "Megatron-Bridge's",
    config_ids={"image_token_index": "image_pad_id", "video_token_index": "video_pad_id"},
)
