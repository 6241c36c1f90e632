"""ModelFamily: everything mrope knows about one released model family, in one value.

A family bundles the facts the rest of the library reads by value, never by name: the layout rules of
the released checkpoints (token ids, how time and space become coordinates, processor sizing, timestamp
text), their rotary spec, the Hugging Face ``model_type`` strings and repo ids it answers to, and the
field overrides that reproduce the family's own transformers 5.24 ``get_rope_index``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, get_args

from mrope._errors import LayoutError
from mrope._layer_sets import SINGLE_SET, LayerSets
from mrope._learned_rotary import LearnedRotary
from mrope._rules import LayoutRules
from mrope._spec import RopeSpec

Convention = Literal["released", "transformers5"]
CONVENTIONS: tuple[str, ...] = get_args(Convention)
"""The conventions a family's rules come in: ``"released"`` (the official semantics) and ``"transformers5"``
(the family's own transformers 5.24 ``get_rope_index``)."""


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True)
class CheckpointChoice:
    """A checkpoint key whose value is a name, not a number: each accepted name -> the value it gives one
    :class:`LayoutRules` field (MiniCPM-V 4.7's ``downsample_mode`` ``"4x"`` -> ``merge_size`` 2).

    Attributes:
        field: the :class:`LayoutRules` field the key sets.
        values: accepted checkpoint value -> that field's value.
        default: what a file that lacks the key stands for (its transformers class default), so that a
            file saying otherwise next to it is a contradiction; ``None``: a missing key says nothing.
        why: said in the error for any other value (a key transformers reads whose other values change
            grids in a way mrope does not compute: refused, never silently ignored).
    """

    field: str
    values: Mapping[Any, Any]
    default: str | None = None
    why: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _frozen(self.values))
        if self.default is not None and self.default not in self.values:
            raise LayoutError(f"CheckpointChoice.default {self.default!r} is not one of {list(self.values)}")

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (CheckpointChoice, (self.field, dict(self.values), self.default, self.why))

    def value_of(self, value: Any, where: str) -> Any:
        """The field value ``value`` (read at ``where``, named in the error) stands for.

        Raises:
            LayoutError: a value that is not one of the accepted names.
        """
        accepted = [v for v in self.values if type(v) is type(value) and v == value]  # True is not 1
        if not accepted:
            why = f" ({self.why})" if self.why else ""
            raise LayoutError(f"{where} must be one of {list(self.values)}; got {value!r}{why}")
        return self.values[accepted[0]]


def video_processor_switches(
    frame_sampling: str,
    video_bounds: str,
    *,
    sampling_why: str = "without sampling every frame is kept",
) -> dict[str, CheckpointChoice]:
    """A transformers video processor's ``do_sample_frames`` and ``do_resize`` keys: ``true`` is the rule
    mrope computes (``frame_sampling`` / ``video_bounds``); ``false`` changes grids (every frame kept,
    frames kept at their own size) and is refused."""
    return {
        "video:do_sample_frames": CheckpointChoice(
            "frame_sampling", {True: frame_sampling}, why=sampling_why
        ),
        "video:do_resize": CheckpointChoice(
            "video_bounds", {True: video_bounds}, why="without resizing the frames keep their own size"
        ),
    }


@dataclass(frozen=True)
class ModelFamily:
    """One model family (see the module docstring).

    Attributes:
        name: canonical name, e.g. ``"qwen2.5-vl"``.
        model_types: Hugging Face ``model_type`` strings it answers to (top-level and text-config ones).
        aliases: repo ids such as ``"Qwen/Qwen2.5-VL-7B-Instruct"`` (matched case-insensitively).
        rules: the released checkpoints' :class:`LayoutRules`.
        spec: the released checkpoints' :class:`RopeSpec`.
        transformers5: :class:`LayoutRules` field overrides (pad value included) that reproduce the
            family's own transformers 5.24 ``get_rope_index``; applied by ``convention="transformers5"``.
        exactness: one line for the family table (docs/families.md): what is exact against what.
        config_ids: ``config.json`` token-id keys -> the :class:`LayoutRules` field (or fields) they set
            (read by :func:`mrope.from_pretrained`).
        checkpoint_fields: overrides of :data:`mrope._checkpoint.CHECKPOINT_FIELDS`, the table of which
            checkpoint file key sets which :class:`LayoutRules` field(s) (``"video:size.longest_edge"`` ->
            ``"video_total_pixels"`` where the video processor's bound is the whole clip's budget, as
            Qwen3-VL's is); ``None`` ignores a key the family's processor uses otherwise; a
            :class:`CheckpointChoice` reads a named value (MiniCPM-V 4.7's ``downsample_mode``).
        tokenizer: the checkpoint's tokenizer (``tokenizer.json``), used for timestamp text when a call
            passes none; ``None`` for registry families.
        processor_defaults: ``{"image" | "video": {LayoutRules field: value}}``: what a processor config
            file that is present but sets none of that field's keys stands for, where the processor's class
            defaults differ from the registry's rules (GLM-Image, whose registry values are the vision
            config's); ``{}``: the registry's rules.
        config_partial_rotary_factor: the ``partial_rotary_factor`` transformers 5.24 uses for a text config
            that gives none: its config class's default where the class sets one (Qwen3.5's 0.25, GLM-4.5V's
            0.5), else its rotary's own 1.0 (GLM-4.1V's ``glm4v_text`` rotates whole heads, though the
            released checkpoints say 0.5).
        config_section_axes: the axis (0 = t, 1 = h, 2 = w, ...) of each entry of the config's
            ``mrope_section``, when the config orders them otherwise than :class:`RopeSpec` (ERNIE-4.5-VL
            writes (h, w, t): ``(1, 2, 0)``); ``None``: the same order.
        packed_input: how the family's transformers 5.24 model keeps packed samples apart (the kinds of
            :data:`mrope.packing.PACKED_INPUT`): ``"text-row"`` (a text row of the position ids that
            restarts per sample, no attention mask, no cache), ``"text-row+fla"`` (that, and its
            linear-attention layers need flash-linear-attention), ``"none"`` (it takes no packed input).
        source: where the values come from (a checkpoint folder for :func:`mrope.from_pretrained`).
        rule_sources: the :class:`LayoutRules` fields a checkpoint set -> the file and key each was read
            from (``"preprocessor_config.json: min_pixels"``); empty for a registry family.
        layer_sets: the named position sets (overrides of ``rules``) and the set each decoder layer
            rotates by (:class:`mrope.LayerSets`); one set, the family's own, by default.
        config_layer_sets: where a checkpoint's text config says which layers rotate (EXAONE 4.5's
            ``layer_types``), the family's reader of that config (a dict) into its :class:`mrope.LayerSets`,
            called by :func:`mrope.from_pretrained`; ``None``: the layer sets are the family's own.
        learned_rotary: where part of the rotation is a checkpoint tensor, not a formula (Falcon-OCR's
            ``freqs_cis_golden``): which buffer and which :mod:`mrope.ops` table builder, and its values
            once :func:`mrope.from_pretrained` read them from ``model.safetensors``. ``spec`` then holds
            only the formula half; every face that rotates applies both or refuses. ``None``: ``spec``
            is the whole rotation.
    """

    name: str
    model_types: tuple[str, ...]
    aliases: tuple[str, ...]
    rules: LayoutRules
    spec: RopeSpec
    transformers5: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=True)
    exactness: str = ""
    config_ids: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict, hash=False, compare=True)
    checkpoint_fields: Mapping[str, str | tuple[str, ...] | CheckpointChoice | None] = field(
        default_factory=dict, hash=False, compare=True
    )
    processor_defaults: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict, hash=False, compare=True
    )
    config_partial_rotary_factor: float = 1.0
    config_section_axes: tuple[int, ...] | None = None
    packed_input: str = "text-row"
    source: str = "registry"
    rule_sources: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)
    tokenizer: Any = field(default=None, hash=False, compare=False, repr=False)
    layer_sets: LayerSets = field(default=SINGLE_SET, hash=False, compare=True)
    config_layer_sets: Callable[[Mapping[str, Any]], LayerSets] | None = field(
        default=None, hash=False, compare=True
    )
    learned_rotary: LearnedRotary | None = None
    _transformers5_rules: LayoutRules | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "model_types", tuple(self.model_types))
        object.__setattr__(self, "aliases", tuple(self.aliases))
        object.__setattr__(self, "transformers5", _frozen(self.transformers5))
        object.__setattr__(self, "config_ids", _frozen(self.config_ids))
        object.__setattr__(self, "checkpoint_fields", _frozen(self.checkpoint_fields))
        object.__setattr__(self, "rule_sources", _frozen(self.rule_sources))
        object.__setattr__(
            self,
            "processor_defaults",
            _frozen({kind: _frozen(values) for kind, values in self.processor_defaults.items()}),
        )
        if not isinstance(self.rules, LayoutRules):
            raise LayoutError(f"ModelFamily.rules must be a LayoutRules; got {type(self.rules).__name__}")
        if not isinstance(self.spec, RopeSpec):
            raise LayoutError(f"ModelFamily.spec must be a RopeSpec; got {type(self.spec).__name__}")
        if self.rules.name != self.name:  # a family's rules carry its name, written once: the family's
            object.__setattr__(self, "rules", self.rules.replace(name=self.name))
        if self.learned_rotary is not None and not isinstance(self.learned_rotary, LearnedRotary):
            raise LayoutError(
                f"ModelFamily.learned_rotary must be a LearnedRotary or None; got {type(self.learned_rotary).__name__}"
            )
        if not isinstance(self.layer_sets, LayerSets):
            raise LayoutError(
                f"ModelFamily.layer_sets must be a LayerSets; got {type(self.layer_sets).__name__}"
            )
        for overrides in self.layer_sets.sets.values():
            self.rules.replace(**overrides)
        # unknown or invalid override fields fail here, once
        object.__setattr__(self, "_transformers5_rules", self.rules.replace(**self.transformers5))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickle as the constructor call (the read-only mappings do not pickle themselves), so a
        family, or what :func:`mrope.from_pretrained` returns, travels to Ray or ``num_proc`` workers."""
        args = {f.name: getattr(self, f.name) for f in fields(self) if f.init}
        for name, value in args.items():
            if isinstance(value, MappingProxyType):
                args[name] = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in value.items()}
        return (_rebuild, (args,))

    def rules_for(self, convention: str = "released") -> LayoutRules:
        """The family's rules under a convention: ``"released"`` (the official semantics) or
        ``"transformers5"`` (its own transformers 5.24 ``get_rope_index``)."""
        check_convention(convention)
        if convention == "transformers5":
            assert self._transformers5_rules is not None
            return self._transformers5_rules
        return self.rules

    def replace(self, **changes: Any) -> ModelFamily:
        """A copy with some attributes changed."""
        return replace(self, **changes)


def _rebuild(args: dict[str, Any]) -> ModelFamily:
    return ModelFamily(**args)


def check_convention(convention: str) -> None:
    """Refuse a convention that is not one of :data:`CONVENTIONS` (a :class:`LayoutError`)."""
    if convention not in CONVENTIONS:
        raise LayoutError(f"convention must be one of {list(CONVENTIONS)}; got {convention!r}")
