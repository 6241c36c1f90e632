"""A half-precision model is patched, and rotates with the frequencies its own buffer holds.

transformers registers the rotary's ``inv_freq`` as a buffer, so ``model.to(torch.float16)`` (or bf16)
rounds it, and the model then rotates by the rounded frequencies (transformers 5.24
modeling_qwen2_vl.py:130 multiplies the positions by ``self.inv_freq`` cast back to fp32). Expected values
come from the unpatched half-precision model itself; the controls rotate with the spec's fp32 frequencies
and must differ.
"""

from __future__ import annotations

import copy

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import patched

from mrope.integrations.transformers._discovery import spec_of, text_rotaries
from mrope.integrations.transformers._rotation import Rotation

HALF = (torch.float16, torch.bfloat16)
FAMILIES = ("qwen2-vl", "qwen3-vl", "glm-4.1v", "qwen3-omni")


def _ulps(dtype: torch.dtype) -> float:
    """Two units in the last place at 1.0: the patched rotation rounds once from fp32 where the model
    rounds each product and sum, and the logits carry that rounding."""
    return 2 * torch.finfo(dtype).eps


def _text_inputs(name: str) -> dict[str, torch.Tensor]:
    kw = tv.inputs(name, [tv.prompt(name), tv.prompt(name)[:3]], with_pixels=False)
    return {key: kw[key] for key in ("input_ids", "attention_mask", "position_ids")}


def _half(name: str, dtype: torch.dtype) -> torch.nn.Module:
    return copy.deepcopy(tv.model(name)).to(dtype)


def _assert_logits_close(
    got: torch.Tensor, want: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype
) -> None:
    got, want = got.float()[mask.bool()], want.float()[mask.bool()]
    torch.testing.assert_close(got, want, rtol=0, atol=_ulps(dtype) * float(want.abs().max()))


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", FAMILIES)
def test_a_half_precision_model_is_patched_and_gives_its_logits(name: str, dtype: torch.dtype) -> None:
    net = _half(name, dtype)
    kw = _text_inputs(name)
    with torch.no_grad():
        want = net(**kw, use_cache=False).logits
        with patched(net):
            got = net(**kw, use_cache=False).logits
    _assert_logits_close(got, want, kw["attention_mask"], dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_model_cast_after_patch_follows_its_buffer(dtype: torch.dtype) -> None:
    """Patched in fp32, then cast: the patched rotary reads the buffer's dtype at each call."""
    name = "qwen2-vl"
    want_net = _half(name, dtype)
    net = copy.deepcopy(tv.model(name))
    kw = _text_inputs(name)
    with torch.no_grad():
        want = want_net(**kw, use_cache=False).logits
        with patched(net):
            net.to(dtype)
            got = net(**kw, use_cache=False).logits
    _assert_logits_close(got, want, kw["attention_mask"], dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_the_rotation_at_large_positions_uses_the_rounded_frequencies(dtype: torch.dtype) -> None:
    """At positions up to 8191 the rounding of a frequency moves an angle by up to about 1 rad (fp16) or 8
    rad (bf16): the patched rotation equals the model's own there (fp32 heads: only the frequencies differ),
    and the control, the spec's fp32 frequencies, does not."""
    name = "qwen2-vl"
    net = _half(name, dtype)
    rotary = text_rotaries(net.model)[0]
    module = type(net.model.language_model).__module__
    original_apply = __import__(module, fromlist=["apply_rotary_pos_emb"]).apply_rotary_pos_emb
    spec = spec_of(net.config)
    gen = torch.Generator().manual_seed(7)
    positions = torch.randint(0, 8192, (3, 1, 64), generator=gen)
    q = torch.randn(1, 2, 64, spec.head_dim, generator=gen)
    k = torch.randn(1, 1, 64, spec.head_dim, generator=gen)
    with torch.no_grad():
        cos, sin = type(rotary).forward(rotary, q, positions)
        want_q, want_k = original_apply(q, k, cos, sin)
        with patched(net):
            rotation, _ = rotary.forward(q, positions)
            got_q, got_k = rotation.apply(q, k)
    assert rotation.frequencies is not None
    torch.testing.assert_close(got_q, want_q, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_k, want_k, rtol=1e-4, atol=1e-4)
    control_q, _ = Rotation(positions, spec, "torch", "fp32").apply(q, k)
    assert (control_q - want_q).abs().max() > 0.1
