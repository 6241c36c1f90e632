"""The form fields and the layout of ``POST /v1/positions/upload``, validated like a JSON body."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from mrope.schema import TextSegment
from mrope.schema._fields import model_names
from mrope.schema._request import FileItem, UploadFields

from . import _convert as convert
from . import _jsonbody as jsonbody
from ._errors import ServiceError
from ._settings import Settings
from ._state import ServiceState
from ._uploads import UploadForm

_EXPECTED = {
    "layout": "an array of layout items",
    "layer_sets": "true or an object {sets, pattern} (leave it out, or false, for one set)",
}
"""What a JSON form field other than ``rules`` holds, for the refusal of a ``null``."""


def parse_upload_fields(form: UploadForm, state: ServiceState) -> tuple[UploadFields, Any]:
    """The ``model``, ``layout``, ``rules``, ``layer_sets`` and ``route`` form fields (``model`` and ``route`` plain text),
    validated like a JSON body (bounded walk,
    no repeated keys, skeleton first; 422 with at most a few pydantic details)."""
    data: dict[str, Any] = {}
    shape = jsonbody.Shape()
    for name, text in form.fields.items():
        if name in ("model", "route"):
            data[name] = text.strip()
            continue
        raw = text.encode("utf-8")
        if len(raw) > jsonbody.PRESCAN_BYTES:
            jsonbody.prescan(raw, state.limits)
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ServiceError(422, "invalid_form", f"form field {name!r} is not valid JSON: {exc}") from None
        if value is None:  # JSON null: a field sent is a value; the default is the field left out
            expected = _EXPECTED.get(name, "an object of rule overrides")
            raise ServiceError(
                422,
                "invalid_form",
                f"form field {name!r} must be {expected}; got null (leave it out instead)",
            )
        if name == "layout" and isinstance(value, list):
            convert.check_segment_count(len(value), state.settings)
        found = jsonbody.inspect(value, state.limits)
        jsonbody.check_duplicate_keys(raw, found)
        shape.scalar_lists.extend((name, *path) for path in found.scalar_lists)
        shape.scalar_items += found.scalar_items
        data[name] = value
    if "model" not in data:
        raise ServiceError(
            422, "invalid_form", "the form has no 'model' field (one of " + ", ".join(model_names()) + ")"
        )
    served = state.served_model(data)
    fields = jsonbody.validate(UploadFields, data, shape)
    return fields, served or fields.model


def place_files(fields: UploadFields, form: UploadForm, settings: Settings) -> list[TextSegment | FileItem]:
    """The layout (default: every file in order, no text); every file must be placed, indices in range."""
    n = len(form.files)
    if n == 0:
        raise ServiceError(
            422, "invalid_form", "the upload has no 'files' parts; send text-only sequences to /v1/positions"
        )
    layout = (
        fields.layout if fields.layout is not None else [FileItem(type="file", index=i) for i in range(n)]
    )
    convert.check_segment_count(len(layout), settings)
    placed = set()
    for k, item in enumerate(layout):
        if isinstance(item, FileItem):
            if item.index >= n:
                raise ServiceError(
                    422,
                    "invalid_form",
                    f"layout item {k} places file {item.index}, but {n} file(s) were sent",
                )
            placed.add(item.index)
    missing = sorted(set(range(n)) - placed)
    if missing:
        raise ServiceError(422, "invalid_form", f"file(s) {missing} are sent but not placed in the layout")
    return list(layout)


def assemble(
    layout: list[TextSegment | FileItem], loaded: Iterator[Any], reader: convert.ServiceReader
) -> tuple[list[Any], list[dict[str, Any]]]:
    """The library segments of an upload's layout, in order (``loaded``: the
    :class:`~mrope.service._media.LoadedFile` of each file item, in layout order; text items are read by
    ``reader``), and the info of each distinct load, in layout order."""
    segments: list[Any] = []
    infos: dict[int, dict[str, Any]] = {}
    for k, item in enumerate(layout):
        if isinstance(item, FileItem):
            done = next(loaded)
            segments.append(done.segment)
            infos.setdefault(id(done), done.info)
        else:
            segments.append(reader.text(item, f"layout item {k}"))
    return segments, list(infos.values())
