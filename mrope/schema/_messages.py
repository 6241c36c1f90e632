"""Chat messages -> library segments and the assistant-token mask: wrapped by a fixed turn format, or
rendered with the checkpoint's own chat template (:mod:`mrope._chat`) and tokenized as one text, as
transformers' ``apply_chat_template`` tokenizes it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mrope._chat import assistant_spans, render_chat
from mrope._rules import LayoutRules
from mrope._segments import Image, Segment, Text, Video

from ._convert import SegmentReader
from ._errors import RequestError
from ._image import IMAGE_FORMS
from ._media import MEDIA_NONE, MediaAccess
from ._records import Message, MessageText
from ._text import tokenize, tokenize_with_offsets


@dataclass(frozen=True)
class ChatSegments:
    """Chat messages as library segments, with which text tokens are the assistant's.

    Attributes:
        segments: the library segments, in order.
        masks: per segment, a bool ``[n]`` (True: an assistant token, a label) for a :class:`mrope.Text`
            of token ids, ``None`` for a media segment (never a label) or a text given as a count.
    """

    segments: list[Segment]
    masks: list[np.ndarray | None]

    def labels(self, positions: Any) -> np.ndarray:
        """The ``labels`` of ``positions`` (built from :attr:`segments`): the token id where the token is
        the assistant's, ``-100`` everywhere else (media, wrappers, timestamps, other turns)."""
        out = np.full(positions.num_tokens, -100, dtype=np.int64)
        seen: dict[int, int] = {}
        for span in positions.spans:
            mask = self.masks[span.index] if span.index < len(self.masks) else None
            if span.kind != "text" or mask is None:
                continue
            at = seen.get(span.index, 0)
            part = mask[at : at + span.stop - span.start]
            seen[span.index] = at + part.size
            ids = positions.input_ids[span.start : span.stop]
            out[span.start : span.stop] = np.where(part, ids, -100)
        return out


def _items(message: Message) -> list[Any]:
    content = message.content
    return [MessageText(type="text", text=content)] if isinstance(content, str) else list(content or ())


def message_segments(
    messages: Sequence[Message],
    rules: LayoutRules,
    *,
    tokenizer: Any = None,
    media: MediaAccess = MEDIA_NONE,
    turn_format: tuple[str, str] | None = None,
    generation_prompt: str | None = None,
    reader: SegmentReader | None = None,
) -> list[Segment]:
    """Chat messages -> library segments, in order.

    Adjacent strings (texts, turn wrappers, the generation prompt) are tokenized together, as a chat
    template renders them; ``turn_format = (prefix, suffix)`` wraps each message's content (``{role}``
    filled in) and ``generation_prompt`` is appended at the end. Media are read by ``reader`` (default:
    a :class:`SegmentReader` of ``rules``, ``tokenizer`` and ``media``).
    """
    return turn_segments(
        messages,
        reader or SegmentReader(rules, tokenizer=tokenizer, media=media),
        turn_format=turn_format,
        generation_prompt=generation_prompt,
    ).segments


def turn_segments(
    messages: Sequence[Message],
    reader: SegmentReader,
    *,
    turn_format: tuple[str, str] | None = None,
    generation_prompt: str | None = None,
) -> ChatSegments:
    """:func:`message_segments` with the assistant mask: an assistant message's content and its turn
    suffix are the assistant's."""
    out: list[Segment] = []
    masks: list[np.ndarray | None] = []
    pending: list[tuple[str, bool]] = []
    origin: list[str] = []
    tokenizer = reader.tokenizer

    def add_text(text: str, where: str, mine: bool) -> None:
        if not pending:
            origin[:] = [where]
        pending.append((text, mine))

    def flush() -> None:
        if not pending:
            return
        where = origin[0]
        if all(mine == pending[0][1] for _, mine in pending):
            ids = tokenize(tokenizer, "".join(t for t, _ in pending), where, reader.token_limit)
            mask = np.full(len(ids), pending[0][1])
        else:  # a turn boundary inside the run: tokenized as one text, split by character offsets
            text = "".join(t for t, _ in pending)
            ids, offsets = tokenize_with_offsets(tokenizer, text, where, reader.token_limit)
            mask = _mask_from(pending, ids, offsets, tokenizer, where)
        out.append(Text(ids))
        masks.append(mask)
        pending.clear()

    for m, message in enumerate(messages):
        where = f"message {m}"
        mine = message.role == "assistant"
        role = message.role or ""
        if turn_format is not None:
            add_text(turn_format[0].format(role=role), f"{where} (its turn prefix)", False)
        for c, item in enumerate(_items(message)):
            at = f"{where} item {c}"
            if isinstance(item, MessageText):
                if item.tokens is not None:
                    flush()
                    out.append(Text(item.tokens))
                    masks.append(None)
                else:
                    add_text(item.text or "", at, mine)
                continue
            flush()
            out.append(reader.image(item, at) if isinstance(item, IMAGE_FORMS) else reader.video(item, at))
            masks.append(None)
        if turn_format is not None:
            add_text(turn_format[1].format(role=role), f"{where} (its turn suffix)", mine)
    if generation_prompt:
        add_text(generation_prompt, "the generation prompt", False)
    flush()
    return ChatSegments(out, masks)


def _mask_from(
    pieces: list[tuple[str, bool]],
    ids: list[int],
    offsets: list[tuple[int, int]] | None,
    tokenizer: Any,
    where: str,
) -> np.ndarray:
    spans, at = [], 0
    for text, mine in pieces:
        if mine:
            spans.append((at, at + len(text)))
        at += len(text)
    if offsets is not None:
        return _in_spans(offsets, spans)
    # no offsets (a callable tokenizer): the pieces tokenized one by one, each piece's tokens its own
    parts = [(tokenize(tokenizer, t, where), mine) for t, mine in pieces]
    ids[:] = [i for p, _ in parts for i in p]
    return np.concatenate([np.full(len(p), mine) for p, mine in parts]) if parts else np.zeros(0, bool)


def _in_spans(offsets: Any, spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Whether each token (by its character offsets: ``[N, 2]``, or pairs) starts inside one of
    ``spans`` (in order, none overlapping: the assistant turns of a chat)."""
    starts = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)[:, 0]
    if not spans:
        return np.zeros(starts.size, dtype=bool)
    lo, hi = np.asarray(spans, dtype=np.int64).reshape(-1, 2).T
    k = np.searchsorted(lo, starts, side="right") - 1  # the last span starting at or before each token
    return (k >= 0) & (starts < hi[np.maximum(k, 0)])


# ------------------------------------------------------------------------------------- chat templates


def _template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as a chat template reads them: text items with their text, media items as
    ``{"type": "image"}`` / ``{"type": "video"}`` (templates emit a placeholder for each)."""
    out = []
    for m, message in enumerate(messages):
        content = []
        for c, item in enumerate(_items(message)):
            if isinstance(item, MessageText):
                if item.text is None:
                    raise RequestError(
                        f"message {m} item {c}: a 'tokens' count cannot be rendered by a chat template; give "
                        "the text, or turn the template off (chat_template=None in the pipeline, "
                        '--chat-template none on the command line, "chat_template": "none" in a service request)'
                    )
                content.append({"type": "text", "text": item.text})
            else:
                content.append({"type": "image" if isinstance(item, IMAGE_FORMS) else "video"})
        out.append({"role": message.role or "", "content": content})
    return out


def template_segments(
    messages: Sequence[Message],
    reader: SegmentReader,
    template: str,
    *,
    add_generation_prompt: bool = False,
    continued: bool = False,
) -> ChatSegments:
    """Chat messages rendered with ``template`` (:func:`mrope._chat.render_chat`) and tokenized as one
    text, as ``apply_chat_template(tokenize=True)`` does; each image and video placeholder the template
    writes (``vision_start, image_pad | video_pad, vision_end`` by the rules' token ids, or a bare pad) is
    replaced by the item's :class:`mrope.Image` / :class:`mrope.Video`, in order. The mask marks the
    tokens of the assistant turns (:func:`mrope._chat.assistant_spans`: the reply and the template's
    end-of-turn text).

    ``continued``: the messages are a turn appended to a conversation, rendered as the template renders
    them at the end of it: after a stand-in conversation (:func:`_stand_in`), whose tokens are
    dropped (:func:`_turn_start`, :func:`_tail`).

    Raises:
        RequestError: text without a tokenizer, text given as a count, a template that writes a
            different number of placeholders than there are media items, or (``continued``) one that
            does not render the turn as a suffix of the conversation before it.
    """
    tokenizer = reader.tokenizer
    plain = _template_messages(messages)
    before = _stand_in(plain) if continued else []
    text = render_chat(template, before + plain, add_generation_prompt=add_generation_prompt)
    if tokenizer is None:
        tokenize(None, text, "message 0")  # raises TokenizerRequired
    cut = _turn_start(template, before, plain, text) if continued else 0
    ids, offsets = tokenize_with_offsets(tokenizer, text, "the rendered chat", reader.token_limit)
    spans = assistant_spans(template, before + plain) if any(m.role == "assistant" for m in messages) else []
    if continued:
        ids, offsets, spans = _tail(ids, offsets, spans, cut)
    if offsets is None:
        if spans:
            raise RequestError(
                "the assistant mask of a chat template needs a tokenizer that gives character offsets (a "
                "tokenizer.json or a fast transformers tokenizer); this one is a callable"
            )
        mask = np.zeros(len(ids), dtype=bool)
    else:
        mask = _in_spans(offsets, spans)
    media = [
        (f"message {m} item {c}", item)
        for m, message in enumerate(messages)
        for c, item in enumerate(_items(message))
        if not isinstance(item, MessageText)
    ]
    rules = reader.rules
    out: list[Segment] = []
    masks: list[np.ndarray | None] = []
    cursor = 0
    arr = np.asarray(ids, dtype=np.int64)
    for where, item in media:
        is_image = isinstance(item, IMAGE_FORMS)
        pad = rules.image_pad_id if is_image else rules.video_pad_id
        hits = np.flatnonzero(arr[cursor:] == pad)
        if hits.size == 0:
            raise RequestError(
                f"{where}: the chat template wrote no {'image' if is_image else 'video'} placeholder (token id "
                f"{pad}) for it; the template and the model's rules disagree"
            )
        k = cursor + int(hits[0])
        wrapped = k > cursor and k + 1 < arr.size and arr[k - 1] == rules.vision_start_id
        wrapped = wrapped and arr[k + 1] == rules.vision_end_id
        start, stop = (k - 1, k + 2) if wrapped else (k, k + 1)
        if start > cursor:
            out.append(Text(ids[cursor:start]))
            masks.append(mask[cursor:start])
        seg: Image | Video = reader.image(item, where) if is_image else reader.video(item, where)
        if seg.wrap != wrapped:
            seg = _rewrapped(seg, wrapped)
        out.append(seg)
        masks.append(None)
        cursor = stop
    for pad in (rules.image_pad_id, rules.video_pad_id):
        if np.any(arr[cursor:] == pad):
            raise RequestError(
                f"the chat template wrote more media placeholders (token id {pad}) than the messages hold "
                f"media items ({len(media)})"
            )
    if cursor < len(ids):
        out.append(Text(ids[cursor:]))
        masks.append(mask[cursor:])
    return ChatSegments(out, masks)


STAND_INS = ("a", "b c d")
"""Texts of the stand-in conversation a continued turn is rendered after; its text must not change with
them (the turn's tokens must not depend on what came before)."""


def _stand_in(plain: list[dict[str, Any]], text: str = STAND_INS[0]) -> list[dict[str, Any]]:
    """A conversation to render a continued turn after: a user message, and an assistant reply when the
    turn does not open with one (templates that make roles alternate accept it)."""
    user = {"role": "user", "content": [{"type": "text", "text": text}]}
    if plain and plain[0]["role"] == "assistant":
        return [user]
    return [user, {"role": "assistant", "content": [{"type": "text", "text": text}]}]


_NOT_A_TAIL = (
    "the chat template does not render this turn as the tail of the conversation before it ({}), so its "
    "positions would not be the whole conversation's; send the whole conversation without 'state'"
)


def _turn_start(template: str, before: list[dict[str, Any]], plain: list[dict[str, Any]], text: str) -> int:
    """Where the turn starts in ``text`` (``before + plain`` rendered): the end of ``before`` rendered.

    Raises:
        RequestError: the template renders the stand-in ``before`` differently once the turn follows,
            or the turn differently after another stand-in.
    """
    head = render_chat(template, before)
    if not text.startswith(head):
        raise RequestError(_NOT_A_TAIL.format("the text of the turns before changes once this turn follows"))
    other = _stand_in(plain, STAND_INS[1])
    if render_chat(template, other + plain)[len(render_chat(template, other)) :] != text[len(head) :]:
        raise RequestError(_NOT_A_TAIL.format("its text changes with what came before"))
    return len(head)


def _tail(
    ids: list[int], offsets: list[tuple[int, int]] | None, spans: list[tuple[int, int]], cut: int
) -> tuple[list[int], list[tuple[int, int]] | None, list[tuple[int, int]]]:
    """The tokens from character ``cut`` on, with their offsets and the assistant spans counted from there.

    Raises:
        RequestError: no offsets (a callable tokenizer), or a token across ``cut``.
    """
    if offsets is None:
        raise RequestError(
            "a continued turn under a chat template needs a tokenizer that gives character offsets (a "
            "tokenizer.json or a fast transformers tokenizer); this one is a callable"
        )
    first = next((k for k, (a, _) in enumerate(offsets) if a >= cut), len(ids))
    if first and offsets[first - 1][1] > cut:
        raise RequestError(
            _NOT_A_TAIL.format("a token spans the end of the turns before and this turn's start")
        )
    moved = [(a - cut, b - cut) for a, b in offsets[first:]]
    return ids[first:], moved, [(a - cut, b - cut) for a, b in spans if b > cut]


def _rewrapped(seg: Image | Video, wrap: bool) -> Image | Video:
    return dataclasses.replace(seg, wrap=wrap)


__all__ = ["ChatSegments", "message_segments", "template_segments", "turn_segments"]
