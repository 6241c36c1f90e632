"""Golden-gate RoPE (Falcon-OCR) through the pair table: cos / sin and rotated q, k equal TII's own rotation.

The reference is TII's ``falcon-perception`` 1.0.0 ``falcon_perception/rope.py``, written out in
``tests/support/falcon_perception.py`` (files and lines there). The model repeats the key heads before
rotating (model.py:113-116), so k has the query's heads. mlx-vlm 0.7.10's port
(``mlx_vlm/models/falcon_ocr/language.py``:16-86) computes the same.

Inputs: random ``t`` (ints), random float ``(h, w)`` with text tokens at ``(0, 0)`` as the model's, random
learned frequencies. Negative controls: h and w swapped, the key heads not repeated, a table whose 2-D half
is plain RoPE on h.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton  # noqa: F401  (a dev dependency: the kernel tests must not be skipped)
from support.falcon_perception import ref_apply, ref_freqs_cis, ref_golden_cis

from mrope import ApplyError, SpecError
from mrope.ops import apply_mrope, cos_sin, golden_gate_positions, golden_gate_table
from mrope.ops._aot import KernelVariant, compile_variant

BACKENDS = ("torch", "triton")


@pytest.fixture(autouse=True)
def _triton_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")


# ------------------------------------------------------------------------------------------- inputs


def sample(seed: int, heads: int = 16, f: int = 16, s: int = 41, image_share: float = 0.6):
    """``(pos_t [1, S] int64, pos_hw [1, S, 2] float32, freqs [H, F, 2])``: text tokens at ``(h, w) = 0``."""
    g = torch.Generator().manual_seed(seed)
    pos_t = torch.randint(0, 6000, (1, s), generator=g)
    image = torch.rand(1, s, generator=g) < image_share
    pos_hw = (torch.rand(1, s, 2, generator=g) * 4 - 2) * image[..., None]
    freqs = torch.randn(heads, f, 2, generator=g) * torch.logspace(0, -3, f)[None, :, None]
    return pos_t, pos_hw.float(), freqs


def mrope_positions(pos_t: torch.Tensor, pos_hw: torch.Tensor) -> torch.Tensor:
    """``[3, T]`` rows (t, h, w) of a one-row batch."""
    return torch.stack([pos_t[0].float(), pos_hw[0, :, 0], pos_hw[0, :, 1]])


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.parametrize("seed", range(4))
def test_cos_sin_equal_tii_tables(seed: int) -> None:
    """cos / sin of every head and channel: the cos / sin of rope.py's fp32 angles bit for bit, and its
    complex tables (``torch.polar``, whose cos / sin round apart by at most one ulp) to 1.2e-7."""
    pos_t, pos_hw, freqs = sample(seed)
    table = golden_gate_table(freqs, theta=10000.0)
    rows = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs)
    cos, sin = cos_sin(rows, table)  # [T, H, 64], each pair's value twice (gptj)
    d = table.head_dim
    ladder = 1.0 / (10000.0 ** (torch.arange(0, d // 2, 2)[: d // 4].float() / (d // 2)))  # rope.py:23
    angle_1d = torch.outer(pos_t[0], ladder).float()  # rope.py:25, indexed by pos_t (model.py:656)
    angle_2d = torch.einsum("bsp,hfp->bshf", pos_hw, freqs)[0]  # rope.py:64, [T, H, F]
    angle = torch.cat([angle_1d[:, None].expand_as(angle_2d), angle_2d], dim=-1)  # [T, H, 2F]
    for got, fn in ((cos, torch.cos), (sin, torch.sin)):
        assert torch.equal(got[..., 0::2], fn(angle)) and torch.equal(got[..., 1::2], fn(angle))
    cis_1d = ref_freqs_cis(d // 2, int(pos_t.max()) + 1, 10000.0)[pos_t][0]  # [T, F]
    cis = torch.cat([cis_1d[:, None].expand_as(angle_2d), ref_golden_cis(freqs, pos_hw)[0]], dim=-1)
    torch.testing.assert_close(cos[..., 0::2], cis.real, atol=1.2e-7, rtol=0)
    torch.testing.assert_close(sin[..., 1::2], cis.imag, atol=1.2e-7, rtol=0)
    # negative control: the angles of h and w swapped
    assert not torch.equal(
        cos, cos_sin(golden_gate_positions(mrope_positions(pos_t, pos_hw.flip(-1)), freqs), table)[0]
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("seed", range(3))
def test_rotated_q_k_equal_tii(seed: int, dtype: torch.dtype, backend: str) -> None:
    """q and k rotated as apply_3d_rotary_emb does (k's 8 heads repeated to 16 first, model.py:115)."""
    pos_t, pos_hw, freqs = sample(seed, s=23)
    g = torch.Generator().manual_seed(100 + seed)
    q = torch.randn(1, 23, 16, 64, generator=g).to(dtype)
    k8 = torch.randn(1, 23, 8, 64, generator=g).to(dtype)
    k = k8.repeat_interleave(2, dim=2)  # repeat_kv: kv head j serves query heads 2j, 2j + 1
    want_q, want_k = ref_apply(q, k, pos_t, pos_hw, freqs, 10000.0)
    table = golden_gate_table(freqs)
    rows = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs)
    got_q, got_k = apply_mrope(q[0], k[0], rows, table, backend=backend)
    tol = {"atol": 2e-6, "rtol": 2e-6} if dtype == torch.float32 else {"atol": 1e-2, "rtol": 1e-2}
    torch.testing.assert_close(got_q, want_q[0], **tol)
    torch.testing.assert_close(got_k, want_k[0], **tol)
    # negative control: h and w swapped rotates the 2-D half otherwise
    swapped = golden_gate_positions(mrope_positions(pos_t, pos_hw.flip(-1)), freqs)
    bad_q, _ = apply_mrope(q[0], k[0], swapped, table, backend=backend)
    image = pos_hw[0].abs().sum(-1) > 0
    assert (bad_q[image, :, 32:].float() - want_q[0, image, :, 32:].float()).abs().max() > 1e-2


def test_text_tokens_leave_the_2d_half_alone() -> None:
    """``(h, w) = (0, 0)``: the golden half of a text token is untouched (rope.py:62, angle 0)."""
    pos_t, pos_hw, freqs = sample(7, image_share=0.0)
    q = torch.randn(41, 16, 64)
    rows = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs)
    got_q, _ = apply_mrope(q, q[:, :0], rows, golden_gate_table(freqs))
    assert torch.equal(got_q[..., 32:], q[..., 32:])
    assert not torch.equal(got_q[..., :32], q[..., :32])


def test_batched_positions_rows() -> None:
    """``[3, B, S]`` positions give ``[1 + H F, B, S]`` rows, each row's angles as rope.py:64."""
    pos_t, pos_hw, freqs = sample(3, heads=4, f=8, s=10)
    positions = torch.stack([pos_t.float(), pos_hw[..., 0], pos_hw[..., 1]]).expand(3, 2, 10)
    rows = golden_gate_positions(positions, freqs)
    assert rows.shape == (1 + 4 * 8, 2, 10) and rows.dtype == torch.float32
    theta = torch.einsum("bsp,hfp->bshf", pos_hw, freqs)[0]  # [S, H, F]
    assert torch.equal(rows[1:, 1], theta.permute(1, 2, 0).reshape(32, 10))
    assert torch.equal(rows[0, 0], pos_t[0].float())


def test_table_layout() -> None:
    """Pairs ``< F`` on row 0 at TII's fp32 ladder; head h's 2-D pair f on row ``1 + h F + f`` at 1."""
    freqs = torch.randn(4, 8, 2)
    table = golden_gate_table(freqs, theta=500.0)
    assert (table.heads, table.num_freqs, table.head_dim, table.num_rows) == (4, 16, 32, 33)
    assert table.pairing == "gptj" and (table.rows[:, :8] == 0).all()
    assert table.rows[2, 8 + 5] == 1 + 2 * 8 + 5
    ladder = 1.0 / (500.0 ** (torch.arange(0, 16, 2)[:8].float() / 16))  # rope.py:23
    assert np.array_equal(table.inv_freq32[0, :8], ladder.numpy()) and (table.inv_freq32[:, 8:] == 1).all()


def test_key_heads_must_be_repeated() -> None:
    """Negative control: 8 key heads under a 16-head table is refused (each query head turns its own copy)."""
    pos_t, pos_hw, freqs = sample(1)
    rows = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs)
    with pytest.raises(ApplyError):
        apply_mrope(torch.randn(41, 16, 64), torch.randn(41, 8, 64), rows, golden_gate_table(freqs))


def test_plain_rope_on_h_is_not_golden() -> None:
    """Negative control: a table whose 2-D half turns by h alone at the ladder differs from rope.py."""
    pos_t, pos_hw, freqs = sample(2)
    q = torch.randn(41, 16, 64)
    rows = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs)
    table = golden_gate_table(freqs)
    h_only = golden_gate_positions(mrope_positions(pos_t, pos_hw), freqs * torch.tensor([1.0, 0.0]))
    want, _ = ref_apply(q[None], q[None], pos_t, pos_hw, freqs, 10000.0)
    got, _ = apply_mrope(q, q[:, :0], rows, table)
    bad, _ = apply_mrope(q, q[:, :0], h_only, table)
    torch.testing.assert_close(got, want[0], atol=2e-6, rtol=2e-6)
    assert not torch.allclose(bad, want[0], atol=1e-3)


@pytest.mark.parametrize(
    "freqs",
    [np.zeros((16, 16)), np.zeros((16, 16, 3)), np.full((2, 4, 2), np.nan), "x", np.zeros((0, 4, 2))],
)
def test_bad_freqs_refused(freqs: object) -> None:
    with pytest.raises(SpecError, match="freqs_golden"):
        golden_gate_table(freqs)


def test_bad_theta_and_positions_refused() -> None:
    freqs = torch.randn(2, 4, 2)
    with pytest.raises(SpecError, match="theta"):
        golden_gate_table(freqs, theta=0.5)
    with pytest.raises(ApplyError, match=r"\[3, \.\.\.\]"):
        golden_gate_positions(torch.zeros(2, 5), freqs)
    with pytest.raises(ApplyError, match=r"\[3, \.\.\.\]"):
        golden_gate_positions([[0.0]] * 3, freqs)


@pytest.mark.parametrize("exact", [False, True])
def test_golden_gate_kernel_compiles_within_128_registers(
    exact: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Falcon-OCR's launch shape (16 query heads, key heads repeated to 16, a 16-head table of 32 GPT-J
    pairs over head_dim 64, float32 rows) compiled ahead of time for sm_90 without a GPU: within 128
    registers, no spills (the bound tests/ops/test_ops_aot_report.py sets for the shared-table kernel)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # compiled, not interpreted
    variant = KernelVariant(
        dtype="bfloat16",
        exact=exact,
        position_dtype="float32",
        head_dim=64,
        rotary_dim=64,
        gptj=True,
        hq=16,
        hk=16,
        table_heads=16,
    )
    compiled = compile_variant(variant, 90)
    assert compiled.registers <= 128 and compiled.spill_stores == 0 and compiled.spill_loads == 0, compiled
