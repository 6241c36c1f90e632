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
   :func:`mrope.apply_mrope` (the Triton kernel on CUDA, the torch path elsewhere), or for fp16 / bf16
   hidden states the original function on the tables the model's rotary returns (:meth:`Rotation.tables`:
   the model's own rounding, so half-precision logits are the model's bit for bit); given real cos/sin
   tensors (an unpatched model of the same class) it calls the original function unchanged.

Everything is checked before anything is changed: the family (from ``config.model_type`` through
:func:`mrope.models.get_family`), the three hook points, the spec (the model's own rotary is run on probe
positions and must equal :func:`mrope.apply_mrope` with the spec mrope derived) and, under
``convention="transformers5"``, the positions (the model's own ``get_rope_index`` on a probe batch built
by :func:`mrope.build_batch`, left-padded, with images and a video, must equal mrope's, and leave the
same state on the model: GLM-Image's decode cache of the images it will generate, which the stand-in
fills from :func:`mrope.generation_index`; nothing for every other family). A model that fails any
check raises :class:`~mrope._errors.PatchError` and is left untouched. :func:`unpatch` restores the exact objects.

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

Modules: :mod:`~mrope.integrations.transformers._patching` (patch, unpatch and what they install),
:mod:`~mrope.integrations.transformers._discovery` (the model's family, hook points, spec and rules),
:mod:`~mrope.integrations.transformers._probes` (the checks before patching),
:mod:`~mrope.integrations.transformers._rotation` (the :class:`Rotation` stand-in) and
:mod:`~mrope.integrations.transformers._inputs` (:func:`model_inputs`),
:mod:`~mrope.integrations.transformers._pruned` (:func:`pruned_video_inputs`: video tokens pruned after
the vision tower, docs/pruning.md).
"""

from mrope import _extras

_extras.require("mrope.integrations.transformers", "torch", "torch")

from mrope.integrations.transformers._discovery import APPLY_FUNCTION
from mrope.integrations.transformers._inputs import model_inputs
from mrope.integrations.transformers._patching import (
    DEFAULT_CONVENTION,
    is_patched,
    model_rules,
    patch,
    patch_info,
    unpatch,
)
from mrope.integrations.transformers._probes import NotARotationError
from mrope.integrations.transformers._pruned import MaskRule, pruned_video_inputs
from mrope.integrations.transformers._rotation import Rotation
from mrope.models import CONVENTIONS

__all__ = [
    "APPLY_FUNCTION",
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "MaskRule",
    "NotARotationError",
    "Rotation",
    "is_patched",
    "model_inputs",
    "model_rules",
    "patch",
    "patch_info",
    "pruned_video_inputs",
    "unpatch",
]
