"""Install mrope on one loaded transformers model and take it off again (patch, unpatch, their state).

:func:`patch`, :func:`unpatch`, :func:`is_patched`, :func:`patch_info` and :func:`model_rules`, with the
replacements a patch installs: the ``get_rope_index`` stand-in, the rotary ``forward`` that hands out a
:class:`~mrope.integrations.transformers._rotation.Rotation`, and the pass-through
``apply_rotary_pos_emb``.
"""

from __future__ import annotations

import copy
import functools
import inspect
import sys
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from mrope._errors import MRopeError, MRopeWarning, PatchError
from mrope._layout.leniency import lenient_reading
from mrope._spec import RopeSpec
from mrope._token_ids import generation_index, get_rope_index
from mrope.integrations.transformers._discovery import (
    APPLY_FUNCTION,
    APPLY_HALVES,
    applied_spec,
    apply_hook,
    family_of,
    inv_freq_buffer,
    layer_types,
    position_owners,
    rules_of,
    spec_of,
    text_rotaries,
)
from mrope.integrations.transformers._inputs import CROP_SIZES, grids_from_crops
from mrope.integrations.transformers._probes import (
    MISSING,
    check_positions,
    check_rotary,
    check_text_forward,
    table_form,
)
from mrope.integrations.transformers._rotation import HALF_PRECISION, Rotation, buffer_frequencies
from mrope.models import CONVENTIONS
from mrope.ops import ANGLE_PRECISIONS, BACKENDS

DEFAULT_CONVENTION = "transformers5"
"""The convention :func:`patch` and :func:`model_rules` use for ``convention=None``: the installed
transformers' own (one of :data:`CONVENTIONS`, the registry's)."""

_STATE_ATTR = "_mrope_patch"


# ------------------------------------------------------------------------------------------ hook


@dataclass
class _Hook:
    module: types.ModuleType
    name: str
    original: Any
    users: int = 0


_HOOKS: dict[str, _Hook] = {}
"""The installed pass-through per modeling module; ``users`` counts the live patched models (deep copies
included) that rotate through it, and the last one to go (unpatched or collected) puts the original back."""


def _release_hook(module_name: str) -> None:
    hook = _HOOKS.get(module_name)
    if hook is None:
        return
    hook.users -= 1
    if hook.users <= 0:
        setattr(hook.module, hook.name, hook.original)
        del _HOOKS[module_name]


def _lease_hook(state: _State) -> None:
    """Count ``state``'s model as a user of its module's hook until it is unpatched or collected."""
    _HOOKS[state.hook_module].users += 1
    _LEASES[state] = weakref.finalize(state, _release_hook, state.hook_module)


@dataclass(frozen=True)
class _Slot:
    """Where one argument of ``apply_rotary_pos_emb`` arrives: its position among the positional
    arguments (``None`` for keyword-only) and the value it takes when the call does not pass it."""

    name: str
    at: int | None
    default: Any

    def read(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The value passed for this argument (positionally or by name), else its default."""
        if self.at is not None and len(args) > self.at:
            return args[self.at]
        return kwargs.get(self.name, self.default)

    def write(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], value: Any
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``args`` and ``kwargs`` with ``value`` passed for this argument where the call passed it
        (positionally or by name), else by name."""
        if self.at is not None and len(args) > self.at:
            return (*args[: self.at], value, *args[self.at + 1 :]), kwargs
        return args, {**kwargs, self.name: value}


def _named(original: Any) -> Any:
    """The function whose signature names ``original``'s arguments: ``original`` itself, or for an
    ``nn.Module`` standing in for a function (transformers 5.25 with ``kernels`` installed decorates
    ``apply_rotary_pos_emb`` with ``use_kernel_forward_from_hub``, which makes it an instance of a ``Func``
    module whose ``forward(*args, **kwargs)`` calls the function it closes over as ``func``: kernels 0.19.1
    kernels/_internals/layer/layer.py:835-856) its ``forward`` when that names ``q`` (a kernel layer's),
    else that closed-over function."""
    if not isinstance(original, torch.nn.Module):
        return original
    forward = original.forward
    if "q" in inspect.signature(forward).parameters:
        return forward
    wrapped = inspect.getclosurevars(type(original).forward).nonlocals.get("func")
    return wrapped if callable(wrapped) else forward


def _slots(original: Any, name: str) -> tuple[_Slot, _Slot, _Slot, _Slot, _Slot]:
    """The slots of ``q``, ``k``, ``cos``, ``sin`` and ``unsqueeze_dim`` in the signature of ``original`` (the
    modeling module's function ``name``, see :func:`_named`), read once so that a call reads only its own
    args tuple and kwargs dict (which ``torch.compile`` traces without a graph break). ``k`` defaults to
    ``None``, ``unsqueeze_dim`` to 1, and ``cos`` and ``sin`` are the third and fourth positional arguments
    where the signature does not say.

    Raises:
        PatchError: ``original`` has no ``q`` argument for mrope to rotate.
    """
    signature = inspect.signature(_named(original))
    params = signature.parameters
    if "q" not in params:
        raise PatchError(f"{name}{signature} has no q argument for mrope to rotate")
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    order = [name for name, p in params.items() if p.kind in kinds]

    def slot(name: str, default: Any, at: int | None = None) -> _Slot:
        param = params.get(name)
        if param is not None:
            at = order.index(name) if name in order else None
            default = default if param.default is inspect.Parameter.empty else param.default
        return _Slot(name, at, default)

    return (
        slot("q", None),
        slot("k", None),
        slot("cos", None, at=2),
        slot("sin", None, at=3),
        slot("unsqueeze_dim", 1),
    )


def _dispatching(original: Any, name: str = APPLY_FUNCTION) -> Any:
    """The pass-through for the modeling module's function ``name`` (a key of :data:`APPLY_HALVES`): a
    :class:`Rotation` in the cos slot is rotated by mrope (in split halves where ``name`` writes them),
    or, in half precision (:attr:`Rotation.in_model_arithmetic`), replaced with its cos/sin tables and
    handed to ``original`` (the model's own arithmetic on mrope's tables); real cos/sin tables (an
    unpatched model of the same class) go to ``original`` unchanged.

    Raises:
        PatchError: ``original`` has no ``q`` argument.
    """
    q_slot, k_slot, cos_slot, sin_slot, unsqueeze_slot = _slots(original, name)
    halves = APPLY_HALVES[name]

    @functools.wraps(_named(original))
    def apply_rotary_pos_emb(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - transformers' signature
        cos = cos_slot.read(args, kwargs)
        if isinstance(cos, Rotation) and cos.in_model_arithmetic:
            cos_table, sin_table = cos.tables()
            args, kwargs = cos_slot.write(args, kwargs, cos_table)
            args, kwargs = sin_slot.write(args, kwargs, sin_table)
            return original(*args, **kwargs)
        if isinstance(cos, Rotation):
            q = q_slot.read(args, kwargs)
            k = k_slot.read(args, kwargs)
            return cos.apply(q, k, unsqueeze_slot.read(args, kwargs), halves=halves)
        return original(*args, **kwargs)

    apply_rotary_pos_emb.__mrope_original__ = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _original_apply(module: types.ModuleType, name: str = APPLY_FUNCTION) -> Any:
    fn = getattr(module, name)
    return getattr(fn, "__mrope_original__", fn)


# ------------------------------------------------------------------------------------------ state


@dataclass(eq=False)
class _State:
    """What :func:`patch` changed on one model, so that :func:`unpatch` can put it back.

    A deep copy of a patched model is a patched model of its own: its state (deep-copied with the model, so
    ``owners`` and ``rotaries`` name the copy's modules) holds the hook too.
    """

    family: Any
    convention: str
    rules: Any
    spec: RopeSpec
    backend: str
    angle_precision: str
    owners: list[tuple[torch.nn.Module, Any]] = field(default_factory=list)
    rotaries: list[tuple[torch.nn.Module, Any]] = field(default_factory=list)
    hook_module: str = ""

    def __deepcopy__(self, memo: dict[int, Any]) -> _State:
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        for key, value in self.__dict__.items():
            twin.__dict__[key] = copy.deepcopy(value, memo)
        _lease_hook(twin)
        return twin


_LEASES: weakref.WeakKeyDictionary[_State, weakref.finalize] = weakref.WeakKeyDictionary()
"""Each patched model's hold on its module's hook, released by unpatch or when the state is collected."""


def is_patched(model: torch.nn.Module) -> bool:
    """Whether :func:`patch` has been applied to ``model`` (and not undone)."""
    return isinstance(getattr(model, "__dict__", {}).get(_STATE_ATTR), _State)


def patch_info(model: torch.nn.Module) -> dict[str, Any]:
    """What a patched model uses: ``{"family", "convention", "rules", "spec", "backend", "angle_precision"}``.

    Raises:
        PatchError: the model is not patched.
    """
    state = model.__dict__.get(_STATE_ATTR) if hasattr(model, "__dict__") else None
    if not isinstance(state, _State):
        raise PatchError(f"{type(model).__name__} is not patched by mrope")
    return {
        "family": state.family,
        "convention": state.convention,
        "rules": state.rules,
        "spec": state.spec,
        "backend": state.backend,
        "angle_precision": state.angle_precision,
    }


# ------------------------------------------------------------------------------------------ replacements


def _make_get_rope_index(owner: torch.nn.Module, family: Any, rules: Any) -> Any:
    """A drop-in for ``owner.get_rope_index`` (same signature, positional or keyword) that calls
    :func:`mrope.get_rope_index` with the family and this model's rules, reading the token ids leniently
    (:mod:`mrope._layout.leniency`): an input the model reads anyway is read as the model reads it, and
    each kind of such input warns once per patch (an :class:`~mrope.MRopeWarning`)."""
    signature = inspect.signature(type(owner).get_rope_index)
    takes = set(inspect.signature(get_rope_index).parameters) - {
        "model",
        "rules",
        "convention",
        "pad_position",
    }
    takes |= set(CROP_SIZES.values()) | {"downsample_mode"}
    warned: set[str] = set()  # the lenient readings this patch has warned about

    def mrope_get_rope_index(*args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """mrope.get_rope_index with this model's rules: ``([3, B, L], [B, 1])`` on input_ids' device."""
        bound = signature.bind(owner, *args, **kwargs)
        given: dict[str, Any] = {}
        for name, value in list(bound.arguments.items())[1:]:
            if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                given.update(value)
            else:
                given[name] = value
        call = {k: v for k, v in given.items() if v is not None and k in takes}
        mask = call.get("attention_mask")
        if not (isinstance(mask, torch.Tensor) and mask.dim() == 2):
            call.pop("attention_mask", None)
        input_ids = call.pop("input_ids")
        grids_from_crops(call)
        mode = call.pop("downsample_mode", None)
        lay = rules if mode is None else _with_downsample_mode(rules, family, mode)
        with lenient_reading() as notes:
            positions, deltas = get_rope_index(input_ids, model=family, rules=lay, **call)
        for note in notes:
            if note not in warned:
                warned.add(note)
                warnings.warn(
                    f"the patched {type(owner).__name__}: {note} (mrope's own get_rope_index refuses this "
                    "input)",
                    MRopeWarning,
                    stacklevel=2,
                )
        if lay.generates_images:
            _cache_generation(owner, input_ids, call, family, lay)
        if not positions.is_floating_point():
            positions = positions.to(input_ids.dtype)
        return positions.to(input_ids.device), deltas.to(input_ids.device)

    mrope_get_rope_index.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    return mrope_get_rope_index


def _with_downsample_mode(rules: Any, family: Any, mode: Any) -> Any:
    """``rules`` with a per-call ``downsample_mode`` (MiniCPM-V 4.7: the merge its vision tower runs
    with), read by the family's own checkpoint field for that key."""
    choice = family.checkpoint_fields.get("config:downsample_mode")
    if choice is None:
        raise PatchError(f"the {family.name!r} family takes no downsample_mode; got {mode!r}")
    try:
        return rules.replace(**{choice.field: choice.value_of(mode, "downsample_mode")})
    except MRopeError as exc:
        raise PatchError(str(exc)) from None


_GENERATION_CACHE = ("_cached_decode_position_ids", "_prefill_len")
"""Where a model under ``generates_images`` rules (GLM-Image) keeps what its ``get_rope_index`` plans for
decoding: the positions of the images it will generate ``[B', 3, G]`` and the prompt length; its
``compute_3d_position_ids`` reads step ``cache_length - _prefill_len`` of them at every decode step."""


def _cache_generation(
    owner: torch.nn.Module, input_ids: torch.Tensor, call: dict[str, Any], family: Any, rules: Any
) -> None:
    """Set :data:`_GENERATION_CACHE` on ``owner`` as GLM-Image's own get_rope_index does: the prompt
    length, and :func:`mrope.generation_index` of the rows that have grids (``None`` without grids)."""
    grids = call.get("image_grid_thw")
    per_sample = call.get("images_per_sample")
    cached = None
    if grids is not None and len(grids):
        decode = torch.from_numpy(
            generation_index(
                input_ids,
                grids,
                call.get("attention_mask"),
                model=family,
                rules=rules,
                images_per_sample=per_sample,
            )
        )
        if per_sample is not None:  # the model skips rows given no grid (it stacks the others)
            decode = decode[torch.as_tensor(per_sample).reshape(-1).cpu() > 0]
        cached = decode.to(input_ids.device) if len(decode) else None
    owner.__dict__[_GENERATION_CACHE[0]] = cached
    owner.__dict__[_GENERATION_CACHE[1]] = int(input_ids.shape[1])


def _make_rotary_forward(
    specs: dict[str | None, RopeSpec],
    backend: str,
    precision: str,
    forms: dict[str | None, tuple[str, bool] | None],
) -> Any:
    """The patched rotary ``forward(self, x, position_ids, layer_type=None)`` (bound to each rotary) for a
    model with ``specs`` (one per layer type; key ``None`` for a rotary with one ``inv_freq``) whose own
    tables have the ``forms`` (:func:`table_form`, per layer type)."""
    held = {
        (layer_type, dtype): buffer_frequencies(spec, dtype)
        for layer_type, spec in specs.items()
        for dtype in (torch.float16, torch.bfloat16)
    }  # built here, not per call: a compiled forward only looks them up

    def forward(
        self: torch.nn.Module, x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> tuple[Rotation, Rotation]:
        """Positions -> a :class:`Rotation` in both the cos and sin slots (with the spec of ``layer_type``
        for a per-layer-type rotary, and the frequencies its ``inv_freq`` buffer holds in its dtype now).

        Takes the shapes the models' own rotaries take (``position_ids.expand(A, -1, -1)``, A =
        ``len(spec.mrope_section)`` axes): ``[A, B, S]``, ``[1, B, S]`` (one row for every axis, as
        ``generate`` hands a model continuing from a cache) and ``[B, S]`` (text positions).
        """
        spec = specs.get(layer_type)
        if spec is None:
            raise PatchError(
                f"patched rotary has no spec for layer type {layer_type!r}; it has {list(specs)}"
            )
        axes = len(spec.mrope_section)
        if position_ids.dim() not in (2, 3) or (
            position_ids.dim() == 3 and position_ids.shape[0] not in (1, axes)
        ):
            raise PatchError(
                f"patched rotary takes position_ids [{axes}, B, S], [1, B, S] or [B, S] (as the model's own "
                f"rotary expands them to {axes} rows); got {list(position_ids.shape)}"
            )
        frequencies = held.get((layer_type, inv_freq_buffer(self, layer_type).dtype))
        form = forms[layer_type]
        table_dtype = None  # mrope's own rotation, unless the model's arithmetic is the half-precision one
        if form is not None and x.dtype in HALF_PRECISION and precision == "fp32":
            table_dtype = x.dtype if form[1] else torch.float32
        rotation = Rotation(
            position_ids.expand(axes, -1, -1),
            spec,
            backend,
            precision,
            frequencies,
            table_dtype,
            None if form is None else form[0],
        )
        return rotation, rotation

    return forward


# ------------------------------------------------------------------------------------------ public


def _convention(convention: str | None) -> str:
    conv = DEFAULT_CONVENTION if convention is None else convention
    if conv not in CONVENTIONS:
        raise PatchError(f"convention must be None or one of {list(CONVENTIONS)}; got {convention!r}")
    return conv


def model_rules(model: torch.nn.Module, convention: str | None = None, *, family: Any = None) -> Any:
    """The :class:`~mrope.LayoutRules` mrope uses for this transformers model: its family's rules under
    ``convention`` (``None`` = ``"transformers5"``) with the token ids and vision sizes of its config
    (``family``: as :func:`patch` takes it).

    Pass them as ``rules=`` (with ``model=`` the family) to :func:`mrope.build_batch` to build positions
    for it outside the model.
    """
    conv = _convention(convention)
    config = getattr(model, "config", None)
    return rules_of(config, family_of(config, family), conv)


def patch(
    model: torch.nn.Module,
    *,
    convention: str | None = None,
    angle_precision: str = "fp32",
    backend: str = "auto",
    family: Any = None,
) -> torch.nn.Module:
    """Make a loaded transformers M-RoPE model use mrope's positions and apply op (in place).

    Args:
        model: a transformers model of a family mrope supports (``...ForConditionalGeneration`` or the
            bare ``...Model``), on any device, any dtype.
        convention: ``None`` / ``"transformers5"`` (the installed transformers' conventions: logits equal
            the unpatched model's) or ``"released"`` (the released models' semantics; see the module doc).
        angle_precision: ``"fp32"`` (transformers' angle arithmetic) or ``"exact"`` (angles right to one
            fp32 rounding at any position); see :func:`mrope.apply_mrope`.
        backend: ``"auto"`` (Triton on CUDA, torch elsewhere), ``"torch"`` or ``"triton"``.
        family: ``None`` (the family of ``config.model_type``, ids from the config) or what
            :func:`mrope.from_pretrained` returns for the model's checkpoint (or a family name): its ids
            fill those the config leaves ``None`` (MiniCPM-V 4.7's marker ids have no class default).

    Returns:
        ``model`` itself, patched.

    Raises:
        PatchError: the model is already patched, its family is unknown, a token id its rules need is in
            neither its config nor ``family``, a hook point is missing, or mrope does not reproduce its
            rotary or (``"transformers5"``) its positions; the model is unchanged.
    """
    conv = _convention(convention)
    if angle_precision not in ANGLE_PRECISIONS:
        raise PatchError(f"angle_precision must be one of {list(ANGLE_PRECISIONS)}; got {angle_precision!r}")
    if backend not in BACKENDS:
        raise PatchError(f"backend must be one of {list(BACKENDS)}; got {backend!r}")
    if not isinstance(model, torch.nn.Module):
        raise PatchError(f"patch takes a transformers model (a torch.nn.Module); got {type(model).__name__}")
    if is_patched(model):
        raise PatchError(f"{type(model).__name__} is already patched by mrope; unpatch it first")
    config = getattr(model, "config", None)
    family = family_of(config, family)
    owner, owners = position_owners(model)
    rotaries = text_rotaries(owner)
    module_name = type(rotaries[0]).__module__
    module = sys.modules.get(module_name)
    if module is None:
        raise PatchError(f"{module_name} (the module of {type(rotaries[0]).__name__}) is not imported")
    apply_name, attentions = apply_hook(owner, module)
    spec = spec_of(config)
    specs = {lt: applied_spec(spec_of(config, lt), attentions) for lt in layer_types(rotaries[0])}
    rules = rules_of(config, family, conv)
    missing = [name for name in _GENERATION_CACHE if rules.generates_images and not hasattr(owner, name)]
    if missing:
        raise PatchError(
            f"{type(owner).__name__} has no {missing}: the decode cache of generated images that mrope "
            f"fills for the {rules.name!r} rules (generates_images) is not where its forward reads it"
        )
    original_apply = _original_apply(module, apply_name)
    dispatch = _dispatching(original_apply, apply_name)  # refuses one without q before any change
    for layer_type, applied in specs.items():
        check_rotary(
            rotaries[0],
            original_apply,
            applied,
            backend,
            layer_type,
            released=conv == "released",
            halves=APPLY_HALVES[apply_name],
        )
    forms = {lt: table_form(rotaries[0], applied, lt) for lt, applied in specs.items()}
    replacements = [(o, _make_get_rope_index(o, family, rules)) for o in owners]
    if conv == "transformers5":
        for o, replacement in replacements:
            check_positions(o, replacement, family, rules)

    # every check passed: mutate (instance attributes only, plus the shared pass-through hook)
    state = _State(
        family=family,
        convention=conv,
        rules=rules,
        spec=spec,
        backend=backend,
        angle_precision=angle_precision,
        hook_module=module_name,
    )
    hook = _HOOKS.get(module_name)
    if hook is None:
        hook = _HOOKS[module_name] = _Hook(module=module, name=apply_name, original=original_apply)
        setattr(module, apply_name, dispatch)
    _lease_hook(state)
    for o, replacement in replacements:
        state.owners.append((o, o.__dict__.get("get_rope_index", MISSING)))
        o.get_rope_index = replacement  # type: ignore[method-assign]
    forward = _make_rotary_forward(specs, backend, angle_precision, forms)
    for rotary in rotaries:
        state.rotaries.append((rotary, rotary.__dict__.get("forward", MISSING)))
        rotary.forward = types.MethodType(forward, rotary)  # type: ignore[method-assign]
    model.__dict__[_STATE_ATTR] = state
    try:
        check_text_forward(owner)
    except Exception as exc:  # the model's own code cannot take a Rotation: undo everything
        unpatch(model)
        raise PatchError(
            f"the patched {type(owner.language_model).__name__} failed on a short text-only probe "
            f"({type(exc).__name__}: {exc}); its code uses the rotary tables other than by passing them to "
            f"{apply_name} (e.g. it slices or gathers them), so mrope cannot stand in for them; the model is "
            "unchanged"
        ) from None
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`patch`: the model gets back exactly the methods it had (and ``model`` is returned).

    Raises:
        PatchError: the model is not patched.
    """
    state = model.__dict__.get(_STATE_ATTR) if hasattr(model, "__dict__") else None
    if not isinstance(state, _State):
        raise PatchError(f"{type(model).__name__} is not patched by mrope; nothing to unpatch")
    for rotary, previous in state.rotaries:
        if previous is MISSING:
            del rotary.forward
        else:
            rotary.forward = previous  # type: ignore[method-assign]
    for o, previous in state.owners:
        if previous is MISSING:
            del o.get_rope_index
        else:
            o.get_rope_index = previous  # type: ignore[method-assign]
    lease = _LEASES.pop(state, None)
    if lease is not None:
        lease()  # releases the hook once; the finalizer is then dead
    del model.__dict__[_STATE_ATTR]
    return model


__all__ = [
    "DEFAULT_CONVENTION",
    "is_patched",
    "model_rules",
    "patch",
    "patch_info",
    "unpatch",
]
