"""Chat templates: a checkpoint's own template found and rendered, and where its assistant turns are.

A checkpoint keeps its chat template in ``chat_template.jinja`` (transformers 5 ``save_pretrained``),
``chat_template.json`` (``{"chat_template": ...}``, a processor's) or ``tokenizer_config.json``
(``"chat_template"``: a string, or a list of ``{"name", "template"}`` of which ``"default"`` is used).
:func:`render_chat` renders one the way transformers 5.24 does (``utils/chat_template_utils.py``: a
sandboxed Jinja environment with ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension,
``tojson``, ``raise_exception`` and ``strftime_now``), so the text, and its token count, equal
``apply_chat_template``'s. :func:`assistant_spans` finds each assistant turn in that text as the text of the conversation up
to it (with and without the turn), which needs no ``{% generation %}`` markers, read from one streamed
rendering.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from mrope._caches import cached
from mrope._errors import MRopeError

TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
"""The files a checkpoint folder may keep its chat template in, in the order they are looked for."""


class ChatTemplateError(MRopeError):
    """A chat template that cannot be found, read or rendered."""


def _from_json(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ChatTemplateError(f"cannot read the chat template in {str(path)!r}: {exc}") from None
    value = data.get("chat_template") if isinstance(data, Mapping) else None
    if isinstance(value, list):  # [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, Mapping)}
        value = named.get("default")
    return value if isinstance(value, str) and value else None


def find_chat_template(source: Any) -> str | None:
    """The chat template of ``source``, or ``None`` when it has none.

    ``source``: a checkpoint folder (or a file in one, such as its ``tokenizer.json``), a
    ``.jinja`` file, or an object with a ``chat_template`` string (a transformers tokenizer or processor).
    """
    if source is None:
        return None
    if not isinstance(source, (str, os.PathLike)):
        value = getattr(source, "chat_template", None)
        return value if isinstance(value, str) and value else None
    path = Path(source)
    if path.is_file() and path.suffix == ".jinja":
        return _read_jinja(path)
    if not path.exists():
        return None
    folder = path if path.is_dir() else path.parent
    for name in TEMPLATE_FILES:
        candidate = folder / name
        if candidate.is_file():
            found = _read_jinja(candidate) if name.endswith(".jinja") else _from_json(candidate)
            if found:
                return found
    return None


def _read_jinja(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ChatTemplateError(f"cannot read the chat template {str(path)!r}: {exc}") from None


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the messages: {message}")


@cached("chat.templates", maxsize=16)
def _compiled(template: str) -> Any:
    from jinja2 import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys
    )
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not compile: {exc}") from None


def render_chat(
    template: str, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool = False, **extra: Any
) -> str:
    """``messages`` (``{"role", "content"}``; content a string or a list of ``{"type": ...}`` items)
    rendered with ``template``, as transformers' ``apply_chat_template(tokenize=False)`` renders them
    (``extra``: further template variables, e.g. ``tools``)."""
    from jinja2 import TemplateError

    try:
        return str(
            _compiled(template).render(
                messages=list(messages), add_generation_prompt=add_generation_prompt, **extra
            )
        )
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed on the messages: {exc}") from None


class _Pulls(list):  # type: ignore[type-arg]
    """The messages as a template sees them, noting how much text was rendered each time its loop takes
    the next message (``marks[k]``: the text before message ``k``; the last mark: the text after the
    loop's last message)."""

    def __init__(self, messages: Sequence[Mapping[str, Any]], rendered: list[int]) -> None:
        super().__init__(messages)
        self.rendered = rendered
        self.loops: list[list[int]] = []

    def __iter__(self) -> Any:
        marks: list[int] = []
        self.loops.append(marks)
        for message in super().__iter__():
            marks.append(self.rendered[0])
            yield message
        marks.append(self.rendered[0])

    def marks(self) -> list[int] | None:
        """The marks of the one complete loop over the messages that wrote text (``None``: no such
        loop, or several)."""
        writing = [m for m in self.loops if len(m) == len(self) + 1 and m[0] != m[-1]]
        return writing[0] if len(writing) == 1 else None


def _streamed(template: str, messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[int] | None]:
    """``render_chat(template, messages)`` and where each message's turn begins in it, read while the
    template streams its text (``None`` without one loop over the messages that writes them)."""
    from jinja2 import TemplateError

    rendered = [0]
    pulls = _Pulls(messages, rendered)
    parts = []
    try:
        for part in _compiled(template).generate(messages=pulls, add_generation_prompt=False):
            parts.append(part)
            rendered[0] += len(part)
    except TemplateError as exc:
        raise ChatTemplateError(f"the chat template failed on the messages: {exc}") from None
    return "".join(parts), pulls.marks()


def _prefix_span(template: str, messages: Sequence[Mapping[str, Any]], i: int, full: str) -> tuple[int, int]:
    """Assistant turn ``i``'s span by its definition (two renders of the conversation up to it)."""
    before = render_chat(template, messages[:i], add_generation_prompt=True)
    through = render_chat(template, messages[: i + 1])
    if not (through.startswith(before) and full.startswith(through)):
        raise ChatTemplateError(
            f"cannot place assistant message {i} in the rendered chat: the template renders the "
            "conversation before it (with its generation prompt) and through it as texts that are not "
            "prefixes of the whole"
        )
    return len(before), len(through)


SMALL_CHAT = 32
"""Conversations of at most this many messages may be placed turn by turn (two renders per assistant
turn) when the one-render placement does not apply; longer ones get a :class:`ChatTemplateError`."""


def assistant_spans(template: str, messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """Character spans ``[start, stop)`` of the assistant turns of ``render_chat(template, messages)``.

    By definition turn ``i`` spans from the end of the conversation before it rendered with its
    generation prompt to the end of the conversation through it: the reply and what the template closes
    it with (Qwen's ``<|im_end|>\\n``), which a model learns to emit.

    Rendering those prefixes for every turn costs time quadratic in the conversation, so the spans are
    read from one streamed rendering instead: where the template's loop takes each message is where the
    conversation before it ends, and the generation prompt (rendered once, for the first assistant turn)
    must follow it in the whole text at every assistant turn. The definition is then checked on the
    first and last assistant turns. A template whose rendering does not stream that way (one that loops
    over the messages twice, or writes text after its loop) is placed turn by turn when the conversation
    has at most :data:`SMALL_CHAT` messages.

    Raises:
        ChatTemplateError: a template whose renderings are not prefixes of each other (one that, say,
            writes a date or the last turn differently), so turns cannot be placed; or a long
            conversation whose template does not stream.
    """
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
    full, marks = _streamed(template, messages)
    if not turns:
        return []
    spans = _streamed_spans(template, messages, turns, full, marks) if marks is not None else None
    if spans is not None:
        return spans
    if len(messages) > SMALL_CHAT:
        raise ChatTemplateError(
            f"cannot place the assistant turns of {len(messages)} messages: the chat template does not "
            f"render a conversation as its turns one after the other, and placing each turn by rendering "
            f"the conversation up to it is done for at most {SMALL_CHAT} messages"
        )
    return [_prefix_span(template, messages, i, full) for i in turns]


def _streamed_spans(
    template: str, messages: Sequence[Mapping[str, Any]], turns: list[int], full: str, marks: list[int]
) -> list[tuple[int, int]] | None:
    """The spans read from the marks of :func:`_streamed` (``None`` when the generation prompt does not
    follow the conversation before an assistant turn, or the first or last turn's definition disagrees
    with them)."""
    first = turns[0]
    prompt = render_chat(template, messages[:first], add_generation_prompt=True)
    if not prompt.startswith(full[: marks[first]]):
        return None
    generation = prompt[marks[first] :]
    spans = []
    for i in turns:
        start, stop = marks[i] + len(generation), marks[i + 1] if i + 1 < len(messages) else len(full)
        if not full.startswith(generation, marks[i]) or stop < start:
            return None
        spans.append((start, stop))
    for k in {0, len(turns) - 1}:
        if _prefix_span(template, messages, turns[k], full) != spans[k]:
            return None
    return spans


__all__ = ["TEMPLATE_FILES", "ChatTemplateError", "assistant_spans", "find_chat_template", "render_chat"]
