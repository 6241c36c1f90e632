"""Patch a loaded transformers M-RoPE model: positions from mrope, rotation by :func:`mrope.apply_mrope`.

:func:`patch` changes three things on ONE model instance and nothing else:

1. every ``get_rope_index`` of the model (the ``...Model`` that holds ``rope_deltas``, and a wrapper
   such as an omni thinker whose ``generate`` calls its own) becomes :func:`mrope.get_rope_index` with
   the family's rules, read from the model's config (token ids, merge size, tokens per second) under
   the chosen convention, behind the original's signature. ``forward`` and ``generate`` both call it.
2. the text model's rotary embedding module no longer computes ``(cos, sin)`` tables: it hands the
   attention layers a small :class:`Rotation` (the ``[A, B, S]`` positions plus the spec), in both slots;
   it stands for the ``[B, S, rotary_dim]`` table under the indexing model code does on one (slices,
   integers and ``index_select`` on the token dims: Qwen4-Exp's QSA indexer) and refuses anything else.
   A per-layer-type rotary (``forward(x, position_ids, layer_type)``) gets each layer type's spec; an
   attention that splits off its rope slice itself (``qk_rope_head_dim``: multi-head latent attention)
   is rotated with the slice's spec.
3. the family's modeling-module function ``apply_rotary_pos_emb`` gets a pass-through wrapper (installed
   once per modeling module, removed with the last patched model, arguments bound by the original's
   signature: a query-only call ``(q, cos=..., sin=...)`` returns q alone): given a :class:`Rotation` it calls
   :func:`mrope.apply_mrope` (the Triton kernel on CUDA, the torch path elsewhere); given real cos/sin
   tensors (an unpatched model of the same class) it calls the original function unchanged.

Everything is checked before anything is changed: the family (from ``config.model_type`` through
:func:`mrope.models.get_family`), the three hook points, the spec (the model's own rotary is run on probe
positions and must equal :func:`mrope.apply_mrope` with the spec mrope derived) and, under
``convention="transformers5"``, the positions (the model's own ``get_rope_index`` on a probe batch built
by :func:`mrope.build_batch`, left-padded, with images and a video, must equal mrope's, and leave the
same state on the model: GLM-Image's decode cache of the images it will generate, which the stand-in
fills from :func:`mrope.generation_index`; nothing for every other family). A model that fails any
check raises :class:`~mrope.errors.PatchError` and is left untouched. :func:`unpatch` restores the exact objects.

Conventions:

- ``"transformers5"`` (the default): the installed transformers 5.x conventions (5.x advance
  ``s + max(H', W')`` after a vision block, pads 0, Qwen2.5-VL's ``i * (tps * spg)`` time grouping), so
  the patched model's logits equal the unpatched model's on every input (fp32: to a rounding; the
  rotation is the same arithmetic, fused differently).
- ``"released"``: the released models' semantics (max+1 advance, the released pad value, float32
  ``(i * spg) * tps``). It differs from the unpatched model after a video whose temporal extent exceeds
  its spatial one, and in pad slots. A model whose own rotary is not a rotation (transformers 5.24's
  HunyuanOCR: :class:`NotARotationError` under the default) is rotated with the released layout of the
  spec, once its frequencies and pairing match on text positions.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from mrope.errors import MRopeError, PatchError
from mrope.ops import ANGLE_PRECISIONS, BACKENDS, apply_mrope
from mrope.spec import RopeSpec

CONVENTIONS: tuple[str, ...] = ("transformers5", "released")
"""The ``convention=`` values :func:`patch` takes; ``None`` means ``"transformers5"``."""

APPLY_FUNCTION = "apply_rotary_pos_emb"
"""The modeling-module function every supported family's text attention calls with ``(q, k, cos, sin)``."""

_STATE_ATTR = "_mrope_patch"
_MISSING = object()
_PROBE_MAX_POSITION = 997  # probe positions stay below any dynamic-NTK growth threshold


# ------------------------------------------------------------------------------------------ rotation


@dataclass(frozen=True, eq=False)
class Rotation:
    """What a patched rotary module returns in place of ``(cos, sin)`` (it fills both slots).

    It stands for a ``[*lead, rotary_dim]`` cos/sin table (``lead`` = ``(B, S)`` as the rotary hands it
    out) and supports the table indexing model code does on one (Qwen4-Exp's QSA indexer and attention
    slice and gather theirs): ``view[key]`` with integers and slices on the leading dims (and at most a
    full slice ``:`` on the channel dim) and ``view.index_select(dim, index)`` on a leading dim select the
    same entries of :attr:`positions`, so the rotation then uses the positions the table rows held.
    Anything else (tensor or Ellipsis keys, a partial channel slice, other tensor methods) raises
    :class:`~mrope.errors.PatchError`, never a silently wrong table.

    Attributes:
        positions: integer ``[A, *lead]`` position ids (A rows: t, h, w), ``[A, B, S]`` from the rotary.
        spec: the model's rotary spec.
        backend, angle_precision: passed to :func:`mrope.apply_mrope`.
    """

    positions: torch.Tensor
    spec: RopeSpec
    backend: str
    angle_precision: str

    @property
    def lead_shape(self) -> tuple[int, ...]:
        """The table's leading (token) dims, ``(B, S)`` as the rotary hands it out."""
        return tuple(self.positions.shape[1:])

    def _with(self, positions: torch.Tensor) -> Rotation:
        return dataclasses.replace(self, positions=positions)

    def __getitem__(self, key: Any) -> Rotation:
        """``table[key]``: integers and slices on the leading dims, a full slice on the channel dim."""
        keys = key if isinstance(key, tuple) else (key,)
        lead = len(self.lead_shape)
        if len(keys) > lead + 1:
            raise PatchError(
                f"Rotation stands for a {lead + 1}-dim cos/sin table; got {len(keys)} indices {key!r}"
            )
        picked: list[int | slice] = []
        for at, item in enumerate(keys):
            if at == lead:  # the channel dim: only the whole of it
                if not isinstance(item, slice) or item.indices(self.spec.rotary_dim) != (
                    0,
                    self.spec.rotary_dim,
                    1,
                ):
                    raise PatchError(
                        "Rotation supports only a full slice ':' on the cos/sin channel dim; got "
                        f"{item!r} (rotating part of the channels is not a rotation mrope can stand for)"
                    )
                continue
            if isinstance(item, slice):
                picked.append(item)
            elif not isinstance(item, bool) and isinstance(item, (int, np.integer)):
                picked.append(int(item))
            else:
                raise PatchError(
                    "Rotation supports integers and slices on the cos/sin table's token dims; got "
                    f"{type(item).__name__} {item!r} at dim {at}"
                )
        return self._with(self.positions[(slice(None), *picked)])

    def index_select(self, dim: int, index: torch.Tensor) -> Rotation:
        """``table.index_select(dim, index)`` on a leading (token) dim: the same rows of positions."""
        lead = len(self.lead_shape)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -lead - 1 <= dim <= lead:
            raise PatchError(
                f"Rotation.index_select: dim must be an int in [{-lead - 1}, {lead}]; got {dim!r}"
            )
        dim = int(dim) % (lead + 1)
        if dim == lead:
            raise PatchError("Rotation.index_select on the cos/sin channel dim is not a rotation; refusing")
        if (
            not isinstance(index, torch.Tensor)
            or index.dim() > 1
            or index.dtype.is_floating_point
            or index.dtype.is_complex
            or index.dtype == torch.bool
        ):
            raise PatchError(
                "Rotation.index_select takes a 0-d or 1-d integer tensor index; got "
                f"{type(index).__name__} {getattr(index, 'dtype', '')} {_shape_of(index)}"
            )
        return self._with(self.positions.index_select(dim + 1, index.to(self.positions.device)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _UnsupportedTableOp(
            f"the patched rotary hands out a Rotation (a view of positions standing for a cos/sin table); it "
            f"supports indexing with integers/slices and index_select on token dims, not {name!r}"
        )

    def apply(
        self, q: torch.Tensor, k: torch.Tensor | None, unsqueeze_dim: int = 1
    ) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        """Rotate q and k as ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)`` would with this table:
        ``cos.unsqueeze(unsqueeze_dim)`` broadcast against ``[..., D]`` heads, its ``rotary_dim`` first
        channels rotated (``D >= rotary_dim``). ``k=None`` rotates q alone and returns it alone."""
        spec = self._spec_for(q)
        lead = self.lead_shape
        if not isinstance(unsqueeze_dim, int) or not -len(lead) - 2 <= unsqueeze_dim <= len(lead) + 1:
            raise PatchError(f"patched rotary: unsqueeze_dim {unsqueeze_dim!r} is out of range for {lead}")
        u = unsqueeze_dim % (len(lead) + 2)
        if u > len(lead):
            raise PatchError(f"patched rotary: unsqueeze_dim {unsqueeze_dim!r} would split the channel dim")
        keys = q if k is None else k
        if k is not None and (k.shape[-1] != q.shape[-1] or k.dim() != q.dim()):
            raise PatchError(f"patched rotary: q {tuple(q.shape)} and k {tuple(k.shape)} heads differ")
        if len(lead) == 2 and q.dim() == 4 and u in (1, 2) and q.shape[0] == lead[0]:
            if q.shape[3 - u] == lead[1] and (k is None or keys.shape[3 - u] == lead[1]):
                layout = "bhsd" if u == 1 else "bshd"
                if k is None:  # one key head is enough company for a query-only rotation
                    keys = q.narrow(u, 0, 1)
                q_rot, k_rot = self._rotate(q, keys, self.positions, spec, layout)
                return q_rot if k is None else (q_rot, k_rot)
        # any other broadcast: positions per element of the heads' leading dims, rotated as tokens
        shape = (*lead[:u], 1, *lead[u:])
        rotated = []
        for x in (q,) if k is None else (q, k):
            try:
                target = torch.broadcast_shapes(shape, tuple(x.shape[:-1]))
            except RuntimeError:
                target = None
            if target != tuple(x.shape[:-1]):
                raise PatchError(
                    f"patched rotary: a cos/sin table of shape {(*lead, spec.rotary_dim)} unsqueezed at "
                    f"{unsqueeze_dim} does not broadcast to heads of shape {tuple(x.shape)}"
                )
            rows = self.positions.reshape(len(self.positions), *shape).expand(-1, *target)
            flat = x.reshape(-1, 1, x.shape[-1])
            out, _ = self._rotate(flat, flat, rows.reshape(len(rows), -1), spec, "thd")
            rotated.append(out.reshape(x.shape))
        return rotated[0] if k is None else (rotated[0], rotated[1])

    def _spec_for(self, heads: torch.Tensor) -> RopeSpec:
        """The spec for heads ``[..., D]``: the table rotates the first ``rotary_dim`` channels of any
        ``D >= rotary_dim`` (an indexer's heads may be narrower or wider than the attention's)."""
        width = heads.shape[-1]
        if width == self.spec.head_dim:
            return self.spec
        if self.spec.rotary_offset != 0 or width < self.spec.rotary_dim:
            raise PatchError(
                f"patched rotary: heads of {width} channels, spec rotates channels "
                f"[{self.spec.rotary_offset}, {self.spec.rotary_offset + self.spec.rotary_dim}) of "
                f"{self.spec.head_dim}"
            )
        return dataclasses.replace(self.spec, head_dim=width)

    def _rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, spec: RopeSpec, layout: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return apply_mrope(
            q,
            k,
            positions,
            spec,
            layout=layout,  # type: ignore[arg-type]
            backend=self.backend,  # type: ignore[arg-type]
            angle_precision=self.angle_precision,  # type: ignore[arg-type]
        )


class _UnsupportedTableOp(PatchError, AttributeError):
    """A tensor method model code called on a :class:`Rotation` that it does not stand for."""


def _shape_of(value: Any) -> Any:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


@dataclass
class _Hook:
    module: types.ModuleType
    original: Any
    users: int = 0


_HOOKS: dict[str, _Hook] = {}


def _dispatching(original: Any) -> Any:
    params = list(inspect.signature(original).parameters)
    cos_at = params.index("cos") if "cos" in params else 2
    signature = inspect.signature(original)

    @functools.wraps(original)
    def apply_rotary_pos_emb(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - transformers' signature
        cos = args[cos_at] if len(args) > cos_at else kwargs.get("cos")
        if isinstance(cos, Rotation):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            named = bound.arguments
            if "q" not in named:
                raise PatchError(f"{APPLY_FUNCTION}{signature} has no q argument for mrope to rotate")
            return cos.apply(named["q"], named.get("k"), named.get("unsqueeze_dim", 1))
        return original(*args, **kwargs)

    apply_rotary_pos_emb.__mrope_original__ = original  # type: ignore[attr-defined]
    return apply_rotary_pos_emb


def _original_apply(module: types.ModuleType) -> Any:
    fn = getattr(module, APPLY_FUNCTION)
    return getattr(fn, "__mrope_original__", fn)


# ------------------------------------------------------------------------------------------ state


@dataclass
class _State:
    """What :func:`patch` changed on one model, so that :func:`unpatch` can put it back."""

    family: Any
    convention: str
    rules: Any
    spec: RopeSpec
    backend: str
    angle_precision: str
    owners: list[tuple[torch.nn.Module, Any]] = field(default_factory=list)
    rotaries: list[tuple[torch.nn.Module, Any]] = field(default_factory=list)
    hook_module: str = ""


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


# ------------------------------------------------------------------------------------------ discovery


def _family_of(config: Any, family: Any = None) -> Any:
    """The family of a model's config, or ``family`` (a name, model_type or :func:`mrope.from_pretrained`
    result) when given; it must answer to the config's model_type."""
    from mrope.models import get_family

    model_type = getattr(config, "model_type", None)
    if not model_type:
        raise PatchError("patch needs a transformers model whose config has a model_type; got none")
    try:
        found = get_family(model_type if family is None else family)
    except MRopeError as exc:
        raise PatchError(f"cannot patch model_type {model_type!r}: {exc}") from None
    if model_type not in found.model_types:
        raise PatchError(
            f"family={found.name!r} answers to model_types {list(found.model_types)}, not to this model's "
            f"{model_type!r}"
        )
    return found


def _position_owners(model: torch.nn.Module) -> tuple[torch.nn.Module, list[torch.nn.Module]]:
    """``(text_owner, owners)``: the module whose ``language_model`` M-RoPE positions feed (it holds
    ``rope_deltas``), and every module with a ``get_rope_index`` (that one and its wrappers, e.g. a
    ``...ForConditionalGeneration`` whose ``generate`` calls its own)."""
    owners = [m for m in model.modules() if callable(getattr(type(m), "get_rope_index", None))]
    texts = [m for m in owners if isinstance(getattr(m, "language_model", None), torch.nn.Module)]
    if len(texts) != 1:
        raise PatchError(
            f"{type(model).__name__}: expected exactly one module with a get_rope_index method and a "
            f"language_model (the model whose M-RoPE positions mrope computes); found {len(texts)} among "
            f"{[type(m).__name__ for m in owners]}"
        )
    text_owner = texts[0]
    for other in owners:
        if other is not text_owner and not any(m is text_owner for m in other.modules()):
            raise PatchError(
                f"{type(model).__name__}: {type(other).__name__} computes positions for a model other than "
                f"{type(text_owner).__name__}.language_model (e.g. a speech talker); patch that text model's "
                "owner (e.g. model.thinker) instead"
            )
    return text_owner, owners


def _text_rotaries(owner: torch.nn.Module) -> list[torch.nn.Module]:
    text = getattr(owner, "language_model", None)
    if not isinstance(text, torch.nn.Module):
        raise PatchError(f"{type(owner).__name__} has no language_model submodule to patch")
    found = [m for m in text.modules() if type(m).__name__.endswith("RotaryEmbedding") and _layer_types(m)]
    if not found:
        raise PatchError(
            f"{type(text).__name__} has no rotary embedding module (…RotaryEmbedding with inv_freq, or "
            "<layer_type>_inv_freq per layer type)"
        )
    kinds = {type(m) for m in found}
    if len(kinds) != 1:
        raise PatchError(f"{type(text).__name__} mixes rotary classes {sorted(k.__name__ for k in kinds)}")
    return found


def _layer_types(rotary: torch.nn.Module) -> list[str | None]:
    """``[None]`` for a rotary with one ``inv_freq``; the layer types of a per-layer-type rotary
    (``<layer_type>_inv_freq`` buffers, ``forward(x, position_ids, layer_type)``: Cohere-Compass);
    ``[]`` for neither."""
    if isinstance(getattr(rotary, "inv_freq", None), torch.Tensor):
        return [None]
    return [
        name[: -len("_inv_freq")]
        for name, buffer in rotary.named_buffers(recurse=False)
        if name.endswith("_inv_freq") and not name.endswith("_original_inv_freq") and buffer is not None
    ]


def _attention_modules(owner: torch.nn.Module) -> list[torch.nn.Module]:
    """Text attention layers whose forward calls the modeling module's ``apply_rotary_pos_emb``."""
    text = owner.language_model
    out = []
    for m in text.modules():
        code = getattr(inspect.unwrap(type(m).forward), "__code__", None)
        if code is not None and APPLY_FUNCTION in code.co_names:
            out.append(m)
    return out


def _spec_of(config: Any, layer_type: str | None = None) -> RopeSpec:
    try:
        return RopeSpec.from_hf_config(config.to_dict(), layer_type=layer_type)
    except MRopeError as exc:
        raise PatchError(f"cannot read the rotary spec of {config.model_type!r}: {exc}") from None


def _applied_spec(spec: RopeSpec, attentions: list[torch.nn.Module]) -> RopeSpec:
    """The spec of the tensors the attention layers hand ``apply_rotary_pos_emb``.

    Attention with a ``qk_rope_head_dim`` (multi-head latent attention: HY-V4-VL, and its DSA indexer)
    splits off the rope slice itself and passes only those ``rotary_dim`` channels, so the rotation acts
    on a ``rotary_dim``-wide head; every other attention passes whole ``head_dim`` heads.
    """
    widths = {getattr(attn, "qk_rope_head_dim", None) for attn in attentions}
    if widths == {None}:
        for attn in attentions:
            head_dim = getattr(attn, "head_dim", spec.head_dim)
            if head_dim != spec.head_dim:
                raise PatchError(
                    f"{type(attn).__name__}.head_dim is {head_dim} but the config's rotary spec has head_dim "
                    f"{spec.head_dim}; refusing to patch"
                )
        return spec
    if widths != {spec.rotary_dim}:
        raise PatchError(
            f"the text attention layers rotate slices of {sorted(widths, key=str)} channels (qk_rope_head_dim) but "
            f"the config's rotary spec rotates {spec.rotary_dim}; refusing to patch"
        )
    return dataclasses.replace(spec, head_dim=spec.rotary_dim, rotary_offset=0)


def _rules_of(config: Any, family: Any, convention: str) -> Any:
    """The family's rules under ``convention`` with the ids and vision sizes of this model's config."""
    from mrope.models import resolve_rules

    data = config.to_dict()
    vision = data.get("vision_config") if isinstance(data.get("vision_config"), dict) else {}
    changes: dict[str, Any] = {}
    for key, rule_fields in dict(getattr(family, "config_ids", {}) or {}).items():
        if data.get(key) is not None:
            for rule_field in (rule_fields,) if isinstance(rule_fields, str) else rule_fields:
                changes[rule_field] = int(data[key])
    if data.get("position_id_per_seconds") is not None:  # omni thinkers: the time scale of video t
        changes["tokens_per_second"] = data["position_id_per_seconds"]
    for key, rule_field in (
        ("spatial_merge_size", "merge_size"),
        ("temporal_patch_size", "temporal_patch_size"),
        ("patch_size", "patch_size"),
        ("tokens_per_second", "tokens_per_second"),
    ):
        if vision.get(key) is not None:
            changes[rule_field] = vision[key]
    mode = data.get("downsample_mode")
    if mode is not None:  # MiniCPM-V 4.7: the merge its vision tower runs with
        changes["merge_size"] = _downsample_merge(mode)
    try:
        rules = resolve_rules(family, changes, convention)
    except MRopeError as exc:
        raise PatchError(f"cannot build the layout rules of {config.model_type!r}: {exc}") from None
    missing = [
        key
        for key, rule_fields in dict(getattr(family, "config_ids", {}) or {}).items()
        if data.get(key) is None
        and any(
            getattr(rules, f) is None
            for f in ((rule_fields,) if isinstance(rule_fields, str) else rule_fields)
        )
    ]
    if missing:
        raise PatchError(
            f"{type(config).__name__} has no {', '.join(missing)} (None) and the {family.name!r} family has no "
            "value for them: set them on model.config as the checkpoint's config.json has them, or pass "
            "family=mrope.from_pretrained(checkpoint_folder)"
        )
    return rules


def _downsample_merge(mode: Any) -> int:
    """MiniCPM-V 4.7's ``downsample_mode`` -> the spatial merge of its tokens (the family's table)."""
    from mrope.models.minicpmv4_7 import DOWNSAMPLE_MODE

    try:
        return int(DOWNSAMPLE_MODE.value_of(mode, "downsample_mode"))
    except MRopeError as exc:
        raise PatchError(str(exc)) from None


# ------------------------------------------------------------------------------------------ probes


def _check_rotary(
    rotary: torch.nn.Module,
    original_apply: Any,
    spec: RopeSpec,
    backend: str,
    layer_type: str | None = None,
    *,
    released: bool = False,
) -> None:
    """The model's own rotary on probe positions must equal apply_mrope with ``spec`` (fp32). Dynamic NTK
    is probed past its growth threshold too; the rotary's state (a grown table) is put back.

    With ``released``, a model whose own rotary is not a rotation (:class:`NotARotationError`) passes if
    it equals apply_mrope on text positions (every axis the same): its frequencies, scaling and pairing
    are the spec's, and the spec's (released) layout replaces its own."""
    high = [_PROBE_MAX_POSITION]
    if spec.scaling.type == "dynamic" and spec.scaling.original_max_position_embeddings:
        high.append(2 * spec.scaling.original_max_position_embeddings)
    for top in high:
        before, buffers = dict(rotary.__dict__), dict(rotary._buffers)
        try:
            _probe_rotary(rotary, original_apply, spec, backend, layer_type, top)
        except NotARotationError:
            if not released:
                raise
            _probe_rotary(rotary, original_apply, spec, backend, layer_type, top, same_axes=True)
        finally:
            _restore(rotary, before)
            rotary._buffers.clear()
            rotary._buffers.update(buffers)


def _probe_rotary(
    rotary: torch.nn.Module,
    original_apply: Any,
    spec: RopeSpec,
    backend: str,
    layer_type: str | None,
    top: int,
    same_axes: bool = False,
) -> None:
    device = next(rotary.buffers()).device
    gen = torch.Generator().manual_seed(1234)
    length = 29
    axes = len(spec.mrope_section)
    positions = torch.randint(0, top, (axes, 1, length), generator=gen).to(device)
    positions[0, 0, -1] = top - 1  # the largest position sets a dynamic table
    if same_axes:  # text positions
        positions = positions[:1].expand(axes, -1, -1).contiguous()
    q = torch.randn(1, 2, length, spec.head_dim, generator=gen).to(device)
    k = torch.randn(1, 1, length, spec.head_dim, generator=gen).to(device)
    extra = () if layer_type is None else (layer_type,)
    with torch.no_grad():
        try:
            cos, sin = type(rotary).forward(rotary, q, positions, *extra)
            want_q, want_k = original_apply(q, k, cos, sin)
        except Exception as exc:  # the model's own code failed on a plain probe: not a model we can patch
            raise PatchError(
                f"{type(rotary).__name__} failed on probe positions ({type(exc).__name__}: {exc}); the model's "
                "own rotary does not run with this config"
            ) from None
        try:
            got_q, got_k = apply_mrope(
                q,
                k,
                positions,
                spec,
                layout="bhsd",
                backend=backend,
                angle_precision="fp32",
            )
        except MRopeError as exc:
            raise PatchError(f"apply_mrope cannot run this model's rotary: {exc}") from None
    for name, got, want in (("q", got_q, want_q), ("k", got_k, want_k)):
        if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
            err = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
            mixed, layout = _table_axes(rotary, cos, positions, spec)
            cls = NotARotationError if mixed else PatchError
            raise cls(
                f"{type(rotary).__name__}: apply_mrope with the spec read from the config ({spec}) does not "
                f"reproduce the model's own rotation of {name} (max abs difference {err:.3g}); refusing to "
                f"patch.{layout}"
            )


class NotARotationError(PatchError):
    """The model's own rotary pairs channels driven by different position axes: not a rotation wherever
    those axes differ (transformers 5.24's HunyuanOCR). :func:`patch` refuses it under the default
    convention; ``convention="released"`` rotates with the released layout instead (the spec's)."""


def _runs(channels: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out: list[str] = []
    for c in channels:
        if out and int(out[-1].split("-")[-1]) == c - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{c}"
        else:
            out.append(str(c))
    return ", ".join(out)


def _table_axes(
    rotary: torch.nn.Module, cos: Any, positions: torch.Tensor, spec: RopeSpec
) -> tuple[bool, str]:
    """Which position axis drives each channel of the model's own cos table, against the spec's layout.

    Returns ``(mixed, text)``: ``mixed`` when the table's rotation pairs (split halves for neox, adjacent
    channels for gptj) hold channels of different axes (not a rotation); ``text`` says which channels
    differ from the spec (empty when the table cannot be read channel by channel)."""
    inv_freq = getattr(rotary, "inv_freq", None)
    if not isinstance(cos, torch.Tensor) or cos.dim() != 3 or not isinstance(inv_freq, torch.Tensor):
        return False, ""
    width = spec.rotary_dim
    if cos.shape[-1] != width or inv_freq.numel() != width // 2:
        return False, ""
    half = width // 2
    channel = torch.arange(width)
    freq = channel % half if spec.pairing == "neox" else channel // 2
    partner = (channel + half) % width if spec.pairing == "neox" else channel ^ 1
    scale = float(getattr(rotary, "attention_scaling", 1.0))
    angles = positions[:, 0, :, None].float().cpu() * inv_freq.float().cpu()[freq]  # [A, S, width]
    table = cos[0].float().cpu()  # [S, width]
    error = (angles.cos() * scale - table).abs().amax(dim=1)  # [A, width]
    best = error.min(dim=0)
    found = torch.where(best.values <= 1e-4, best.indices, torch.full_like(channel, -1))
    wanted = torch.from_numpy(spec.axis_map())[freq]
    wrong = [int(c) for c in channel if found[c] != wanted[c]]
    if not wrong:
        return False, ""
    by_axis: dict[tuple[int, int], list[int]] = {}
    for c in wrong:
        by_axis.setdefault((int(found[c]), int(wanted[c])), []).append(c)
    what = "; ".join(
        f"{_runs(cs)} follow axis {'unknown' if a < 0 else a} (the spec: axis {b})"
        for (a, b), cs in by_axis.items()
    )
    text = f" In the model's cos/sin table channels {what}."
    by_pair: dict[tuple[int, int], list[int]] = {}
    for c in channel.tolist():
        a, b = int(found[c]), int(found[partner[c]])
        if c < partner[c] and a >= 0 and b >= 0 and a != b:
            by_pair.setdefault((a, b), []).append(c)
    if not by_pair:
        return False, text
    pairs = " and ".join(
        f"{_runs(cs)} (axis {a}) with {_runs([int(partner[c]) for c in cs])} (axis {b})"
        for (a, b), cs in by_pair.items()
    )
    return True, (
        f"{text} Its {spec.pairing} rotation pairs channels {pairs}: not a rotation wherever those axes' "
        "positions differ (every image token). mrope rotates each pair by one axis and will not copy it; "
        "patch(model, convention='released') rotates with the spec's (released) layout instead."
    )


def _probe_tokenize(text: str) -> list[int]:
    return [1000 + ord(c) % 500 for c in text]


def _probe_inputs(family: Any, rules: Any) -> dict[str, torch.Tensor]:
    """Two left-padded rows built by mrope: text, an image, text, a 2-patch video, text; text, an image."""
    from mrope.builder import build_batch
    from mrope.segments import Image, Text, Video

    m = rules.merge_size
    word = _probe_tokenize("probe")
    samples = [
        [
            Text(word),
            Image(grid=(1, 2 * m, 3 * m)),
            Text(word),
            Video(grid=(2, 2 * m, 2 * m), fps=2.0),
            Text(word),
        ],
        [Text(word[:2]), Image(grid=(1, 2 * m, 2 * m)), Text(word[:3])],
    ]
    if rules.positions_base == "canvas":  # MiniCPM-V 4.7: a sliced image (slice markers, a newline)
        samples[1].insert(2, Image(grid=(1, 2 * m, 4 * m), tiles=(2, 2), thumbnail_grid=(1, m, 2 * m)))
    if rules.generates_images:  # GLM-Image: a source image and a target; two targets (large, preview)
        samples = [
            [
                Text(word),
                Image(grid=(1, 2 * m, 3 * m)),
                Text(word),
                Image(grid=(1, 3 * m, 2 * m), generate=True),
            ],
            [
                Text(word[:2]),
                Image(grid=(1, 2 * m, 2 * m), generate=True),
                Image(grid=(1, m, 2 * m), generate=True),
            ],
        ]
    batch = build_batch(samples, model=family, rules=rules, tokenizer=_probe_tokenize)
    inputs = model_inputs(batch)
    inputs.pop("position_ids")
    if "second_per_grid_ts" in inputs:
        inputs["second_per_grids"] = inputs["second_per_grid_ts"]
    return inputs


def _accepted(fn: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The items of ``kwargs`` that ``fn`` takes by name (all of them if it has ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        named = {k: v for k, v in kwargs.items() if k in params}
        return named or kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _restore(module: torch.nn.Module, before: dict[str, Any]) -> dict[str, Any]:
    """Put back the instance attributes a call changed; return what the call had set them to
    (:data:`_MISSING` for one it deleted)."""
    changed = {
        k: module.__dict__.get(k, _MISSING)
        for k in set(module.__dict__) | set(before)
        if module.__dict__.get(k, _MISSING) is not before.get(k, _MISSING)
    }
    for key in changed:
        if key in before:
            module.__dict__[key] = before[key]
        else:
            del module.__dict__[key]
    return changed


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a.cpu(), b.cpu())
        )
    return type(a) is type(b) and a == b


def _check_positions(owner: torch.nn.Module, replacement: Any, family: Any, rules: Any) -> None:
    """The model's own get_rope_index and mrope's stand-in on a probe batch: same positions, same deltas,
    and the same state left on the model (GLM-Image caches its decode positions; every other family
    keeps none). Both calls' state is rolled back."""
    try:
        probe = _probe_inputs(family, rules)
    except MRopeError as exc:
        raise PatchError(f"cannot build a probe batch under rules {rules.name!r}: {exc}") from None
    original = type(owner).get_rope_index
    args = _named_for(original, probe)
    before = dict(owner.__dict__)
    try:
        with torch.no_grad():
            want_pos, want_delta = original(owner, **args)
    except Exception as exc:
        raise PatchError(
            f"{type(owner).__name__}.get_rope_index failed on a probe batch ({type(exc).__name__}: {exc}); "
            "cannot check mrope's positions against it"
        ) from None
    finally:
        want_state = _restore(owner, before)
    try:
        got_pos, got_delta = replacement(**args)
    except MRopeError as exc:
        raise PatchError(f"mrope cannot compute this model's positions: {exc}") from None
    finally:
        got_state = _restore(owner, before)
    if sorted(want_state) != sorted(got_state):
        raise PatchError(
            f"{type(owner).__name__}.get_rope_index keeps state between calls (it sets {sorted(want_state)}); "
            f"mrope's stand-in sets {sorted(got_state)}, so this model cannot be patched"
        )
    differs = [k for k in sorted(want_state) if not _same_value(got_state[k], want_state[k])]
    if differs:
        raise PatchError(
            f"mrope's stand-in leaves {differs} on {type(owner).__name__} different from its own "
            f"get_rope_index on a probe batch; refusing to patch.\n"
            + "\n".join(f"{k}: mrope {got_state[k]!r}, model {want_state[k]!r}" for k in differs)
        )
    same = got_pos.shape == want_pos.shape and torch.equal(got_pos.cpu(), want_pos.cpu().to(got_pos.dtype))
    same = same and torch.equal(got_delta.cpu().reshape(-1), want_delta.cpu().reshape(-1).to(got_delta.dtype))
    if not same:
        raise PatchError(
            f"mrope's positions (rules {rules.name!r}) differ from {type(owner).__name__}.get_rope_index on a probe "
            f"batch; refusing to patch.\nmrope: {got_pos.tolist()} {got_delta.tolist()}\n"
            f"model: {want_pos.tolist()} {want_delta.tolist()}"
        )


# ------------------------------------------------------------------------------------------ replacements


def _make_get_rope_index(owner: torch.nn.Module, family: Any, rules: Any) -> Any:
    """A drop-in for ``owner.get_rope_index`` (same signature, positional or keyword) that calls
    :func:`mrope.get_rope_index` with the family and this model's rules."""
    from mrope.tokens import get_rope_index

    signature = inspect.signature(type(owner).get_rope_index)
    takes = set(inspect.signature(get_rope_index).parameters) - {
        "model",
        "rules",
        "convention",
        "pad_position",
    }
    takes |= set(_CROP_SIZES.values()) | {"downsample_mode"}

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
        _grids_from_crops(call)
        mode = call.pop("downsample_mode", None)
        lay = rules if mode is None else rules.replace(merge_size=_downsample_merge(mode))
        positions, deltas = get_rope_index(input_ids, model=family, rules=lay, **call)
        if lay.generates_images:
            _cache_generation(owner, input_ids, call, family, lay)
        if not positions.is_floating_point():
            positions = positions.to(input_ids.dtype)
        return positions.to(input_ids.device), deltas.to(input_ids.device)

    mrope_get_rope_index.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=list(signature.parameters.values())[1:]
    )
    return mrope_get_rope_index


_GENERATION_CACHE = ("_cached_decode_position_ids", "_prefill_len")
"""Where a model under ``generates_images`` rules (GLM-Image) keeps what its ``get_rope_index`` plans for
decoding: the positions of the images it will generate ``[B', 3, G]`` and the prompt length; its
``compute_3d_position_ids`` reads step ``cache_length - _prefill_len`` of them at every decode step."""


def _cache_generation(
    owner: torch.nn.Module, input_ids: torch.Tensor, call: dict[str, Any], family: Any, rules: Any
) -> None:
    """Set :data:`_GENERATION_CACHE` on ``owner`` as GLM-Image's own get_rope_index does: the prompt
    length, and :func:`mrope.generation_index` of the rows that have grids (``None`` without grids)."""
    from mrope.tokens import generation_index

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


def _make_rotary_forward(specs: dict[str | None, RopeSpec], backend: str, precision: str) -> Any:
    def forward(
        x: torch.Tensor, position_ids: torch.Tensor, layer_type: str | None = None
    ) -> tuple[Rotation, Rotation]:
        """Positions ``[3, B, S]`` (or ``[B, S]``) -> a :class:`Rotation` in both the cos and sin slots
        (with the spec of ``layer_type`` for a per-layer-type rotary)."""
        spec = specs.get(layer_type)
        if spec is None:
            raise PatchError(
                f"patched rotary has no spec for layer type {layer_type!r}; it has {list(specs)}"
            )
        if position_ids.dim() == 2:
            position_ids = position_ids.unsqueeze(0).expand(len(spec.mrope_section), -1, -1)
        rotation = Rotation(position_ids, spec, backend, precision)
        return rotation, rotation

    return forward


# ------------------------------------------------------------------------------------------ public

_KIND_TYPE = {"image": 1, "thumbnail": 1, "video": 2}
"""Span kinds -> transformers' ``mm_token_type_ids`` values (0 text, 1 image, 2 video)."""


def model_rules(model: torch.nn.Module, convention: str | None = None, *, family: Any = None) -> Any:
    """The :class:`~mrope.LayoutRules` mrope uses for this transformers model: its family's rules under
    ``convention`` (``None`` = ``"transformers5"``) with the token ids and vision sizes of its config
    (``family``: as :func:`patch` takes it).

    Pass them as ``rules=`` (with ``model=`` the family) to :func:`mrope.build_batch` to build positions
    for it outside the model.
    """
    conv = "transformers5" if convention is None else convention
    if conv not in CONVENTIONS:
        raise PatchError(f"convention must be None or one of {list(CONVENTIONS)}; got {convention!r}")
    config = getattr(model, "config", None)
    return _rules_of(config, _family_of(config, family), conv)


_FORWARD_ALIASES: dict[str, tuple[str, ...]] = {
    "second_per_grid_ts": ("second_per_grid_ts", "video_second_per_grid")
}
"""mrope's input names -> the names families' ``forward`` use for them (the omni thinkers rename some)."""

_CROP_SIZES: dict[str, str] = {"image_grid_thw": "target_sizes", "video_grid_thw": "target_sizes_videos"}
"""mrope's per-crop grids ``(1, h, w)`` -> the ``(h, w)`` patch sizes MiniCPM-V 4.7 takes instead."""


def _named_for(fn: Any, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``inputs`` under the names ``fn`` takes (``forward`` or ``get_rope_index``): aliases renamed, grids
    given as crop sizes where it takes those; what it does not take is left out."""
    params = inspect.signature(fn).parameters
    out = {}
    for key, value in inputs.items():
        name = next((n for n in _FORWARD_ALIASES.get(key, (key,)) if n in params), None)
        if name is not None:
            out[name] = value
        elif _CROP_SIZES.get(key) in params:
            if bool((value[:, 0] != 1).any()):
                raise PatchError(f"{_CROP_SIZES[key]} are per-crop (h, w) sizes; got {key} rows with t != 1")
            out[_CROP_SIZES[key]] = value[:, 1:]
    return out


def _grids_from_crops(call: dict[str, Any]) -> None:
    """MiniCPM-V 4.7's ``target_sizes`` / ``target_sizes_videos`` ``[n, 2]`` -> mrope's ``(1, h, w)``
    grids in ``call`` (in place)."""
    for grid_name, crop_name in _CROP_SIZES.items():
        sizes = call.pop(crop_name, None)
        if sizes is not None:
            sizes = torch.as_tensor(sizes).reshape(-1, 2)
            call[grid_name] = torch.cat([torch.ones_like(sizes[:, :1]), sizes], dim=1)


def model_inputs(batch: Any, model: torch.nn.Module | None = None) -> dict[str, torch.Tensor]:
    """The keyword arguments a transformers M-RoPE model takes for a :class:`mrope.Batch`.

    Returns:
        ``input_ids`` ``[B, L]``, ``attention_mask`` ``[B, L]``, ``position_ids`` int64 ``[3, B, L]``,
        ``mm_token_type_ids`` ``[B, L]`` (0 text, 1 image, 2 video, from the batch's spans),
        ``image_grid_thw`` / ``video_grid_thw`` ``[n, 3]`` (every row's grids in row order, when there
        are any), ``second_per_grid_ts`` ``[n_videos]`` (for rules whose video time is in seconds) and
        ``images_per_sample`` ``[B]`` (rules that generate images, GLM-Image: grids to generate included).
        Add ``pixel_values`` / ``pixel_values_videos`` from the processor; pass the whole dict to
        ``forward`` or ``generate``. The decode continuation of row ``b`` after ``n_b`` valid tokens is
        ``n_b + batch.deltas[b]`` on every axis. With ``model`` given, the names are those its
        ``forward`` takes (e.g. the omni thinkers' ``video_second_per_grid``; MiniCPM-V 4.7's
        ``target_sizes`` / ``target_sizes_videos``, each crop's ``(h, w)``, in place of the grids; no
        ``mm_token_type_ids`` where it takes none).
    """
    position_ids, attention_mask, _ = batch.torch()
    input_ids = torch.from_numpy(batch.input_ids)
    types = torch.zeros_like(input_ids)
    images, videos, seconds = [], [], []
    for row, seq in enumerate(batch.sequences):
        start = int(np.flatnonzero(batch.attention_mask[row])[0]) if seq.num_tokens else 0
        for span in seq.spans:
            kind = _KIND_TYPE.get(span.kind)
            if kind:
                types[row, start + span.start : start + span.stop] = kind
        images.append(seq.image_grid_thw)
        videos.append(seq.video_grid_thw)
        seconds.append(seq.second_per_grid_ts)
    out = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "mm_token_type_ids": types,
    }
    image_grid = np.concatenate(images).reshape(-1, 3)
    video_grid = np.concatenate(videos).reshape(-1, 3)
    if len(image_grid):
        out["image_grid_thw"] = torch.from_numpy(image_grid)
        if batch.sequences[0].rules.generates_images:
            out["images_per_sample"] = torch.from_numpy(batch.images_per_sample)
    if len(video_grid):
        out["video_grid_thw"] = torch.from_numpy(video_grid)
        if batch.sequences[0].rules.temporal == "seconds":
            out["second_per_grid_ts"] = torch.from_numpy(np.concatenate(seconds)).to(torch.float32)
    return out if model is None else _named_for(type(model).forward, out)


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
    conv = "transformers5" if convention is None else convention
    if conv not in CONVENTIONS:
        raise PatchError(f"convention must be None or one of {list(CONVENTIONS)}; got {convention!r}")
    if angle_precision not in ANGLE_PRECISIONS:
        raise PatchError(f"angle_precision must be one of {list(ANGLE_PRECISIONS)}; got {angle_precision!r}")
    if backend not in BACKENDS:
        raise PatchError(f"backend must be one of {list(BACKENDS)}; got {backend!r}")
    if not isinstance(model, torch.nn.Module):
        raise PatchError(f"patch takes a transformers model (a torch.nn.Module); got {type(model).__name__}")
    if is_patched(model):
        raise PatchError(f"{type(model).__name__} is already patched by mrope; unpatch it first")
    config = getattr(model, "config", None)
    family = _family_of(config, family)
    owner, owners = _position_owners(model)
    rotaries = _text_rotaries(owner)
    module_name = type(rotaries[0]).__module__
    module = sys.modules.get(module_name)
    if module is None or not callable(getattr(module, APPLY_FUNCTION, None)):
        raise PatchError(f"{module_name} has no {APPLY_FUNCTION} function to route through apply_mrope")
    attentions = _attention_modules(owner)
    if not attentions:
        raise PatchError(
            f"no text attention layer of {type(model).__name__} calls {module_name}.{APPLY_FUNCTION}"
        )
    spec = _spec_of(config)
    specs = {lt: _applied_spec(_spec_of(config, lt), attentions) for lt in _layer_types(rotaries[0])}
    rules = _rules_of(config, family, conv)
    missing = [name for name in _GENERATION_CACHE if rules.generates_images and not hasattr(owner, name)]
    if missing:
        raise PatchError(
            f"{type(owner).__name__} has no {missing}: the decode cache of generated images that mrope "
            f"fills for the {rules.name!r} rules (generates_images) is not where its forward reads it"
        )
    original_apply = _original_apply(module)
    for layer_type, applied in specs.items():
        _check_rotary(rotaries[0], original_apply, applied, backend, layer_type, released=conv == "released")
    replacements = [(o, _make_get_rope_index(o, family, rules)) for o in owners]
    if conv == "transformers5":
        for o, replacement in replacements:
            _check_positions(o, replacement, family, rules)

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
        hook = _HOOKS[module_name] = _Hook(module=module, original=getattr(module, APPLY_FUNCTION))
        setattr(module, APPLY_FUNCTION, _dispatching(hook.original))
    hook.users += 1
    for o, replacement in replacements:
        state.owners.append((o, o.__dict__.get("get_rope_index", _MISSING)))
        o.get_rope_index = replacement  # type: ignore[method-assign]
    forward = _make_rotary_forward(specs, backend, angle_precision)
    for rotary in rotaries:
        state.rotaries.append((rotary, rotary.__dict__.get("forward", _MISSING)))
        rotary.forward = forward  # type: ignore[method-assign]
    model.__dict__[_STATE_ATTR] = state
    try:
        _check_text_forward(owner)
    except Exception as exc:  # the model's own code cannot take a Rotation: undo everything
        unpatch(model)
        raise PatchError(
            f"the patched {type(owner.language_model).__name__} failed on a short text-only probe "
            f"({type(exc).__name__}: {exc}); its code uses the rotary tables other than by passing them to "
            f"{APPLY_FUNCTION} (e.g. it slices or gathers them), so mrope cannot stand in for them; the model is "
            "unchanged"
        ) from None
    return model


_FORWARD_PROBE_TOKENS = 5


def _check_text_forward(owner: torch.nn.Module) -> None:
    """Run the patched text model on a few random embeddings with its own default positions: every place
    its code touches the rotary's output must accept the :class:`Rotation` stand-in."""
    text = owner.language_model
    table = text.get_input_embeddings().weight
    gen = torch.Generator().manual_seed(7)
    embeds = torch.randn(1, _FORWARD_PROBE_TOKENS, table.shape[1], generator=gen)
    with torch.no_grad():
        text(inputs_embeds=embeds.to(table.device, table.dtype), use_cache=False)


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undo :func:`patch`: the model gets back exactly the methods it had (and ``model`` is returned).

    Raises:
        PatchError: the model is not patched.
    """
    state = model.__dict__.get(_STATE_ATTR) if hasattr(model, "__dict__") else None
    if not isinstance(state, _State):
        raise PatchError(f"{type(model).__name__} is not patched by mrope; nothing to unpatch")
    for rotary, previous in state.rotaries:
        if previous is _MISSING:
            del rotary.forward
        else:
            rotary.forward = previous  # type: ignore[method-assign]
    for o, previous in state.owners:
        if previous is _MISSING:
            del o.get_rope_index
        else:
            o.get_rope_index = previous  # type: ignore[method-assign]
    hook = _HOOKS.get(state.hook_module)
    if hook is not None:  # a deep copy of a patched model shares its original's hook
        hook.users -= 1
        if hook.users <= 0:
            setattr(hook.module, APPLY_FUNCTION, hook.original)
            del _HOOKS[state.hook_module]
    del model.__dict__[_STATE_ATTR]
    return model


__all__ = [
    "CONVENTIONS",
    "NotARotationError",
    "Rotation",
    "is_patched",
    "model_inputs",
    "model_rules",
    "patch",
    "patch_info",
    "unpatch",
]
