"""Put mrope's invariance assertions in your own test suite (a pytest file: copy what you need).

Run: ``python -m pytest examples/invariance_tests.py`` (or ``python examples/invariance_tests.py``).

:mod:`mrope.testing` checks what the model sees, the q.k scores after M-RoPE, not only the coordinates.
The crop and tile cases here start from a real image file, sized by the model's rules through
:func:`mrope.media.load_image` exactly as a preprocessing job would size it:

- a crop aligned to the merge grid at the same scale scores like that region of the whole image
  (and under ``crop="keep"`` gets exactly its coordinates);
- a tiled image (InternVL-style tiles, in any emission order) scores like the untiled image under the
  ``global`` tile rule;
- shifting every coordinate changes no score; prefill in chunks plus decode equals the whole sequence;
  a moment sampled at 1 fps and at 2 fps gets the same time under Qwen2.5-VL.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

import mrope
from mrope import Image, Text, Video
from mrope.media import load_image
from mrope.testing import (
    assert_crop_invariant,
    assert_prefill_decode_consistent,
    assert_tile_invariant,
    assert_time_aligned,
    assert_translation_invariant,
)

MODELS = ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"]


@pytest.fixture(scope="module")
def photo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 672 x 448 (w x h) photo-like test image: every side a multiple of 28 and 32, so no preset
    rescales it and a crop on the 28-pixel grid stays at the same scale."""
    h, w = 448, 672
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([xx * 255 // w, yy * 255 // h, (xx + yy) % 256], axis=2).astype(np.uint8)
    path = tmp_path_factory.mktemp("media") / "photo.png"
    PILImage.fromarray(rgb, "RGB").save(path)
    return path


@pytest.mark.parametrize("crop_rule", ["reset", "keep"])
def test_crop_scores_like_the_same_region(photo: Path, crop_rule: str) -> None:
    rules = {"crop": crop_rule}
    whole = load_image(photo, model="qwen2-vl", rules=rules)
    crop = load_image(photo, model="qwen2-vl", rules=rules, crop=(112, 224, 224, 280))  # top, left, h, w
    assert crop.origin == (4, 8)  # merged tokens: 112 / 28, 224 / 28
    prompt = [Text(6)]
    found = assert_crop_invariant(  # the crop carries its origin; under "keep" its coordinates give it
        mrope.build_positions([*prompt, whole], model="qwen2-vl", rules=rules),
        mrope.build_positions([*prompt, crop], model="qwen2-vl", rules=rules),
    )
    assert found == (crop.origin if crop_rule == "keep" else None)


@pytest.mark.parametrize("model", ["qwen2.5-vl", "qwen3-vl"])
def test_tiles_score_like_the_untiled_image(photo: Path, model: str) -> None:
    tiled = load_image(photo, model=model, tiling={"tile_size": 224, "max_tiles": 6, "thumbnail": False})
    assert tiled.tiles == (3, 2)  # (cols, rows) chosen from the 3:2 aspect ratio
    untiled = Image(grid=tiled.grid)  # the same pixels as one block
    reference = mrope.build_positions([Text(4), untiled], model=model)
    assert_tile_invariant(mrope.build_positions([Text(4), tiled], model=model), reference)
    shuffled = dataclasses.replace(tiled, tile_order=(5, 2, 0, 4, 1, 3))
    assert_tile_invariant(mrope.build_positions([Text(4), shuffled], model=model), reference)


def test_independent_tiles_are_not_tile_invariant(photo: Path) -> None:
    """The assertion fails where the rule breaks: each tile as its own block loses the geometry."""
    tiled = load_image(photo, model="qwen2-vl", tiling={"tile_size": 224, "thumbnail": False})
    rules = {"tiles": "independent"}
    with pytest.raises(AssertionError, match="tile geometry lost"):
        assert_tile_invariant(
            mrope.build_positions([tiled], rules=rules, model="qwen2-vl"),
            mrope.build_positions([Image(grid=tiled.grid)], rules=rules, model="qwen2-vl"),
        )


@pytest.mark.parametrize("model", MODELS)
def test_translation_and_prefill_decode(photo: Path, model: str) -> None:
    segments = [Text(5), load_image(photo, model=model), Text(7)]
    assert_translation_invariant(mrope.build_positions(segments, model=model), shift=(1000, -3, 17))
    assert_prefill_decode_consistent(segments, n_decode=16, model=model, chunk=64)


def test_same_moment_same_time_at_two_rates() -> None:
    # Qwen2.5-VL's t is in half seconds: patch i at 1 fps and patch 2i at 2 fps start at the same second
    assert_time_aligned(
        mrope.build_positions([Video(grid=(4, 8, 8), fps=1.0)], model="qwen2.5-vl"),
        mrope.build_positions([Video(grid=(8, 8, 8), fps=2.0)], model="qwen2.5-vl"),
    )


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", *sys.argv[1:]]))
