"""The request models: text and audio segments, the union of every segment (images and videos are
:mod:`~mrope.schema._image`'s and :mod:`~mrope.schema._video`'s), and the non-file fields of an upload.

Unknown fields are refused (a typo is an error, never a silently ignored option), ``null`` means absent,
and types are strict (``"3"`` or ``3.0`` is not an int). These models check the shape of a segment; the
library checks everything about coordinates (grids divisible by the merge size, tiles, frame times, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from ._fields import (
    GRID_DIM_MAX,
    INT64_MAX,
    AudioSeconds,
    Count,
    Fps,
    Int64,
    MediaPath,
    ModelName,
    RouteField,
    RulesOverrides,
    StrictModel,
    model_names,
)
from ._image import ImageSegment
from ._sets import LayerSetsField
from ._video import VideoSegment


class TextSegment(StrictModel):
    """A run of text: a token count, token ids, or a string (needs a tokenizer)."""

    type: Literal["text"]
    tokens: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None
    ids: list[Int64] | None = None
    text: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TextSegment:
        if (self.tokens is not None) + (self.ids is not None) + (self.text is not None) == 1:
            return self
        given = [k for k in ("tokens", "ids", "text") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a text segment takes exactly one of tokens, ids, text; got {given or 'none'}")
        return self


class AudioSegment(StrictModel):
    """An audio clip (omni models): its ``tokens``, its duration in ``seconds``, its length in
    ``mel_frames``, or a media ``path`` (an audio file, or a video's audio track) read from its
    container."""

    type: Literal["audio"]
    tokens: Count | None = None
    seconds: AudioSeconds | None = None
    mel_frames: Count | None = None
    path: MediaPath | None = None
    wrap: bool = True

    @model_validator(mode="after")
    def _one_form(self) -> AudioSegment:
        forms = [k for k in ("tokens", "seconds", "mel_frames", "path") if getattr(self, k) is not None]
        if len(forms) != 1:
            raise ValueError(
                f"an audio segment takes exactly one of tokens, seconds, mel_frames, path; got {forms or 'none'}"
            )
        return self


Segment_ = Annotated[
    Union[TextSegment, ImageSegment, VideoSegment, AudioSegment],  # noqa: UP007
    Field(discriminator="type"),
]
"""One JSON segment (the union, told apart by ``type``; an image or a video then by its form)."""


def require_model_key(data: Any) -> Any:
    """No silent model: a request without one is refused with the names (not pydantic's 'Field required')."""
    if isinstance(data, Mapping) and data.get("model") is None:
        raise ValueError(f"no model given; name one of {', '.join(model_names())}")
    return data


# ------------------------------------------------------------------------------------------- upload


class FileItem(StrictModel):
    """A place for uploaded file ``index`` (0-based, in the order the ``files`` parts were sent)."""

    type: Literal["file"]
    index: Annotated[int, Field(ge=0, le=GRID_DIM_MAX)]
    wrap: bool = True
    fps: Fps | None = Field(None, description="video sampling rate (default: the model's rules)")
    nframes: Count | None = Field(None, description="video frames to sample (instead of fps)")
    use_audio_in_video: bool = Field(False, description="omni models: a video's own audio track")


LayoutItem = Annotated[Union[TextSegment, FileItem], Field(discriminator="type")]  # noqa: UP007


class UploadFields(StrictModel):
    """The non-file parts of an upload, after JSON decoding of ``layout`` and ``rules``."""

    model: ModelName
    layout: list[LayoutItem] | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]
    route: RouteField | None = None
    layer_sets: LayerSetsField = None

    @model_validator(mode="before")
    @classmethod
    def _model_required(cls, data: Any) -> Any:
        return require_model_key(data)
