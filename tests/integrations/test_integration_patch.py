"""mrope.integrations.transformers.patch on tiny random-weight models of every covered family.

Expected values come from the unpatched transformers 5.24 model itself (its own get_rope_index, rotary
embedding and apply_rotary_pos_emb), and for the released convention from the official max+1 rule written
out below. The tiny models are built from configs (no hub), fp32, seed 0.
"""

from __future__ import annotations

import copy
import functools
import gc
import inspect
import sys
from typing import Any

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import FAMILIES, patched

import mrope
from mrope._errors import PatchError
from mrope.integrations import transformers as mt
from mrope.integrations.transformers import _patching as patching
from mrope.integrations.transformers import _rotation as rotation
from mrope.testing import tiny_config, tiny_model

ATOL = 2e-6  # fp32 logits: the same rotation arithmetic, fused differently


@pytest.fixture
def apply_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the patched attention's calls of apply_mrope (one per layer per forward)."""
    calls: list[str] = []
    real = rotation.apply_mrope

    def counting(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(kwargs.get("layout", "thd"))
        return real(*args, **kwargs)

    monkeypatch.setattr(rotation, "apply_mrope", counting)
    return calls


def _q_k_cos_sin(q, k=None, cos=None, sin=None, unsqueeze_dim=1):  # noqa: ANN001, ANN202
    """transformers' ``apply_rotary_pos_emb`` signature (5.25 modeling_qwen2_vl.py:156), with Qwen4-Exp's
    query-only calls (5.25 modeling_qwen4_exp.py:731, 812)."""


def _interleave(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):  # noqa: ANN001, ANN202
    """5.25's ``apply_rotary_pos_emb_interleave`` signature (modeling_hy_v4_vl.py:64)."""


_OWN_APPLY = {
    "apply_rotary_pos_emb": inspect.signature(_q_k_cos_sin),
    "apply_rotary_pos_emb_interleave": inspect.signature(_interleave),
}
"""The rotation functions a text attention calls, with their signatures written out from transformers'
source (with ``kernels`` installed 5.25's ``apply_rotary_pos_emb`` is a module taking ``*args``)."""


def _calling(net: torch.nn.Module, name: str) -> list[torch.nn.Module]:
    return [
        m
        for m in net.model.language_model.modules()
        if name in getattr(inspect.unwrap(type(m).forward), "__code__", None).co_names
    ]


def _own_apply(net: torch.nn.Module) -> str:
    """The name of the rotation function the model's text attention calls."""
    return next(name for name in _OWN_APPLY if _calling(net, name))


def _rotary_layers(net: torch.nn.Module) -> int:
    """Text layers whose attention calls the rotation function (hybrid stacks have others)."""
    return len(_calling(net, _own_apply(net)))


def _own_rotations(family: str, kw: dict[str, torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The layouts of the unpatched model's own apply_rotary_pos_emb calls in one forward: one per rotary
    layer (hybrid stacks and NoPE layers have none; HY-V4-VL's DSA indexer rotates ``bshd`` too)."""
    net = tv.model(family)
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    name = _own_apply(net)
    real, calls = getattr(module, name), []

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        bound = _OWN_APPLY[name].bind(*args, **kwargs)
        bound.apply_defaults()
        table, unsqueeze_dim = bound.arguments["cos"], bound.arguments["unsqueeze_dim"]
        # a [B, S, D] table rotates [B, H, S, D] or [B, S, H, D] heads; a [T, D] one (Qwen4-Exp's QSA
        # block keys, gathered at block starts) rotates tokens
        calls.append({1: "bhsd", 2: "bshd"}[unsqueeze_dim] if table.dim() == 3 else "thd")
        return real(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(module, name, recording)
        tv.logits(family, kw)
    return calls


def _two_rows(name: str) -> list[list[object]]:
    rules = mt.model_rules(tv.model(name))
    m = rules.merge_size
    return [
        tv.prompt(name),
        [mrope.Text(tv.tokenize("hi")), mrope.Image(grid=(1, 2 * m, 2 * m)), mrope.Text(tv.tokenize("ok"))],
    ]


@pytest.mark.parametrize("name", FAMILIES)
def test_patched_prefill_equals_unpatched(
    name: str, apply_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kw = tv.inputs(name, _two_rows(name), padding_side="left")
    want = tv.logits(name, kw)
    own = _own_rotations(name, kw, monkeypatch)
    net = tv.model(name)
    with patched(net):
        apply_calls.clear()  # patch's own probe called it once
        got = tv.logits(name, kw)
    assert own and apply_calls == own  # the patched path ran, once per rotation the model makes
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)  # every slot, pads included


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_16_greedy_tokens_identical(name: str) -> None:
    kw = tv.forward_kwargs(tv.inputs(name, _two_rows(name), padding_side="left"), own_positions=True)
    net = tv.model(name)
    options = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}

    def run() -> torch.Tensor:
        net.model.rope_deltas = None
        with torch.no_grad():
            return net.generate(**kw, **options)

    want = run()
    with patched(net):
        got = run()
    assert got.shape[1] == kw["input_ids"].shape[1] + 16
    assert torch.equal(got, want)


def test_unpatch_restores_exactly_and_patching_is_per_instance() -> None:
    name = "qwen2-vl"
    net = tv.model(name)
    other = tiny_model(name, seed=1)  # same class, not patched
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    apply_before = module.apply_rotary_pos_emb
    kw = tv.inputs(name, _two_rows(name))
    other_before = _logits(other, kw)
    net_before = tv.logits(name, kw)
    with patched(net):
        assert mt.is_patched(net) and not mt.is_patched(other)
        assert module.apply_rotary_pos_emb is not apply_before  # the shared pass-through hook
        assert torch.equal(_logits(other, kw), other_before)  # the unpatched instance is untouched
        with patched(other):
            pass
        assert module.apply_rotary_pos_emb is not apply_before  # still in use by net
    assert module.apply_rotary_pos_emb is apply_before
    assert "get_rope_index" not in net.model.__dict__
    assert "forward" not in net.model.language_model.rotary_emb.__dict__
    assert "_mrope_patch" not in net.__dict__
    assert torch.equal(tv.logits(name, kw), net_before)


def test_a_deep_copy_of_a_patched_model_stays_patched_when_the_original_is_unpatched() -> None:
    """A deep copy (an EMA model, transformers' own tests) is a patched model of its own: unpatching the
    original leaves the copy's rotation working (its logits: the unpatched model's), and unpatching the
    copy too puts the module's function back. Control: the copy's Rotation handed to the original
    function fails, which is what a released hook would do."""
    name = "qwen2-vl"
    net = copy.deepcopy(tv.model(name))
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    original = patching._original_apply(module)
    kw = tv.inputs(name, _two_rows(name))
    want = _logits(net, kw)
    mt.patch(net)
    twin = copy.deepcopy(net)
    mt.unpatch(net)
    assert mt.is_patched(twin) and not mt.is_patched(net)
    assert module.apply_rotary_pos_emb is not original
    torch.testing.assert_close(_logits(twin, kw), want, rtol=0, atol=ATOL)
    rotary = twin.model.language_model.rotary_emb
    q = torch.randn(1, 2, 4, mt.patch_info(twin)["spec"].head_dim)
    rotation, same = rotary.forward(q, torch.zeros(3, 1, 4, dtype=torch.long))
    with pytest.raises(Exception, match="Rotation"):
        original(q, q, rotation, same)
    mt.unpatch(twin)
    assert module.apply_rotary_pos_emb is original


def test_a_patched_model_collected_without_unpatch_gives_the_function_back() -> None:
    name = "qwen2-vl"
    net = copy.deepcopy(tv.model(name))
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    original = patching._original_apply(module)
    gc.collect()  # models other tests dropped while patched
    assert module.apply_rotary_pos_emb is original
    mt.patch(net)
    assert module.apply_rotary_pos_emb is not original
    del net
    gc.collect()
    assert module.apply_rotary_pos_emb is original


def _logits(net: torch.nn.Module, kw: dict[str, torch.Tensor]) -> torch.Tensor:
    net.model.rope_deltas = None
    with torch.no_grad():
        return net(**tv.forward_kwargs(kw, own_positions=True), use_cache=False).logits


# HY-V4-VL: rope-slice views, bshd indexer; Qwen4-Exp: sliced and gathered table views (QSA indexer)
@pytest.mark.parametrize("name", ["qwen3-vl", "hy-v4-vl", "qwen4-exp"])
def test_exact_angles_and_triton_interpreter(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kw = tv.inputs(name, _two_rows(name)[1:])
    want = tv.logits(name, kw)
    net = tv.model(name)
    with patched(net, angle_precision="exact"):
        torch.testing.assert_close(tv.logits(name, kw), want, rtol=0, atol=1e-5)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with patched(net, backend="triton"):
        assert mt.patch_info(net)["backend"] == "triton"
        torch.testing.assert_close(tv.logits(name, kw), want, rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------ released convention


def _released_rule(runs: list[tuple]) -> torch.Tensor:
    """The official rule (max+1 advance, as the Qwen2-VL release and transformers 4.x's get_rope_index:
    docs/conventions.md, "Known divergences") for one unpadded sequence, written out here.

    runs: ("text", n) or ("vision", T', H', W', tau) with tau the t offset of each temporal patch.
    """
    cols: list[list[int]] = [[], [], []]
    s = 0
    for run in runs:
        if run[0] == "text":
            for i in range(run[1]):
                for axis in range(3):
                    cols[axis].append(s + i)
            s += run[1]
            continue
        _, frames, rows, width, tau = run
        top = s
        for f in range(frames):
            for r in range(rows):
                for c in range(width):
                    cols[0].append(s + tau[f])
                    cols[1].append(s + r)
                    cols[2].append(s + c)
                    top = max(top, s + tau[f], s + r, s + c)
        s = top + 1
    return torch.tensor(cols)[:, None, :]


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl"])
def test_released_convention_differs_after_a_long_video(name: str) -> None:
    """A video longer in time than in space: transformers 5.x resumes at s + max(H', W'), the released
    models at max + 1. patch(convention="released") gives the released positions, checked against the
    rule written out above (fed to the unpatched model as position_ids)."""
    net = tv.model(name)
    rules = mt.model_rules(net)
    m = rules.merge_size
    frames = 6  # T' = 6 > max(H', W') = 2
    text_ids = tv.tokenize("look")
    sample = [
        mrope.Text(text_ids),
        mrope.Video(grid=(frames, 2 * m, 2 * m), fps=2.0),
        mrope.Text(tv.tokenize("now?")),
    ]
    kw = tv.inputs(name, [sample])
    # tau: Qwen2-VL t = i; Qwen2.5-VL t = floor(i * second_per_grid * tokens_per_second), spg = 2 / 2 fps
    tps = net.config.vision_config.tokens_per_second if rules.temporal == "seconds" else None
    tau = [i if tps is None else int(i * 1.0 * tps) for i in range(frames)]
    expected = _released_rule(
        [("text", len(text_ids) + 1), ("vision", frames, 2, 2, tau), ("text", 1 + len(tv.tokenize("now?")))]
    )
    own = tv.logits(name, kw)
    want = tv.logits(name, {**kw, "position_ids": expected}, own_positions=False)
    with patched(net, convention="released"):
        got = tv.logits(name, kw)
        assert mt.patch_info(net)["convention"] == "released"
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    video_end = len(text_ids) + 1 + frames * 4
    torch.testing.assert_close(got[:, :video_end], own[:, :video_end], rtol=0, atol=ATOL)
    assert (got[:, video_end + 1 :] - own[:, video_end + 1 :]).abs().max() > 1e-3  # the text after it moved


@pytest.mark.parametrize("name", ["qwen3-vl", "glm-4.1v"])
def test_released_convention_equals_transformers5_for_frame_split_videos(name: str) -> None:
    """Qwen3-VL and GLM-4.1V split a video into one-frame blocks, where s + max(H', W') is max + 1."""
    net = tv.model(name)
    rules = mt.model_rules(net)
    kw = tv.inputs(name, [tv.segments(rules, video_t=6)])
    want = tv.logits(name, kw)
    with patched(net, convention="released"):
        torch.testing.assert_close(tv.logits(name, kw), want, rtol=0, atol=ATOL)


def test_released_convention_pads_and_float32_time_grouping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The other two released semantics, on Qwen2.5-VL with tokens_per_second 25 (a config value where the
    groupings differ): video time ``long((i * spg32) * tps)`` as the release computes it (5.24 groups
    ``i * (tps * spg32)``; at 25 fps, patch 5 gets 9 instead of 10), and pads 1 (the release starts from
    ``torch.ones``; 5.24 from zeros). Expected: the release's float32 expression and the max+1 rule written
    out here, fed to the unpatched model as position_ids."""
    name = "qwen2.5-vl"
    net = tv.model(name)
    monkeypatch.setattr(net.config.vision_config, "tokens_per_second", 25)
    m = mt.model_rules(net).merge_size
    frames, fps = 6, 25.0  # T' = 6 = max(H', W'): the advance conventions agree, only the time differs
    head, tail = tv.tokenize("look"), tv.tokenize("ok?")
    sample = [mrope.Text(head), mrope.Video(grid=(frames, m, 6 * m), fps=fps), mrope.Text(tail)]
    spg = torch.tensor([2 / fps])[0]  # float32, as the processor returns it
    tau = ((torch.arange(frames) * spg) * 25).long().tolist()
    assert tau != (torch.arange(frames) * (25 * spg)).long().tolist()  # the grouping matters here
    expected = _released_rule(
        [("text", len(head) + 1), ("vision", frames, 1, 6, tau), ("text", 1 + len(tail))]
    )
    kw = tv.inputs(name, [sample], with_pixels=False)
    own = tv.logits(name, kw)
    want = tv.logits(name, {**kw, "position_ids": expected}, own_positions=False)
    rows = tv.inputs(name, [sample, [mrope.Text(tail)]], with_pixels=False)  # row 1 is left-padded
    args = {k: rows[k] for k in ("input_ids", "mm_token_type_ids", "video_grid_thw", "attention_mask")}
    pads = rows["attention_mask"] == 0
    with torch.no_grad():
        pads_own = net.model.get_rope_index(**args, second_per_grid_ts=rows["second_per_grid_ts"])[0][:, pads]
        with patched(net, convention="released"):
            got = tv.logits(name, kw)
            pads_got = net.model.get_rope_index(**args, second_per_grid_ts=rows["second_per_grid_ts"])[0][
                :, pads
            ]
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)
    assert (got - own).abs().max() > 1e-4  # the video's time moved
    assert pads.any() and bool((pads_own == 0).all()) and bool((pads_got == 1).all())


# ------------------------------------------------------------------------------------------ errors


def test_patch_refuses_what_it_cannot_patch(monkeypatch: pytest.MonkeyPatch) -> None:
    net = tv.model("qwen2-vl")
    with pytest.raises(PatchError, match="convention"):
        mt.patch(net, convention="4.x")
    with pytest.raises(PatchError, match="angle_precision"):
        mt.patch(net, angle_precision="fp16")
    with pytest.raises(PatchError, match="torch.nn.Module"):
        mt.patch("Qwen/Qwen2-VL-7B-Instruct")  # type: ignore[arg-type]
    with pytest.raises(PatchError, match="not patched"):
        mt.unpatch(net)
    with patched(net), pytest.raises(PatchError, match="already patched"):
        mt.patch(net)

    from transformers import Qwen2Config, Qwen2ForCausalLM

    text_only = Qwen2ForCausalLM(
        Qwen2Config(
            hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=32
        )
    )
    with pytest.raises(PatchError, match="qwen2"):
        mt.patch(text_only)
    assert issubclass(PatchError, mrope.MRopeError)


def _untouched(net: torch.nn.Module) -> bool:
    """No trace of patch: no instance overrides anywhere, no pass-through hook in any modeling module."""
    overridden = [m for m in net.modules() if "get_rope_index" in m.__dict__ or "forward" in m.__dict__]
    modules = {sys.modules[type(m).__module__] for m in net.modules()}
    hooked = [m for m in modules for n in _OWN_APPLY if hasattr(getattr(m, n, None), "__mrope_original__")]
    return not mt.is_patched(net) and not overridden and not hooked


def test_a_rotary_mrope_does_not_reproduce_is_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    net = tv.model("qwen2-vl")
    rope = dict(net.config.text_config.rope_parameters)
    monkeypatch.setitem(net.config.text_config.rope_parameters, "mrope_section", rope["mrope_section"][::-1])
    with pytest.raises(PatchError, match="does not reproduce"):
        mt.patch(net)
    assert _untouched(net)


def test_positions_mrope_does_not_reproduce_are_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    net = tv.model("qwen2.5-vl")
    real = patching.rules_of
    # a wrong convention for this check: released rules (pads 1) where the model pads with 0
    monkeypatch.setattr(
        patching, "rules_of", lambda config, family, convention: real(config, family, "released")
    )
    with pytest.raises(PatchError, match="differ from"):
        mt.patch(net)
    assert _untouched(net)


# ------------------------------------------------------------------------------------------ GLM-Image


def _glm_image_inputs(padding_side: str) -> tuple[dict[str, torch.Tensor], mrope.Batch]:
    """Two image-to-image rows (a source image with pixels, one target each: 5.24 encodes every grid but
    a row's last as a source) and their batch; ``position_ids`` built by mrope."""
    name = "glm-image"
    net = tv.model(name)
    samples = [
        [
            mrope.Text(tv.tokenize("draw")),
            mrope.Image((1, 2, 3)),
            mrope.Text(tv.tokenize("as")),
            mrope.Image((1, 4, 4), generate=True),
        ],
        [
            mrope.Text(tv.tokenize("a")),
            mrope.Image((1, 2, 2)),
            mrope.Text(tv.tokenize("b")),
            mrope.Image((1, 2, 4), generate=True),
        ],
    ]
    batch = mrope.build_batch(
        samples,
        model=name,
        rules=mt.model_rules(net),
        padding_side=padding_side,
        tokenizer=tv.tokenize,
        pad_token_id=0,
    )
    kw = mt.model_inputs(batch, net)
    assert kw["images_per_sample"].tolist() == [2, 2]
    sources = kw["image_grid_thw"][[0, 2]]  # each row's grids but its last (the target)
    kw["pixel_values"] = tv.pixels(net, sources, 1)
    return kw, batch


def _glm_image_reset(net: torch.nn.Module) -> None:
    """No state from an earlier call: the deltas and the decode cache get_rope_index leaves."""
    net.model.rope_deltas = net.model._cached_decode_position_ids = net.model._prefill_len = None


def _glm_image_run(
    net: torch.nn.Module, kw: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(prefill logits, the decode cache its forward left, 16 greedy tokens of generate)."""
    own = {k: v for k, v in kw.items() if k != "position_ids"}
    with torch.no_grad():
        _glm_image_reset(net)
        logits = net(**own, use_cache=False).logits
        cache = net.model._cached_decode_position_ids
        _glm_image_reset(net)
        tokens = net.generate(**own, max_new_tokens=16, min_new_tokens=16, do_sample=False)
    _glm_image_reset(net)
    return logits, cache, tokens


def test_glm_image_patched_prefill_decode_cache_and_generate_equal_unpatched(apply_calls: list[str]) -> None:
    """GLM-Image decodes its generated image at positions its get_rope_index plans and caches on the model
    (``_cached_decode_position_ids``); the patched stand-in fills the same cache from mrope.generation_index.
    Expected: the unpatched 5.24 model (pixels through its vision tower and VQ codes, left padding)."""
    net = tv.model("glm-image")
    kw, _ = _glm_image_inputs("left")
    want_logits, want_cache, want_tokens = _glm_image_run(net, kw)
    assert want_cache is not None and want_cache.shape == (2, 3, 17)  # 4 x 4 target + end marker
    with patched(net):
        apply_calls.clear()
        got_logits, got_cache, got_tokens = _glm_image_run(net, kw)
        assert apply_calls[: _rotary_layers(net)] == ["bhsd"] * _rotary_layers(net)  # the patched path ran
    torch.testing.assert_close(got_logits, want_logits, rtol=0, atol=ATOL)
    assert torch.equal(got_cache, want_cache)
    assert got_tokens.shape[1] == kw["input_ids"].shape[1] + 16
    assert torch.equal(got_tokens, want_tokens)


@pytest.mark.parametrize("side", ["left", "right"])
def test_glm_image_built_positions_and_generation_ids_give_the_models_logits(side: str) -> None:
    """build_batch's positions as position_ids give the unpatched model's own logits; a manual decode at
    each row's ``Positions.window`` (its generation_ids) gives generate's logits step by step; the
    patched model's prefill equals the unpatched one with this padding too."""
    net = tv.model("glm-image")
    kw, batch = _glm_image_inputs(side)
    own = {k: v for k, v in kw.items() if k != "position_ids"}
    steps = 3
    with torch.no_grad():
        _glm_image_reset(net)
        generated = net.generate(
            **own,
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
        _glm_image_reset(net)
        out = net(**kw, use_cache=True)  # position_ids given: the model computes none
        assert net.model.rope_deltas is None and net.model._cached_decode_position_ids is None
        torch.testing.assert_close(out.logits[:, -1], generated.logits[0], rtol=0, atol=1e-5)
        mask, cache, prompt = kw["attention_mask"], out.cache, kw["input_ids"].shape[1]
        for j in range(1, steps):
            token = generated.sequences[:, prompt + j - 1 : prompt + j]
            position = torch.stack(
                [
                    torch.from_numpy(seq.window(seq.num_tokens + j - 1, seq.num_tokens + j))
                    for seq in batch.sequences
                ],
                dim=1,
            )  # [3, B, 1]
            mask = torch.cat([mask, torch.ones_like(token)], dim=-1)
            out = net(
                input_ids=token, attention_mask=mask, position_ids=position, cache=cache, use_cache=True
            )
            torch.testing.assert_close(out.logits[:, -1], generated.logits[j], rtol=0, atol=1e-5)
            cache = out.cache
        _glm_image_reset(net)
        built = net(**kw, use_cache=False).logits
        own_logits = net(**own, use_cache=False).logits
        _glm_image_reset(net)
        with patched(net):
            patched_logits = net(**own, use_cache=False).logits
    _glm_image_reset(net)
    assert torch.equal(built, own_logits)  # the model's own positions are build_batch's, pads included
    torch.testing.assert_close(patched_logits, own_logits, rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------------ MiniCPM-V 4.7


def _canvas_rows(merge: int) -> list[list[object]]:
    """A sliced picture (a thumbnail over a 3 x 2 canvas of slices), a plain one and video frames; a short row."""
    m = merge
    return [
        [
            mrope.Text(tv.tokenize("look")),
            mrope.Image((1, 4 * m, 6 * m), tiles=(3, 2), thumbnail_grid=(1, 3 * m, 2 * m)),
            mrope.Text(tv.tokenize("and")),
            mrope.Image((1, m, 2 * m)),
            mrope.Video((2, 2 * m, m), fps=2.0),
            mrope.Text(tv.tokenize("say?")),
        ],
        [mrope.Text(tv.tokenize("hi")), mrope.Image((1, 2 * m, 2 * m)), mrope.Text(tv.tokenize("ok"))],
    ]


@pytest.mark.parametrize("mode", ["16x", "4x"])
def test_minicpm_v_canvas_slices_and_downsample_mode_equal_unpatched(mode: str) -> None:
    """MiniCPM-V 4.7 takes crop sizes (``target_sizes``) and a per-call ``downsample_mode`` (merge 4 or 2);
    the stand-in converts both. Expected: the unpatched 5.24 model (its canvas get_rope_index)."""
    name = "minicpm-v-4.7"
    net = tv.model(name)
    rules = mt.model_rules(net)
    assert rules.merge_size == 4 and net.config.downsample_mode == "16x"
    if mode == "4x":
        rules = rules.replace(merge_size=2)
    batch = mrope.build_batch(
        _canvas_rows(rules.merge_size), model=name, rules=rules, tokenizer=tv.tokenize, pad_token_id=0
    )
    kw = {**mt.model_inputs(batch, net), "downsample_mode": mode}
    assert kw["target_sizes"].shape == (1 + 6 + 1 + 1, 2) and "image_grid_thw" not in kw
    want = tv.logits(name, kw)
    torch.testing.assert_close(tv.logits(name, kw, own_positions=False), want, rtol=0, atol=0)
    with patched(net):
        torch.testing.assert_close(tv.logits(name, kw), want, rtol=0, atol=ATOL)


def test_minicpm_v_without_marker_ids_is_refused_untouched_and_a_checkpoint_family_supplies_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The class defaults of the canvas marker ids are None: patch names the missing ones and changes
    nothing. ``family=mrope.from_pretrained(config)`` (a checkpoint's config.json) supplies them; the
    model's own get_rope_index still reads None from its config (slices become text), so under the
    default convention the probe refuses, and ``convention="released"`` gives the positions of the model
    with its ids (the expected logits: the unpatched model with the ids on its config)."""
    name = "minicpm-v-4.7"
    net = tv.model(name)
    kw = tv.inputs(name, _canvas_rows(4), with_pixels=False)
    want = tv.logits(name, kw)
    ids = dict(tv.CONFIG_IDS[name])
    checkpoint = mrope.from_pretrained({**net.config.to_dict(), **ids})
    for key in ids:
        monkeypatch.setattr(net.config, key, None)
    with pytest.raises(PatchError, match="has no slice_start_id, slice_end_id, newline_id"):
        mt.patch(net)
    assert _untouched(net)
    with pytest.raises(PatchError, match="answers to model_types"):
        mt.patch(net, family="qwen3.5")
    assert _untouched(net)
    with pytest.raises(PatchError, match="differ from MiniCPMV4_7Model.get_rope_index"):
        mt.patch(net, family=checkpoint)
    assert _untouched(net)
    assert (tv.logits(name, kw) - want).abs().max() > 1e-3  # the model without its ids is another model
    with patched(net, family=checkpoint, convention="released"):
        assert mt.patch_info(net)["rules"].slice_start_id == ids["slice_start_id"]
        torch.testing.assert_close(tv.logits(name, kw), want, rtol=0, atol=ATOL)


# ------------------------------------------------------------------------------------------ HunyuanOCR


def test_hunyuan_ocr_refusal_says_what_differs() -> None:
    """transformers 5.24's HunyuanOCR rotary (recomposition_frequencies) cuts cat(f, f) into chunks of
    2 * section channels, chunk i from axis i % 4; with sections (4, 4, 4, 4) and head_dim 32 channels
    0-7 follow axis 0, 8-15 axis 1, 16-23 axis 2, 24-31 axis 3, and rotate_half pairs c with c + 16
    (derived by hand from that code). The spec (the released xdrope: the same chunks in both halves)
    gives channel c axis (c mod 16) // 4."""
    net = tv.model("hunyuan-ocr")
    with pytest.raises(mt.NotARotationError) as info:
        mt.patch(net)
    message = str(info.value)
    assert "pairs channels 0-7 (axis 0) with 16-23 (axis 2) and 8-15 (axis 1) with 24-31 (axis 3)" in message
    assert "channels 4-7 follow axis 0 (the spec: axis 1); 8-11 follow axis 1 (the spec: axis 2)" in message
    assert "16-19 follow axis 2 (the spec: axis 0)" in message and "convention='released'" in message
    assert _untouched(net)


@functools.cache
def _hunyuan_ocr_ntk_alpha() -> torch.nn.Module:
    """A tiny HunyuanOCR with the released rotary type ("dynamic" with a fixed alpha: NTK-alpha)."""
    import transformers

    config = tiny_config("hunyuan-ocr")
    rope = {**config.text_config.rope_parameters, "rope_type": "dynamic", "alpha": 1000.0}
    config.text_config.rope_parameters = rope
    torch.manual_seed(0)
    return transformers.HunYuanVLForConditionalGeneration._from_config(config).eval()


def _official_xdrope(text_config: object):  # noqa: ANN202
    """Tencent's released rotary (apply_rotary_pos_emb_xdrope) as a rotary forward, written out here:
    base ``theta * alpha ** (d / (d - 2))``; the cos/sin of ``cat(f, f)`` cut into chunks of
    ``xdrope_section * 2`` (list repetition: the same axis map in both halves), chunk i from axis i % 4."""
    rope = text_config.rope_parameters  # type: ignore[attr-defined]
    dim = text_config.head_dim  # type: ignore[attr-defined]
    section = list(rope["mrope_section"])
    base = rope["rope_theta"] * rope["alpha"] ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))

    def forward(x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * inv_freq  # [4, B, S, d / 2]
        emb = torch.cat((freqs, freqs), dim=-1)
        emb = torch.cat([c[i % len(section)] for i, c in enumerate(emb.split(section * 2, dim=-1))], dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    return forward


def test_hunyuan_ocr_released_convention_is_the_official_xdrope_rotation() -> None:
    """convention="released" patches HunyuanOCR with the released rotation and positions (image index per
    sequence). Expected: each row alone through the unpatched model (its own get_rope_index: one row, so
    the index starts at 0) with the official xdrope above in place of 5.24's rotary. The logits differ
    from 5.24's by design from the first image token on."""
    name = "hunyuan-ocr"
    net = _hunyuan_ocr_ntk_alpha()
    rules = mt.model_rules(net, "released")
    m = rules.merge_size
    rows = [tv.segments(rules, video=False), [mrope.Text(tv.tokenize("hi")), mrope.Image((1, 2 * m, 2 * m))]]

    def inputs(samples: list[list[object]]) -> dict[str, torch.Tensor]:
        batch = mrope.build_batch(samples, model=name, rules=rules, tokenizer=tv.tokenize, pad_token_id=0)
        return mt.model_inputs(batch, net)

    def positions(model: torch.nn.Module, kw: dict[str, torch.Tensor]) -> torch.Tensor:
        names = ("input_ids", "mm_token_type_ids", "image_grid_thw", "attention_mask")
        return model.get_rope_index(**{k: kw[k] for k in names})[0]

    kw = inputs(rows)
    alone = [inputs([row]) for row in rows]
    rotary = net.model.language_model.rotary_emb
    rotary.forward = _official_xdrope(net.config.text_config)
    try:
        want = [_logits(net, one)[0] for one in alone]
    finally:
        del rotary.forward
    installed = _logits(net, kw)
    with patched(net, convention="released"):
        got = _logits(net, kw)
        got_positions = positions(net.model, kw)
    valid = kw["attention_mask"].bool()
    for r in range(len(rows)):
        torch.testing.assert_close(got[r][valid[r]], want[r], rtol=0, atol=ATOL)
        # the image index restarts per row: the last axis's frequencies are too low to show it in logits
        assert torch.equal(got_positions[:, r][:, valid[r]], positions(net.model, alone[r])[:, 0])
    assert not torch.equal(got_positions, positions(net.model, kw))  # 5.24 counts images across rows
    first = int(kw["mm_token_type_ids"][0].nonzero()[0])  # row 0 is the longer: no padding
    torch.testing.assert_close(got[0, :first], installed[0, :first], rtol=0, atol=ATOL)
    assert (got[0, first:] - installed[0, first:]).abs().max() > 1e-3


def test_every_registry_family_has_the_model_level_checks() -> None:
    """Every registry family is in FAMILIES (patched prefill, generate, build_batch positions and the
    validation checks above and in test_integration_seed/pipeline) or has its own tests here: GLM-Image
    (it decodes at planned image positions), HunyuanOCR (refused under the default convention, by
    design), MiniCPM-V 4.6, Qwen3-ASR, EXAONE 4.5 and MiniMax-M3-VL (refused: no get_rope_index to bind;
    EXAONE's and MiniMax's in their family tests), Falcon-OCR (not in transformers, and half its rotation is a
    checkpoint tensor: patch refuses it, tests/models/test_family_falcon_ocr.py). A family added to the
    registry fails this until its tiny model passes those checks."""
    own = (
        "glm-image",
        "hunyuan-ocr",
        "minicpm-v-4.6",
        "qwen3-asr",
        "exaone-4.5",
        "minimax-m3-vl",
        "falcon-ocr",
    )
    others = [f.name for f in mrope.models.families() if f.name not in (*FAMILIES, *own)]
    assert others == [], f"registry families without model-level checks: {others}"


def test_minicpm_v_4_6_is_refused_naming_get_rope_index() -> None:
    """transformers 5.24's MiniCPM-V 4.6 has no get_rope_index: its model passes position_ids=None to its
    Qwen3.5 text model, which writes arange on every axis (models/minicpmv4_6/modeling_minicpmv4_6.py:734-741),
    so patch() has nothing to replace and says so (its positions: tests/models/test_family_minicpmv4_6.py)."""
    net = tiny_model("minicpm-v-4.6")
    with pytest.raises(PatchError, match="get_rope_index"):
        mt.patch(net)
    assert not mt.is_patched(net)


def test_qwen3_asr_is_refused_naming_get_rope_index() -> None:
    """transformers 5.24's Qwen3-ASR has no get_rope_index: its model passes no position ids to its Qwen3
    text model, which counts arange (models/qwen3_asr/modeling_qwen3_asr.py:535-575), so patch() has
    nothing to replace and says so (its positions: tests/models/test_family_qwen3_asr.py)."""
    net = tiny_model("qwen3-asr")
    with pytest.raises(PatchError, match="get_rope_index"):
        mt.patch(net)
    assert not mt.is_patched(net)


def test_minimax_m3_vl_is_refused_naming_get_rope_index() -> None:
    """transformers 5.24's MiniMax-M3-VL has no get_rope_index: its model passes no position ids to its text
    model, which counts arange (models/minimax_m3_vl/modeling_minimax_m3_vl.py:757-760, 1459-1466), so patch()
    has nothing to replace and says so (its positions: tests/models/test_family_minimax_m3_vl.py)."""
    net = tiny_model("minimax-m3-vl")
    with pytest.raises(PatchError, match="get_rope_index"):
        mt.patch(net)
    assert not mt.is_patched(net)


def test_a_model_built_in_bf16_gives_its_logits_bit_for_bit() -> None:
    """Built in bf16 (not cast): transformers rounds cos/sin to bf16 and rotates in bf16
    (5.24 modeling_qwen2_vl.py:136, 176-177); the patched model hands its own apply_rotary_pos_emb mrope's
    tables in that dtype, so the logits are equal, not only within bf16 rounding (the control, mrope's
    fp32 rotation rounded once: tests/integrations/test_patch_half_precision.py)."""
    name = "qwen2-vl"
    net = tiny_model(name, dtype=torch.bfloat16)
    kw = tv.forward_kwargs(tv.inputs(name, _two_rows(name), with_pixels=False), own_positions=True)
    with torch.no_grad():
        want = net(**kw, use_cache=False).logits
        with patched(net):
            got = net(**kw, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=0, atol=0)


_TABLE_INDEXING: dict[str, Any] = {
    "indexer queries [:, -n:, :]": lambda t: t[:, -4:, :],
    "attention [:, -n:, :] (n = S)": lambda t: t[:, -6:, :],
    "row [b]": lambda t: t[1],
    "block starts [b].index_select(0, starts)": lambda t: t[1].index_select(0, torch.tensor([4, 0, 2, 2])),
    "index_select(1, ...) then [:, 1:]": lambda t: t.index_select(1, torch.tensor([5, 1, 3]))[:, 1:],
    "index_select(-3, ...)": lambda t: t.index_select(-3, torch.tensor([1])),
    "strided [-1, ::2]": lambda t: t[-1, ::2],
    "column [:, 2]": lambda t: t[:, 2],
    "numpy int [np.int64(0), 1:5, :]": lambda t: t[np.int64(0), 1:5, :],
    "one token [1, 3]": lambda t: t[1, 3],
}
"""Every kind of cos/sin table indexing the Rotation view stands for (Qwen4-Exp's QSA indexer and
attention: modeling_qwen4_exp.py:720, 764, 877), applied alike to the model's real table and to the view."""


@pytest.mark.parametrize("case", list(_TABLE_INDEXING))
def test_rotation_view_indexes_like_the_models_own_cos_table(case: str) -> None:
    """The view a patched rotary hands out, indexed as model code indexes a ``[B, S, D]`` cos/sin table,
    rotates heads like transformers 5.24's own apply_rotary_pos_emb with the model's own rotary's real
    table indexed the same way (t, h, w positions all differ, so a wrong row or axis shows)."""
    net = tv.model("qwen4-exp")
    rotary = net.model.language_model.rotary_emb
    module = sys.modules[type(rotary).__module__]
    gen = torch.Generator().manual_seed(3)
    positions = torch.randint(0, 500, (3, 2, 6), generator=gen)
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, positions)
    with patched(net):
        view, other = rotary(x, positions)
    assert isinstance(view, mt.Rotation) and other is view
    pick = _TABLE_INDEXING[case]
    cos_at, sin_at, view_at = pick(cos), pick(sin), pick(view)
    lead = tuple(cos_at.shape[:-1])
    assert view_at.lead_shape == lead
    width = cos.shape[-1] + 4  # a wider head: the channels past the table's width pass through
    for unsqueeze_dim in (1, 2) if len(lead) == 2 else range(len(lead) + 1):  # where the heads dim sits
        q = torch.randn((*lead[:unsqueeze_dim], 3, *lead[unsqueeze_dim:], width), generator=gen)
        k = torch.randn(q.shape, generator=gen)
        want_q, want_k = module.apply_rotary_pos_emb(q, k, cos_at, sin_at, unsqueeze_dim=unsqueeze_dim)
        got_q, got_k = view_at.apply(q, k, unsqueeze_dim)
        torch.testing.assert_close(got_q, want_q, rtol=0, atol=2e-6)
        torch.testing.assert_close(got_k, want_k, rtol=0, atol=2e-6)
        got_alone = view_at.apply(q, None, unsqueeze_dim)  # query-only, as the indexer calls it
        torch.testing.assert_close(got_alone, want_q, rtol=0, atol=2e-6)


def test_rotation_view_refuses_indexing_it_cannot_stand_for() -> None:
    """A partial channel slice, tensor/Ellipsis/None keys, a channel index_select or any other tensor
    method is a clear PatchError, never a silently wrong table."""
    spec = mrope.RopeSpec(head_dim=8, rotary_dim=8, mrope_section=(2, 1, 1))
    view = mt.Rotation(torch.zeros(3, 2, 5, dtype=torch.long), spec, "torch", "fp32")
    refused = {
        "channel dim": lambda: view[:, :, :4],
        "ellipsis": lambda: view[..., -2:],
        "tensor key": lambda: view[torch.tensor([0, 1])],
        "none key": lambda: view[None],
        "bool key": lambda: view[True],
        "too many": lambda: view[0, 0, :, 0],
        "channel index_select": lambda: view.index_select(2, torch.tensor([0])),
        "float index": lambda: view.index_select(1, torch.tensor([0.0])),
        "2-d index": lambda: view.index_select(1, torch.tensor([[0]])),
        "other method": lambda: view.unsqueeze(1),
        "split channel": lambda: view.apply(torch.zeros(2, 5, 8), None, 3),
        "no broadcast": lambda: view.apply(torch.zeros(3, 4, 5, 8), None, 1),
    }
    for what, call in refused.items():
        with pytest.raises(PatchError):
            call()
            pytest.fail(what)
    assert not hasattr(view, "unsqueeze")  # an AttributeError too, for code that probes with hasattr


def test_table_use_the_view_cannot_stand_for_is_refused_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The post-patch text forward probe stays a safety net: Qwen4-Exp whose QSA indexer (monkeypatched
    here) slices part of the cos/sin channels passes every probe before patching, fails on the view, so
    patch undoes itself and refuses; the model then runs as before."""
    net = tv.model("qwen4-exp")
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    indexer = module.Qwen4ExpTextQSAIndexer
    real = indexer.forward

    @functools.wraps(real)
    def half_channels(self, hidden_states, position_embeddings, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        position_embeddings[0][:, :, :4]  # a partial-channel table use (its result is not needed here)
        return real(self, hidden_states, position_embeddings, *args, **kwargs)

    monkeypatch.setattr(indexer, "forward", half_channels)
    ids = torch.tensor([tv.tokenize("plain text")])
    with torch.no_grad():
        before = net(input_ids=ids, use_cache=False).logits
    with pytest.raises(PatchError, match="failed on a short text-only probe .*full slice"):
        mt.patch(net)
    assert _untouched(net)
    with torch.no_grad():
        assert torch.equal(net(input_ids=ids, use_cache=False).logits, before)


def test_per_layer_type_rotaries_each_get_their_own_spec() -> None:
    """Cohere-Compass with a rotary on both layer types, theta 1e4 on the sliding-window layer and 1e6 on the
    full-attention one: the patched rotary hands each layer type its own spec (patch probes both), and the
    prefill equals the unpatched model's."""
    from transformers import AutoModelForImageTextToText

    from mrope.testing import tiny_config

    name = "cohere-compass"
    config = tiny_config(name)
    rope = config.text_config.rope_parameters
    rope["full_attention"] = {**rope["sliding_attention"], "rope_theta": 1e6}
    rope["sliding_attention"] = {**rope["sliding_attention"], "rope_theta": 1e4}
    torch.manual_seed(0)
    net = AutoModelForImageTextToText.from_config(config).eval()
    kw = tv.forward_kwargs(tv.inputs(name, _two_rows(name), with_pixels=False), own_positions=True)
    with torch.no_grad():
        want = net(**kw, use_cache=False).logits
        with patched(net):
            thetas = {
                lt: net.model.language_model.rotary_emb(kw["input_ids"], torch.zeros(3, 1, 1), lt)[
                    0
                ].spec.theta
                for lt in ("sliding_attention", "full_attention")
            }
            got = net(**kw, use_cache=False).logits
    assert thetas == {"sliding_attention": 1e4, "full_attention": 1e6}
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)


def test_model_rules_read_the_config_through_from_pretrained() -> None:
    """The patch reads a model's rules with mrope.from_pretrained (one reader of checkpoint fields), so a
    config's seconds_per_chunk (the omni thinkers' audio-in-video chunk) is read too."""
    import types

    config = tiny_config("qwen2.5-omni")
    config.seconds_per_chunk = 3
    rules = mt.model_rules(types.SimpleNamespace(config=config))
    assert rules.seconds_per_chunk == 3.0
    assert rules == mrope.from_pretrained(config.to_dict()).rules_for("transformers5")
