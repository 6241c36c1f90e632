"""JSON -> validated request models, every pydantic error raised as one :class:`RequestError` line."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError, model_validator

from ._aliases import retype_segments
from ._errors import RequestError, describe_validation_errors
from ._fields import StrictModel
from ._image import ImageGrid, ImagePath, ImageSize
from ._records import PositionsRequest, Record
from ._request import AudioSegment, Segment_, TextSegment
from ._sets import LayerSetsBody, LayerSetsField
from ._video import VideoFrames, VideoGrid, VideoPath


def _validate(model: type[BaseModel], data: Any, what: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, _ = describe_validation_errors(exc.errors())
        raise RequestError(f"{what}: {message}" if what else message) from None


def parse_request(data: Any) -> PositionsRequest:
    """A ``{model, segments, rules}`` layout (raises :class:`RequestError`)."""
    if not isinstance(data, Mapping):
        raise RequestError(
            f"a request must be a JSON object with model and segments; got {type(data).__name__}"
        )
    return _validate(PositionsRequest, data, "")


def parse_record(data: Any) -> Record:
    """A batch record (raises :class:`RequestError`)."""
    if not isinstance(data, Mapping):
        raise RequestError(f"a record must be an object; got {type(data).__name__}")
    return _validate(Record, data, "")


def parse_segments(
    items: Any,
) -> list[
    TextSegment | ImageGrid | ImageSize | ImagePath | VideoGrid | VideoPath | VideoFrames | AudioSegment
]:
    """A list of JSON segments (raises :class:`RequestError`)."""
    if not isinstance(items, list):
        raise RequestError(f"segments must be a list of segment objects; got {type(items).__name__}")
    return list(_validate(_SegmentList, {"segments": items}, "").segments)


class _SegmentList(StrictModel):
    segments: list[Segment_]

    @model_validator(mode="before")
    @classmethod
    def _forms(cls, data: Any) -> Any:
        return retype_segments(data)


class _LayerSetsOnly(StrictModel):
    layer_sets: LayerSetsField = None


def parse_layer_sets(value: Any) -> LayerSetsBody | None:
    """A request's ``layer_sets`` value alone (a face that reads the rest of its request another way:
    ``mrope positions --spec``), refused in the words of :func:`parse_request` (raises
    :class:`RequestError`)."""
    return _validate(_LayerSetsOnly, {"layer_sets": value}, "").layer_sets
