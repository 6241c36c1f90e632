"""OmniRoPE's positions held to OmniGen2's own code (its authors', not a re-implementation).

Reference: VectorSpaceLab/OmniGen2 at 0f72fa9, ``omnigen2/models/transformers/repo.py:53-101``, written out in
``support.omnigen2_ref.omnigen2_positions`` (file and lines there). OmniGen2's DiT sequence is a caption,
then reference images, then the output image, each image its latent in ``p x p`` patches with no token
between them. mrope gives it with ``model="omnirope"``, unwrapped images (``Image(wrap=False)``) of grid
``(1, latent rows, latent columns)`` and ``merge_size`` the transformer's ``patch_size`` (Qwen3-VL's 2 is
OmniGen2's default). Checked on random prompts (caption length, 0-3 references of random sizes, output
image, patch 1, 2 or 4), with negative controls.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.omnigen2_ref import DEFAULT_CONFIG, omnigen2_positions

import mrope
from mrope.models import video_rope

SEEDS = range(16)


def _prompt(seed: int) -> tuple[int, list[tuple[int, int]], tuple[int, int], int]:
    """A caption length (0 included), 0-3 reference latents, the output latent and the patch size;
    latent sides are whole patches (OmniGen2's patch embedding reshapes into them,
    transformer_omnigen2.py:507, :521)."""
    rng = np.random.default_rng(seed)
    patch = int(rng.choice([2, 2, 1, 4]))

    def side() -> int:
        return patch * int(rng.integers(1, 24 // patch + 2))

    references = [(side(), side()) for _ in range(int(rng.integers(0, 4)))]
    caption = int(rng.integers(1, 41)) if seed % 5 else 0  # every fifth prompt: no caption
    return caption, references, (side(), side()), patch


def _segments(caption: int, references: list, output: tuple[int, int], wrap: bool = False) -> list:
    text = [mrope.Text(caption)] if caption else []
    return text + [mrope.Image(grid=(1, h, w), wrap=wrap) for h, w in [*references, output]]


def _mrope_positions(caption: int, references: list, output: tuple, patch: int, **kw) -> np.ndarray:
    segments = _segments(caption, references, output, **kw)
    return mrope.build_positions(segments, model="omnirope", rules={"merge_size": patch}).ids


@pytest.mark.parametrize("seed", SEEDS)
def test_builder_equals_omnigen2(seed: int) -> None:
    caption, references, output, patch = _prompt(seed)
    got = _mrope_positions(caption, references, output, patch)
    want = omnigen2_positions(caption, references, output, patch)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_the_prompts_cover_the_cases() -> None:
    """The random prompts include no caption, no reference, three references, and every patch size."""
    prompts = [_prompt(seed) for seed in SEEDS]
    assert any(p[0] == 0 for p in prompts)
    assert {len(p[1]) for p in prompts} == {0, 1, 2, 3}
    assert {p[3] for p in prompts} == {1, 2, 4}


@pytest.mark.parametrize("seed", range(4))
def test_latent_positions_of_the_output_image_alone(seed: int) -> None:
    """``mrope.latent_positions`` of the omnigen2 rope numbers one latent as OmniGen2 numbers an output
    image with no caption and no reference (t at shift 0)."""
    rope = video_rope(DEFAULT_CONFIG)
    _, _, (height, width), _ = _prompt(seed)
    height, width = 2 * height, 2 * width  # whole patches of OmniGen2's patch 2
    got = mrope.latent_positions(rope, 1, height, width)
    np.testing.assert_array_equal(got, omnigen2_positions(0, [], (height, width), 2))


def test_negative_controls() -> None:
    """The check can fail, and these are where mrope's other layouts part from OmniGen2's:

    - wrapped images (Qwen3-VL's ``<|vision_start|>`` / ``<|vision_end|>``, the builder's default): each
      wrapper takes a position, so with the wrappers left out the first image's t is one past OmniGen2's
      and each later image's two further (h and w unchanged);
    - Qwen3-VL's own rules (h and w offset by the block start, the ``max+1`` advance);
    - a reference whose shift grew by ``max + 1``.
    """
    caption, references, output, patch = 5, [(8, 4), (2, 6)], (4, 4), 2
    want = omnigen2_positions(caption, references, output, patch)
    segments = _segments(caption, references, output, wrap=True)
    pos = mrope.build_positions(segments, model="omnirope", rules={"merge_size": patch})
    wrappers = [s.start for s in pos.spans if s.kind == "wrapper"]
    unwrapped = np.delete(pos.ids, wrappers, axis=1)
    assert len(wrappers) == 6 and unwrapped.shape == want.shape
    np.testing.assert_array_equal(unwrapped[1:], want[1:])
    images = np.split(unwrapped[0, caption:] - want[0, caption:], [8, 8 + 3])
    assert [np.unique(t).tolist() for t in images] == [[1], [3], [5]]
    qwen = mrope.build_positions(_segments(caption, references, output), model="qwen3-vl").ids
    assert qwen.shape == want.shape and not np.array_equal(qwen, want)
    plus_one = want.copy()
    plus_one[0, caption + 8 :] += 1  # the second reference and the output one further
    assert not np.array_equal(_mrope_positions(caption, references, output, patch), plus_one)
