"""The field types of a request: bounded numbers and times, model names, rule overrides, a strict base.

Numbers are bounded to what the library can hold (int64 token ids, finite floats, physically plausible
rates and times); a model name is checked against the family registry (:mod:`mrope.models`) and an alias
becomes the canonical name; rule overrides are generated from :class:`mrope.LayoutRules`, so they follow it.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Annotated, Any, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    create_model,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from mrope import models as registry
from mrope._caches import cached
from mrope._errors import MRopeError
from mrope._route import RouteName
from mrope._rule_checks import RULE_BOUNDS
from mrope._rules import LayoutRules
from mrope._timestamp_format import check_timestamp_format
from mrope.media._audio import MAX_AUDIO_SECONDS
from mrope.media._memory import in_memory

from ._errors import RequestError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
GRID_DIM_MAX = 2**31 - 1

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
GridDim = Annotated[int, Field(ge=1, le=GRID_DIM_MAX)]
Grid = Annotated[list[GridDim], Field(min_length=3, max_length=3, description="encoder patch grid [t, h, w]")]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# Time values are bounded to physically plausible ranges: with the token and segment caps they keep
# every position far inside int64 (the library computes t offsets in int64).
MIN_FPS, MAX_FPS = RULE_BOUNDS["fps"]
MAX_SECONDS_PER_PATCH = 3600.0
MAX_FRAME_TIME = 1e7
MAX_TOKENS_PER_SECOND = RULE_BOUNDS["tokens_per_second"][1]
MAX_PATH_CHARS = 1 << 20  # a data: URI of a small image fits
Fps = Annotated[float, Field(ge=MIN_FPS, le=MAX_FPS, allow_inf_nan=False, description="frames per second")]
SecondsPerPatch = Annotated[float, Field(gt=0, le=MAX_SECONDS_PER_PATCH, allow_inf_nan=False)]
FrameTime = Annotated[float, Field(ge=0, le=MAX_FRAME_TIME, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=1, le=GRID_DIM_MAX)]
MediaPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_PATH_CHARS,
        description="a media file: a local path, an s3:// gs:// https:// file:// URL or a data: URI "
        "(read only by faces that allow it; the service reads URLs of allowlisted hosts only)",
    ),
]
_RULE_TYPES: dict[str, Any] = {"fps": Fps}


def _or_in_memory(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    return value if in_memory(value) else handler(value)


MediaSource = Annotated[MediaPath, WrapValidator(_or_in_memory)]
"""A media file: a :data:`MediaPath`, or (from Python only: JSON holds none) the file in memory, as
:func:`mrope.media._memory.in_memory` says (``bytes``, a PIL image, a numpy image or frames). Its JSON
schema is :data:`MediaPath`'s."""


AudioSeconds = Annotated[float, Field(gt=0, le=MAX_AUDIO_SECONDS, allow_inf_nan=False)]
"""An audio clip's duration in seconds, at most what :func:`mrope.media.load_audio` accepts."""


# ------------------------------------------------------------------------------------------- models


def model_names() -> tuple[str, ...]:
    """The canonical model names a request may give: the registry's family names, then its research
    schemes'."""
    return registry.names() + registry.SCHEME_NAMES


# a registry lookup per request otherwise; unknown names are not kept
@cached("schema.model_names", maxsize=256)
def canonical_model(name: str) -> str:
    """``name`` (a model name, a Hugging Face ``model_type`` or a repo id) -> the canonical name.

    Raises:
        ValueError: an unknown name; the message lists the known ones (pydantic reports it as a field
            error, the faces as :class:`RequestError`).
    """
    try:
        return str(registry.get_family(name).name)
    except MRopeError as exc:
        raise ValueError(str(exc)) from None


RouteField = Annotated[
    RouteName,
    Field(
        description="whose pipeline reads the media: processor (the checkpoint's transformers processors, the "
        "default), qwen-vl-utils (the model-card recipe: no EXIF transpose, sample_fps for frame lists) or vllm"
    ),
]
"""A request's ``route`` (:mod:`mrope.models._routes`)."""

ModelName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        description="the model: " + ", ".join(model_names()) + " (or a Hugging Face model_type / repo id)",
        examples=list(model_names()),
    ),
    AfterValidator(canonical_model),
]
"""A model name, validated against the library's list (aliases resolved to the canonical name)."""


def require_model(model: Any, where: str = "", missing: str = "no model given") -> str:
    """A face's model, required: ``None`` is an error listing the names (there is no default model).

    Returns the canonical name (aliases resolved), or a :class:`mrope.models.ModelFamily` as given (what
    :func:`mrope.from_pretrained` returns); ``where`` prefixes other errors, ``missing`` is the
    start of the message when no model came.
    """
    if model is None or model == "":
        raise RequestError(f"{missing}; name one of {', '.join(model_names())}")
    if isinstance(model, registry.ModelFamily):  # a registered family or mrope.from_pretrained(<checkpoint>)
        return model  # type: ignore[return-value]
    prefix = f"{where}: " if where else ""
    if not isinstance(model, str):
        raise RequestError(f"{prefix}model must be a model name string; got {model!r}")
    try:
        return canonical_model(model)
    except ValueError as exc:
        raise RequestError(f"{prefix}{exc}") from None


# ------------------------------------------------------------------------------------------ strict base


_SCHEMA_NOTES = ("default", "description", "title", "examples")


class StrictModel(BaseModel):
    """Strict, closed, and ``null`` means absent (its JSON schema lets every optional field be null)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        body = handler.resolve_ref_schema(schema)
        required = set(body.get("required", ()))
        props = body.get("properties", {})
        for name, prop in props.items():
            if name in required or any(b.get("type") == "null" for b in prop.get("anyOf", ())):
                continue
            notes = {k: prop[k] for k in _SCHEMA_NOTES if k in prop}
            plain = {k: v for k, v in prop.items() if k not in notes}
            props[name] = {"anyOf": [plain, {"type": "null"}], **notes}
        return schema

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_absent(cls, data: Any) -> Any:
        if type(data) is dict:  # the JSON case: copied only when a value is null
            try:
                has_null = None in data.values()
            except ValueError:  # a numpy value (media in memory) compared by ==: no truth value
                has_null = any(v is None for v in data.values())
            return {k: v for k, v in data.items() if v is not None} if has_null else data
        if isinstance(data, Mapping):
            return {k: v for k, v in data.items() if v is not None}
        return data


# --------------------------------------------------------------------------------------------- rules


def _override_type(hint: Any, bounds: tuple[float, float] | None = None) -> Any:
    """The request type of one LayoutRules field: int64 and finite floats, at most the rule's upper
    bound (:data:`mrope._rule_checks.RULE_BOUNDS`; the lower ones are the library's to refuse, as
    ``layout_error``), short strings."""
    if hint is int:
        return Int64 if bounds is None else Annotated[int, Field(ge=INT64_MIN, le=bounds[1])]
    if hint is float:
        return FiniteFloat if bounds is None else Annotated[float, Field(le=bounds[1], allow_inf_nan=False)]
    if hint is str:
        return Annotated[str, Field(max_length=64)]
    if typing.get_origin(hint) is Union or type(hint).__name__ == "UnionType":
        args = [
            _override_type(a, bounds) if a is not type(None) else type(None) for a in typing.get_args(hint)
        ]
        return Union[tuple(args)]  # noqa: UP007 - built from a runtime list
    return hint


def _rules_model() -> type[BaseModel]:
    hints = typing.get_type_hints(LayoutRules)
    spec: dict[str, Any] = {}
    for f in dataclass_fields(LayoutRules):
        hint = _RULE_TYPES.get(f.name) or _override_type(hints[f.name], RULE_BOUNDS.get(f.name))
        if f.name == "timestamp_format":
            hint = Annotated[hint, AfterValidator(check_timestamp_format)]
        spec[f.name] = (Union[hint, None], None)  # noqa: UP007
    return create_model(  # type: ignore[call-overload, no-any-return]
        "RulesOverrides",
        __config__=ConfigDict(
            extra="forbid",
            strict=True,
            json_schema_extra={"description": "Overrides of the model's LayoutRules (null: keep)."},
        ),
        **spec,
    )


RulesOverrides = _rules_model()
"""Every :class:`mrope.LayoutRules` field, optional: generated, so it follows the library."""


def rules_dict(rules: BaseModel | None) -> dict[str, Any] | None:
    """The overrides a client set (``null`` and absent fields keep the model's value)."""
    if rules is None:
        return None
    return rules.model_dump(exclude_none=True) or None
