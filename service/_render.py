"""Output formats: JSON (orjson, numpy arrays serialized natively), ``application/x-npy`` or a position program.

The npy form is the raw array as ``np.save`` writes it, in the narrowest integer type that holds every
value (int32 when all of them lie in [-2**31, 2**31), int64 otherwise; float32 for the fractional
positions of Qwen3-Omni). ``Accept: application/x-npy; dtype=int64`` asks for int64 whatever the values
(float32 stays float32); any other parameter or value is a 406. The small values travel in headers:
``X-MRope-Delta`` (or ``X-MRope-Deltas``), ``X-MRope-Num-Tokens``, and compact JSON in ``X-MRope-Spans``,
``X-MRope-Image-Grid-Thw``, ``X-MRope-Video-Grid-Thw``, ``X-MRope-Second-Per-Grid-Ts``, ``X-MRope-Notes``
(and ``X-MRope-Audio-Tokens`` for rules with audio, ``X-MRope-Generation-Ids`` when there are images to
generate, ``X-MRope-Files`` for uploads). A JSON header value longer than ``MROPE_NPY_MAX_HEADER_BYTES`` (e.g.
thousands of spans) is left out and its header name listed in ``X-MRope-Omitted``: HTTP clients cap
header sizes, and the JSON form always carries everything.

``Accept: application/x-mrope-program`` answers a positions endpoint with the bytes of
:meth:`mrope.PositionProgram.to_bytes` (docs/engine.md, "Position programs": the runs, delta and token
count inside), the other fields in the npy form's headers. ``/v1/rope-index`` (a padded batch) has no
program form: a 406.

The JSON answer of a positions endpoint also carries ``media``: each image's and video's record of how it
was read and sized (:meth:`mrope.media.MediaRecord.as_dict`, ``null`` for one given by its grid); the npy
and program answers carry no media.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
import orjson
from starlette.responses import Response

from mrope import Positions
from mrope._caches import register
from mrope._errors import LayoutError
from mrope._position_sets import stacked_ids
from mrope._result_rows import media_items

from ._errors import ServiceError

NPY = "application/x-npy"
JSON = "application/json"
PROGRAM = "application/x-mrope-program"
OutputFormat = Literal["json", "npy", "npy-int64", "program"]
"""JSON, npy in the narrowest integer type (``application/x-npy``), npy with integers as int64
(``application/x-npy; dtype=int64``), or a position program (``application/x-mrope-program``)."""
NPY_DTYPES: dict[str, OutputFormat] = {"int64": "npy-int64"}
"""The values of ``application/x-npy``'s ``dtype`` parameter and the format each asks for."""

_OPTS = orjson.OPT_SERIALIZE_NUMPY
_JSON_RANGES = (JSON, "application/*", "*/*")


def negotiate(accept: str | None) -> OutputFormat:
    """The output format for an ``Accept`` header: the acceptable type with the highest q wins, an exact
    type beats a wildcard at equal q, then the earlier one; JSON when the header is absent. A header that
    accepts neither type, or an ``application/x-npy`` with a parameter other than ``q`` and
    ``dtype=int64``, is a 406."""
    if not accept or not accept.strip():
        return "json"
    candidates: list[tuple[tuple[float, int, int], OutputFormat]] = []
    for order, item in enumerate(accept.split(",")):
        media, _, params = item.strip().partition(";")
        media = media.strip().lower()
        fmt: OutputFormat | None = _MEDIA.get(media, "json" if media in _JSON_RANGES else None)
        q = 1.0
        for p in params.split(";"):
            key, _, value = p.strip().partition("=")
            key, value = key.strip().lower(), value.strip().strip('"')
            if not key:
                continue
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
            elif fmt is not None and fmt != "json":
                fmt = _npy_parameter(key, value, item, fmt)
        if fmt is not None and 0.0 < q <= 1.0:
            candidates.append(((q, int("*" not in media), -order), fmt))
    if not candidates:
        raise ServiceError(
            406,
            "not_acceptable",
            f"cannot produce any type in Accept: {accept[:200]!r}; available: {JSON} (default), {NPY} "
            f"(or {', '.join(f'{NPY}; dtype={name}' for name in NPY_DTYPES)}) and {PROGRAM}",
        )
    return max(candidates)[1]


_MEDIA: dict[str, OutputFormat] = {NPY: "npy", PROGRAM: "program"}


def _npy_parameter(key: str, value: str, item: str, media: OutputFormat) -> OutputFormat:
    """The format an ``application/x-npy`` media range's parameter ``key=value`` asks for; a 406 for a
    parameter or value this service does not know (a program takes none but ``q``)."""
    if media == "program":
        raise ServiceError(
            406, "not_acceptable", f"{PROGRAM} takes no parameter but q; got {item.strip()[:200]!r}"
        )
    fmt = NPY_DTYPES.get(value.lower()) if key == "dtype" else None
    if fmt is None:
        expected = " or ".join(f"dtype={name}" for name in NPY_DTYPES)
        raise ServiceError(
            406,
            "not_acceptable",
            f"{NPY} takes the parameters q and {expected} (without dtype: the narrowest integer type, int32 "
            f"or int64); got {item.strip()[:200]!r}",
        )
    return fmt


def _json_header(value: Any) -> bytes:
    """Compact JSON that is plain ASCII, as a header value's bytes (header values must be latin-1; file
    names may be anything)."""
    text = orjson.dumps(value, option=_OPTS)
    if text.isascii():
        return text
    return json.dumps(json.loads(text), ensure_ascii=True, separators=(",", ":")).encode("ascii")


_NPY_DESCR = {np.dtype("<i4"): "<i4", np.dtype("<i8"): "<i8", np.dtype("<f4"): "<f4"}
"""The dtypes the service answers in npy and their ``descr`` in the header (the others go through numpy)."""
_NPY_MAGIC = b"\x93NUMPY\x01\x00"


def _npy_header(arr: np.ndarray) -> bytes:
    """The format 1.0 header ``np.save`` writes for a C-contiguous ``arr`` (numpy/lib/_format_impl.py
    ``_write_array_header``: the sorted dict's repr, room for the first axis to grow to 21 digits,
    spaces and a newline up to a multiple of 64 bytes), built without numpy's Python writer (a fifth
    of its time)."""
    descr = _NPY_DESCR.get(arr.dtype)
    if descr is None:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(arr))
        return header.getvalue()
    shape = arr.shape
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    if shape:
        text += " " * (21 - len(repr(shape[0])))
    hlen = len(text) + 1
    padlen = 64 - (10 + hlen) % 64
    return b"".join(
        (_NPY_MAGIC, (hlen + padlen).to_bytes(2, "little"), text.encode("latin-1"), b" " * padlen, b"\n")
    )


def npy_bytes(arr: np.ndarray) -> bytes:
    """Exactly what ``np.save`` writes (format 1.0), built with one copy of the data instead of three."""
    arr = np.ascontiguousarray(arr)
    return b"".join((_npy_header(arr), memoryview(arr.reshape(-1)).cast("B")))


_INT32_MIN, _INT32_MAX = int(np.iinfo(np.int32).min), int(np.iinfo(np.int32).max)


def wire_array(arr: np.ndarray, fmt: OutputFormat) -> np.ndarray:
    """``arr`` as the npy body carries it: an int64 array as int32 when every value fits (and ``fmt`` is
    not ``"npy-int64"``), anything else unchanged. Half the bytes for the kernel and the client to copy;
    the check costs two passes over the array."""
    if arr.dtype != np.int64 or fmt == "npy-int64":
        return arr
    if arr.size and not (_INT32_MIN <= int(arr.min()) and int(arr.max()) <= _INT32_MAX):
        return arr
    return arr.astype(np.int32)


_NPY_TYPE = (b"content-type", NPY.encode("latin-1"))
_PROGRAM_TYPE = (b"content-type", PROGRAM.encode("latin-1"))


def _npy_response(
    arr: np.ndarray | bytes,
    fmt: OutputFormat,
    plain: Mapping[str, str],
    meta: Mapping[str, Any],
    max_header: int,
) -> Response:
    """The npy response (or a program's, ``arr`` its bytes): its headers go straight to the raw list
    Starlette sends (names lower-cased, as ``Response(headers=...)`` writes them), the JSON ones as
    orjson's bytes."""
    raw = [(_header_name(name), value.encode("latin-1")) for name, value in plain.items()]
    omitted = []
    for name, value in meta.items():
        text = _json_header(value)
        if len(text) > max_header:
            omitted.append(name)
        else:
            raw.append((_header_name(name), text))
    if omitted:
        raw.append((b"x-mrope-omitted", ", ".join(omitted).encode("latin-1")))
    body = arr if isinstance(arr, bytes) else npy_bytes(wire_array(arr, fmt))
    response = Response(body, media_type=NPY)
    raw.append((b"content-length", str(len(body)).encode("latin-1")))
    raw.append(_PROGRAM_TYPE if isinstance(arr, bytes) else _NPY_TYPE)
    response.raw_headers = raw
    return response


_HEADER_NAMES: dict[str, bytes] = {}


def _header_name(name: str) -> bytes:
    """A header name as its raw lower-case latin-1 bytes (a handful of names: cached)."""
    raw = _HEADER_NAMES.get(name)
    if raw is None:
        raw = _HEADER_NAMES[name] = name.lower().encode("latin-1")
    return raw


_META_NAMES: dict[str, str] = {}
register("service.header_names", _HEADER_NAMES.clear, lambda: len(_HEADER_NAMES))
register("service.meta_names", _META_NAMES.clear, lambda: len(_META_NAMES))


def _meta_name(key: str) -> str:
    """``"image_grid_thw"`` -> ``"X-MRope-Image-Grid-Thw"`` (a handful of keys: cached)."""
    name = _META_NAMES.get(key)
    if name is None:
        name = _META_NAMES[key] = "X-MRope-" + "-".join(w.capitalize() for w in key.split("_"))
    return name


def positions_payload(pos: Positions) -> dict[str, Any]:
    """Everything of a :class:`~mrope.Positions` that a response carries besides the ids."""
    return pos.metadata()


def render_positions(
    pos: Positions, fmt: OutputFormat, max_header: int, extra: Mapping[str, Any] | None = None
) -> Response:
    """The response of a positions endpoint (``extra``: more top-level fields, e.g. ``files``)."""
    payload = positions_payload(pos)
    if extra:
        payload.update(extra)
    if fmt == "json":
        body = orjson.dumps({"positions": pos.ids, **payload, "media": media_items(pos)}, option=_OPTS)
        return Response(body, media_type=JSON)
    plain = {"X-MRope-Delta": str(pos.delta), "X-MRope-Num-Tokens": str(pos.num_tokens)}
    meta = {_meta_name(k): v for k, v in payload.items() if k not in ("delta", "num_tokens")}
    body = pos.program().to_bytes() if fmt == "program" else pos.ids
    return _npy_response(body, fmt, plain, meta, max_header)


def render_position_sets(
    sets: Mapping[str, Positions],
    pattern: tuple[str, ...],
    fmt: OutputFormat,
    max_header: int,
    extra: Mapping[str, Any] | None = None,
) -> Response:
    """The response of a positions request with ``layer_sets``: JSON ``{"position_sets": {name: {positions,
    delta, ...}}, "layer_pattern", "media"}``; npy, the sets stacked ``[S, A, T]`` in their order
    (``X-MRope-Position-Sets``), in one dtype that holds every set exactly (float64 where integer and
    fractional sets meet), the deltas in ``X-MRope-Deltas`` and each other field as a list over the sets.
    ``extra``: more top-level fields, shared by the sets (an upload's ``files``; npy: a header each)."""
    first = next(iter(sets.values()))
    if fmt == "json":
        doc = {name: {"positions": p.ids, **positions_payload(p)} for name, p in sets.items()}
        body = {
            "position_sets": doc,
            "layer_pattern": list(pattern),
            **(extra or {}),
            "media": media_items(first),
        }
        return Response(orjson.dumps(body, option=_OPTS), media_type=JSON)
    if fmt == "program":
        raise ServiceError(
            406,
            "not_acceptable",
            f"position sets (layer_sets) have no {PROGRAM} form, a program being one set's; ask for {JSON} "
            f"or {NPY}",
        )
    try:
        stacked = stacked_ids(sets)
    except LayoutError as exc:
        raise ServiceError(422, "invalid_input", f"{exc}: ask for {JSON}") from None
    payloads = [positions_payload(p) for p in sets.values()]
    plain = {"X-MRope-Num-Tokens": str(first.num_tokens)}
    meta: dict[str, Any] = {
        "X-MRope-Position-Sets": list(sets),
        "X-MRope-Layer-Pattern": list(pattern),
        "X-MRope-Deltas": [d["delta"] for d in payloads],
    }
    for key in payloads[0]:
        if key not in ("delta", "num_tokens"):
            meta[_meta_name(key)] = [d.get(key) for d in payloads]
    meta.update({_meta_name(k): v for k, v in (extra or {}).items()})
    return _npy_response(stacked, fmt, plain, meta, max_header)


def _no_batch_program(fmt: OutputFormat) -> None:
    if fmt == "program":
        raise ServiceError(
            406,
            "not_acceptable",
            f"/v1/rope-index answers a padded batch, which has no {PROGRAM} form; ask for {JSON} or {NPY} "
            "(or a sequence's program from /v1/positions)",
        )


def render_rope_index(
    position_ids: np.ndarray, deltas: np.ndarray, fmt: OutputFormat, max_header: int
) -> Response:
    """The response of ``/v1/rope-index``: ``[3, B, L]`` ids and ``[B]`` deltas."""
    _no_batch_program(fmt)
    if fmt == "json":
        body = orjson.dumps({"position_ids": position_ids, "deltas": deltas}, option=_OPTS)
        return Response(body, media_type=JSON)
    plain = {"X-MRope-Batch": str(position_ids.shape[1]), "X-MRope-Length": str(position_ids.shape[2])}
    return _npy_response(position_ids, fmt, plain, {"X-MRope-Deltas": deltas}, max_header)


def render_rope_index_sets(
    sets: Mapping[str, tuple[np.ndarray, np.ndarray]],
    pattern: tuple[str, ...],
    fmt: OutputFormat,
    max_header: int,
) -> Response:
    """The response of ``/v1/rope-index`` with ``layer_sets``: JSON ``{"position_sets": {name:
    {position_ids [3][B][L], deltas [B]}}, "layer_pattern"}``; npy, the sets stacked ``[S, 3, B, L]`` in
    their order (``X-MRope-Position-Sets``) in one dtype that holds every set exactly (float64 where
    integer and fractional sets meet), their deltas ``[S][B]`` in ``X-MRope-Deltas``."""
    _no_batch_program(fmt)
    if fmt == "json":
        doc = {name: {"position_ids": ids, "deltas": d} for name, (ids, d) in sets.items()}
        body = orjson.dumps({"position_sets": doc, "layer_pattern": list(pattern)}, option=_OPTS)
        return Response(body, media_type=JSON)
    dtype = np.result_type(*(ids.dtype for ids, _ in sets.values()))
    stacked = np.stack([ids.astype(dtype, copy=False) for ids, _ in sets.values()])
    plain = {"X-MRope-Batch": str(stacked.shape[2]), "X-MRope-Length": str(stacked.shape[3])}
    meta = {
        "X-MRope-Position-Sets": list(sets),
        "X-MRope-Layer-Pattern": list(pattern),
        "X-MRope-Deltas": [d for _, d in sets.values()],
    }
    return _npy_response(stacked, fmt, plain, meta, max_header)
