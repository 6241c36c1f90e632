"""TII's ``falcon-perception`` 1.0.0 (PyPI wheel; tiiuae/Falcon-Perception) written out: Falcon-OCR's positions
and rotation, the expected values of the image-step, golden-gate and ``falcon-ocr`` family tests.

Its package imports einops, PIL and its model code, so the functions are restated here with the same
arithmetic (``pip download falcon-perception==1.0.0 --no-deps`` to read them again):

- positions, ``falcon_perception/data.py``: ``_compute_image_spatial_positions`` :330-357,
  ``_get_image_token_masks`` :360-371, ``get_pos_thw`` :407-458 (the batch form; on an unpadded row it is
  ``get_pos_thw_single`` :374-404), the image block of ``tokenize_inputs`` :514-521. Ids are the released
  config's (mlx-vlm 0.7.10 ``mlx_vlm/models/falcon_ocr/config.py``:44-51: image 227, end 230, cls 244,
  registers 245-248).
- rotation, ``falcon_perception/rope.py``: ``precompute_freqs_cis`` :7-27 (complex64 1-D table over ``D/2``
  channels), ``apply_rotary_emb`` :30-44 (complex product of adjacent channel pairs),
  ``apply_golden_freqs_cis_to_visual_pos`` :59-66 (fp32 ``einsum("bsp,hfp->bshf")`` of ``pos_hw`` with the
  learned ``freqs_cis_golden``), ``apply_golden_rotary_emb`` :69-85 (even / odd channels) and
  ``apply_3d_rotary_emb`` :88-104 (first half 1-D, second half golden); model.py:334-335 (``D/2`` 1-D
  channels) and :656-660 (indexing by ``pos_t``). The model repeats the key heads before rotating
  (model.py:113-116), so k has the query's heads.
"""

from __future__ import annotations

import numpy as np
import torch

IMG, END, CLS, REGS, PAD = 227, 230, 244, (245, 246, 247, 248), 0


# ------------------------------------------------------------------------------------ data.py


def tii_spatial(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """data.py:352-357 (``width`` / ``height``: the image's patches, :349-350)."""
    xlim = np.sqrt(width / height)
    ylim = np.sqrt(height / width)
    xpos = np.linspace(-xlim, xlim, width)
    ypos = np.linspace(-ylim, ylim, height)
    wpos, hpos = np.meshgrid(xpos, ypos, indexing="xy")
    return hpos.flatten(), wpos.flatten()


def tii_pos_thw(tokens: np.ndarray, grids: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """data.py:425-458: ``(tpos int64 [B, S], hw float32 [B, S, 2])`` of a padded batch, images in order."""
    spatial = tokens == IMG
    no_increase = spatial | np.isin(tokens, REGS) | (tokens == END)  # :362-370
    parts = [tii_spatial(h, w) for h, w in grids]
    hpos_n = np.concatenate([p[0] for p in parts]) if parts else np.empty(0)
    wpos_n = np.concatenate([p[1] for p in parts]) if parts else np.empty(0)
    assert hpos_n.size == spatial.sum()
    hpos = np.zeros_like(tokens, dtype=np.float32)
    wpos = np.zeros_like(tokens, dtype=np.float32)
    hpos[spatial] = hpos_n
    wpos[spatial] = wpos_n
    tpos = np.ones_like(tokens, dtype=np.float32)
    tpos[no_increase] = 0
    tpos = np.cumsum(tpos, axis=1) - 1
    tpos[tokens == PAD] = 0
    return tpos.astype(np.int64), np.stack([hpos, wpos], axis=-1)


def image_block(h: int, w: int) -> list[int]:
    """The ids tokenize_inputs writes for one image of ``h x w`` patches (data.py:516-521)."""
    return [CLS, *REGS] + [IMG] * (h * w) + [END]


def as_rows(tpos: np.ndarray, hw: np.ndarray) -> np.ndarray:
    """float32 ``[3, ...]`` rows ``(t, h, w)``: the model's ``pos_t`` and ``pos_hw``."""
    return np.stack([tpos.astype(np.float32), hw[..., 0], hw[..., 1]])


# ------------------------------------------------------------------------------------ rope.py


def ref_freqs_cis(dim: int, end: int, theta: float) -> torch.Tensor:
    """rope.py:23-27: complex64 ``[end, dim // 2]``."""
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end)
    angles = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(angles), angles)


def ref_golden_cis(freqs_hfp: torch.Tensor, pos_bsp: torch.Tensor) -> torch.Tensor:
    """rope.py:64-66: complex64 ``[B, S, H, F]``."""
    theta = torch.einsum("bsp,hfp->bshf", pos_bsp.float(), freqs_hfp.float())
    return torch.polar(torch.ones_like(theta), theta)


def ref_rotary_1d(x: torch.Tensor, cis_bsf: torch.Tensor) -> torch.Tensor:
    """rope.py:36-44 for one tensor ``[B, S, H, d]``."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * cis_bsf[:, :, None]).flatten(3).type_as(x)


def ref_golden_rotary(x: torch.Tensor, cis_bshf: torch.Tensor) -> torch.Tensor:
    """rope.py:75-85."""
    xf = x.float()
    even, odd = xf[..., 0::2], xf[..., 1::2]
    cos, sin = cis_bshf.real, cis_bshf.imag
    out = torch.empty_like(xf)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out.type_as(x)


def ref_apply(
    xq: torch.Tensor,
    xk: torch.Tensor,
    pos_t: torch.Tensor,
    pos_hw: torch.Tensor,
    freqs: torch.Tensor,
    theta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """rope.py:94-104 with model.py:334-335 (``D/2`` 1-D channels) and model.py:656-660 (indexing by pos_t):
    ``xq``, ``xk`` ``[B, S, H, D]``, ``pos_t`` int ``[B, S]``, ``pos_hw`` float ``[B, S, 2]``."""
    d = xq.shape[-1]
    cis_1d = ref_freqs_cis(d // 2, int(pos_t.max()) + 1, theta)[pos_t]
    cis_2d = ref_golden_cis(freqs, pos_hw)
    outs = []
    for x in (xq, xk):
        x_t, x_hw = x.chunk(2, dim=-1)
        outs.append(
            torch.cat([ref_rotary_1d(x_t, cis_1d), ref_golden_rotary(x_hw, cis_2d)], dim=-1).type_as(x)
        )
    return outs[0], outs[1]
