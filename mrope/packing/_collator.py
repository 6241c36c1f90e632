"""A data collator for transformers' ``Trainer`` / TRL that packs processor outputs into padding-free rows.

Each record is one processor output (``input_ids``, optional ``labels`` and ``attention_mask``, pixel
values and grids). The positions come from the ids and grids by the token path
(:func:`mrope.numpy_rope_index`, one record at a time), the rows from the bin packers
(:mod:`mrope.packing._bins`), the layout of a row from :mod:`mrope.packing._rows`.
"""

from __future__ import annotations

from mrope import _extras

_extras.require("mrope.packing.PackedCollator", "torch", "torch")

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from mrope._errors import MRopeError, PackingError
from mrope._layer_sets import LayerSets
from mrope._position_sets import position_set_rules
from mrope._rules import LayoutRules
from mrope._token_ids import numpy_rope_index
from mrope.integrations.transformers._inputs import named_for
from mrope.models import get_family, resolve_rules
from mrope.packing._bins import MODES, check_max_length, first_fit_decreasing, stream_rows
from mrope.packing._inputs import model_packed_input, seq_len_inputs
from mrope.packing._rows import cu_seqlens, padded_arrays, stack_positions
from mrope.packing._shard import check_split, layout_unit, shard_arrays, split_sizes
from mrope.packing._support import IGNORE_INDEX, check_packed_input

_MEDIA: tuple[tuple[str, str], ...] = (
    ("pixel_values", "image_grid_thw"),
    ("pixel_values_videos", "video_grid_thw"),
)
"""(pixel values, grids) key pairs of a processor output, concatenated in row order."""


def _flat(value: Any, name: str, index: int) -> np.ndarray:
    out = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value)
    if out.ndim == 2 and out.shape[0] == 1:
        out = out[0]
    if out.ndim != 1:
        raise PackingError(f"record {index}: {name} must be [n] or [1, n]; got shape {list(out.shape)}")
    return out.astype(np.int64, copy=False)


def _types(sample: Mapping[str, Any]) -> np.ndarray:
    """A sample's ``mm_token_type_ids``, zeros when its record had none."""
    return sample["types"] if sample["types"] is not None else np.zeros(len(sample["ids"]), dtype=np.int64)


def _grids(value: Any) -> np.ndarray | None:
    if value is None:
        return None
    out = np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value, dtype=np.int64).reshape(-1, 3)
    return out if len(out) else None


class PackedCollator:
    """Packs a list of processor outputs into padding-free rows for one training step.

    Args:
        model: a transformers model (its rules, ids and ``forward`` names are read from it), or a family
            name / :class:`mrope.models.ModelFamily` (then give ``rules`` where the model's ids differ).
        max_length: row capacity; a longer record is a :class:`~mrope._errors.PackingError` naming it.
        rules, convention: as :func:`mrope.numpy_rope_index`. For a transformers model the default is
            :func:`mrope.integrations.transformers.model_rules` under ``convention`` (``None``: its own
            transformers 5.24 ``get_rope_index``'s, so the packed positions equal the model's own
            unpacked ones); for a family name ``None`` means ``"released"``.
        mode: ``"ffd"`` (first-fit-decreasing over the records of the call) or ``"stream"`` (their order
            kept, ``open_rows`` rows open).
        pad_token_id: the id of padding tokens (rows are padded to the longest, or to ``max_length`` with
            ``pad_to_max_length``); padding is a segment of its own, its labels ``-100``.
        seq_lens: add ``cu_seq_lens_q/k`` and ``max_length_q/k`` (see
            :func:`mrope.packing._inputs.packed_inputs`: leave it off with pixel values under
            flash-attention; the text row carries the boundaries either way).
        cp_size, cp_rank, cp_layout: give ``cp_size`` for context / sequence parallelism: each row is
            cut as :func:`mrope.packing.shard` cuts it (``cp_layout`` ``"zigzag"`` or ``"contiguous"``)
            and only rank ``cp_rank``'s tokens come back; every row is first padded to the same length
            (the longest padded row, or ``max_length`` rounded up with ``pad_to_max_length``) by one
            padding segment at its end, so the ranks' rows stack.

    Returns (``__call__``): ``input_ids [R, L]``, ``labels [R, L]`` (the record's ``labels``, or its
    ``input_ids`` when it has none; ``-100`` at each sample's first token, whose label the previous
    sample's last token would otherwise predict, and at padding), ``position_ids [1 + A, R, L]``, the
    pixel values and grids in row order, ``second_per_grid_ts`` (videos in seconds), ``mm_token_type_ids``
    when every record has them, ``use_cache=False``; no attention mask (with a cache or a mask
    transformers would not read the sample boundaries from the text row). Named as the model's ``forward`` takes them when
    ``model`` is a transformers model. With ``cp_size`` the token arrays are this rank's ``[R, L_r]``
    (``position_ids [1 + A, R, L_r]``), ``labels`` and ``shift_labels`` both the already-shifted labels
    (transformers' loss computes when ``labels`` is given and then takes ``shift_labels`` unshifted),
    plus ``token_index [R, L_r]`` (each token's index in its padded row of ``L_pad`` tokens) and int32
    ``cu_seqlens_padded [m + 1]`` (the segment boundaries of the ``R * L_pad`` padded tokens read row
    after row, TransformerEngine's THD form) for the trainer's attention;
    the pixel values and grids stay the whole batch's (the vision encoder's input); ``seq_lens`` is
    refused.

    ``layer_sets`` (``True``: the model's own :class:`mrope.LayerSets`, ``circle-rope-age``'s circle and
    M-RoPE sets; or a :class:`mrope.LayerSets` of one's own, each set's overrides after ``rules``) is for
    a model whose layers rotate by different position sets: the call then adds ``position_sets`` (set
    name -> ``[1 + A, R, L]``, each set's positions by the token path laid out as ``position_ids``, which
    is the first set's; with ``cp_size`` the rank's, padding continuing each sample by its set's delta)
    and ``layer_pattern`` (layer ``i`` rotates by set ``layer_pattern[i % len]``:
    :func:`mrope.layer_cos_sin`), beside the forward's arguments as the trainer's extras are.
    """

    def __init__(
        self,
        model: Any,
        *,
        max_length: int,
        rules: LayoutRules | dict[str, Any] | None = None,
        convention: str | None = None,
        mode: str = "ffd",
        open_rows: int = 8,
        pad_token_id: int = 0,
        pad_to_max_length: bool = False,
        seq_lens: bool = False,
        cp_size: int | None = None,
        cp_rank: int = 0,
        cp_layout: str = "zigzag",
        layer_sets: bool | LayerSets = False,
    ) -> None:
        check_max_length(max_length)
        if cp_size is not None:
            check_split(cp_size, cp_rank, cp_layout)
            if seq_lens:  # the local tokens are not whole sequences: varlen boundaries would mislead
                raise PackingError(
                    "seq_lens does not go with cp_size: a rank's tokens are chunks of the sequences, whose "
                    "boundaries come back as cu_seqlens_padded for the trainer's attention"
                )
        self.cp = None if cp_size is None else (int(cp_size), int(cp_rank), cp_layout)
        if mode not in MODES:
            raise PackingError(f"mode must be one of {list(MODES)}; got {mode!r}")
        self.forward = None
        if isinstance(model, torch.nn.Module):
            from mrope.integrations.transformers import model_rules
            from mrope.integrations.transformers._discovery import family_of

            self.forward = type(model).forward
            check_packed_input(*model_packed_input(model, "text-row", type(model).__name__))
            own = model_rules(model, convention)
            family = family_of(getattr(model, "config", None))
            self.rules = (
                own
                if rules is None
                else resolve_rules(None, rules if isinstance(rules, LayoutRules) else own.replace(**rules))
            )
        else:
            family = get_family(model)
            check_packed_input(family.packed_input, family.name)
            self.rules = resolve_rules(family, rules, convention or "released")
        self.max_length, self.mode, self.open_rows = max_length, mode, open_rows
        self.pad_token_id, self.pad_to_max_length, self.seq_lens = pad_token_id, pad_to_max_length, seq_lens
        self.set_rules: dict[str, LayoutRules] = {}
        self.pattern: tuple[str, ...] = ()
        if layer_sets is not False:
            if not (layer_sets is True or isinstance(layer_sets, LayerSets)):
                raise PackingError(f"layer_sets is True or a mrope.LayerSets; got {layer_sets!r}")
            if isinstance(layer_sets, LayerSets):
                family = family.replace(layer_sets=layer_sets)
            self.set_rules = position_set_rules(family, self.rules)  # type: ignore[assignment]
            self.pattern = family.layer_sets.pattern

    def sample(self, index: int, record: Mapping[str, Any]) -> dict[str, Any]:
        """One record's ids, labels, grids and positions ``[A, n]`` (the token path)."""
        if "input_ids" not in record:
            raise PackingError(f"record {index} has no input_ids; keys: {sorted(record)}")
        ids = _flat(record["input_ids"], "input_ids", index)
        labels = _flat(record["labels"], "labels", index) if record.get("labels") is not None else ids.copy()
        if labels.shape != ids.shape:
            raise PackingError(f"record {index}: labels {labels.shape[0]} long, input_ids {ids.shape[0]}")
        keep = None
        if record.get("attention_mask") is not None:  # a padded processor output: its pads are dropped
            keep = _flat(record["attention_mask"], "attention_mask", index).astype(bool)
            ids, labels = ids[keep], labels[keep]
        types = record.get("mm_token_type_ids")
        types = None if types is None else _flat(types, "mm_token_type_ids", index)
        if types is not None and keep is not None:
            types = types[keep]
        images, videos = _grids(record.get("image_grid_thw")), _grids(record.get("video_grid_thw"))
        seconds = record.get("second_per_grid_ts")
        sets = {}
        for name, rules in (self.set_rules or {"": self.rules}).items():
            try:
                pos, delta = numpy_rope_index(
                    ids[None],
                    image_grid_thw=images,
                    video_grid_thw=videos,
                    rules=rules,
                    second_per_grid_ts=None if seconds is None else np.asarray(seconds, dtype=np.float64),
                    mm_token_type_ids=None if types is None else types[None],
                )
            except MRopeError as exc:
                raise PackingError(f"record {index}: its placeholders and grids do not agree: {exc}") from exc
            sets[name] = (pos[:, 0], delta[0])
        labels = labels.copy()
        labels[0] = IGNORE_INDEX
        first, delta = next(iter(sets.values()))
        sample = {"ids": ids, "labels": labels, "types": types, "positions": first, "record": record}
        return {**sample, "delta": delta, "sets": sets}

    def bins(self, lengths: Sequence[int]) -> list[list[int]]:
        """Rows of record indices for one call's records."""
        if self.mode == "ffd":
            return [sorted(b) for b in first_fit_decreasing(lengths, self.max_length)]
        pairs = ((i, int(n)) for i, n in enumerate(lengths))
        return [indices for indices, _ in stream_rows(pairs, self.max_length, open_rows=self.open_rows)]

    def __call__(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not records:
            raise PackingError("the collator got no records")
        samples = [self.sample(i, r) for i, r in enumerate(records)]
        rows = self.bins([len(s["ids"]) for s in samples])
        ordered = [samples[i] for row in rows for i in row]
        out, extra = (self.tokens(samples, rows), {}) if self.cp is None else self.sharded(samples, rows)
        for pixels_key, grid_key in _MEDIA:
            held = [s["record"] for s in ordered if _grids(s["record"].get(grid_key)) is not None]
            if held:
                out[grid_key] = torch.from_numpy(np.concatenate([_grids(r[grid_key]) for r in held]))
                if all(r.get(pixels_key) is not None for r in held):
                    out[pixels_key] = torch.cat([torch.as_tensor(r[pixels_key]) for r in held])
        seconds = [s["record"].get("second_per_grid_ts") for s in ordered]
        if any(v is not None for v in seconds):
            out["second_per_grid_ts"] = torch.cat(
                [torch.as_tensor(v, dtype=torch.float32).reshape(-1) for v in seconds if v is not None]
            )
        if self.set_rules:  # not the forward's own names: its **kwargs reach the model's layers
            extra = {**extra, "position_sets": out.pop("position_sets"), "layer_pattern": list(self.pattern)}
        if self.forward is not None:
            out = named_for(self.forward, out)
        out.update(extra)  # not the forward's own names: its **kwargs reach the loss and the attention
        out["use_cache"] = False  # a cache turns transformers' packed-sequence mask off
        return out

    def tokens(self, samples: list[dict[str, Any]], rows: list[list[int]]) -> dict[str, Any]:
        """The rows' token arrays (``[R, L]``; positions ``[1 + A, R, L]``), padded to one length."""
        ordered = [samples[i] for row in rows for i in row]
        width = (
            self.max_length
            if self.pad_to_max_length
            else max(sum(len(samples[i]["ids"]) for i in r) for r in rows)
        )
        ids, pos, is_sample, cu, longest = padded_arrays(
            [np.concatenate([samples[i]["ids"] for i in r]) for r in rows],
            [stack_positions([samples[i]["positions"] for i in r]) for r in rows],
            [[len(samples[i]["ids"]) for i in r] for r in rows],
            width,
            self.pad_token_id,
        )
        labels = np.full(ids.shape, IGNORE_INDEX, dtype=np.int64)
        labels[is_sample] = np.concatenate([s["labels"] for s in ordered])
        out: dict[str, Any] = {
            "input_ids": torch.from_numpy(ids),
            "labels": torch.from_numpy(labels),
            "position_ids": torch.from_numpy(pos),
        }
        if self.set_rules:
            row_ids = [np.concatenate([samples[i]["ids"] for i in r]) for r in rows]
            lengths = [[len(samples[i]["ids"]) for i in r] for r in rows]
            out["position_sets"] = {
                name: torch.from_numpy(
                    padded_arrays(
                        row_ids,
                        [stack_positions([samples[i]["sets"][name][0] for i in r]) for r in rows],
                        lengths,
                        width,
                        self.pad_token_id,
                    )[1]
                )
                for name in self.set_rules
            }
        if all(s["types"] is not None for s in samples):
            types = np.zeros(ids.shape, dtype=np.int64)
            types[is_sample] = np.concatenate([s["types"] for s in ordered])
            out["mm_token_type_ids"] = torch.from_numpy(types)
        if self.seq_lens:
            out.update(seq_len_inputs(cu, longest))
        return out

    def sharded(
        self, samples: list[dict[str, Any]], rows: list[list[int]]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Rank ``cp_rank``'s token arrays of the rows (:func:`mrope.packing._shard.shard_arrays`), every
        row padded to the same length first: ``(forward arguments, the trainer's extras)``."""
        world_size, rank, layout = self.cp
        lengths = [np.array([len(samples[i]["ids"]) for i in r], dtype=np.int64) for r in rows]
        width = max(int(split_sizes(n, world_size, layout).sum()) for n in lengths)
        if self.pad_to_max_length:
            unit = layout_unit(world_size, layout)
            width = max(width, -(-self.max_length // unit) * unit)

        def cut(name: str) -> list[dict[str, Any]]:
            """Each row's arrays with the positions of set ``name`` (``""``: the collator's one set)."""
            return [
                shard_arrays(
                    np.concatenate([samples[i]["ids"] for i in r]),
                    stack_positions([samples[i]["sets"][name][0] for i in r]),
                    np.concatenate([_types(samples[i]) for i in r]),
                    np.concatenate([samples[i]["labels"] for i in r]),
                    cu_seqlens(n.tolist()),
                    np.stack([samples[i]["sets"][name][1] for i in r]),
                    world_size=world_size,
                    rank=rank,
                    layout=layout,
                    width=width,
                    pad_token_id=self.pad_token_id,
                )
                for r, n in zip(rows, lengths, strict=True)
            ]

        names = list(self.set_rules) or [""]
        parts = cut(names[0])
        labels = torch.from_numpy(np.stack([p["labels"] for p in parts]))
        out = {
            "input_ids": torch.from_numpy(np.stack([p["input_ids"] for p in parts])),
            "labels": labels,
            "position_ids": torch.from_numpy(np.stack([p["position_ids"] for p in parts], axis=1)),
        }
        if all(s["types"] is not None for s in samples):
            out["mm_token_type_ids"] = torch.from_numpy(np.stack([p["mm_token_type_ids"] for p in parts]))
        if self.set_rules:
            cuts = {names[0]: parts, **{name: cut(name) for name in names[1:]}}
            out["position_sets"] = {
                name: torch.from_numpy(np.stack([p["position_ids"] for p in c], axis=1))
                for name, c in cuts.items()
            }
        bounds = [p["cu_seqlens_padded"][1:].astype(np.int64) + r * width for r, p in enumerate(parts)]
        extra = {
            "shift_labels": labels,
            "token_index": torch.from_numpy(np.stack([p["token_index"] for p in parts])),
            "cu_seqlens_padded": torch.from_numpy(np.concatenate([[0], *bounds]).astype(np.int32)),
        }
        return out, extra


__all__ = ["PackedCollator"]
