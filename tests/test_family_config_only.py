"""The config-only families against their own transformers 5.24 ``get_rope_index`` (issue 10).

Each family below reuses an existing rule set with its own ids and sizing (FAMILIES.md section A). For each,
random padded batches (left and right padding, ``attention_mask``, ``mm_token_type_ids``) built by
``mrope.build_batch`` under ``convention="transformers5"`` must equal what the family's own
``get_rope_index`` (the 5.24 method, called on an object holding the family's config class) computes from
the same ``input_ids``, types and grids; ``mrope.get_rope_index`` on those inputs must too, with and
without ``mm_token_type_ids``. The config objects are the 5.24 config classes with their defaults: their
``vision_config.spatial_merge_size`` (2) is the released value, and ``get_rope_index`` reads nothing else.

Adding a family here is one line in ``FAMILIES``.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pytest
import torch

import mrope
from mrope import Image, Text, Video
from mrope.models import get_family

# family -> (transformers module, model class, top-level config class, whether it takes videos)
FAMILIES = {
    "qwen3-vl-moe": ("qwen3_vl_moe", "Qwen3VLMoeModel", "Qwen3VLMoeConfig", True),
    "cosmos3-omni": ("cosmos3_omni", "Cosmos3OmniModel", "Cosmos3OmniConfig", True),
    "qwen3.5": ("qwen3_5", "Qwen3_5Model", "Qwen3_5Config", True),
    "qwen3.5-moe": ("qwen3_5_moe", "Qwen3_5MoeModel", "Qwen3_5MoeConfig", True),
    "qwen4-exp": ("qwen4_exp", "Qwen4ExpModel", "Qwen4ExpConfig", True),
    "cosmos3-edge": ("cosmos3_edge", "Cosmos3EdgeModel", "Cosmos3EdgeConfig", True),
    "cohere-compass": ("cohere_compass", "CohereCompassModel", "CohereCompassConfig", True),
    "glm-4.5v": ("glm4v_moe", "Glm4vMoeModel", "Glm4vMoeConfig", True),
    "glm-4.6v": ("glm46v", "Glm46VModel", "Glm46VConfig", True),
    "glm-ocr": ("glm_ocr", "GlmOcrModel", "GlmOcrConfig", True),
    "paddleocr-vl": ("paddleocr_vl", "PaddleOCRVLModel", "PaddleOCRVLConfig", False),
}


class _Method:
    """The family's ``get_rope_index`` and ``get_vision_position_ids`` on an object holding its config."""

    def __init__(self, module: str, model: str, config: str) -> None:
        mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        cfg = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
        self.config = getattr(cfg, config)()
        cls = getattr(mod, model)
        self.get_vision_position_ids = functools.partial(cls.get_vision_position_ids, self)
        self.get_rope_index = functools.partial(cls.get_rope_index, self)


@functools.cache
def _hf(family: str) -> _Method:
    module, model, config, _ = FAMILIES[family]
    return _Method(module, model, config)


def _tokenize(text: str) -> list[int]:
    return [1000 + ord(c) for c in text]  # timestamp text: any ids that are not the family's specials


def _sample(rng: np.random.Generator, videos: bool, temporal_patch: int) -> list:
    out: list = [Text(list(rng.integers(2000, 3000, int(rng.integers(1, 6)))))]
    for _ in range(int(rng.integers(1, 4))):
        if videos and rng.random() < 0.5:
            t = int(rng.integers(1, 4))
            grid = (t, 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5)))
            out.append(Video(grid=grid, fps=float(rng.choice([1.0, 2.0, 4.0]))))
        else:
            out.append(Image(grid=(1, 2 * int(rng.integers(1, 6)), 2 * int(rng.integers(1, 6)))))
        out.append(Text(list(rng.integers(2000, 3000, int(rng.integers(0, 4))))))
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_the_familys_own(family: str, side: str) -> None:
    rules = get_family(family).rules
    hf = _hf(family)
    rng = np.random.default_rng(abs(hash((family, side))) % 2**32)
    for _ in range(4):
        samples = [_sample(rng, FAMILIES[family][3], rules.temporal_patch_size) for _ in range(3)]
        batch = mrope.build_batch(
            samples, model=family, convention="transformers5", padding_side=side, tokenizer=_tokenize
        )
        images = np.concatenate([p.image_grid_thw for p in batch.sequences])
        videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
        ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
        types = torch.from_numpy(batch.mm_token_type_ids)
        want, want_delta = hf.get_rope_index(
            ids,
            types,
            torch.from_numpy(images) if len(images) else None,
            torch.from_numpy(videos) if len(videos) else None,
            attention_mask=mask,
        )
        np.testing.assert_array_equal(batch.ids, want.numpy())  # pads hold 0, as 5.24 writes
        np.testing.assert_array_equal(batch.deltas, want_delta.numpy()[:, 0])
        for kwargs in ({"mm_token_type_ids": types}, {}):  # 5.x type ids, and the placeholder-id scan
            got, delta = mrope.get_rope_index(
                ids, images, videos, mask, model=family, convention="transformers5", **kwargs
            )
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            np.testing.assert_array_equal(delta.numpy(), want_delta.numpy())
