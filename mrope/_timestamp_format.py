"""Timestamp text formats of the ``timestamps`` rule: the one check every face applies, and formatting.

A ``timestamp_format`` (:class:`mrope._rules.LayoutRules`) is text with exactly one float field; it comes
from configs and requests, so its width and precision are bounded.
"""

from __future__ import annotations

import functools
import re
import string
from typing import Any

from mrope._errors import LayoutError

__all__ = ["MAX_TIMESTAMP_WIDTH", "check_timestamp_format", "format_seconds"]

MAX_TIMESTAMP_WIDTH = 64
"""Largest width or precision a ``timestamp_format`` field may ask for (``{:>999999999}`` is a GB)."""
_FORMAT_NUMBER = re.compile(r"\d+")


def format_seconds(fmt: str, seconds: float) -> str:
    """``fmt`` applied to ``seconds``; an integer field (``{:d}``) takes the seconds truncated to int."""
    if ":d}" in fmt:
        return fmt.format(int(seconds))
    return fmt.format(seconds)


def check_timestamp_format(fmt: Any) -> str:
    """``fmt`` when it is a ``timestamp_format``: text with exactly one positional field, ``{}`` or
    ``{:spec}`` (no name, index, attribute, conversion or nested field, width and precision at most
    :data:`MAX_TIMESTAMP_WIDTH`) that formats a float; else :class:`~mrope._errors.LayoutError` saying
    what was expected and what came. Every face checks rules through it (the schema calls it)."""
    if not isinstance(fmt, str):
        raise LayoutError(f"{_TIMESTAMP_FORMAT_EXPECTED}; got {fmt!r} (a {type(fmt).__name__})")
    _check_format_text(fmt)
    return fmt


_TIMESTAMP_FORMAT_EXPECTED = (
    "LayoutRules.timestamp_format must hold exactly one float field, {} or {:spec} (like '<{:.1f} seconds>')"
)


@functools.lru_cache(maxsize=64)
def _check_format_text(fmt: str) -> None:
    """The checks of :func:`check_timestamp_format` on a string (cached: rules are made per request)."""
    problem = None
    try:
        fields = [
            (name, spec, conv) for _, name, spec, conv in string.Formatter().parse(fmt) if name is not None
        ]
    except ValueError as exc:
        fields, problem = [], str(exc)
    if problem is None and len(fields) != 1:
        problem = f"{len(fields)} fields"
    if problem is None:
        name, spec, conv = fields[0]
        if name:
            problem = f"the field names {name!r}; it must be empty (the one positional argument)"
        elif conv is not None:
            problem = f"the field has a conversion !{conv}"
        elif spec and "{" in spec:
            problem = "the field's spec holds a nested field"
        elif spec and any(int(n) > MAX_TIMESTAMP_WIDTH for n in _FORMAT_NUMBER.findall(spec)):
            problem = f"the spec {spec!r} asks for a width or precision over {MAX_TIMESTAMP_WIDTH}"
    if problem is None:
        try:
            format_seconds(fmt, 0.0)
        except (ValueError, TypeError) as exc:
            problem = str(exc)
    if problem is not None:
        raise LayoutError(f"{_TIMESTAMP_FORMAT_EXPECTED}; got {fmt!r}: {problem}")
