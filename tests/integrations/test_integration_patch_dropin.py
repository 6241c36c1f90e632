"""A patched model is a drop-in under torch.compile and for every position-id shape the model takes.

``torch.compile(fullgraph=True)`` traces a patched model's forward (and ``generate``'s static-cache
decode step) without a graph break and gives the eager logits; position ids of any shape the model's own
rotary takes (``position_ids.expand(3, -1, -1)`` in every family's transformers 5.24 rotary: ``[3, B, S]``,
``[1, B, S]``, ``[B, S]``) give the unpatched model's logits, a ``generate`` continued from a cache (which
hands the text model ``[1, B, S]`` ids) included. Expected values come from the unpatched model itself.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from support import tiny_vlm as tv
from support.tiny_vlm import FAMILIES, patched
from transformers import CompileConfig

from mrope._errors import PatchError
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
def test_a_patched_bf16_forward_compiles_fullgraph_to_the_models_compiled_logits(
    fresh_dynamo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In bf16 the patched forward (the model's own apply_rotary_pos_emb on mrope's tables) traces
    without a graph break, and compiled it gives the compiled unpatched model's logits bit for bit
    (compiled and eager differ by bf16 rounding, measured 0.006: inductor keeps the fused rotation's
    intermediates in fp32). The control, tables of the inverse rotation (sin negated), compiles to other
    logits."""
    name = "qwen2-vl"
    net = copy.deepcopy(tv.model(name)).to(torch.bfloat16)
    kw = _text_inputs(name)
    mask = kw["attention_mask"].bool()

    def compiled_logits() -> torch.Tensor:
        torch._dynamo.reset()
        return torch.compile(net.forward, fullgraph=True)(**kw, use_cache=False).logits[mask]

    with torch.no_grad():
        want = compiled_logits()
        with patched(net):
            got = compiled_logits()
            tables = Rotation.tables
            monkeypatch.setattr(Rotation, "tables", lambda self: (tables(self)[0], -tables(self)[1]))
            inverse = compiled_logits()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert not torch.equal(inverse, want)


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
    signature = inspect.signature(patching._named(original))  # 5.25 with kernels: a Func module

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


# ------------------------------------------------------------------------------------------ position ids


def _logits_or_error(net: torch.nn.Module, kw: dict[str, torch.Tensor]) -> torch.Tensor | Exception:
    net.model.rope_deltas = None
    try:
        with torch.no_grad():
            return net(**kw, use_cache=False).logits
    except Exception as exc:  # noqa: BLE001 - the outcome is compared with the patched model's
        return exc


def _position_shapes(mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Position ids of each shape, from text positions ``[B, S]`` (``mask``'s cumulative sum, row 0
    shifted as after an image): the rows differ per axis where there are several."""
    text = (mask.cumsum(-1) - 1).clamp(min=0) + torch.tensor([[5], [0]])
    return {
        "[3, B, S]": torch.stack([text, text + 1, text + 2]),
        "[1, B, S]": text[None],
        "[B, S]": text,
        "[4, B, S]": torch.stack([text, text, text + 1, text + 2]),  # text row first, then the three axes
        "[2, B, S]": torch.stack([text, text + 1]),
        "[S]": text[0],
    }


TAKEN = ("[3, B, S]", "[1, B, S]", "[B, S]", "[4, B, S]")
"""The shapes every family's model takes (``[4, B, S]``: its text model splits off the text row)."""


@pytest.mark.parametrize("name", FAMILIES)
def test_position_id_shapes_the_model_takes_give_its_logits_and_others_are_refused(name: str) -> None:
    net = tv.model(name)
    ids = torch.randint(1000, 1400, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    for shape, positions in _position_shapes(mask).items():
        kw = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        want = _logits_or_error(net, kw)
        with patched(net):
            got = _logits_or_error(net, kw)
        if shape in TAKEN:
            assert isinstance(want, torch.Tensor), (shape, want)
            assert isinstance(got, torch.Tensor), (shape, got)
            torch.testing.assert_close(got, want, rtol=0, atol=ATOL, msg=shape)
        else:  # the model's rotary cannot expand them to its three rows; the patched one says so
            assert isinstance(want, RuntimeError), (shape, want)
            assert isinstance(got, PatchError) and "position_ids" in str(got), (shape, got)


CONTINUED_IN_THREE_ROWS = frozenset({"minicpm-v-4.7", "qwen4-exp"})
"""Families whose generate hands a decode step continued from a cache ``[3, B, S]`` ids (the others hand
text positions plus the cached deltas, ``[1, B, S]``)."""


@pytest.mark.parametrize("name", FAMILIES)
def test_generate_continued_from_its_cache_gives_the_models_tokens(name: str) -> None:
    """As transformers' test_generate_continue_from_past_key_values: 3 tokens, then 1 more from the
    returned cache, equal 4 tokens in one call; patched, both equal the unpatched model's. The second
    call's decode hands the rotary ``[1, B, S]`` ids (text positions plus the cached deltas)."""
    net = tv.model(name)
    kw = _generate_inputs(name)
    rotary = net.model.language_model.rotary_emb

    def run() -> tuple[Any, Any]:
        whole = _greedy(net, kw, tokens=4)
        first = _greedy(net, kw)
        grown = first.sequences.shape[1] - kw["attention_mask"].shape[1]
        more = dict(kw, input_ids=first.sequences, cache=first.cache)
        more["attention_mask"] = torch.nn.functional.pad(kw["attention_mask"], (0, grown), value=1)
        with torch.no_grad():
            rest = net.generate(
                **more,
                max_new_tokens=1,
                do_sample=False,
                pad_token_id=0,
                return_dict_in_generate=True,
                output_scores=True,
            )
        return whole, (rest.sequences, torch.stack((*first.scores, *rest.scores)))

    want_whole, (want_seq, want_scores) = run()
    shapes: list[tuple[int, ...]] = []

    def record(_: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        shapes.append(tuple((args[1] if len(args) > 1 else kwargs["position_ids"]).shape))

    hook = rotary.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with patched(net):
            got_whole, (got_seq, got_scores) = run()
    finally:
        hook.remove()
    assert torch.equal(want_seq, want_whole.sequences)  # the model continues its own cache
    assert torch.equal(got_seq, want_seq) and torch.equal(got_whole.sequences, want_whole.sequences)
    torch.testing.assert_close(got_scores, want_scores, rtol=0, atol=ATOL)
    torch.testing.assert_close(torch.stack(got_whole.scores), want_scores, rtol=0, atol=ATOL)
    # the continued step's [1, B, S] ids reached the patched rotary (two families expand them first)
    assert ((1, 1, 1) in shapes) == (name not in CONTINUED_IN_THREE_ROWS), shapes
