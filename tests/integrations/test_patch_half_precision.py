"""A patched half-precision model gives the unpatched model's logits bit for bit.

transformers registers the rotary's ``inv_freq`` as a buffer, so ``model.to(torch.float16)`` (or bf16)
rounds it, and the model then rotates by the rounded frequencies (transformers 5.24
modeling_qwen2_vl.py:130 multiplies the positions by ``self.inv_freq`` cast back to fp32); it casts cos /
sin to the heads' dtype (:136) and rotates in that dtype (``q * cos + rotate_half(q) * sin``, :176-177).
Expected values come from the unpatched half-precision model itself; the controls rotate with the spec's
fp32 frequencies, or in fp32 rounded once (mrope's own op), and must differ.
"""

from __future__ import annotations

import copy
import importlib

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import patched

from mrope.integrations.transformers._discovery import APPLY_HALVES, spec_of, text_rotaries
from mrope.integrations.transformers._patching import _original_apply
from mrope.integrations.transformers._rotation import Rotation, buffer_frequencies
from mrope.ops import apply_mrope

HALF = (torch.float16, torch.bfloat16)
FAMILIES = ("qwen2-vl", "qwen3-vl", "glm-4.1v", "qwen3-omni", "hy-v4-vl", "glm-4.5v", "qwen4-exp")
"""Split halves (Qwen); interleaved pairs with partial rotary and an interleaved table (GLM); interleaved
pairs from a ``cat`` table (HY-V4-VL: its apply_rotary_pos_emb interleaves, modeling_hy_v4_vl.py:96-97);
and the two MoE families whose top-k turned a last-place rotation difference into different logits
(GLM-4.5V bf16: 0.046, Qwen4-Exp fp16: 5.7e-3, while mrope rotated half-precision heads in fp32 and
rounded once)."""


def _text_inputs(name: str) -> dict[str, torch.Tensor]:
    kw = tv.inputs(name, [tv.prompt(name), tv.prompt(name)[:3]], with_pixels=False)
    return {key: kw[key] for key in ("input_ids", "attention_mask", "position_ids")}


def _half(name: str, dtype: torch.dtype) -> torch.nn.Module:
    return copy.deepcopy(tv.model(name)).to(dtype)


def _assert_logits_equal(got: torch.Tensor, want: torch.Tensor, mask: torch.Tensor) -> None:
    got, want = got[mask.bool()], want[mask.bool()]
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", FAMILIES)
def test_a_half_precision_model_is_patched_and_gives_its_logits_bit_for_bit(
    name: str, dtype: torch.dtype
) -> None:
    net = _half(name, dtype)
    kw = _text_inputs(name)
    with torch.no_grad():
        want = net(**kw, use_cache=False).logits
        with patched(net):
            got = net(**kw, use_cache=False).logits
    _assert_logits_equal(got, want, kw["attention_mask"])


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
    _assert_logits_equal(got, want, kw["attention_mask"])


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_the_rotation_at_large_positions_uses_the_rounded_frequencies(dtype: torch.dtype) -> None:
    """At positions up to 8191 the rounding of a frequency moves an angle by up to about 1 rad (fp16) or 8
    rad (bf16): the patched rotation equals the model's own there (fp32 heads: only the frequencies differ),
    and the control, the spec's fp32 frequencies, does not."""
    name = "qwen2-vl"
    net = _half(name, dtype)
    rotary = text_rotaries(net.model)[0]
    module = type(net.model.language_model).__module__
    original_apply = _original_apply(importlib.import_module(module))
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


def _rotated(name: str, dtype: torch.dtype) -> dict[str, object]:
    """Half-precision heads at random positions through the model's own rotary and
    apply_rotary_pos_emb (``want_*``) and through the patched ones (``got_*``, the Rotation ``rotation``)."""
    net = _half(name, dtype)
    rotary = text_rotaries(net.model)[0]
    modeling = importlib.import_module(type(net.model.language_model).__module__)
    # transformers 5.25's HY-V4-VL has apply_rotary_pos_emb_interleave in place of apply_rotary_pos_emb
    apply_name = next(n for n in APPLY_HALVES if hasattr(modeling, n))
    original_apply = _original_apply(modeling, apply_name)  # another test's model may still hold the hook
    spec = spec_of(net.config)
    gen = torch.Generator().manual_seed(3)
    positions = torch.randint(0, 4096, (3, 2, 48), generator=gen)
    width = spec.head_dim - spec.rotary_offset  # HY-V4-VL's attention passes its trailing rope slice
    q = torch.randn(2, 4, 48, width, generator=gen).to(dtype)
    k = torch.randn(2, 2, 48, width, generator=gen).to(dtype)
    with torch.no_grad():
        cos, sin = type(rotary).forward(rotary, q, positions)
        want = original_apply(q, k, cos, sin)
        with patched(net):
            rotation, same = rotary.forward(q, positions)
            assert getattr(modeling, apply_name) is not original_apply  # the patched pass-through
            got = getattr(modeling, apply_name)(q, k, rotation, same)
    return {"q": q, "k": k, "positions": positions, "spec": spec, "rotation": rotation,
            "tables": (cos, sin), "want": want, "got": got}  # fmt: skip


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["qwen2-vl", "glm-4.1v", "hy-v4-vl", "ernie-4.5-vl"])
def test_half_heads_get_the_models_tables_and_arithmetic(name: str, dtype: torch.dtype) -> None:
    """A Rotation for half-precision heads hands the model's own apply_rotary_pos_emb the tables its
    rotary returns, in their dtype and channel order (Qwen: split halves; GLM-4.1V: an interleaved table;
    HY-V4-VL: a ``cat`` table its function interleaves; ERNIE-4.5-VL: fp32 tables,
    modeling_ernie4_5_vl_moe.py:122, rotated in fp32 by its function): bit-equal to the unpatched
    rotary and function."""
    run = _rotated(name, dtype)
    rotation = run["rotation"]
    assert isinstance(rotation, Rotation) and rotation.in_model_arithmetic
    torch.testing.assert_close(rotation.tables(), run["tables"], rtol=0, atol=0)
    torch.testing.assert_close(run["got"], run["want"], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", ["qwen2-vl", "glm-4.1v"])
def test_the_rotation_rounded_once_is_not_the_models(name: str, dtype: torch.dtype) -> None:
    """The control: mrope's op (an fp32 rotation rounded once to the dtype) on the same heads, positions
    and frequencies is not bit-equal to a model that rounds each product in the dtype."""
    run = _rotated(name, dtype)
    frequencies = buffer_frequencies(run["spec"], dtype)
    assert frequencies is not None
    once = apply_mrope(run["q"], run["k"], run["positions"], frequencies, layout="bhsd", backend="torch")
    want_q, want_k = run["want"]
    assert not torch.equal(once[0], want_q) or not torch.equal(once[1], want_k)


def _routed(net: torch.nn.Module, kw: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits and, per MoE router, each token's chosen experts (sorted; the router returns them last:
    transformers 5.24 modeling_glm4v_moe.py:369, ``_, topk_weights, topk_indices = self.gate(...)``)."""
    chosen: list[torch.Tensor] = []
    routers = [m for m in net.modules() if type(m).__name__.endswith("Router")]
    hooks = [r.register_forward_hook(lambda m, i, o: chosen.append(o[-1].sort(-1).values)) for r in routers]
    try:
        with torch.no_grad():
            logits = net(**kw, use_cache=False).logits
    finally:
        for hook in hooks:
            hook.remove()
    return logits, chosen


def test_rounding_once_flips_an_expert_choice_and_the_models_arithmetic_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cause of GLM-4.5V's bf16 difference, measured: mrope's own rotation (fp32, rounded once)
    moves one token of this prompt to another expert set in the MoE layer, and the logits then differ by
    far more than rounding; the model's arithmetic chooses the same experts for every token."""
    name = "glm-4.5v"
    net = _half(name, torch.bfloat16)
    kw = _text_inputs(name)
    want, want_chosen = _routed(net, kw)
    with patched(net):
        got, got_chosen = _routed(net, kw)
        with monkeypatch.context() as m:
            m.setattr(Rotation, "in_model_arithmetic", property(lambda self: False))
            once, once_chosen = _routed(net, kw)
    mask = kw["attention_mask"].bool()
    flips = [int((a != b).any(-1).sum()) for a, b in zip(want_chosen, once_chosen, strict=True)]
    assert [int((a != b).any(-1).sum()) for a, b in zip(want_chosen, got_chosen, strict=True)] == [0]
    assert flips == [1]  # measured: 1 of 70 tokens
    _assert_logits_equal(got, want, kw["attention_mask"])
    assert (once.float()[mask] - want.float()[mask]).abs().max() > 0.01  # measured 0.046
