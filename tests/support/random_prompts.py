"""Random multimodal prompts for a tiny model's family, and that model's own ``get_rope_index`` on them
(the expected positions of tests that compare against transformers)."""

from __future__ import annotations

import numpy as np

import mrope
from mrope import Image, Text, Video
from support import tiny_vlm as tv
from support.hf_reference import own_get_rope_index


def models_own(name: str, segments: list) -> np.ndarray:
    """The family's own get_rope_index on one prompt: positions ``[A, T]``."""
    net = tv.model(name)
    return own_get_rope_index(net, tv.inputs(name, [segments], with_pixels=False))[0]


def random_segments(rng: np.random.Generator, rules: mrope.LayoutRules, video: bool) -> list:
    """Text, then 1-3 images or videos (random grids and fps), each followed by text."""
    m, tm = rules.merge_size, rules.temporal_merge_size

    def side() -> int:
        return m * int(rng.integers(1, 4))

    segments = [Text(tv.tokenize("x" * int(rng.integers(1, 12))))]
    for _ in range(int(rng.integers(1, 4))):
        if video and rng.random() < 0.5:
            fps = float(rng.choice([0.5, 1.0, 2.0]))
            segments.append(Video(grid=(tm * int(rng.integers(1, 4)), side(), side()), fps=fps))
        else:
            segments.append(Image(grid=(1, side(), side())))
        segments.append(Text(tv.tokenize("y" * int(rng.integers(1, 9)))))
    return segments
