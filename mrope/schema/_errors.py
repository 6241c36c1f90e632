"""Errors of a request: the one exception every face raises, and pydantic's errors said in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mrope._errors import MRopeError


class RequestError(MRopeError):
    """A request, record or segment that does not have the documented JSON shape."""

    code = "invalid_request"


_FORM_TAG_SEPARATOR = ":"
"""Joins a segment's kind and form in the tag of one form (``image:grid``, ``video:frames``)."""


def form_tag(kind: str, form: str) -> str:
    """The union tag of one form of a media segment (``image:grid``): a branch, never a place, so it is
    left out of every error location."""
    return f"{kind}{_FORM_TAG_SEPARATOR}{form}"


def _is_form_tag(part: Any) -> bool:
    return isinstance(part, str) and _FORM_TAG_SEPARATOR in part


def describe_validation_errors(errors: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """A one-line message and a JSON-safe list (``loc``, ``msg``, ``type``) for pydantic errors.

    Union branches (``image``, ``video``, ...) and ``function-after`` wrappers are left out of the
    message's location, and the tag of a segment's form (:func:`form_tag`) out of both; an unknown field
    reads ``unknown field 'x'``.
    """
    details = []
    for e in errors:
        loc = [p if isinstance(p, (int, str)) else str(p) for p in e.get("loc", ()) if not _is_form_tag(p)]
        msg = str(e.get("msg", ""))
        kind = str(e.get("type", ""))
        if kind == "extra_forbidden" and loc:
            msg = f"unknown field {loc[-1]!r}"
            loc = loc[:-1]
        msg = msg.removeprefix("Value error, ")
        if kind == "union_tag_not_found":  # pydantic: "Unable to extract tag using discriminator 'type'"
            ctx = e.get("ctx") or {}
            key = str(ctx.get("discriminator", "type")).strip("'")
            msg = f"no {key!r} key: an item says what it is by its {key!r} (text, image, video, ...)"
        if kind == "union_tag_invalid":
            ctx = e.get("ctx") or {}
            msg = f"type must be one of {ctx.get('expected_tags', '?')}; got {ctx.get('tag', '?')!r}"
        details.append({"loc": loc, "msg": msg, "type": kind})
    parts = []
    for d in details[:5]:
        where = _where(d["loc"])
        parts.append(f"{where}: {d['msg']}" if where else d["msg"])
    more = f" (and {len(details) - 5} more)" if len(details) > 5 else ""
    return "; ".join(parts) + more, details


_BRANCHES = {"body", "text", "image", "video", "audio", "file", "str", "list[...]", "int", "bool"}


def _where(loc: Sequence[Any]) -> str:
    out: list[str] = []
    i = 0
    while i < len(loc):
        p = loc[i]
        if (
            p in ("segments", "layout", "messages", "content")
            and i + 1 < len(loc)
            and isinstance(loc[i + 1], int)
        ):
            name = {"segments": "segment", "layout": "layout item", "messages": "message", "content": "item"}[
                p
            ]
            out.append(f"{name} {loc[i + 1]}")
            i += 2
            continue
        if isinstance(p, str) and (p in _BRANCHES or p.startswith(("function-", "list[", "constrained-"))):
            i += 1
            continue
        out.append(str(p))
        i += 1
    return " ".join(out)


__all__ = ["RequestError", "describe_validation_errors", "form_tag"]
