"""mrope: multimodal M-RoPE coordinates (t, h, w) for vision-language models, and the op that applies them.

The core (spec, rules, segments, builder, tokens) is pure numpy; :mod:`mrope.vision` reads media,
:mod:`mrope.ops` rotates q and k with torch or a Triton kernel, :mod:`mrope.testing` holds invariance
assertions for users' test suites.
"""

from mrope.builder import (
    Batch,
    MRopeWarning,
    Positions,
    Span,
    build_batch,
    build_positions,
    next_positions,
    text_positions,
)
from mrope.errors import ApplyError, LayoutError, MediaError, MRopeError, SpecError, TokenError
from mrope.rules import LayoutRules
from mrope.segments import Image, Text, Video
from mrope.spec import RopeScaling, RopeSpec
from mrope.tokens import get_rope_index, rope_index

__version__ = "0.1.0"

__all__ = [
    "ApplyError",
    "Batch",
    "Image",
    "LayoutError",
    "LayoutRules",
    "MRopeError",
    "MRopeWarning",
    "MediaError",
    "Positions",
    "RopeScaling",
    "RopeSpec",
    "Span",
    "SpecError",
    "Text",
    "TokenError",
    "Video",
    "build_batch",
    "get_rope_index",
    "rope_index",
    "build_positions",
    "next_positions",
    "text_positions",
]
