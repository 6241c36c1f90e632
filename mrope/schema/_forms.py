"""What every form of an image or a video shares: a model per form holding only its own fields, the
union of a kind's forms (chosen by which key is present), the sizing keys, keep masks and OpenAI's
``{url}``.

A key of another form of the same kind is refused with a message that says which form it goes with
(a table per form, :attr:`Form.foreign`), before the form's own fields are read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Union

from pydantic import (
    BeforeValidator,
    Discriminator,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    Tag,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ._aliases import media_aliases
from ._errors import form_tag
from ._fields import GRID_DIM_MAX, MediaPath, StrictModel

QUIET_DEFAULTS: dict[str, Any] = {"generate": False}
"""Keys of one form that another form reads as absent at this value (``"generate": false`` is every
image's default, so a path may carry it)."""


class Form(StrictModel):
    """One form of a media segment (an image by grid, a video by path, ...).

    Class attributes:
        form: the form's name in messages and in its union tag (``grid``, ``size``, ``path``, ``frames``).
        keys: the keys that say a segment is given in this form (any one of them present).
        foreign: ``(keys, message)`` pairs: keys of the kind's other forms, refused with ``message``
            (``{keys}`` the given ones joined, ``{verb}`` ``goes`` or ``go``), checked in order by the
            union (:func:`form_union`) before the form's model reads the segment.
        own: the form's field names.
    """

    form: ClassVar[str]
    keys: ClassVar[tuple[str, ...]]
    foreign: ClassVar[tuple[tuple[tuple[str, ...], str], ...]] = ()
    own: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.own = frozenset(cls.model_fields)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = super().__get_pydantic_json_schema__(core_schema, handler)
        names = [k for k in cls.keys if k in ALIAS_KEYS]
        if names:  # the file under its own key or one users copy: one of them, whichever
            body = handler.resolve_ref_schema(schema)
            body["required"] = [k for k in body.get("required", ()) if k != cls.keys[0]]
            body["anyOf"] = [{"required": [k]} for k in (cls.keys[0], *names)]
        return schema

    @classmethod
    def refuse_foreign(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """``data`` (a JSON object of this form) without the keys of other forms that read as absent
        (:data:`QUIET_DEFAULTS`); a key of another form given is refused, with its :attr:`foreign` message."""
        if cls.own.issuperset(data.keys()):
            return data
        for keys, message in cls.foreign:
            given = [k for k in keys if data.get(k) is not None and data[k] is not QUIET_DEFAULTS.get(k)]
            if given:
                verb = "goes" if len(given) == 1 else "go"
                raise ValueError(message.format(keys=", ".join(given), verb=verb))
        quiet = [k for k in QUIET_DEFAULTS if k not in cls.own and k in data]
        return {k: v for k, v in data.items() if k not in quiet} if quiet else data


class SchemaName:
    """Names a type's schema: the JSON schema holds it once, under ``name``, and refers to it (so a union
    of forms is one component, and a union told apart by ``type`` maps ``image`` to it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return {**handler(source), "ref": self.name}  # type: ignore[typeddict-item]


class FormChooser:
    """Which form of a ``kind`` segment a JSON object is given in: the keys users copy read as this
    schema's (:func:`~mrope.schema._aliases.media_aliases`), then exactly one form named by its keys (else
    ``refuse(the forms named)`` is the error), and that form's :attr:`Form.foreign` keys refused."""

    def __init__(self, kind: str, forms: tuple[type[Form], ...], refuse: Callable[[list[str]], str]) -> None:
        self.kind = kind
        self.forms = forms
        self.refuse = refuse
        self.known = frozenset().union(*(f.own for f in forms))
        self.by_key = {k: f for f in forms for k in f.keys}
        self.tags = {f: form_tag(kind, f.form) for f in forms}

    def check(self, data: Any) -> Any:
        """``data`` ready for its form's model (the union's before-validator)."""
        if type(data) is not dict and not isinstance(data, Mapping):
            return data
        present = data.keys() & self.by_key.keys()
        if len(present) == 1 and data.get("type") == self.kind:  # one key names the form, none renamed
            (key,) = present
            value = data[key]
            if value is not None and key not in ALIAS_KEYS and (key != "path" or type(value) is str):
                return self.by_key[key].refuse_foreign(data)
        return self._renamed(media_aliases(data, self.kind))

    def _renamed(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        present = [k for k in data.keys() & self.by_key.keys() if data[k] is not None]
        left = [k for k in ALIAS_KEYS if k in present]
        if left:  # media_aliases leaves a key the user wrote only when its value is not a file
            raise ValueError(_not_a_file(left[0], self.kind, data[left[0]]))
        named = {self.by_key[k] for k in present}
        if len(named) == 1:
            return named.pop().refuse_foreign(data)
        unknown = [k for k in data if k not in self.known]
        if unknown:  # reported first, as a model reports unknown fields before its own checks
            raise ValueError(f"unknown field {unknown[0]!r}")
        raise ValueError(self.refuse([f.form for f in self.forms if f in named]))

    def tag(self, data: Any) -> str | None:
        """The union tag of ``data``'s form (the union's callable discriminator)."""
        if type(data) is dict or isinstance(data, Mapping):
            for k in data:
                form = self.by_key.get(k)
                if form is not None and data[k] is not None:
                    return self.tags[form]
            return None
        return self.tags.get(type(data))


def form_union(
    kind: str, forms: tuple[type[Form], ...], refuse: Callable[[list[str]], str], name: str
) -> Any:
    """The type of a ``kind`` segment given in one of ``forms`` (:class:`FormChooser` picks it). Its
    JSON schema is the component ``name``, a ``oneOf`` of the forms."""
    chooser = FormChooser(kind, forms, refuse)
    members = tuple(Annotated[f, Tag(chooser.tags[f])] for f in forms)
    union = Union[members]  # noqa: UP007 - built from a runtime tuple
    return Annotated[union, Discriminator(chooser.tag), BeforeValidator(chooser.check), SchemaName(name)]


ALIAS_KEYS = ("image", "image_url", "video", "video_url", "url")
"""The keys users copy from model cards for a media file (:func:`~mrope.schema._aliases.media_aliases`
reads them as ``path`` or ``frames``); the path forms list them as fields, so the wire schema shows them."""


def _not_a_file(key: str, kind: str, value: Any) -> str:
    forms = "a path or URL string" + (" or OpenAI's {url}" if key.endswith("_url") else "")
    if kind == "video":
        forms += " or a list of frame files"
    return f"{key} names the {kind} file: {forms}; got {type(value).__name__}"


def check_sizing(seg: Any) -> None:
    """The qwen-vl-utils sizing keys of an image or a video form that reads a file or a size:
    ``resized_height`` with ``resized_width``, ``min_pixels`` at most ``max_pixels``."""
    if (seg.resized_height is None) != (seg.resized_width is None):
        raise ValueError("resized_height and resized_width go together")
    if seg.min_pixels is not None and seg.max_pixels is not None and seg.min_pixels > seg.max_pixels:
        raise ValueError(f"min_pixels {seg.min_pixels} is above max_pixels {seg.max_pixels}")


SIZING_KEYS = ("min_pixels", "max_pixels", "total_pixels", "resized_height", "resized_width")
"""The qwen-vl-utils keys that size a file (or a pixel size): never with a grid."""


def already_sized(what: str) -> tuple[tuple[str, ...], str]:
    """The :attr:`Form.foreign` entry of a grid form: the sizing keys, refused."""
    return SIZING_KEYS, "{keys}: " + what + " is already sized; these keys size a file (or a size)"


class MediaUrl(StrictModel):
    """OpenAI's ``{"url": ..., "detail": ...}`` under ``image_url`` / ``video_url`` (``detail`` not read)."""

    url: MediaPath
    detail: Annotated[str, Field(max_length=64)] | None = None


MAX_KEEP_RUNS = 1 << 22
"""Most runs a run-length ``keep`` mask may list (each at least one token but the first)."""
MAX_KEEP_BITS_CHARS = 1 << 22
"""Most base64 characters of a bitset ``keep`` mask (24 Mi tokens)."""


class KeepMask(StrictModel):
    """A pruning mask over a segment's language-model vision tokens (docs/pruning.md), compact: ``runs``
    (alternating kept / dropped run lengths, kept first: ``[3, 2, 4]`` keeps 3, drops 2, keeps 4; a first 0
    when the first token is dropped) or ``bits`` (base64 of the mask packed 8 tokens a byte, the first
    token in the highest bit, as numpy's ``packbits``) with its ``length``. Its length must be the
    segment's token count; it is checked against the segment's grid before it is decoded."""

    runs: (
        Annotated[list[Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]], Field(max_length=MAX_KEEP_RUNS)] | None
    ) = None
    bits: Annotated[str, Field(max_length=MAX_KEEP_BITS_CHARS)] | None = None
    length: Annotated[int, Field(ge=0, le=6 * MAX_KEEP_BITS_CHARS)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> KeepMask:
        if (self.runs is None) == (self.bits is None):
            raise ValueError("a keep mask takes runs or bits, exactly one of them")
        if (self.bits is None) != (self.length is None):
            raise ValueError("a keep mask's bits go with its length (and runs without one)")
        if self.runs is not None and any(n == 0 for n in self.runs[1:]):
            raise ValueError("a keep mask's runs after the first must be >= 1")
        return self

    @property
    def size(self) -> int:
        """How many tokens the mask covers."""
        return sum(self.runs) if self.runs is not None else int(self.length or 0)
