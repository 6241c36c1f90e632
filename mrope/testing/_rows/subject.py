"""The model a validation runs on: a loaded checkpoint or a tiny model, with what the rows run on it.

:func:`load_subject` takes a loaded transformers model, a local checkpoint folder (read with transformers,
no network) or a family name (a tiny random-weight model built from the family's config by
:func:`mrope.testing._tiny.tiny_model`). A :class:`Subject` holds the parts the rows need: the model's own
rotary module and the modeling module's ``apply_rotary_pos_emb`` (its own rotation, run on given q, k and
positions), the rotary spec and layout rules mrope reads from its config, its lengths ``L0`` / ``L1``,
and its inputs and logits (whole sequence, or prefill then token-by-token decode with the KV cache).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mrope._builder import build_batch, build_positions
from mrope._errors import MRopeError
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Segment, Text
from mrope._spec import RopeSpec
from mrope.integrations.transformers import APPLY_FUNCTION, model_inputs, model_rules
from mrope.integrations.transformers._discovery import (
    applied_spec,
    attention_modules,
    family_of,
    layer_types,
    position_owners,
    spec_of,
    text_rotaries,
)
from mrope.integrations.transformers._inputs import named_for
from mrope.integrations.transformers._probes import restore_attributes
from mrope.models import ModelFamily
from mrope.ops import apply_mrope

TEXT_IDS = (1000, 1500)
"""Token ids the rows use for text (ordinary tokens in every registered family's vocabulary)."""


class ValidationError(MRopeError):
    """The model or checkpoint cannot be validated (no folder there, not a model mrope knows, ...)."""


@dataclass
class Subject:
    """A model under validation and the parts of it the rows use.

    Attributes:
        model: the module whose ``forward`` gives logits (``...ForConditionalGeneration``, an omni thinker).
        owner: the module holding ``get_rope_index`` and ``language_model``.
        family: the registry family of its config.
        spec: the rotary spec mrope reads from its config (of the tensors ``apply_rotary_pos_emb`` gets).
        layer_type: the rotary's layer type (per-layer-type rotaries), else ``None``.
        rotaries: the text model's rotary modules.
        modeling: the modeling module whose ``apply_rotary_pos_emb`` the attention layers call.
        rules: the layout rules for its config (``None`` when its config lacks ids: :attr:`rules_error`).
        label: the checkpoint folder, or ``"tiny <family>"``.
        tokenizer: the checkpoint's tokenizer, if its folder has one.
        length_l0: the pretraining length ``L0``.
        length_l1: the extended length ``L1`` where the config names one, else ``None``.
    """

    model: torch.nn.Module
    owner: torch.nn.Module
    family: ModelFamily
    spec: RopeSpec
    layer_type: str | None
    rotaries: list[torch.nn.Module]
    modeling: types.ModuleType
    rules: LayoutRules | None
    rules_error: str
    label: str
    tokenizer: Any
    length_l0: int
    length_l1: int | None

    # ------------------------------------------------------------------ the rotation alone

    def own_rotation(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's own rotary and ``apply_rotary_pos_emb`` on ``q`` ``[1, H, S, D]`` and ``k``
        ``[1, 1, S, D]`` at ``positions`` ``[A, S]``; the rotary's state (a grown dynamic table) is put back."""
        rotary = self.rotaries[0]
        extra = () if self.layer_type is None else (self.layer_type,)
        before, buffers = dict(rotary.__dict__), dict(rotary._buffers)
        device = next(iter(rotary.buffers())).device
        try:
            with torch.no_grad():
                cos, sin = rotary(q.to(device), positions[:, None, :].to(device), *extra)
                out = getattr(self.modeling, APPLY_FUNCTION)(q.to(device), k.to(device), cos, sin)
        finally:
            restore_attributes(rotary, before)
            rotary._buffers.clear()
            rotary._buffers.update(buffers)
        return out[0].cpu(), out[1].cpu()

    def reference_rotation(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor, precision: str = "exact"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """mrope's rotation with the config's spec: float64 with exact angles, or transformers' fp32
        angle arithmetic (``precision="fp32"``)."""
        dtype = torch.float64 if precision == "exact" else torch.float32
        return apply_mrope(
            q.to(dtype),
            k.to(dtype),
            positions[:, None, :],
            self.spec,
            layout="bhsd",
            backend="torch",
            angle_precision=precision,
        )

    def probe_vectors(self, length: int, seed: int, heads: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
        """Random q ``[1, heads, length, D]`` and k ``[1, 1, length, D]`` in the model's dtype."""
        gen = torch.Generator().manual_seed(seed)
        dtype = next(self.model.parameters()).dtype
        q = torch.randn(1, heads, length, self.spec.head_dim, generator=gen)
        k = torch.randn(1, 1, length, self.spec.head_dim, generator=gen)
        return q.to(dtype), k.to(dtype)

    # ------------------------------------------------------------------ the whole model

    def text(self, n: int, seed: int) -> list[int]:
        """``n`` ordinary text token ids."""
        gen = np.random.default_rng(seed)
        return gen.integers(*TEXT_IDS, size=n).tolist()

    def tokenize(self, text: str) -> list[int]:
        """Text (a timestamp's, under timestamp rules) to ids: the checkpoint's tokenizer, else one id
        per character among :data:`TEXT_IDS`."""
        if self.tokenizer is not None:
            return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return [TEXT_IDS[0] + ord(c) % (TEXT_IDS[1] - TEXT_IDS[0]) for c in text]

    def positions(self, segments: Sequence[Segment]) -> Positions:
        """mrope's positions of one sequence under the model's rules."""
        return build_positions(segments, model=self.family, rules=self.rules, tokenizer=self.tokenize)

    def inputs(self, samples: Sequence[Sequence[Segment]], padding_side: str = "left") -> dict[str, Any]:
        """Model inputs for ``samples`` under mrope's names (no pixels: vision placeholders keep their
        token embeddings), with mrope's ``position_ids`` (:meth:`hidden` lets the model compute its own)."""
        if self.rules is None:
            if any(not isinstance(s, Text) for sample in samples for s in sample):
                raise ValidationError(f"no layout rules for this model: {self.rules_error}")
            return self._text_inputs(samples, padding_side)
        batch = build_batch(
            samples,
            model=self.family,
            rules=self.rules,
            padding_side=padding_side,
            pad_token_id=0,
            tokenizer=self.tokenize,
        )
        return model_inputs(batch)

    def _text_inputs(self, samples: Sequence[Sequence[Segment]], side: str) -> dict[str, Any]:
        rows = [[i for s in sample for i in s.token_ids] for sample in samples]
        width = max(len(r) for r in rows)
        ids = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for b, row in enumerate(rows):
            span = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[b, span] = torch.tensor(row)
            mask[b, span] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def _call(self, module: torch.nn.Module, kw: dict[str, Any], **options: Any) -> Any:
        """``module(**kw)`` under the names its forward takes, on its device, no gradients."""
        device = next(self.model.parameters()).device
        args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
        with torch.no_grad():
            return module(**named_for(type(module).forward, args), **options)

    @contextlib.contextmanager
    def _fresh(self) -> Iterator[None]:
        """No position state (``rope_deltas``) from an earlier call, before or after."""
        if hasattr(self.owner, "rope_deltas"):
            self.owner.rope_deltas = None
        try:
            yield
        finally:
            if hasattr(self.owner, "rope_deltas"):
                self.owner.rope_deltas = None

    def hidden(self, kw: dict[str, Any], *, own_positions: bool = True) -> torch.Tensor:
        """The whole sequence's final hidden states ``[B, T, hidden]`` (float32, CPU): the lm_head's
        input, a fixed linear map of which the logits are. The model computes its positions unless
        ``own_positions`` is false."""
        args = {k: v for k, v in kw.items() if not (own_positions and k == "position_ids")}
        with self._fresh():
            return self._call(self.owner, args, use_cache=False).last_hidden_state.float().cpu()

    def decode_hidden(self, kw: dict[str, Any], prompt: int) -> torch.Tensor:
        """:meth:`hidden` of one unpadded row computed as a prefill of ``prompt`` tokens (the model computes
        their positions), then one token per call with the KV cache (the model places each from its state)."""
        kw = {k: v for k, v in kw.items() if k != "position_ids"}
        ids = kw["input_ids"]
        cut = ("input_ids", "mm_token_type_ids", "attention_mask")
        first = {k: v[:, :prompt] if k in cut else v for k, v in kw.items()}
        with self._fresh():
            out = self._call(self.owner, first, use_cache=True)
            pieces, cache = [out.last_hidden_state], out.cache
            for j in range(prompt, ids.shape[1]):
                out = self._call(self.owner, {"input_ids": ids[:, j : j + 1]}, cache=cache, use_cache=True)
                pieces.append(out.last_hidden_state)
                cache = out.cache
        return torch.cat(pieces, dim=1).float().cpu()

    def last_logits(self, kw: dict[str, Any], keep: int) -> torch.Tensor:
        """Logits of the last ``keep`` tokens ``[B, keep, vocab]`` (float32, CPU), the model's positions."""
        takes_keep = "logits_to_keep" in inspect.signature(type(self.model).forward).parameters
        options = {"logits_to_keep": keep} if takes_keep else {}
        with self._fresh():
            out = self._call(self.model, kw, use_cache=False, **options).logits
        return out[:, -keep:].float().cpu()

    @contextlib.contextmanager
    def rotaries_replaced(self, make: Any) -> Iterator[None]:
        """The text model's rotary modules swapped for ``make(rotary)`` inside the block."""
        swapped = []
        for parent in self.owner.language_model.modules():
            for name, child in list(parent.named_children()):
                if any(child is r for r in self.rotaries):
                    swapped.append((parent, name, child))
        try:
            for parent, name, child in swapped:
                setattr(parent, name, make(child))
            yield
        finally:
            for parent, name, child in swapped:
                setattr(parent, name, child)


def _lengths(spec: RopeSpec, text_config: Any) -> tuple[int, int | None]:
    """``(L0, L1)``: the pretraining length and the extended one where the config names one."""
    max_pos = getattr(text_config, "max_position_embeddings", None)
    sc = spec.scaling
    if sc.type == "none" or sc.type == "ntk_alpha":
        return int(max_pos or 0), None
    if sc.type == "dynamic":
        l0 = int(sc.original_max_position_embeddings or max_pos)
        return l0, int(round(sc.factor * l0)) if sc.factor > 1 else None
    l0 = int(sc.original_max_position_embeddings or max_pos)
    l1 = int(max_pos) if max_pos and max_pos > l0 else int(round(sc.factor * l0))
    return l0, l1 if l1 > l0 else None


def _load_folder(path: Path) -> tuple[torch.nn.Module, Any]:
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path}: not a transformers checkpoint folder ({exc})") from None
    names = getattr(config, "architectures", None) or []
    cls = getattr(transformers, names[0], None) if names else None
    cls = cls or transformers.AutoModelForImageTextToText
    try:
        model = cls.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path}: transformers cannot load it as {cls.__name__} ({exc})") from None
    tokenizer = None
    if any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError):
            tokenizer = None  # the rows then use token ids
    return model, tokenizer


def load_subject(model_or_path: Any, family: Any = None, tokenizer: Any = None) -> Subject:
    """The :class:`Subject` for a loaded model, a checkpoint folder, or (``model_or_path=None``) a tiny
    model of ``family``."""
    if isinstance(model_or_path, torch.nn.Module):
        model, label = model_or_path, type(model_or_path).__name__
    elif model_or_path is None:
        if family is None:
            raise ValidationError("give a model, a checkpoint folder, or family= for a tiny model")
        from mrope.testing._tiny import tiny_model

        model, label = tiny_model(family), f"tiny {family if isinstance(family, str) else family.name}"
    else:
        path = Path(model_or_path)
        if not (path / "config.json").is_file():
            raise ValidationError(
                f"{model_or_path!s}: no checkpoint folder there (a folder with config.json); pass family= "
                "without a model for a tiny model of a family"
            )
        model, found = _load_folder(path)
        label, tokenizer = str(path), tokenizer if tokenizer is not None else found
    model = getattr(model, "thinker", model)  # an omni model's text model is its thinker's
    model.eval()
    config = model.config
    fam = family_of(config, family)
    owner, _ = position_owners(model)
    rotaries = text_rotaries(owner)
    modeling = sys.modules[type(rotaries[0]).__module__]
    layer_type = next(iter(layer_types(rotaries[0])))
    spec = applied_spec(spec_of(config, layer_type), attention_modules(owner))
    try:
        rules, rules_error = model_rules(model, family=fam), ""
    except MRopeError as exc:
        rules, rules_error = None, str(exc)
    l0, l1 = _lengths(spec, config.get_text_config())
    return Subject(
        model=model,
        owner=owner,
        family=fam,
        spec=spec,
        layer_type=layer_type,
        rotaries=rotaries,
        modeling=modeling,
        rules=rules,
        rules_error=rules_error,
        label=label,
        tokenizer=tokenizer,
        length_l0=l0,
        length_l1=l1,
    )


__all__ = ["TEXT_IDS", "Subject", "ValidationError", "load_subject"]
