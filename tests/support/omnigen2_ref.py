"""OmniGen2's rotary positions and angles, written out from its authors' code, for the tests to hold mrope to.

Source: VectorSpaceLab/OmniGen2 at 0f72fa92564d9f8ba76f53fcc3c05aca2372458f (not installable here, so its
rule is written out, not run; the diffusers functions it calls are run as they are):

- positions, ``omnigen2/models/transformers/repo.py:53-101`` (``OmniGen2RotaryPosEmbed.forward``): the
  caption's tokens take ``i`` on all three axes (:70); a running shift starts at the caption length (:72);
  each reference image's tokens (its latent ``H x W`` in ``p x p`` patches, row-major) take
  ``(shift, row, col)`` and the shift then grows by ``max(H / p, W / p)`` (:75-89); the output image's
  tokens take ``(shift, row, col)`` at the final shift (:91-101). The sequence is caption, references,
  output image, with nothing between them (transformer_omnigen2.py:475-478 and :639-642 join them so).
- angles, ``repo.py:21-41``: per axis a table from diffusers' ``get_1d_rotary_pos_embed(d, axes_lens[a],
  theta=10000, freqs_dtype=torch.float64)`` (complex128, ``[axes_lens[a], d / 2]``), each token's row of
  each table gathered by its coordinate on that axis, the three concatenated (t, h, w).
- config defaults, ``transformer_omnigen2.py:257-275``, and theta 10000 at the ``OmniGen2RotaryPosEmbed(``
  call (:288-293; also pipelines/omnigen2/pipeline_omnigen2.py:578-582).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from diffusers.models.embeddings import get_1d_rotary_pos_embed

DEFAULT_CONFIG = {
    "_class_name": "OmniGen2Transformer2DModel",
    "patch_size": 2,
    "hidden_size": 2304,
    "num_attention_heads": 24,
    "num_kv_heads": 8,
    "axes_dim_rope": [32, 32, 32],
    "axes_lens": [300, 512, 512],
}
"""transformer_omnigen2.py:257-275, the ``__init__`` defaults that concern the rotation."""

THETA = 10000


def _image(shift: int, rows: int, cols: int) -> np.ndarray:
    """One image's ``[3, rows * cols]`` coordinates: ``(shift, row, col)``, row-major."""
    row, col = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return np.stack([np.full(rows * cols, shift), row.reshape(-1), col.reshape(-1)])


def omnigen2_positions(
    caption: int, references: Sequence[tuple[int, int]], output: tuple[int, int], patch: int
) -> np.ndarray:
    """int64 ``[3, N]``: a caption of ``caption`` tokens, reference latents of ``(H, W)`` and the output
    latent ``(H, W)`` (latent rows and columns, multiples of ``patch``), as repo.py:53-101 numbers them."""
    parts = [np.repeat(np.arange(caption)[None], 3, axis=0)]
    shift = caption
    for height, width in references:
        parts.append(_image(shift, height // patch, width // patch))
        shift += max(height // patch, width // patch)
    parts.append(_image(shift, output[0] // patch, output[1] // patch))
    return np.concatenate(parts, axis=1).astype(np.int64)


def omnigen2_freqs_cis(
    positions: np.ndarray, axes_dim: Sequence[int], axes_lens: Sequence[int] = (300, 512, 512)
) -> torch.Tensor:
    """complex128 ``[N, sum(axes_dim) / 2]``: each axis's float64 table (repo.py:21-29) gathered by the
    token's coordinate on that axis, concatenated t, h, w (repo.py:31-41)."""
    index = torch.from_numpy(positions)
    tables = [
        get_1d_rotary_pos_embed(d, n, theta=THETA, freqs_dtype=torch.float64)
        for d, n in zip(axes_dim, axes_lens, strict=True)
    ]
    return torch.cat([table[index[a]] for a, table in enumerate(tables)], dim=-1)
