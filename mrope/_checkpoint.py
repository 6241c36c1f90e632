"""``mrope.from_pretrained``: one model description from a checkpoint folder (or its parsed config).

The registry (:mod:`mrope.models`) holds each family's released values; a checkpoint can differ (a
fine-tune with other pixel bounds, another ``tokens_per_second``, other token ids). This loader reads what
a checkpoint folder says and returns the family with those values: a :class:`~mrope.models.ModelFamily`
that every ``model=`` argument takes (``build_positions``, ``get_rope_index``, ``load_image``,
``load_video``) and whose ``spec`` :func:`mrope.apply_mrope` takes.

Files read (all optional but ``config.json``; unknown keys are ignored):

- ``config.json``: the rotary spec (:func:`mrope.models.spec_from_config`, pairing from the text config's
  ``model_type``), the family (the top-level ``model_type``: GLM-4.6V's rules, not those of the
  ``glm4v_text`` inside it), token ids (the family's ``config_ids``, at any config level), the vision tower's
  ``patch_size`` / ``spatial_merge_size`` / ``temporal_patch_size``, ``tokens_per_second`` (Qwen2.5-VL,
  in ``vision_config``) or ``position_id_per_seconds`` and ``seconds_per_chunk`` (the omni thinkers; numbers).
- ``preprocessor_config.json`` (images) and ``video_preprocessor_config.json``: pixel bounds
  (``min_pixels`` / ``max_pixels`` or ``size.shortest_edge`` / ``size.longest_edge``, in pixels), patch,
  merge and temporal patch sizes, and for videos ``fps``, ``min_frames``, ``max_frames``, ``max_duration``
  (GLM-4.1V's sampling), ``max_image_size.longest_edge`` (HY-V4-VL's per-frame cap). A key inside an
  object (``size.longest_edge``) whose holder is there but not a JSON object is an error, not skipped.
- ``processor_config.json`` (what transformers 5.x ``save_pretrained`` writes): its nested
  ``image_processor`` / ``video_processor`` stand for the two files above and, as transformers loads them,
  win over them. With neither a video processor file nor a nested one, the video keys are read from
  ``preprocessor_config.json`` (transformers 5.24's video processor loads that file then).
- the rotary's section count: one position row per ``mrope_section`` entry (HunyuanOCR's 5.24
  ``get_rope_index`` makes ``len(mrope_section)`` rows; mrope computes 3 or 4).
- the family's own keys (its ``checkpoint_fields``): MiniCPM-V 4.7's ``downsample_mode`` (``"16x"`` /
  ``"4x"``, in ``config.json`` and in both processors' configs) sets the merge.
- ``tokenizer.json``: the tokenizer used for timestamp text when a call passes none.
- the text config's per-layer rotary choice, for a family that reads one (its ``config_layer_sets``:
  EXAONE 4.5's ``layer_types``, its sliding-window layers rotating and its global layers NoPE).
- ``model.safetensors`` (or the shard ``model.safetensors.index.json`` names), for a family whose rotation
  is partly a checkpoint tensor (its ``learned_rotary``: Falcon-OCR's ``freqs_cis_golden``): that one
  tensor, float32. A folder without weights gives a description whose positions work and whose rotation
  every face refuses, naming the tensor.

Keys transformers reads whose other values change grids in a way mrope does not compute (Qwen3-VL's
``cap_pixels_per_frame: true`` / ``num_frames``, Qwen2-VL's ``cap_pixels_per_frame: false`` / other
``max_video_tokens``) are refused by name (the families' :class:`~mrope.models.CheckpointChoice` entries).

Two keys that set one field to different values (a processor's ``patch_size`` against the vision
tower's, say) are a :class:`~mrope.LayoutError` naming both.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mrope._errors import LayoutError, SpecError
from mrope._learned_rotary import LearnedRotary, golden_gate_frequencies
from mrope._rules import FIELD_TYPES
from mrope._spec import RopeSpec
from mrope.models import CheckpointChoice, ModelFamily, get_family
from mrope.models._config import config_levels, family_of_config, spec_from_config

CHECKPOINT_FIELDS: dict[str, str | tuple[str, ...] | CheckpointChoice | None] = {
    # config.json (any level: top, thinker_config, text_config; vision_config under any of them)
    "config:vision_config.patch_size": "patch_size",
    "config:vision_config.spatial_merge_size": "merge_size",
    "config:vision_config.temporal_patch_size": "temporal_patch_size",
    "config:vision_config.tokens_per_second": "tokens_per_second",
    "config:tokens_per_second": "tokens_per_second",
    "config:position_id_per_seconds": "tokens_per_second",  # the omni thinkers (a float: 12.5 is valid)
    "config:seconds_per_chunk": "seconds_per_chunk",
    # preprocessor_config.json
    "image:min_pixels": "image_min_pixels",
    "image:max_pixels": "image_max_pixels",
    "image:size.shortest_edge": "image_min_pixels",
    "image:size.longest_edge": "image_max_pixels",
    "image:size.min_pixels": "image_min_pixels",
    "image:size.max_pixels": "image_max_pixels",
    "image:patch_size": "patch_size",
    "image:merge_size": "merge_size",
    "image:temporal_patch_size": "temporal_patch_size",
    # video_preprocessor_config.json
    "video:min_pixels": "video_min_pixels",
    "video:max_pixels": "video_max_pixels",
    "video:size.shortest_edge": "video_min_pixels",
    "video:size.longest_edge": "video_max_pixels",
    "video:size.min_pixels": "video_min_pixels",
    "video:size.max_pixels": "video_max_pixels",
    "video:patch_size": "patch_size",
    "video:merge_size": "merge_size",
    "video:temporal_patch_size": "temporal_patch_size",
    "video:fps": "fps",
    "video:min_frames": "min_frames",
    "video:max_frames": "max_frames",
    "video:max_duration": "max_duration",
}
"""Which checkpoint key sets which :class:`~mrope.LayoutRules` field(s); a family's ``checkpoint_fields``
overrides entries (``None``: ignore the key)."""

_FILES = {
    "config": "config.json",
    "image": "preprocessor_config.json",
    "video": "video_preprocessor_config.json",
}
_PROCESSOR_FILE = "processor_config.json"
_NESTED = {"image": "image_processor", "video": "video_processor"}
"""transformers 5.x ``ProcessorMixin.save_pretrained`` writes the processors' configs nested in
``processor_config.json``; its loaders take a nested config first and the per-processor file only when
there is none (image_processing_base.py, video_processing_utils.py ``get_*_processor_dict``)."""
_INT_FIELDS = frozenset(name for name, kind in FIELD_TYPES.items() if kind is int)
"""The LayoutRules fields a checkpoint number must be whole for."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"{str(path)!r} is not valid JSON: {exc}") from None
    except OSError as exc:
        raise SpecError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{str(path)!r} must hold a JSON object; got {type(data).__name__}")
    return data


def _lookup(data: Mapping[str, Any], dotted: str) -> Any:
    value: Any = data
    for part in dotted.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _config_values(config: Mapping[str, Any], dotted: str) -> list[tuple[Any, str]]:
    """Every value of ``dotted`` at each level of the config (outer levels first), with where it is."""
    out = []
    levels = config_levels(config)[::-1]  # top, thinker, text
    names = ["config.json", "thinker_config", "text_config"][: len(levels)]
    for level, name in zip(levels, names, strict=True):
        value = _lookup(level, dotted)
        if value is not None:
            out.append((value, f"{name}: {dotted}"))
    return out


def _number(field: str, value: Any, where: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise LayoutError(f"{where} must be a number for LayoutRules.{field}; got {value!r}")
    if field in _INT_FIELDS:
        if value != int(value):
            raise LayoutError(f"{where} must be a whole number for LayoutRules.{field}; got {value!r}")
        return int(value)
    return float(value)


class _Collected:
    """Field values gathered from several files; a field set twice to different values is an error."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[Any, str]] = {}
        self.shown: dict[str, Any] = {}

    def set(self, field: str, value: Any, where: str, shown: Any = None) -> None:
        """Set ``field`` to ``value`` read at ``where``; ``shown`` is the value as the file wrote it (a
        named choice such as ``"4x"``), for the error."""
        shown = value if shown is None else shown
        if field in self.values and self.values[field][0] != value:
            first, first_where = self.values[field]
            raise LayoutError(
                f"the checkpoint contradicts itself: {first_where} = {self.shown[first_where]!r} but {where} = "
                f"{shown!r} (both set LayoutRules.{field})"
            )
        self.values.setdefault(field, (value, where))
        self.shown.setdefault(where, shown)


def _fields_for(key: str, table: Mapping[str, Any]) -> tuple[str, ...]:
    target = table.get(key)
    if target is None or isinstance(target, CheckpointChoice):
        return ()
    return (target,) if isinstance(target, str) else tuple(target)


def _load_tokenizer(path: Path) -> Any:
    try:
        from tokenizers import Tokenizer
    except ImportError:  # pragma: no cover - tokenizers ships with transformers and the dev extras
        raise SpecError(f"{str(path)!r} needs the 'tokenizers' package to read") from None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises its own Exception type on a malformed file
        raise SpecError(f"{str(path)!r} is not a readable tokenizer.json: {exc}") from None


@dataclass(frozen=True)
class _CheckpointFiles:
    """What a checkpoint source holds: its parsed files by kind, each file's name for messages, the
    tokenizer and the source's name."""

    files: dict[str, dict[str, Any]]  # kind ("config", "image", "video") -> the parsed JSON object
    names: dict[str, str]  # kind -> the file (or nested config) it came from, for messages
    tokenizer: Any
    where: str


def _read_folder(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The JSON files of a checkpoint folder by kind, and where each came from (transformers 5.24's
    choice among a per-processor file, a nested ``processor_config.json`` entry and the image file)."""
    if not (path / _FILES["config"]).is_file():
        raise SpecError(f"no config.json in {str(path)!r}: expected a checkpoint folder")
    files: dict[str, dict[str, Any]] = {}
    names = dict(_FILES)
    for kind, name in _FILES.items():
        if (path / name).is_file():
            files[kind] = _read_json(path / name)
    if (path / _PROCESSOR_FILE).is_file():  # 5.x save_pretrained: one file, processors nested
        unified = _read_json(path / _PROCESSOR_FILE)
        for kind, key in _NESTED.items():
            if unified.get(key) is not None:  # wins over the per-processor file, as 5.24 loads
                if not isinstance(unified[key], Mapping):
                    raise SpecError(f"{_PROCESSOR_FILE} {key} must be a JSON object; got {unified[key]!r}")
                files[kind] = dict(unified[key])
                names[kind] = f"{_PROCESSOR_FILE}: {key}"
    if "video" not in files and (path / _FILES["image"]).is_file():
        # 5.24's video processor, with neither its own file nor a nested config, loads
        # preprocessor_config.json (video_processing_utils.py get_video_processor_dict)
        files["video"] = _read_json(path / _FILES["image"])
        names["video"] = f"{_FILES['image']} (no video processor config: 5.24 reads this one)"
    return files, names


def _read_source(source: str | os.PathLike[str] | Mapping[str, Any]) -> _CheckpointFiles:
    """Read a checkpoint folder, a ``config.json`` path or a parsed config dict."""
    if isinstance(source, Mapping):
        return _CheckpointFiles({"config": dict(source)}, dict(_FILES), None, "config dict")
    path = Path(source)
    if path.is_dir():
        files, names = _read_folder(path)
        tokenizer = None
        if (path / "tokenizer.json").is_file():
            tokenizer = _load_tokenizer(path / "tokenizer.json")
        return _CheckpointFiles(files, names, tokenizer, str(path))
    if path.is_file():
        return _CheckpointFiles({"config": _read_json(path)}, dict(_FILES), None, str(path))
    raise SpecError(f"no checkpoint at {str(path)!r} (expected a folder with config.json)")


def _key_values(
    read: _CheckpointFiles, key: str, choice: str | tuple[str, ...] | CheckpointChoice | None
) -> list[tuple[Any, str]]:
    """Every value the checkpoint gives table key ``key`` (``"kind:dotted.path"``), with where it is."""
    kind, _, dotted = key.partition(":")
    if kind == "config":
        found = _config_values(read.files["config"], dotted)
    else:
        holder, _, leaf = dotted.rpartition(".")
        outer = _lookup(read.files.get(kind, {}), holder) if holder else None
        if outer is not None and not isinstance(outer, Mapping):
            raise LayoutError(
                f"{read.names[kind]}: {holder} must be a JSON object (with {leaf!r}, as the processor reads "
                f"it); got {outer!r}"
            )
        value = _lookup(read.files.get(kind, {}), dotted)
        found = [] if value is None else [(value, f"{read.names[kind]}: {dotted}")]
    if not found and isinstance(choice, CheckpointChoice) and choice.default is not None:
        if kind in read.files:  # the file runs its class default: said, if silently
            name = read.names[kind] if kind != "config" else "config.json"
            found = [(choice.default, f"{name}: {dotted} (not set: the class default)")]
    return found


def _collect_fields(base: ModelFamily, read: _CheckpointFiles) -> dict[str, tuple[Any, str]]:
    """The :class:`~mrope.LayoutRules` fields the checkpoint sets for ``base``, each with where it was
    read: token ids, the table's keys and the processors' class defaults for what a present file leaves
    out."""
    config = read.files["config"]
    table = {**CHECKPOINT_FIELDS, **base.checkpoint_fields}
    got = _Collected()
    from_file: dict[str, set[str]] = {kind: set() for kind in _FILES}  # fields each file's keys set
    for key, ids_target in base.config_ids.items():
        for value, at in _config_values(config, key):
            for name in (ids_target,) if isinstance(ids_target, str) else ids_target:
                got.set(name, _token_id(value, at), at)
    for key, choice in table.items():
        kind = key.partition(":")[0]
        for value, at in _key_values(read, key, choice):
            if isinstance(choice, CheckpointChoice):
                got.set(choice.field, choice.value_of(value, at), at, shown=value)
                from_file[kind].add(choice.field)
            for name in _fields_for(key, table):
                got.set(name, _number(name, value, at), at)
                from_file[kind].add(name)
    for kind, defaults in base.processor_defaults.items():
        if kind in read.files:  # a present file runs its processor's class default for what it leaves out
            for name, value in defaults.items():
                if name not in from_file[kind]:
                    got.set(
                        name, value, f"{read.names[kind]}: {name} not set (the processor's class default)"
                    )
    return dict(got.values)


def _num_axes(base: ModelFamily, spec: RopeSpec, where: str) -> dict[str, int]:
    """``{"num_axes": n}`` when the config's ``mrope_section`` asks for other position rows than the
    family's rules make (one row per section), ``{}`` otherwise."""
    axes = len(spec.mrope_section)
    if axes == base.rules.num_axes:
        return {}
    # one position row per rotary section: HunyuanOCR's 5.24 get_rope_index makes
    # len(rope_parameters["mrope_section"]) rows (the last three the image's, the others the sequence)
    if axes not in (3, 4) or base.rules.positions_base != "sequence":
        raise LayoutError(
            f"checkpoint {where!r}: the config's mrope_section {list(spec.mrope_section)} asks for {axes} "
            f"position axes; mrope computes {base.rules.num_axes} for the {base.name!r} family"
            + (" (3 or 4 for this one)" if base.rules.positions_base == "sequence" else "")
        )
    return {"num_axes": axes}


def from_pretrained(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    family: Any = None,
    layer_type: str | None = None,
) -> ModelFamily:
    """The model description of a checkpoint: its family with the checkpoint's own values.

    Args:
        source: a checkpoint folder (``config.json`` required; ``preprocessor_config.json``,
            ``video_preprocessor_config.json``, ``processor_config.json`` and ``tokenizer.json`` read when
            present), the path of a
            ``config.json``, or a parsed ``config.json`` dict.
        family: the family to read it as (a name, model_type or repo id) when the config's model_type is
            not a registered one; by default the family of the top-level ``model_type``.
        layer_type: for per-layer-type rotary configs, the layer type whose spec to take (see
            :func:`mrope.models.spec_from_config`).

    Returns:
        A :class:`~mrope.models.ModelFamily` (its ``source`` names the folder) that ``model=`` takes
        everywhere, with ``rules``, ``spec`` and ``tokenizer`` from the checkpoint.

    Raises:
        SpecError: a missing or unreadable config, an unknown model type, an unreadable rotary.
        LayoutError: contradictory or malformed values.
    """
    read = _read_source(source)
    config = read.files["config"]
    try:  # the rules are the whole model's (top-level type first), the rotary the text model's
        base = get_family(family) if family is not None else family_of_config(config, outer_first=True)
    except LayoutError as exc:
        raise SpecError(str(exc)) from None
    spec = spec_from_config(config, layer_type=layer_type, family=family)
    collected = _collect_fields(base, read)
    changes = {**{k: value for k, (value, _) in collected.items()}, **_num_axes(base, spec, read.where)}
    try:
        rules = base.rules.replace(**changes)
    except LayoutError as exc:
        raise LayoutError(f"checkpoint {read.where!r}: {exc}") from None
    sources = {k: where for k, (_, where) in collected.items()}
    layer_sets = base.layer_sets
    if base.config_layer_sets is not None:
        try:
            layer_sets = base.config_layer_sets(config_levels(config)[0])
        except LayoutError as exc:
            raise LayoutError(f"checkpoint {read.where!r}: {exc}") from None
    learned = base.learned_rotary
    if learned is not None and not isinstance(source, Mapping) and Path(source).is_dir():
        learned = _learned_values(learned, Path(source), spec)
    return base.replace(
        rules=rules,
        spec=spec,
        source=read.where,
        tokenizer=read.tokenizer,
        rule_sources=sources,
        layer_sets=layer_sets,
        learned_rotary=learned,
    )


def _weights_file(folder: Path, buffer: str) -> Path | None:
    """The safetensors file of ``folder`` that holds ``buffer`` (a shard's, by the index), or ``None``
    where the folder has no weights."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, Mapping) or not isinstance(weight_map.get(buffer), str):
            raise SpecError(f"{str(index)!r}: its weight_map names no file for {buffer!r}")
        return folder / weight_map[buffer]
    single = folder / "model.safetensors"
    return single if single.is_file() else None


def _learned_values(learned: LearnedRotary, folder: Path, spec: RopeSpec) -> LearnedRotary:
    """``learned`` with its tensor read from the folder's weights (as is where it has none).

    Raises:
        SpecError: weights without the tensor, unreadable weights, or a tensor whose shape is not
            ``[n_heads, head_dim / 4, 2]`` for the config's ``head_dim``.
    """
    path = _weights_file(folder, learned.buffer)
    if path is None:
        return learned
    try:
        from safetensors import safe_open
    except ImportError:  # pragma: no cover - safetensors ships with transformers and the dev extras
        raise SpecError(f"{str(path)!r} needs the 'safetensors' package to read {learned.buffer!r}") from None
    try:
        with safe_open(str(path), framework="numpy") as weights:
            names = set(weights.keys())
            tensor = weights.get_tensor(learned.buffer) if learned.buffer in names else None
    except Exception as exc:  # safetensors raises its own SafetensorError (an Exception) on a bad file
        raise SpecError(f"cannot read {learned.buffer!r} from {str(path)!r}: {exc}") from None
    if tensor is None:
        raise SpecError(
            f"{str(path)!r} has no tensor {learned.buffer!r} (the learned frequencies of its rotation)"
        )
    arr = golden_gate_frequencies(tensor, f"{str(path)!r}: {learned.buffer!r}")
    if 4 * arr.shape[1] != spec.head_dim:
        raise SpecError(
            f"{str(path)!r}: {learned.buffer!r} must be [n_heads, head_dim / 4, 2] = [n, {spec.head_dim // 4}, 2] "
            f"for head_dim {spec.head_dim}; got {list(arr.shape)}"
        )
    return learned.with_values(arr, str(path))


def _token_id(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LayoutError(f"{where} must be a token id (an int >= 0); got {value!r}")
    return value


__all__ = ["CHECKPOINT_FIELDS", "from_pretrained"]
