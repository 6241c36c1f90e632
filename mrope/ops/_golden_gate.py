"""Golden-gate RoPE (Falcon-OCR, Falcon-Perception) as a pair table: a 1-D half and a learned 2-D half.

Released code: TII's ``falcon-perception`` 1.0.0 (PyPI; tiiuae/Falcon-Perception), ``falcon_perception/rope.py``
and ``model.py``; mlx-vlm 0.7.10 ``mlx_vlm/models/falcon_ocr/language.py`` ports it. A head of ``D``
channels is cut in two halves (``apply_3d_rotary_emb``, rope.py:88-104):

- channels ``[0, D/2)``: 1-D RoPE by the sequence position ``t``, adjacent channels paired (complex view of
  ``reshape(..., -1, 2)``, rope.py:36-43), frequency ``i < D/4`` ``theta ** (-2 i / (D/2))`` computed in fp32
  (``precompute_freqs_cis(D/2, ...)``, rope.py:23; model.py:334-335);
- channels ``[D/2, D)``: pair ``f < D/4`` of head ``h`` (channels ``D/2 + 2f``, ``D/2 + 2f + 1``,
  rope.py:75-84) turns by ``h_pos * F[h, f, 0] + w_pos * F[h, f, 1]`` (fp32 ``einsum("bsp,hfp->bshf")``,
  rope.py:64), ``F`` the checkpoint's ``freqs_cis_golden`` buffer ``[n_heads, D/4, 2]`` (model.py:336-340: a
  persistent buffer loaded from the weights, never computed). Text tokens have ``(h, w) = (0, 0)``: angle 0.

A pair table reads one position row per pair, so each learned pair's angle becomes a row of its own:
:func:`golden_gate_positions` projects ``(h, w)`` onto every ``F[h, f]`` once per call (the model's fp32
einsum) into rows ``1 + h * D/4 + f``, which the table of :func:`golden_gate_table` reads at frequency 1 (the
angle exactly); row 0 is ``t``. k must have the query's head count: the model repeats the key heads before
rotating (``repeat_kv`` then ``apply_3d_rotary_emb``, model.py:113-116), since each query head's copy turns
by its own frequencies.
"""

from __future__ import annotations

import numpy as np
import torch

from mrope._caches import cached
from mrope._errors import ApplyError, SpecError
from mrope._learned_rotary import LearnedRotary, golden_gate_frequencies
from mrope.ops._freqs import hf_inv_freq_fp32
from mrope.ops._pairs import PairTable, _ladder


def _golden_freqs(freqs_golden: object) -> np.ndarray:
    """The checkpoint's ``freqs_cis_golden`` as float32 ``[H, F, 2]``, checked."""
    if isinstance(freqs_golden, torch.Tensor):
        freqs_golden = freqs_golden.detach().to("cpu", torch.float32).numpy()
    return golden_gate_frequencies(freqs_golden)


def golden_gate_table(freqs_golden: torch.Tensor | np.ndarray, *, theta: float = 10000.0) -> PairTable:
    """The pair table of golden-gate RoPE with learned frequencies ``freqs_golden``.

    Args:
        freqs_golden: the checkpoint's ``freqs_cis_golden``, float ``[H, F, 2]`` (Falcon-OCR: ``[16, 16, 2]``),
            radians per unit of ``(h, w)``; head_dim is ``4 F``.
        theta: the 1-D half's base (the config's ``rope_theta``, 10000 in Falcon-OCR).

    Returns:
        A per-head table ``[H, 2 F]`` of GPT-J pairs over the whole head: pairs ``i < F`` read row 0 (``t``)
        at ``theta ** (-2 i / 2F)`` (fp32 as the model computes it), pair ``F + f`` of head ``h`` reads row
        ``1 + h F + f`` at frequency 1; ``1 + H F`` rows, from :func:`golden_gate_positions`.

    Raises:
        SpecError: ``freqs_golden`` not a finite ``[H, F, 2]``, or ``theta`` not a number > 1.
    """
    freqs = _golden_freqs(freqs_golden)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 1:
        raise SpecError(f"theta must be a number > 1; got {theta!r}")
    heads, f = freqs.shape[:2]
    one_d = _ladder(float(theta), 2 * f)  # precompute_freqs_cis(D/2): rope.py:23
    rows = np.zeros((heads, 2 * f), dtype=np.int32)
    rows[:, f:] = 1 + np.arange(heads * f, dtype=np.int32).reshape(heads, f)
    inv = np.ones((heads, 2 * f), dtype=np.float64)
    inv[:, :f] = one_d.inv_freq()
    inv32 = np.ones((heads, 2 * f), dtype=np.float32)
    inv32[:, :f] = hf_inv_freq_fp32(one_d).numpy()
    return PairTable(
        rows=rows,
        inv_freq=inv,
        head_dim=4 * f,
        pairing="gptj",
        num_rows=1 + heads * f,
        inv_freq32=inv32,
    )


def golden_gate_positions(positions: torch.Tensor, freqs_golden: torch.Tensor | np.ndarray) -> torch.Tensor:
    """The position rows :func:`golden_gate_table` reads: ``t`` and each learned pair's angle.

    Args:
        positions: ``[3, ...]`` rows ``(t, h, w)`` (``[3, T]`` or ``[3, B, S]``): the model's ``pos_t`` and
            ``pos_hw``; ``(h, w)`` are 0 on text tokens.
        freqs_golden: the checkpoint's ``freqs_cis_golden`` ``[H, F, 2]``.

    Returns:
        float32 ``[1 + H F, ...]`` on positions' device: row 0 ``t``, row ``1 + h F + f``
        ``h_pos * F[h, f, 0] + w_pos * F[h, f, 1]`` in radians (the model's fp32 einsum, rope.py:64).

    Raises:
        ApplyError: ``positions`` not a tensor with three leading rows.
        SpecError: ``freqs_golden`` not a finite ``[H, F, 2]``.
    """
    if not isinstance(positions, torch.Tensor) or positions.dim() < 2 or positions.shape[0] != 3:
        got = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ApplyError(f"positions must be a tensor [3, ...] of rows (t, h, w); got {got}")
    freqs = torch.from_numpy(_golden_freqs(freqs_golden)).to(positions.device)
    pos = positions.to(torch.float32)
    tail = pos.shape[1:]
    hw = pos[1:].reshape(2, -1).T  # [N, 2]
    angles = torch.einsum("sp,hfp->hfs", hw, freqs).reshape(-1, *tail)  # [H F, ...]
    return torch.cat([pos[:1], angles])


@cached("ops.learned_tables", maxsize=16)
def _learned_table(learned: LearnedRotary, model: str, theta: float) -> PairTable:
    return golden_gate_table(learned.frequencies(model), theta=theta)


def learned_rotation(
    learned: LearnedRotary, model: str, theta: float, positions: torch.Tensor
) -> tuple[PairTable, torch.Tensor]:
    """The pair table and position rows of a model whose rotation is partly a checkpoint tensor (a
    :class:`mrope.models.ModelFamily`'s ``learned_rotary``, its values read by :func:`mrope.from_pretrained`).

    Args:
        learned: the family's learned rotary (kind ``"golden_gate"``). model: the family's name (messages).
        theta: the formula half's base (the family spec's ``theta``). positions: ``[3, ...]`` rows (t, h, w).

    Returns:
        :func:`golden_gate_table` of the tensor (cached per value) and :func:`golden_gate_positions`.

    Raises:
        SpecError: the tensor's values were never read (the message names the buffer and the table builder).
        ApplyError: positions not ``[3, ...]``.
    """
    table = _learned_table(learned, model, theta)
    return table, golden_gate_positions(positions, learned.frequencies(model))


__all__ = ["golden_gate_positions", "golden_gate_table", "learned_rotation"]
