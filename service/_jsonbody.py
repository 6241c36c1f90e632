"""JSON request bodies, bounded before the schema sees them.

Validation must cost time proportional to what the caps allow, never to what an attacker sends: a
16 MiB body can hold a million objects, and pydantic reports one error per bad list item. So a body
goes through, in order (every step bounded, each error a 4xx in the one error shape):

0. :func:`prescan` (bodies over 64 KiB): byte counts bound the containers and values; a body over the
   bounds is refused (413) before it is parsed.
1. :func:`parse`: orjson (400 ``invalid_json``).
2. :func:`inspect`: one walk over the containers (objects and lists), never item by item through a
   list of scalars: at most :attr:`BodyLimits.max_containers` containers (413), at most
   :data:`MAX_DEPTH` levels (422), lists of objects or lists at most :attr:`BodyLimits.max_list` long
   (422). Lists of scalars (ids, masks, frame times; any length) are noted.
3. :func:`check_duplicate_keys`: ``{"a": 1, "a": 2}`` is refused (422), never silently read as 2. The
   structural colons of a body equal its parsed key count unless a key repeats or a string holds a
   colon, so the exact (slower) check runs only in that case.
4. :func:`validate`: the schema (pydantic). When the body's lists of scalars hold more than
   :data:`SKELETON_ITEMS` items it first validates a *skeleton*: each such list replaced by its first items, its smallest and largest
   number and its first item of every type. Every per-item rule of the schemas is a type or a bound, so
   an item that breaks one implies a representative that breaks it: a body with a million bad ids
   fails on the skeleton with a handful of errors, and a body whose skeleton passes can only fail on
   list-level rules. The error lists at most :data:`MAX_ERROR_DETAILS` details (and says how many
   there were).

The checks know nothing of the schema's fields: they sit in front of whatever pydantic model a route
takes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import orjson
from pydantic import BaseModel, ValidationError

from ._errors import ServiceError, describe_validation_errors
from ._settings import Settings

MAX_DEPTH = 32
"""Deepest nesting of objects and lists in a body (the schemas need 5)."""

MAX_ERROR_DETAILS = 20
"""Most validation error details returned in one response."""

SHORT_LIST = 64
"""Lists of objects or lists may always be this long (whatever the caps)."""

SKELETON_ITEMS = 4096
"""Bodies whose long scalar lists hold more items than this in all are validated on their skeleton first
(fewer items can only make as many errors, which costs less than a second validation pass)."""

_HEAD_ITEMS = 8
_REPRESENTED = 16
"""Lists of scalars longer than this are represented by a few items in the skeleton validation."""
_NUMBER_TYPES = frozenset((int, float))
_CONTAINERS = frozenset((dict, list))

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class BodyLimits:
    """Shape bounds of a JSON body.

    Attributes:
        max_containers: most objects and lists in one body.
        max_list: longest list that holds anything but numbers.
        max_items: most values (items and members) in one body.
    """

    max_containers: int
    max_list: int
    max_items: int = 1 << 62

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyLimits:
        # a segment is one object with a few lists (grid, tiles, origin, ids, frame_times); a batch
        # row is one list per per-token field (input_ids, attention_mask, mm_token_type_ids); per-token
        # lists hold at most MROPE_MAX_TOKENS items each, and a request has at most three of them
        return cls(
            max_containers=5 * settings.max_segments + 3 * settings.max_batch + 64,
            max_list=max(settings.max_segments, settings.max_batch, SHORT_LIST),
            max_items=4 * settings.max_tokens + 16 * (settings.max_segments + settings.max_batch) + 1024,
        )


@dataclass
class Shape:
    """What :func:`inspect` learned: key count and the paths of lists of scalars (longer than a few)."""

    keys: int = 0
    containers: int = 0
    scalar_items: int = 0
    scalar_lists: list[tuple[Any, ...]] = field(default_factory=list)


PRESCAN_BYTES = 64 * 1024
"""Bodies larger than this are counted by :func:`prescan` before they are parsed."""

_CHUNK = 1 << 20
_QUOTE, _BACKSLASH, _COMMA = 34, 92, 44
_OPENERS = (123, 91)  # { [


def structure_counts(body: bytes) -> tuple[int, int]:
    """``(containers, commas)`` of a JSON text, outside its strings: every ``{`` or ``[`` there opens a
    container and every comma separates two values. Vectorised (numpy, 1 MiB at a time), so 16 MiB cost
    tens of milliseconds. A quote preceded by an odd run of backslashes is escaped."""
    arr = np.frombuffer(body, dtype=np.uint8)
    opens = commas = 0
    inside = 0  # 1 while in a string, carried from chunk to chunk
    run = 0  # backslashes that end the previous chunk
    for lo in range(0, arr.size, _CHUNK):
        a = arr[lo : lo + _CHUNK]
        quote = a == _QUOTE
        backslash = a == _BACKSLASH
        if run or backslash.any():
            idx = np.arange(a.size, dtype=np.int32)
            last_plain = np.maximum.accumulate(np.where(backslash, np.int32(-1), idx))
            before = np.empty(a.size, dtype=np.int32)  # backslashes right before each byte
            before[0] = run
            before[1:] = idx[:-1] - last_plain[:-1]
            head = last_plain < 0  # still in a run that began in an earlier chunk
            before[1:][head[:-1]] += run
            quote &= (before & 1) == 0
            run = int(before[-1] + 1) if backslash[-1] else 0
        parity = (np.cumsum(quote, dtype=np.uint8) + inside) & 1  # 1 inside a string (mod 256 keeps parity)
        outside = parity == 0
        opens += int(np.count_nonzero(((a == _OPENERS[0]) | (a == _OPENERS[1])) & outside))
        commas += int(np.count_nonzero((a == _COMMA) & outside))
        inside = int(parity[-1])
    return opens, commas


def prescan(body: bytes, limits: BodyLimits) -> None:
    """Refuse a body whose containers or values are over the bounds without parsing it (413).

    Byte counts bound them from above; only when a count is over a bound are the strings told apart
    (:func:`structure_counts`). A million objects cost milliseconds here instead of a second of parsing
    and freeing.
    """
    opens, commas = body.count(b"{") + body.count(b"["), body.count(b",")
    if opens <= limits.max_containers and commas <= limits.max_items:
        return
    opens, commas = structure_counts(body)
    if opens > limits.max_containers:
        raise _too_many_containers(limits)
    if commas > limits.max_items:
        raise ServiceError(
            413,
            "too_many_values",
            f"the body holds more than {limits.max_items:,} JSON values; a request holds at most a few lists "
            "of MROPE_MAX_TOKENS items (the bound follows MROPE_MAX_TOKENS)",
            cap="MROPE_MAX_TOKENS",
            limit=limits.max_items,
        )


def _too_many_containers(limits: BodyLimits) -> ServiceError:
    return ServiceError(
        413,
        "too_many_values",
        f"the body holds more than {limits.max_containers:,} JSON objects and lists; a request holds "
        "a few per segment or batch row (the bound follows MROPE_MAX_SEGMENTS and MROPE_MAX_BATCH)",
        cap="MROPE_MAX_SEGMENTS",
        limit=limits.max_containers,
    )


def parse(body: bytes) -> Any:
    """The body as Python values (400 ``invalid_json`` when it is not JSON)."""
    if not body.strip():
        raise ServiceError(400, "invalid_json", "request body is empty; expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ServiceError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None


def _where(path: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path) or "the body"


def inspect(data: Any, limits: BodyLimits) -> Shape:
    """Walk every object and list of ``data`` (not the items of scalar lists); see the module doc."""
    shape = Shape()
    if type(data) not in _CONTAINERS:
        return shape
    max_containers, max_list = limits.max_containers, limits.max_list
    containers = keys = 0
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    pop, push = stack.pop, stack.append
    while stack:
        node, path = pop()
        containers += 1
        if containers > max_containers:
            raise _too_many_containers(limits)
        if len(path) > MAX_DEPTH:
            raise ServiceError(
                422, "too_deep", f"{_where(path[:8])}... is nested more than {MAX_DEPTH} levels deep"
            )
        if type(node) is dict:
            keys += len(node)
            for key, value in node.items():
                if type(value) in _CONTAINERS:
                    push((value, (*path, key)))
            continue
        kinds = set(map(type, node))
        if kinds.isdisjoint(_CONTAINERS):
            if len(node) > _REPRESENTED:
                shape.scalar_lists.append(path)
                shape.scalar_items += len(node)
            continue
        if len(node) > max_list:
            names = ", ".join(sorted(_json_type(k) for k in kinds))
            raise ServiceError(
                422,
                "list_too_long",
                f"{_where(path)} is a list of {len(node):,} items ({names}); only lists of numbers may be "
                f"longer than {max_list:,} items",
            )
        for i, value in enumerate(node):
            if type(value) in _CONTAINERS:
                push((value, (*path, i)))
    shape.containers, shape.keys = containers, keys
    return shape


def _json_type(kind: type) -> str:
    return {
        dict: "objects",
        list: "lists",
        str: "strings",
        bool: "booleans",
        int: "integers",
        float: "numbers",
        type(None): "nulls",
    }.get(kind, kind.__name__)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ServiceError(
            422, "duplicate_key", f"the JSON object key {dup[:100]!r} appears more than once; send it once"
        )
    return out


def check_duplicate_keys(body: bytes, shape: Shape) -> None:
    """422 when an object of ``body`` repeats a key (see the module doc for the cheap test)."""
    if body.count(b":") == shape.keys:
        return
    json.loads(body, object_pairs_hook=_refuse_duplicates)


def representatives(items: list[Any]) -> list[Any]:
    """The first items of a list of scalars, its smallest and largest number, and its first item of
    each type (so every type and bound an item can break is tried)."""
    out = items[:_HEAD_ITEMS]
    kinds = set(map(type, items))
    numbers = items if kinds <= _NUMBER_TYPES else [x for x in items if type(x) in _NUMBER_TYPES]
    if numbers:
        out.append(min(numbers))
        out.append(max(numbers))
    for x in items:
        if type(x) in kinds:
            kinds.discard(type(x))
            out.append(x)
            if not kinds:
                break
    return out


def skeleton(data: Any, lists: list[tuple[Any, ...]]) -> Any:
    """A copy of ``data`` with each listed scalar list replaced by its :func:`representatives`.

    Only the containers on the way to a long list are copied.
    """
    root: Any = {"": data}
    copied: set[int] = {id(root)}
    for path in lists:
        node, key = root, ""
        for step in path:
            child = node[key]
            if id(child) not in copied:
                child = child.copy()
                node[key] = child
                copied.add(id(child))
            node, key = child, step
        node[key] = representatives(node[key])
    return root[""]


def validation_error(exc: ValidationError, prefix: tuple[str, ...] = ()) -> ServiceError:
    """A 422 listing at most :data:`MAX_ERROR_DETAILS` of pydantic's errors (``prefix``: put before
    every error location, e.g. ``("body",)``)."""
    total = exc.error_count()
    errors = exc.errors(include_url=False, include_input=False, include_context=False)[:MAX_ERROR_DETAILS]
    if prefix:
        errors = [{**e, "loc": (*prefix, *e["loc"])} for e in errors]
    message, details = describe_validation_errors(errors, total=total)
    return ServiceError(422, "validation_error", message, details=details)


def validate(model: type[M], data: Any, shape: Shape, prefix: tuple[str, ...] = ()) -> M:
    """``model`` validated from ``data`` (422 with bounded details); see the module doc."""
    try:
        if shape.scalar_items > SKELETON_ITEMS:
            model.model_validate(skeleton(data, shape.scalar_lists))
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, prefix) from None


def decode(
    body: bytes, model: type[M], limits: BodyLimits, precheck: Callable[[Any], None] | None = None
) -> M:
    """Steps 1 to 4 of the module doc: the validated request of a raw JSON body. ``precheck`` runs on
    the parsed body before anything else (the routes check their list caps there)."""
    if len(body) > PRESCAN_BYTES:
        prescan(body, limits)
    data = parse(body)
    if precheck is not None:
        precheck(data)
    shape = inspect(data, limits)
    check_duplicate_keys(body, shape)
    return validate(model, data, shape, ("body",))
