"""The service's endpoints (:class:`Routes`) and their registration with the app (:func:`add_routes`).

Every endpoint follows the same path: the guard checks content type, ``Accept`` and body size; pydantic
validates the body; the caps are checked with cheap counts; the library computes; JSON or npy is
rendered. Work over ``MROPE_INLINE_TOKENS`` tokens (or many video patches, a body over
:data:`INLINE_BODY_BYTES` or with chat messages, an upload's layout text) runs in a worker thread, never
on the event loop.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import orjson
from fastapi import Depends, Request
from starlette.responses import Response

import mrope
from mrope.models import resolve_rules
from mrope.schema import PositionsRequest
from mrope.schema._fields import rules_dict
from mrope.schema._request import FileItem
from mrope.schema._sets import sets_family

from . import _convert as convert
from . import _media as media
from . import _render as render
from . import _token_caps as token_caps
from ._compute import (
    Conversation,
    compute_rope_index,
    count_build_render,
    count_build_render_sets,
    decode_positions,
    decode_rope_index,
)
from ._direct import Endpoint, read_body
from ._errors import ServiceError
from ._guards import output_format, request_format
from ._metrics import CONTENT_TYPE
from ._openapi import ServiceApp
from ._paths import (
    HEALTH_PATH,
    METRICS_PATH,
    POSITIONS_PATH,
    PRESETS_PATH,
    READY_PATH,
    ROPE_INDEX_PATH,
    UPLOAD_PATH,
)
from ._render import OutputFormat
from ._state import ServiceState
from ._upload_fields import assemble, parse_upload_fields, place_files
from ._uploads import receive_upload
from ._wire import (
    ErrorResponse,
    HealthResponse,
    PositionSetsResponse,
    PositionsResponse,
    PresetsResponse,
    RopeIndexRequest,
    RopeIndexResponse,
    RopeIndexSetsResponse,
    UploadResponse,
    UploadSetsResponse,
    upload_form_schema,
)

INLINE_BODY_BYTES = 16 * 1024
"""JSON bodies up to this size are decoded and converted on the event loop (a few milliseconds at most:
text is tokenized at megabytes a second); larger ones, and any body with chat ``messages`` (whose
template renders cost more than their bytes), in a worker thread."""

_MESSAGES_KEY = b'"messages"'


def inline_body(raw: bytes) -> bool:
    """Whether a positions body is decoded and converted on the event loop (see
    :data:`INLINE_BODY_BYTES`)."""
    return len(raw) <= INLINE_BODY_BYTES and _MESSAGES_KEY not in raw


_HEALTH = orjson.dumps({"status": "ok", "version": mrope.__version__})

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Malformed body (bad JSON, bad multipart)"),
        (
            406,
            "Accept names none of application/json, application/x-npy and application/x-mrope-program "
            "(positions endpoints only), or one with a parameter other than q (and x-npy's dtype=int64)",
        ),
        (413, "Over a configured cap; error.cap names its environment variable"),
        (415, "Wrong Content-Type"),
        (422, "Invalid input: validation, layout, grid, token or media errors"),
    )
}

_NPY_DTYPE = (
    "npy integers are int32 when every value fits, else int64 (application/x-npy; dtype=int64: always "
    "int64); fractional positions are float32"
)
"""The npy form's dtype rule (:func:`mrope.service._render.wire_array`), in the OpenAPI of npy answers."""


_PROGRAM = (
    "mrope.PositionProgram.to_bytes(): the positions as runs (docs/engine.md, 'Position programs'); the other "
    "fields in the npy form's headers"
)


def _ok(model: type, description: str, *, program: bool = True) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of an endpoint: ``model`` as JSON, the npy array or (``program``: a
    positions endpoint) a position program, and the errors."""
    binary = {render.NPY: _NPY_DTYPE, **({render.PROGRAM: _PROGRAM} if program else {})}
    content = {
        t: {"schema": {"type": "string", "format": "binary", "description": d}} for t, d in binary.items()
    }
    return {
        200: {"model": model, "description": description, "content": content},
        **_ERRORS,
    }


class Routes:
    """The endpoints of one app, over its :class:`~mrope.service._state.ServiceState`."""

    def __init__(self, state: ServiceState) -> None:
        self.state = state

    @property
    def direct(self) -> dict[str, Endpoint]:
        """The hot JSON endpoints by path, for :class:`mrope.service._direct.DirectRoutes`."""
        return {POSITIONS_PATH: self.positions, ROPE_INDEX_PATH: self.rope_index}

    async def positions(self, request: Request) -> Response:
        """Positions of a sequence of segments: identical to ``mrope.build_positions``."""
        state = self.state
        settings = state.settings
        raw = await read_body(request.receive)
        body, model, rules, segments = await state.offload(
            functools.partial(decode_positions, raw, state), inline=inline_body(raw)
        )
        conversation = Conversation.of(body, rules)
        if segments is None:  # allowlisted media URLs: off the loop, in a media slot, under its timeout
            convert.check_urls(body, settings)  # refused ones wait for no slot
            to_segments = functools.partial(convert.request_segments, body, rules, settings, state.tokenizer)
            segments = await media.run_bounded(
                to_segments,  # called with the request's deadline
                state.slots,
                settings.media_timeout_s,
                "the media URLs",
            )
        weight = token_caps.weigh(segments, rules)
        family = sets_family(model, body.layer_sets)
        if family is not None:
            return await state.offload(
                functools.partial(
                    count_build_render_sets, segments, family, rules, request_format(request), state
                ),
                inline=weight.light(settings),
            )
        return await state.offload(
            functools.partial(
                count_build_render,
                segments,
                weight,
                model,
                rules,
                request_format(request),
                state,
                conversation=conversation,
            ),
            inline=weight.light(settings),
        )

    async def rope_index(self, request: Request) -> Response:
        """The token-id form: identical to ``mrope.get_rope_index`` (numpy core ``mrope.numpy_rope_index``)."""
        state = self.state
        raw = await read_body(request.receive)
        body, model, size = await state.offload(
            functools.partial(decode_rope_index, raw, state), inline=len(raw) <= INLINE_BODY_BYTES
        )
        return await state.offload(
            functools.partial(compute_rope_index, body, model, request_format(request), state),
            inline=size < state.settings.inline_tokens,
        )

    async def upload(self, request: Request, fmt: OutputFormat = Depends(output_format)) -> Response:
        """Positions of images and videos sent as files (sizes and metadata are read, nothing decoded)."""
        state = self.state
        settings = state.settings
        async with receive_upload(request, settings, state.budget) as form:
            field_bytes = sum(len(text) for text in form.fields.values())
            fields, model = await state.offload(
                functools.partial(parse_upload_fields, form, state), inline=field_bytes <= INLINE_BODY_BYTES
            )
            rules = resolve_rules(model, rules_dict(fields.rules))
            layout = place_files(fields, form, settings)
            file_items = [item for item in layout if isinstance(item, FileItem)]
            loaded = iter(
                await media.load_files(
                    form.files,
                    file_items,
                    model,
                    rules,
                    settings,
                    state.slots,
                    state.metrics.media_seconds,
                    route=fields.route,
                )
            )
            reader = convert.ServiceReader(rules, settings, state.tokenizer)
            # the layout's text is tokenized in the worker pool, whatever its size
            segments, infos = await state.offload(
                functools.partial(assemble, layout, loaded, reader), inline=len(file_items) == len(layout)
            )
            extra = {"files": infos}
            weight = token_caps.weigh(segments, rules)
            family = sets_family(model, fields.layer_sets)
            if family is not None:
                return await state.offload(
                    functools.partial(count_build_render_sets, segments, family, rules, fmt, state, extra),
                    inline=weight.light(settings),
                )
            return await state.offload(
                functools.partial(count_build_render, segments, weight, model, rules, fmt, state, extra),
                inline=weight.light(settings),
            )

    async def healthz(self) -> Response:
        """Liveness: the process answers (no API key needed)."""
        return Response(_HEALTH, media_type=render.JSON)

    async def readyz(self) -> Response:
        """Readiness: started (tokenizer loaded, stale uploads swept), not shutting down, and the upload
        folder writable; 503 otherwise."""
        problem = None
        temp_root = self.state.settings.temp_root
        if not self.state.ready:
            problem = "the worker is starting or shutting down"
        elif not os.access(temp_root, os.W_OK | os.X_OK):
            problem = f"the upload folder {temp_root!r} is not writable"
        if problem is not None:
            raise ServiceError(503, "not_ready", problem, headers={"Retry-After": "1"})
        return Response(_HEALTH, media_type=render.JSON)

    async def metrics_text(self) -> Response:
        """Prometheus metrics of this worker (text exposition format)."""
        return Response(self.state.metrics.render(), media_type=CONTENT_TYPE)

    async def presets(self) -> Response:
        """The RopeSpec and LayoutRules of every model preset."""
        return Response(self.state.presets_body, media_type=render.JSON)


def add_routes(app: ServiceApp, routes: Routes) -> None:
    """Declare every endpoint of ``routes`` on ``app``, with its OpenAPI description (the hot JSON ones
    are answered by :class:`~mrope.service._direct.DirectRoutes`, their routes serve the schema and 405s)."""
    app.get(HEALTH_PATH, response_model=HealthResponse, tags=["meta"])(routes.healthz)
    app.get(READY_PATH, response_model=HealthResponse, tags=["meta"])(routes.readyz)
    app.get(METRICS_PATH, tags=["meta"], response_class=Response)(routes.metrics_text)
    app.get(PRESETS_PATH, response_model=PresetsResponse, tags=["meta"])(routes.presets)
    app.post(
        POSITIONS_PATH,
        response_model=None,
        responses=_ok(
            PositionsResponse | PositionSetsResponse,
            "Positions [3][T] (JSON), or the array (npy) with headers; with layer_sets, every position set "
            "(JSON) or the sets stacked [S][3][T] (npy)",
        ),
        openapi_extra=app.json_body(PositionsRequest),
        tags=["positions"],
    )(routes.positions)
    app.post(
        ROPE_INDEX_PATH,
        response_model=None,
        responses=_ok(
            RopeIndexResponse | RopeIndexSetsResponse,
            "position_ids [3][B][L] and deltas [B] (JSON), or the array (npy); with layer_sets, every "
            "position set (JSON) or the sets stacked [S][3][B][L] (npy)",
            program=False,
        ),
        openapi_extra=app.json_body(RopeIndexRequest),
        tags=["positions"],
    )(routes.rope_index)
    app.post(
        UPLOAD_PATH,
        response_model=None,
        responses=_ok(
            UploadResponse | UploadSetsResponse,
            "Positions plus the grids derived from the files; with layer_sets, every position set (JSON) or "
            "the sets stacked [S][3][T] (npy)",
        ),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"multipart/form-data": {"schema": upload_form_schema()}},
            }
        },
        tags=["positions"],
    )(routes.upload)
