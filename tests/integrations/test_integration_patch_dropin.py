"""A patched model is a drop-in under torch.compile.

``torch.compile(fullgraph=True)`` traces a patched model's forward (and ``generate``'s static-cache
decode step) without a graph break and gives the eager logits. Expected values come from the unpatched
model itself.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import patched
from transformers import CompileConfig

from mrope.integrations.transformers import _patching as patching
from mrope.integrations.transformers._rotation import Rotation

ATOL = 2e-6  # fp32 logits: the same rotation arithmetic, fused differently (as the patch tests)

COMPILED = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v")
"""Families whose patched tiny model is compiled here (inductor on CPU takes about 10-25 s each)."""


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Dynamo forgets earlier compiles before and after the test (the families' forwards share the code
    objects of transformers' decorators, which would count toward one recompile limit)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _text_inputs(name: str) -> dict[str, torch.Tensor]:
    """Two left-padded rows (an image and a video placeholder block, no pixels) with mrope's M-RoPE
    ``position_ids``: what a forward with given positions takes, no get_rope_index involved."""
    kw = tv.inputs(name, [tv.prompt(name), tv.prompt(name)[:3]], with_pixels=False)
    return {key: kw[key] for key in ("input_ids", "attention_mask", "position_ids")}


def _generate_inputs(name: str) -> dict[str, torch.Tensor]:
    """One row with image and video placeholders and their grids (no pixels): the model computes its own
    positions (deltas != 0) and decodes from its rope_deltas."""
    kw = tv.inputs(name, [tv.prompt(name)], with_pixels=False)
    return tv.forward_kwargs(kw, own_positions=True)


def _static_compile() -> CompileConfig:
    """Full-graph compile of generate's decode steps, on CPU too."""
    config = CompileConfig(fullgraph=True, mode="default")
    config._compile_all_devices = True
    return config


@contextlib.contextmanager
def _no_compiled_call(net: torch.nn.Module) -> Iterator[None]:
    """The shared tiny model forgets the compiled forward generate attaches to it."""
    try:
        yield
    finally:
        for attr in ("_compiled_call", "_last_compile_config"):
            net.__dict__.pop(attr, None)


def _greedy(net: torch.nn.Module, kw: dict[str, torch.Tensor], tokens: int = 3, **options: Any) -> Any:
    """Greedy generate of ``tokens`` tokens with their scores, from no cached rope_deltas."""
    net.model.rope_deltas = None
    with torch.no_grad():
        return net.generate(
            **kw,
            max_new_tokens=tokens,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
            output_scores=True,
            **options,
        )


# ------------------------------------------------------------------------------------------ compile


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED)
def test_patched_forward_compiles_fullgraph_to_the_eager_logits(name: str, fresh_dynamo: None) -> None:
    net = tv.model(name)
    kw = _text_inputs(name)
    with torch.no_grad():
        want = net(**kw, use_cache=False).logits
        with patched(net):
            eager = net(**kw, use_cache=False).logits
            compiled = torch.compile(net.forward, fullgraph=True)(**kw, use_cache=False).logits
    torch.testing.assert_close(compiled, eager, rtol=0, atol=ATOL)
    torch.testing.assert_close(compiled, want, rtol=0, atol=ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", COMPILED)
def test_static_cache_generate_compiles_fullgraph_to_the_models_tokens(name: str, fresh_dynamo: None) -> None:
    """generate with a static cache runs its decode steps through ``torch.compile(fullgraph=True)`` of the
    patched forward (a graph break would raise) and gives the unpatched eager model's tokens and scores."""
    net = tv.model(name)
    kw = _generate_inputs(name)
    want = _greedy(net, kw)
    with patched(net), _no_compiled_call(net):
        got = _greedy(net, kw, cache_implementation="static", compile_config=_static_compile())
        assert "_compiled_call" in net.__dict__  # the decode steps ran compiled
    assert torch.equal(got.sequences, want.sequences)
    torch.testing.assert_close(torch.stack(got.scores), torch.stack(want.scores), rtol=0, atol=ATOL)


def _binding_per_call(original: Any) -> Any:
    """A pass-through apply_rotary_pos_emb that binds an ``inspect.Signature`` on every call."""
    signature = inspect.signature(original)

    def apply_rotary_pos_emb(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - transformers' signature
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        named = bound.arguments
        if isinstance(named["cos"], Rotation):
            return named["cos"].apply(named["q"], named["k"], named["unsqueeze_dim"])
        return original(*args, **kwargs)

    return apply_rotary_pos_emb


@pytest.mark.slow
def test_binding_the_signature_per_call_breaks_the_fullgraph_compile(
    fresh_dynamo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: the same static-cache compile with a pass-through that binds a signature at
    call time stops at a graph break (dynamo cannot read the signature's mapping proxy once the cache
    update has mutated a dict)."""
    name = COMPILED[0]
    net = tv.model(name)
    kw = _generate_inputs(name)
    module = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    with patched(net), _no_compiled_call(net), monkeypatch.context() as m:
        m.setattr(module, "apply_rotary_pos_emb", _binding_per_call(patching._original_apply(module)))
        assert torch.equal(_greedy(net, kw).sequences, _greedy(net, kw).sequences)  # it runs eagerly
        with pytest.raises(torch._dynamo.exc.Unsupported, match="mapping proxy"):
            _greedy(net, kw, cache_implementation="static", compile_config=_static_compile())
