"""The dataset formats people have, read as this schema's ``messages``: TRL's vision format, LLaVA /
ShareGPT conversations, Hugging Face ``Image`` feature values, OpenAI's chat and Responses API content
items, and content items without a ``type``.

Each reader follows its format's own source:

- **TRL** (trl 1.16.0, ``trl/data_utils.py`` ``prepare_multimodal_messages``, line 32, as
  ``DataCollatorForVisionLanguageModeling`` calls it, ``trl/trainer/sft_trainer.py`` lines 368-435): a
  record holds ``images`` (a list; a single ``image`` is ``[image]``) and ``messages`` (or ``prompt`` and
  ``completion``). Every ``{"type": "image"}`` item without an image is a placeholder, filled from
  ``images`` in order; the number of placeholders must equal the number of images. When the first user
  message's ``content`` is a string, all the images go before its text. ``tool`` messages hold no
  placeholders.
- **LLaVA / ShareGPT** (LLaVA ``llava/train/train.py``: ``conversations`` of ``{"from", "value"}`` turns,
  ``from`` ``human`` / ``gpt``, an ``image`` file under the record, ``<image>`` in the text, LLaVA's
  ``DEFAULT_IMAGE_TOKEN``; LLaMA-Factory ``src/llamafactory/data/converter.py``
  ``SharegptDatasetConverter``: the ``system`` tag, ``images`` / ``videos`` lists, ``<video>`` tags): each
  ``<image>`` / ``<video>`` tag is replaced, where it stands, by the next image / video (as LLaMA-Factory's
  ``mm_plugin`` replaces its placeholders; LLaVA's own training moves the tag to the start of its turn
  instead), and the number of tags must equal the number of files.
- **Hugging Face ``Image`` feature values** (``datasets`` ``features/image.py``): a ``{"bytes", "path"}``
  dict is its bytes when it has them, else its path; decoded PIL images are images in memory.
- **OpenAI**: chat content items ``{"type": "image_url", "image_url": {"url": ...}}`` (a ``data:`` URL
  or an ``http(s)`` URL; :mod:`~mrope.schema._aliases` reads them); the Responses API's
  ``{"type": "input_text" | "output_text", "text": ...}`` and ``{"type": "input_image", "image_url":
  "..."}`` items and its ``{"type": "message", "role", "content"}`` messages (API reference,
  "Create a model response", ``input`` item list).
- **Items without a ``type``**: the Qwen2-VL chat template (``chat_template.json``: an item is an image
  when ``'image' in content or 'image_url' in content``, a video when ``'video' in content``) and
  qwen-vl-utils 0.0.14 (``vision_process.py`` ``extract_vision_info``: the ``image`` / ``image_url`` /
  ``video`` keys) infer the kind from the key present: one of ``image`` (``image_url``), ``video``
  (``video_url``), ``text``, ``audio``.

The readers rewrite a record's JSON before the models read it, so a record in any of these formats is
validated, and refused, by the same models as a ``messages`` record; a message names the format it
expected and what came.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRL = "TRL's vision format"
LLAVA = "the LLaVA / ShareGPT format"

IMAGE_TAG = "<image>"
"""LLaVA's ``DEFAULT_IMAGE_TOKEN`` (``llava/constants.py``), LLaMA-Factory's ``IMAGE_PLACEHOLDER``."""
VIDEO_TAG = "<video>"
"""LLaMA-Factory's ``VIDEO_PLACEHOLDER`` (``src/llamafactory/extras/constants.py``)."""
_TAGS = re.compile(f"({re.escape(IMAGE_TAG)}|{re.escape(VIDEO_TAG)})")

SHAREGPT_ROLES = {
    "human": "user",
    "gpt": "assistant",
    "system": "system",
    "user": "user",
    "assistant": "assistant",
}
"""ShareGPT's ``from`` values -> chat roles (LLaMA-Factory's default tags; ``user`` / ``assistant`` as
some exports write them)."""

_MEDIA_KEYS = ("image", "image_url", "url", "path", "grid", "height", "width", "frames")
"""Keys that give an image item its file or size: an ``image`` item with none of them is a placeholder."""

_KINDS = {"image": "image", "image_url": "image", "video": "video", "video_url": "video", "text": "text"}
"""The keys an item without ``type`` is told apart by (the Qwen2-VL chat template, qwen-vl-utils)."""

_RESPONSES_TEXT = ("input_text", "output_text")
_RESPONSES_DROPPED = ("annotations", "logprobs", "detail")
"""Keys of Responses API items that say nothing about positions (citations, log-probs, OpenAI's image
detail level)."""


def _given(item: Mapping[str, Any], key: str) -> bool:
    return item.get(key) is not None


def media_value(value: Any) -> Any:
    """A Hugging Face ``Image`` / ``Video`` feature value ``{"bytes", "path"}`` as a file (its bytes when it
    has them, else its path); any other value as it is."""
    if isinstance(value, Mapping) and value.keys() <= {"bytes", "path"} and value:
        return value.get("bytes") if value.get("bytes") is not None else value.get("path")
    return value


# --------------------------------------------------------------------------------------- items


_SCHEMA_TYPES = ("text", "image", "video", "image_url", "video_url")
"""Item types this schema reads as they are (a tuple: ``in`` compares by ``==``, so any JSON value may
be tested)."""


def read_items(items: list[Any], place: str = "") -> list[Any]:
    """Content items in this schema's form (:func:`read_item`; ``place`` starts each error's location,
    ``"message 0 "``); ``items`` itself when none changed."""
    for i, item in enumerate(items):
        new = read_item(item, i, place)
        if new is not item:  # copied from the first item that changes
            return [*items[:i], new, *(read_item(x, j, place) for j, x in enumerate(items[i + 1 :], i + 1))]
    return items


def read_item(item: Any, index: int, place: str = "") -> Any:
    """Content item ``index`` in this schema's form: a Responses API item or an item without ``type``
    retyped, a Hugging Face feature value under ``image`` / ``video`` read as a file
    (:func:`media_value`); the item itself when it needs nothing."""
    if type(item) is not dict and not isinstance(item, Mapping):
        return item
    kind = item.get("type")
    if kind == "text":
        return item
    if kind not in _SCHEMA_TYPES:
        where = f"{place}item {index}"
        if kind is None:
            item = _typed(item, where)
        elif kind in _RESPONSES_TEXT:
            return {k: v for k, v in item.items() if k not in _RESPONSES_DROPPED} | {"type": "text"}
        elif kind == "input_image":
            item = _input_image(item, where)
        elif kind in ("input_file", "input_audio", "audio"):
            audio = "; give audio as a segment" if "audio" in kind else ""
            raise ValueError(
                f"{where}: {kind} items are not read in messages (text, image and video items are){audio}"
            )
    for key in ("image", "video"):
        value = item.get(key)
        if value is not None and type(value) is not str and isinstance(value, Mapping) and "url" not in value:
            item = {**item, key: media_value(value)}
    return item


def _typed(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    kinds = {_KINDS[k] for k in item if k in _KINDS and _given(item, k)}
    if _given(item, "audio"):
        raise ValueError(f"{where}: an audio item is not read in messages (an image, a video or text is)")
    if len(kinds) == 1:
        return {**item, "type": kinds.pop()}
    keys = sorted(k for k in item if _given(item, k))
    if kinds:
        raise ValueError(
            f"{where}: an item without 'type' is told apart by its key (the Qwen2-VL chat template, "
            f"qwen-vl-utils), one of image, video, text; got {' and '.join(sorted(kinds))} ({keys})"
        )
    raise ValueError(
        f"{where}: a content item needs a 'type' (text, image, video; OpenAI's image_url, input_text, "
        f"input_image) or, without one, an image, video or text key; got keys {keys}"
    )


def _input_image(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The Responses API's ``{"type": "input_image", "image_url": "https://... | data:...", "detail"}``."""
    if _given(item, "file_id") and not _given(item, "image_url"):
        raise ValueError(
            f"{where}: input_image file_id names a file uploaded to OpenAI, which is not read here; give "
            "image_url (an https URL or a data: URL)"
        )
    if not isinstance(item.get("image_url"), str):
        got = type(item.get("image_url")).__name__
        raise ValueError(f"{where}: the Responses API's input_image takes an image_url string; got {got}")
    out = {k: v for k, v in item.items() if k not in _RESPONSES_DROPPED and k != "file_id"}
    return out | {"type": "image"}


def read_message(message: Any) -> Any:
    """A chat message with the Responses API's ``"type": "message"`` dropped."""
    if isinstance(message, Mapping) and message.get("type") == "message":
        return {k: v for k, v in message.items() if k != "type"}
    return message


# ------------------------------------------------------------------------------------- records


def read_record(data: Any) -> Any:
    """A record or request in one of the formats above, as ``{..., "messages": [...]}`` (the format's
    own keys consumed); any other value as it is."""
    if not isinstance(data, Mapping):
        return data
    if _given(data, "conversations"):
        return _llava(data)
    prompt = data.get("prompt")
    if prompt is not None and not _given(data, "messages") and not _given(data, "segments"):
        return _trl(data, _prompt_completion(data))
    if isinstance(data.get("messages"), list) and (_given(data, "images") or _given(data, "image")):
        return _trl(data, data["messages"])
    return data


def _without(data: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in keys}


def _files(data: Mapping[str, Any], one: str, many: str, fmt: str) -> list[Any]:
    """A record's files under ``one`` (a file, or a list of them) or ``many`` (a list)."""
    if _given(data, one) and _given(data, many):
        raise ValueError(f"{fmt}: give the files as {one!r} or {many!r}, not both")
    value = data.get(one) if _given(data, one) else data.get(many)
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [media_value(v) for v in value]
    if _given(data, many):
        raise ValueError(f"{fmt}: {many!r} is a list of files; got {type(value).__name__}")
    return [media_value(value)]


def _prompt_completion(data: Mapping[str, Any]) -> list[Any]:
    prompt, completion = data.get("prompt"), data.get("completion")
    if not isinstance(prompt, list) or not (completion is None or isinstance(completion, list)):
        raise ValueError(
            f"{TRL}: a prompt-completion record is conversational here, 'prompt' and 'completion' lists of "
            f"messages; got prompt {type(prompt).__name__}, completion {type(completion).__name__}"
        )
    completion = [_structured(m) for m in completion or []]
    return [*prompt, *completion]


def _structured(message: Any) -> Any:
    if isinstance(message, Mapping) and isinstance(message.get("content"), str):
        return {**message, "content": [{"type": "text", "text": message["content"]}]}
    return message


def _is_placeholder(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and item.get("type") == "image"
        and not any(_given(item, k) for k in _MEDIA_KEYS)
    )


def _trl(data: Mapping[str, Any], messages: list[Any]) -> dict[str, Any]:
    """TRL's ``prepare_multimodal_messages``: placeholders filled from ``images`` in order."""
    images = _files(data, "image", "images", TRL)
    out: list[Any] = []
    placed = False
    for m, message in enumerate(messages):
        message = read_message(message)
        if not isinstance(message, Mapping):
            out.append(message)
            continue
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str) and not placed:
            content = [*({"type": "image"} for _ in images), {"type": "text", "text": content}]
            placed = True
        elif isinstance(content, list):
            content = read_items(content, f"message {m} ")
        out.append({**message, "content": content})
    slots = [
        (m, i)
        for m, message in enumerate(out)
        if isinstance(message, Mapping)
        and message.get("role") != "tool"
        and isinstance(message.get("content"), list)
        for i, item in enumerate(message["content"])
        if _is_placeholder(item)
    ]
    if len(slots) != len(images):
        raise ValueError(
            f'{TRL}: the messages hold {len(slots)} {{"type": "image"}} placeholder(s) and \'images\' '
            f"holds {len(images)} image(s); TRL fills each placeholder with the next image, so they must be "
            "as many"
        )
    for (m, i), image in zip(slots, images, strict=True):
        content = list(out[m]["content"])
        content[i] = {**content[i], "image": image}
        out[m] = {**out[m], "content": content}
    return {**_without(data, ("image", "images", "prompt", "completion")), "messages": out}


def _llava(data: Mapping[str, Any]) -> dict[str, Any]:
    """LLaVA / ShareGPT ``conversations``: roles by ``from``, ``<image>`` / ``<video>`` tags in place."""
    if _given(data, "messages"):
        raise ValueError(f"{LLAVA}: a record holds 'conversations' or 'messages', not both")
    turns = data["conversations"]
    if not isinstance(turns, list):
        raise ValueError(
            f"{LLAVA}: 'conversations' is a list of {{from, value}} turns; got {type(turns).__name__}"
        )
    files = {
        IMAGE_TAG: _files(data, "image", "images", LLAVA),
        VIDEO_TAG: _files(data, "video", "videos", LLAVA),
    }
    used = {IMAGE_TAG: 0, VIDEO_TAG: 0}
    messages = []
    for t, turn in enumerate(turns):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("value"), str):
            raise ValueError(
                f'{LLAVA}: conversation turn {t} is a {{"from": ..., "value": "text"}} object; got '
                f"{_shape(turn)}"
            )
        said = turn.get("from")
        role = SHAREGPT_ROLES.get(said) if isinstance(said, str) else None
        if role is None:
            raise ValueError(
                f"{LLAVA}: conversation turn {t}: 'from' is one of {', '.join(SHAREGPT_ROLES)}; got {said!r}"
            )
        content: list[dict[str, Any]] = []
        for piece in _TAGS.split(turn["value"]):
            if piece in files:
                kind = "image" if piece == IMAGE_TAG else "video"
                at = used[piece]
                used[piece] += 1
                if at < len(files[piece]):
                    content.append({"type": kind, kind: files[piece][at]})
            elif piece:
                content.append({"type": "text", "text": piece})
        messages.append({"role": role, "content": content})
    for tag, kind in ((IMAGE_TAG, "image"), (VIDEO_TAG, "video")):
        if used[tag] != len(files[tag]):
            raise ValueError(
                f"{LLAVA}: the conversations hold {used[tag]} {tag} tag(s) and the record {len(files[tag])} "
                f"{kind}(s) ('{kind}' / '{kind}s'); each tag takes the next {kind}, so they must be as many"
            )
    consumed = ("conversations", "image", "images", "video", "videos")
    return {**_without(data, consumed), "messages": messages}


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"an object with keys {sorted(value)}"
    return type(value).__name__


__all__ = [
    "IMAGE_TAG",
    "SHAREGPT_ROLES",
    "VIDEO_TAG",
    "media_value",
    "read_item",
    "read_message",
    "read_record",
]
