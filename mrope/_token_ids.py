"""The token-id interface: token ids -> M-RoPE positions, as the transformers models' get_rope_index.

:func:`get_rope_index` is the drop-in for the transformers method (tensors in, tensors out; numpy
arrays in, numpy arrays out);
:func:`numpy_rope_index` is its numpy form, and :func:`generation_index` gives the positions of images a
model generates (GLM-Image).

A sequence arrives as token ids with runs of placeholder tokens and one flat list of grids per modality
(see :mod:`mrope._layout.token_inputs` and :mod:`mrope._layout.token_scan`). The coordinates themselves
come from the same layout engines and fill engine as :func:`mrope.build_positions`, so the two
interfaces cannot drift apart.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec

import numpy as np

from mrope._errors import LayoutError, TokenError
from mrope._layout import engine
from mrope._layout.pruned_ids import pruned_rope_index
from mrope._layout.token_inputs import as_numpy, positions_buffer, read_token_inputs
from mrope._rules import LayoutRules
from mrope.models import ModelLike, resolve_rules

if TYPE_CHECKING:
    import torch

P = ParamSpec("P")


def _rope_index_full(
    input_ids: Any,
    image_grid_thw: Any,
    video_grid_thw: Any,
    attention_mask: Any,
    lay: LayoutRules,
    second_per_grid_ts: Any,
    mm_token_type_ids: Any,
    pad_position: int,
    images_per_sample: Any,
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
    out: Any = None,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray | None]]:
    """Positions (in ``out`` when given), deltas and per row the positions of images to generate, from
    the rules' engine."""
    inputs = read_token_inputs(
        input_ids,
        attention_mask,
        mm_token_type_ids,
        image_grid_thw,
        video_grid_thw,
        second_per_grid_ts,
        images_per_sample,
        audio_seqlens,
        use_audio_in_video,
        lay,
        pad_position,
        out,
    )
    return engine(lay).scan_token_ids(inputs)


def numpy_rope_index(
    input_ids: Any,
    image_grid_thw: Any = None,
    video_grid_thw: Any = None,
    attention_mask: Any = None,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    second_per_grid_ts: Any = None,
    mm_token_type_ids: Any = None,
    pad_position: int | None = None,
    images_per_sample: Any = None,
    convention: str = "released",
    audio_seqlens: Any = None,
    use_audio_in_video: bool | None = None,
    second_per_grids: Any = None,
    image_keep: Any = None,
    video_keep: Any = None,
    out: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """M-RoPE position ids from token ids, as numpy: the core of :func:`get_rope_index`.

    Args:
        input_ids: int ``[B, L]`` (torch, numpy or nested lists).
        image_grid_thw: int ``[n_images, 3]`` encoder grids, in order, shared by the batch.
        video_grid_thw: int ``[n_videos, 3]``. For Qwen3-VL one row ``(T, H, W)`` per video, as its
            processor gives it; it is split into ``T`` blocks of ``(1, H, W)`` like the model does.
        attention_mask: 0/1 ``[B, L]``; positions are computed on valid tokens only.
        model: required (no default): a family name, a Hugging Face model_type, a repo id, a
            :class:`mrope.models.ModelFamily` or what :func:`mrope.from_pretrained` returns; ``rules``
            replaces or overrides its rules (see :class:`~mrope.LayoutRules`).
        second_per_grid_ts: float ``[n_videos]`` seconds per temporal patch (Qwen2.5-VL; default 1.0),
            used as float32 like the model does with the float32 tensor its processor hands over.
        mm_token_type_ids: int ``[B, L]`` 0 text / 1 image / 2 video (transformers 5.x form); when
            given, runs are taken from it instead of the placeholder ids.
        pad_position: value written at masked slots (default: the rules' ``pad_position``).
        images_per_sample: int ``[B]``: how many ``image_grid_thw`` rows belong to each row (GLM-Image's
            processor output, images to generate included); without it the grids are one queue.
        audio_seqlens: int ``[n_audios]`` mel-frame lengths of every audio clip in order, standalone or
            inside a video (omni families: ``feature_attention_mask.sum(-1)``, what the models take);
            ``None`` counts each clip's tokens from the ids.
        use_audio_in_video: omni families: whether videos carry their audio. The layout is read from
            the ids (a video whose vision_start is followed by audio_start carries audio); ``True`` with
            a video that carries none is an error, as the models would misplace it.
        second_per_grids: the omni models' name for ``second_per_grid_ts``.
        convention: ``"released"`` (official semantics) or ``"transformers5"`` (the family's own
            transformers 5.24 ``get_rope_index``: its advance and pad value).
        image_keep, video_keep: for pruned ids (vision placeholders dropped): one bool mask or ``None``
            per grid, in grid order, over the grid's language-model tokens; every kept token gets its
            unpruned position and a row's delta continues where the unpruned row's does (docs/pruning.md).
        out: the caller's persistent buffer for the positions, ``[A, B, L]`` of the result's dtype
            (numpy, or a CPU torch tensor); the positions are written into it and it is returned. The
            layout engines write straight into it, so a steady-state call allocates nothing of the
            result's size (scratch of two or three bytes per token remains: the comparisons with the
            placeholder ids and their bytes, or the type ids' runs);
            pruned ids (``image_keep`` / ``video_keep``) are computed, then copied into it.

    Returns:
        ``(position_ids int64 [A, B, L], deltas int64 [B])``; A is ``rules.num_axes`` (3: t, h, w);
        float32 both for fractional-time rules (Qwen3-Omni).
    """
    lay = resolve_rules(model, rules, convention)
    if second_per_grids is not None:  # the omni models' name for it
        if second_per_grid_ts is not None:
            raise TokenError("pass second_per_grid_ts or second_per_grids, not both")
        second_per_grid_ts = second_per_grids
    if not lay.has_audio and (audio_seqlens is not None or use_audio_in_video):
        raise TokenError(
            f"audio_seqlens / use_audio_in_video given, but the {lay.name!r} rules have no audio"
        )
    pad = lay.pad_position if pad_position is None else pad_position
    if image_keep is not None or video_keep is not None:  # pruned ids: expanded, scanned, selected
        ids_shape = np.shape(as_numpy(input_ids, "input_ids", ndim=2))
        buffer = positions_buffer(out, (lay.num_axes, *ids_shape), lay)

        def scan(ids: np.ndarray, mask: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            full = _rope_index_full(
                ids, image_grid_thw, video_grid_thw, mask, lay, second_per_grid_ts, types, pad, None
            )
            return full[0], full[1]

        pos, deltas = pruned_rope_index(
            scan,
            input_ids,
            attention_mask,
            mm_token_type_ids,
            image_grid_thw,
            video_grid_thw,
            image_keep,
            video_keep,
            lay,
            pad,
        )
        if buffer is None:
            return pos, deltas
        buffer[...] = pos
        return buffer, deltas
    pos, deltas, _ = _rope_index_full(
        input_ids,
        image_grid_thw,
        video_grid_thw,
        attention_mask,
        lay,
        second_per_grid_ts,
        mm_token_type_ids,
        pad,
        images_per_sample,
        audio_seqlens,
        use_audio_in_video,
        out,
    )
    return pos, deltas


def generation_index(
    input_ids: Any,
    image_grid_thw: Any,
    attention_mask: Any = None,
    *,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    images_per_sample: Any = None,
) -> np.ndarray:
    """Decode-time positions of the images a model generates (rules with ``generates_images``,
    GLM-Image): per row, the grids left after the prompt's images are generated last grid first, each
    as a 2-D block starting one past the prompt's largest position, then one end marker.

    Returns:
        int64 ``[B, 3, G]``, rows shorter than the longest repeat their last column (how GLM-Image
        caches them); step ``k`` of decoding row ``b`` uses ``[b, :, k]``.
    """
    lay = resolve_rules(model, rules)
    if not lay.generates_images:
        raise TokenError(f"the {lay.name!r} rules do not generate images (generates_images=False)")
    _, _, generation = _rope_index_full(
        input_ids,
        image_grid_thw,
        None,
        attention_mask,
        lay,
        None,
        None,
        lay.pad_position,
        images_per_sample,
    )
    rows = [g if g is not None else np.zeros((3, 0), dtype=np.int64) for g in generation]
    width = max(g.shape[1] for g in rows)
    out = np.zeros((len(rows), 3, width), dtype=np.int64)
    for r, g in enumerate(rows):
        if g.shape[1]:
            out[r, :, : g.shape[1]] = g
            out[r, :, g.shape[1] :] = g[:, -1:]
    return out


def _array_face(
    core: Callable[P, tuple[np.ndarray, np.ndarray]],
) -> Callable[P, tuple[torch.Tensor | np.ndarray, torch.Tensor | np.ndarray]]:
    """``core`` (:func:`numpy_rope_index`) with its arguments as they are and transformers' result shapes:
    the :func:`get_rope_index` a transformers model calls."""

    @functools.wraps(core, assigned=("__module__",))
    def get_rope_index(
        *args: P.args, **kwargs: P.kwargs
    ) -> tuple[torch.Tensor | np.ndarray, torch.Tensor | np.ndarray]:
        """M-RoPE position ids from token ids, like the transformers model method; the arguments of
        :func:`numpy_rope_index`.

        Returns:
            ``(position_ids, deltas)``: int64 ``[A, B, L]`` (A = ``rules.num_axes``) and ``[B, 1]``, the
            shapes transformers returns. They are torch tensors on ``input_ids``' device when
            ``input_ids`` is a torch tensor, numpy arrays otherwise (so this runs without torch).
            Given ``out=`` (numpy or a torch tensor), the positions are written into it and
            ``position_ids`` is ``out`` itself. A CPU tensor is written in place; a tensor on another
            device receives one host-to-device copy of the positions (computed on the host, as the
            token ids are read there: this call belongs before a captured CUDA graph, never inside one).
        """
        out = kwargs.get("out")
        device_out = None
        torch = sys.modules.get("torch")  # a tensor argument means torch is imported; nothing else needs it
        if torch is not None and isinstance(out, torch.Tensor) and not out.is_cpu:
            device_out, kwargs["out"] = out, None  # type: ignore[index]
        try:
            pos, deltas = core(*args, **kwargs)
        except LayoutError as exc:  # a grid the layout rejects is a token-interface error here
            raise TokenError(str(exc)) from None
        input_ids = args[0] if args else kwargs.get("input_ids")
        if device_out is not None:
            device_out.copy_(torch.from_numpy(pos))
            pos = device_out
        elif torch is not None and isinstance(out, torch.Tensor):
            pos = out
        if torch is None or not isinstance(input_ids, torch.Tensor):
            return pos, deltas[:, None]
        # the numpy results become tensors without a copy; moved only when the ids live off the CPU (and
        # the positions were not written into the caller's buffer, which says where they go)
        pos_t = pos if isinstance(pos, torch.Tensor) else torch.from_numpy(pos)
        deltas_t = torch.from_numpy(deltas[:, None])
        if not input_ids.is_cpu:
            deltas_t = deltas_t.to(input_ids.device)
            if out is None:
                pos_t = pos_t.to(input_ids.device)
        return pos_t, deltas_t

    get_rope_index.__qualname__ = get_rope_index.__name__
    get_rope_index.__signature__ = inspect.signature(core).replace(  # type: ignore[attr-defined]
        return_annotation="tuple[torch.Tensor | np.ndarray, torch.Tensor | np.ndarray]"
    )
    return get_rope_index


get_rope_index = _array_face(numpy_rope_index)


__all__ = ["generation_index", "get_rope_index", "numpy_rope_index"]
