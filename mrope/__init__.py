"""mrope: multimodal M-RoPE coordinates (t, h, w) for vision-language models, and the op that applies them.

The core (spec, rules, segments, the builder and its layout engines, the token-id interface) is pure numpy; :mod:`mrope.media` reads media,
:mod:`mrope.ops` rotates q and k with torch or a Triton kernel, :mod:`mrope.testing` holds invariance
assertions for users' test suites.
"""

from mrope._builder import (
    audio_tokens,
    build_batch,
    build_positions,
    count_tokens,
    next_positions,
    text_positions,
)
from mrope._caches import cache_info, clear_caches
from mrope._continuation import ConversationState, Turn, continue_positions, conversation_state
from mrope._errors import (
    ApplyError,
    LayoutError,
    MediaError,
    MRopeError,
    MRopeWarning,
    PackingError,
    PatchError,
    ProgramError,
    SpecError,
    TokenError,
)
from mrope._latent_positions import latent_positions
from mrope._layer_sets import LayerSets
from mrope._live_video import VideoChunk, live_video_chunk
from mrope._position_sets import build_position_sets
from mrope._positions import Batch, Positions, Span
from mrope._program import PositionProgram
from mrope._rewind import rewind
from mrope._rules import LayoutRules, rules_digest
from mrope._segments import Audio, Image, Text, Video
from mrope._spec import RopeScaling, RopeSpec
from mrope._speculative import draft_depths, draft_positions, tree_attention_mask
from mrope._token_ids import generation_index, get_rope_index, numpy_rope_index
from mrope._video_rope import VideoRope
from mrope.packing import PackedBatch, PackedRow, pack

__version__ = "0.1.0"

_LAZY = {
    "apply_mrope": "mrope.ops",
    "cos_sin": "mrope.ops",
    "layer_cos_sin": "mrope.ops",
    "rerotate": "mrope.ops",
    "from_pretrained": "mrope._checkpoint",
    "evs_mask": "mrope._pruning",
    "evs_retained_tokens": "mrope._pruning",
    "evs_rule": "mrope._pruning",
    "vidcom2_rule": "mrope._pruning",
    "vidcom2_mask": "mrope._pruning",
    "vidcom2_retained_tokens": "mrope._pruning",
}
_SUBMODULES = (
    "ops",
    "media",
    "testing",
    "pipeline",
    "integrations",
    "schema",
    "models",
    "packing",
)


def __getattr__(name: str):  # torch, PyAV and Pillow load only when their part is used
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"mrope.{name}")
    raise AttributeError(f"module 'mrope' has no attribute {name!r}")


__all__ = [
    "ApplyError",
    "Audio",
    "Batch",
    "Image",
    "LayoutError",
    "LayoutRules",
    "MRopeError",
    "MRopeWarning",
    "MediaError",
    "PackedBatch",
    "PackedRow",
    "PackingError",
    "PatchError",
    "PositionProgram",
    "Positions",
    "ProgramError",
    "RopeScaling",
    "RopeSpec",
    "Span",
    "SpecError",
    "Text",
    "TokenError",
    "Video",
    "apply_mrope",
    "audio_tokens",
    "build_batch",
    "cache_info",
    "clear_caches",
    "generation_index",
    "get_rope_index",
    "numpy_rope_index",
    "build_positions",
    "cos_sin",
    "rerotate",
    "from_pretrained",
    "count_tokens",
    "next_positions",
    "pack",
    "text_positions",
    "ConversationState",
    "Turn",
    "continue_positions",
    "conversation_state",
    "rewind",
    "VideoChunk",
    "live_video_chunk",
    "VideoRope",
    "latent_positions",
    "rules_digest",
    "draft_depths",
    "draft_positions",
    "tree_attention_mask",
    "LayerSets",
    "build_position_sets",
    "layer_cos_sin",
    "evs_mask",
    "evs_retained_tokens",
    "evs_rule",
    "vidcom2_rule",
    "vidcom2_mask",
    "vidcom2_retained_tokens",
]
