"""JSON request bodies, bounded before the schema sees them.

Validation must cost time proportional to what the caps allow, never to what an attacker sends: a
16 MiB body can hold a million objects, and pydantic reports one error per bad list item. So a body
goes through, in order (every step bounded, each error a 4xx in the one error shape):

1. :func:`parse`: orjson (400 ``invalid_json``).
2. :func:`inspect`: one walk over the containers (objects and lists), never item by item through a
   list of scalars: at most :attr:`BodyLimits.max_containers` containers (413), at most
   :data:`MAX_DEPTH` levels (422), lists of objects or lists at most :attr:`BodyLimits.max_list` long
   (422). Lists of scalars (ids, masks, frame times; any length) are noted.
3. :func:`check_duplicate_keys`: ``{"a": 1, "a": 2}`` is refused (422), never silently read as 2. The
   structural colons of a body equal its parsed key count unless a key repeats or a string holds a
   colon, so the exact (slower) check runs only in that case.
4. :func:`validate`: the schema (pydantic). When the body has lists of scalars longer than a few it
   first validates a *skeleton*: each such list replaced by its first items, its smallest and largest
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

import orjson
from pydantic import BaseModel, ValidationError

from service.errors import ServiceError, describe_validation_errors
from service.settings import Settings

MAX_DEPTH = 32
"""Deepest nesting of objects and lists in a body (the schemas need 5)."""

MAX_ERROR_DETAILS = 20
"""Most validation error details returned in one response."""

SHORT_LIST = 64
"""Lists of objects or lists may always be this long (whatever the caps)."""

_HEAD_ITEMS = 8
_REPRESENTED = 16
"""Lists of scalars longer than this are represented by a few items in the skeleton validation."""
_NUMBER_TYPES = frozenset((int, float))
_CONTAINERS = (dict, list)

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class BodyLimits:
    """Shape bounds of a JSON body.

    Attributes:
        max_containers: most objects and lists in one body.
        max_list: longest list that holds anything but numbers.
    """

    max_containers: int
    max_list: int

    @classmethod
    def from_settings(cls, settings: Settings) -> BodyLimits:
        # a segment is one object with a few lists (grid, tiles, origin, ids, frame_times); a batch
        # row is one list per per-token field (input_ids, attention_mask, mm_token_type_ids)
        return cls(
            max_containers=5 * settings.max_segments + 3 * settings.max_batch + 64,
            max_list=max(settings.max_segments, settings.max_batch, SHORT_LIST),
        )


@dataclass
class Shape:
    """What :func:`inspect` learned: key count and the paths of lists of scalars (longer than a few)."""

    keys: int = 0
    containers: int = 0
    scalar_lists: list[tuple[Any, ...]] = field(default_factory=list)


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
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        shape.containers += 1
        if shape.containers > limits.max_containers:
            raise ServiceError(
                413,
                "too_many_values",
                f"the body holds more than {limits.max_containers:,} JSON objects and lists; a request holds "
                "a few per segment or batch row (the bound follows MROPE_MAX_SEGMENTS and MROPE_MAX_BATCH)",
                cap="MROPE_MAX_SEGMENTS",
                limit=limits.max_containers,
            )
        if len(path) > MAX_DEPTH:
            raise ServiceError(
                422, "too_deep", f"{_where(path[:8])}... is nested more than {MAX_DEPTH} levels deep"
            )
        if type(node) is dict:
            shape.keys += len(node)
            for key, value in node.items():
                if type(value) in _CONTAINERS:
                    stack.append((value, (*path, key)))
            continue
        kinds = set(map(type, node))
        if kinds.isdisjoint(_CONTAINERS):
            if len(node) > _REPRESENTED:
                shape.scalar_lists.append(path)
            continue
        if len(node) > limits.max_list:
            names = ", ".join(sorted(_json_type(k) for k in kinds))
            raise ServiceError(
                422,
                "list_too_long",
                f"{_where(path)} is a list of {len(node):,} items ({names}); only lists of numbers may be "
                f"longer than {limits.max_list:,} items",
            )
        for i, value in enumerate(node):
            if type(value) in _CONTAINERS:
                stack.append((value, (*path, i)))
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
        if shape.scalar_lists:
            model.model_validate(skeleton(data, shape.scalar_lists))
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, prefix) from None


def decode(
    body: bytes, model: type[M], limits: BodyLimits, precheck: Callable[[Any], None] | None = None
) -> M:
    """Steps 1 to 4 of the module doc: the validated request of a raw JSON body. ``precheck`` runs on
    the parsed body before anything else (the routes check their list caps there)."""
    data = parse(body)
    if precheck is not None:
        precheck(data)
    shape = inspect(data, limits)
    check_duplicate_keys(body, shape)
    return validate(model, data, shape, ("body",))
