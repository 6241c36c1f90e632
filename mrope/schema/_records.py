"""The requests that hold segments or chat messages: the layout ``{model, segments | messages, rules}``
(``POST /v1/positions``, ``--spec``) and the batch record ``{id, model, rules, segments | messages}``
(``mrope batch``, :mod:`mrope.pipeline`), with chat messages of text, image and video items."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import ConfigDict, Field, model_validator

from ._aliases import retype, retype_segments
from ._fields import INT64_MAX, Int64, ModelName, RouteField, RulesOverrides, StrictModel
from ._formats import read_items, read_message, read_record
from ._image import ImageSegment
from ._request import Segment_, require_model_key
from ._sets import LayerSetsField
from ._state import ConversationStateBody, StateCount
from ._video import VideoSegment


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


MessageItem = Annotated[
    Union[MessageText, ImageSegment, VideoSegment],  # noqa: UP007
    Field(discriminator="type"),
]
"""An item of a chat message: text, or an image or a video as a segment gives it (``{"type": "image",
"image": "cat.jpg"}``, ``{"type": "image_url", "image_url": {"url": ...}}``, ``{"type": "video", "video":
["f0.jpg", "f1.jpg"]}``: :func:`mrope.schema._aliases.media_aliases` reads those keys)."""


def _string_content_schema(schema: dict[str, Any]) -> None:
    """The JSON schema of a message says what it accepts: ``content`` may also be a string (the model
    validator turns one into a text item before the field is read)."""
    content = schema.get("properties", {}).get("content", {})
    content.setdefault("anyOf", []).append({"type": "string"})


class Message(StrictModel):
    """A chat turn: ``role`` and ``content`` (a string, or a list of text, image and video items)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_string_content_schema)

    role: Annotated[str, Field(max_length=256)] | None = None
    content: Annotated[list[MessageItem], Field(max_length=1 << 20)] | None = Field(
        None, description="a list of text, image and video items, or a string (one text item)"
    )

    @model_validator(mode="before")
    @classmethod
    def _string_content(cls, data: Any) -> Any:
        data = read_message(data)
        if isinstance(data, Mapping) and isinstance(data.get("content"), str):
            data = {**data, "content": [{"type": "text", "text": data["content"]}]}
        elif isinstance(data, Mapping) and isinstance(data.get("content"), list):
            items = retype(read_items(data["content"]))
            if items is not data["content"]:
                data = {**data, "content": items}
        return data


def check_content(messages: list[Message] | None) -> None:
    """Chat messages with something in them: an empty list, or messages without one item, make no
    sequence (refused, rather than a record of 0 tokens)."""
    if messages is not None and not any(m.content for m in messages):
        got = "an empty list" if not messages else f"{len(messages)} message(s) without content"
        raise ValueError(f"no content: 'messages' needs at least one text, image or video item; got {got}")


Convention = Annotated[
    Literal["released", "transformers5"],
    Field(
        description="released: the official semantics; transformers5: the family's own transformers 5.24 "
        "get_rope_index"
    ),
]


RecordId = Union[Annotated[str, Field(max_length=4096)], Int64]  # noqa: UP007


class Record(StrictModel):
    """A batch record: ``{id, model, rules, segments | messages}`` (``mrope batch``, the pipeline).

    ``model`` and ``rules`` are used when the job does not set them; exactly one of ``segments`` and
    ``messages``; ``layer_sets`` (the request field) must be the job's own, whose columns hold them. Other top-level keys are a dataset's own columns (a caption, a split, ...) and are not
    read; inside ``segments`` and ``messages`` every unknown field is refused.
    """

    model_config = ConfigDict(extra="ignore", strict=True)

    id: RecordId | None = None
    model: ModelName | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]
    convention: Convention | None = None
    route: RouteField | None = None
    segments: Annotated[list[Segment_], Field(max_length=1 << 20)] | None = None
    messages: Annotated[list[Message], Field(max_length=1 << 20)] | None = None
    layer_sets: LayerSetsField = None

    @model_validator(mode="before")
    @classmethod
    def _retype(cls, data: Any) -> Any:
        return retype_segments(read_record(data))

    @model_validator(mode="after")
    def _one_form(self) -> Record:
        if (self.segments is None) == (self.messages is None):
            raise ValueError(
                "a record needs exactly one of 'segments' and 'messages' (or a format read as messages: "
                "TRL's images + messages, LLaVA's conversations)"
            )
        check_content(self.messages)
        return self


_REQUEST_EXAMPLES = {
    "examples": [
        {
            "model": "qwen2.5-vl",
            "segments": [
                {"type": "text", "tokens": 12},
                {"type": "image", "grid": [1, 28, 28]},
                {"type": "image", "height": 480, "width": 640},
                {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
                {"type": "text", "ids": [151644, 77091, 198]},
            ],
        }
    ]
}


def _request_schema(schema: dict[str, Any]) -> None:
    """The examples, and ``segments``' item schema at the property's top level too (``segments`` may be
    null, meaning absent, so its array schema sits in an ``anyOf``; clients read the union from here)."""
    schema.update(_REQUEST_EXAMPLES)
    prop = schema.get("properties", {}).get("segments", {})
    for branch in prop.get("anyOf", ()):
        if branch.get("type") == "array":
            prop.setdefault("items", branch.get("items"))


class PositionsRequest(StrictModel):
    """A layout: ``{model, segments | messages, rules}``, the body of ``POST /v1/positions`` and of
    ``--spec``. ``messages`` are chat turns as a :class:`Record` holds them, read the same way as by
    ``mrope batch`` and :mod:`mrope.pipeline` (no turn wrapping unless the face renders a chat template)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra=_request_schema)

    model: ModelName
    segments: Annotated[list[Segment_], Field(max_length=1 << 20)] | None = None
    messages: Annotated[list[Message], Field(max_length=1 << 20)] | None = None
    rules: RulesOverrides | None = None  # type: ignore[valid-type]
    convention: Convention | None = None
    route: RouteField | None = None
    state: ConversationStateBody | None = Field(
        None,
        description="continue a conversation: the state a previous response returned (return_state); the "
        "positions are then the new turn's (docs/engine.md)",
    )
    generated: StateCount | None = Field(None, description="with state: tokens decoded since that state")
    return_state: bool | None = Field(
        None, description="add the conversation's state after these segments to the response"
    )
    chat_template: Literal["auto", "none"] | None = Field(
        None,
        description="how messages become text: 'auto' (the default) renders them with the chat template the "
        "face has (the service's: next to MROPE_TOKENIZER) when there is one; 'none' reads the plain turns",
    )
    layer_sets: LayerSetsField = None

    @model_validator(mode="before")
    @classmethod
    def _model_required(cls, data: Any) -> Any:
        return retype_segments(read_record(require_model_key(data)))

    @model_validator(mode="after")
    def _one_form(self) -> PositionsRequest:
        if (self.segments is None) == (self.messages is None):
            raise ValueError("a request needs exactly one of 'segments' and 'messages'")
        check_content(self.messages)
        if self.generated is not None and self.state is None:
            raise ValueError("'generated' counts tokens decoded since a conversation state; it needs 'state'")
        if self.layer_sets is not None and (self.state is not None or self.return_state):
            raise ValueError(
                "layer_sets answers one prompt's position sets; a conversation's state (state, return_state) "
                "holds one set: ask for them in separate requests"
            )
        return self
