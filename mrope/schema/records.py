"""The batch record: ``{id, model, rules, segments | messages}``, with chat messages of text, image and
video items (``mrope batch``, :mod:`mrope.pipeline`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, model_validator

from .fields import INT64_MAX, Int64, ModelName, RulesOverrides, StrictModel
from .request import ImageSegment, Segment_, VideoSegment


class MessageText(StrictModel):
    """Text in a chat message: a string (tokenized) or a token count."""

    type: Literal["text"]
    text: str | None = None
    tokens: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> MessageText:
        if (self.text is None) == (self.tokens is None):
            raise ValueError("a text item takes a 'text' string or a 'tokens' count, exactly one")
        return self


class MessageImage(ImageSegment):
    """An image in a chat message: ``{"type": "image", "image": "cat.jpg"}`` (or ``"path"``)."""

    @model_validator(mode="before")
    @classmethod
    def _image_key(cls, data: Any) -> Any:
        return _rename_media(data, "image")


class MessageVideo(VideoSegment):
    """A video in a chat message: ``{"type": "video", "video": "clip.mp4"}`` (or ``"path"``)."""

    @model_validator(mode="before")
    @classmethod
    def _video_key(cls, data: Any) -> Any:
        return _rename_media(data, "video")


def _rename_media(data: Any, kind: str) -> Any:
    if isinstance(data, Mapping) and data.get(kind) is not None:
        if data.get("path") is not None:
            raise ValueError(f"give the file as {kind!r} or 'path', not both")
        data = {("path" if k == kind else k): v for k, v in data.items()}
    return data


MessageItem = Annotated[Union[MessageText, MessageImage, MessageVideo], Field(discriminator="type")]  # noqa: UP007


class Message(StrictModel):
    """A chat turn: ``role`` and ``content`` (a string, or a list of text, image and video items)."""

    role: Annotated[str, Field(max_length=256)] = ""
    content: Annotated[list[MessageItem], Field(max_length=1 << 20)] = Field(
        default_factory=list, description="a list of text, image and video items, or a string (one text item)"
    )

    @model_validator(mode="before")
    @classmethod
    def _string_content(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and isinstance(data.get("content"), str):
            data = {**data, "content": [{"type": "text", "text": data["content"]}]}
        return data


RecordId = Union[Annotated[str, Field(max_length=4096)], Int64]  # noqa: UP007


class Record(StrictModel):
    """A batch record: ``{id, model, rules, segments | messages}`` (``mrope batch``, the pipeline).

    ``model`` and ``rules`` are used when the job does not set them; exactly one of ``segments`` and
    ``messages``. Other top-level keys are a dataset's own columns (a caption, a split, ...) and are not
    read; inside ``segments`` and ``messages`` every unknown field is refused.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    id: RecordId | None = None
    model: ModelName | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]
    segments: Annotated[list[Segment_], Field(max_length=1 << 20)] | None = None
    messages: Annotated[list[Message], Field(max_length=1 << 20)] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Record:
        if (self.segments is None) == (self.messages is None):
            raise ValueError("a record needs exactly one of 'segments' and 'messages'")
        return self
