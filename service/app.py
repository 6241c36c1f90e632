"""The FastAPI app: a thin HTTP face over :func:`mrope.build_positions` and :func:`mrope.numpy_rope_index`.

Run it with ``uvicorn mrope.service.app:app`` (settings from ``MROPE_*`` environment variables, see
:mod:`mrope.service.settings`) or :func:`mrope.service.server.run`. :func:`create_app` builds an app from explicit
:class:`~mrope.service.settings.Settings` (tests use it).

Every endpoint follows the same path: the guard checks content type, ``Accept`` and body size; pydantic
validates the body; the caps are checked with cheap counts; the library computes; JSON or npy is
rendered. Work over ``MROPE_INLINE_TOKENS`` tokens (or many video patches, or a body over
:data:`INLINE_BODY_BYTES`) runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

import mrope
from mrope import models as registry
from mrope.errors import MRopeWarning
from mrope.models import resolve_rules
from mrope.rules import LayoutRules
from mrope.schema import PositionsRequest, RequestError, TextSegment
from mrope.schema.fields import model_names, rules_dict
from mrope.schema.request import FileItem, UploadFields
from mrope.schema.state import check_turn_start, request_state
from mrope.schema.text import load_tokenizer

from . import convert, docs, jsonbody, media, render
from .direct import DirectRoutes, read_body
from .errors import ServiceError, install_handlers, over_cap
from .guards import BodyPace, RequestGuard, Route, output_format, request_format
from .memory import pin_mmap_threshold
from .metrics import CONTENT_TYPE, Metrics
from .operator import AccessLog, ApiKeys, ConcurrencyLimit
from .page import PAGE_PATH, install_page
from .render import OutputFormat
from .settings import Settings
from .uploads import TempBudget, UploadForm, receive_upload, sweep_stale_spools
from .wire import (
    ErrorResponse,
    HealthResponse,
    PositionsResponse,
    PresetsResponse,
    RopeIndexRequest,
    RopeIndexResponse,
    UploadResponse,
    upload_form_schema,
)

POSITIONS_PATH = "/v1/positions"
ROPE_INDEX_PATH = "/v1/rope-index"
UPLOAD_PATH = "/v1/positions/upload"
PRESETS_PATH = "/v1/presets"
HEALTH_PATH = "/healthz"
READY_PATH = "/readyz"
METRICS_PATH = "/metrics"
PROBE_PATHS = (HEALTH_PATH, READY_PATH, METRICS_PATH)
"""Not counted against MROPE_MAX_CONCURRENT: an overloaded worker still answers its probes."""
ENDPOINTS = (
    POSITIONS_PATH,
    ROPE_INDEX_PATH,
    UPLOAD_PATH,
    PRESETS_PATH,
    *PROBE_PATHS,
    docs.DOCS_PATH,
    docs.REDOC_PATH,
    "/openapi.json",
    PAGE_PATH,
)
"""The paths metrics are labelled with (any other is "other")."""
INLINE_BODY_BYTES = 64 * 1024
"""JSON bodies up to this size are converted on the event loop; larger ones in a worker thread."""

T = TypeVar("T")
log = logging.getLogger("mrope.service")

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Malformed body (bad JSON, bad multipart)"),
        (
            406,
            "Accept names neither application/json nor application/x-npy, or x-npy with a parameter other "
            "than q and dtype=int64",
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
"""The npy form's dtype rule (:func:`mrope.service.render.wire_array`), in the OpenAPI of npy answers."""


def _ok(model: type, description: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": model,
            "description": description,
            "content": {
                render.NPY: {"schema": {"type": "string", "format": "binary", "description": _NPY_DTYPE}}
            },
        },
        **_ERRORS,
    }


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its JSON itself (see :mod:`mrope.service.jsonbody`)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
        }
    }


def _add_body_schemas(app: FastAPI, models: tuple[type[BaseModel], ...]) -> None:
    """Put the request models' schemas into the app's OpenAPI components (FastAPI only collects the
    models of the parameters it parses itself)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                found = model.model_json_schema(ref_template="#/components/schemas/{model}")
                for name, sub in found.pop("$defs", {}).items():
                    components.setdefault(name, sub)
                components[model.__name__] = found
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def service_tokenizer(path: str | None) -> Any:
    """The tokenizer of ``MROPE_TOKENIZER`` (a ``tokenizer.json``), or ``None`` without one."""
    try:
        return load_tokenizer(path)
    except RequestError as exc:
        raise RuntimeError(f"MROPE_TOKENIZER={path!r}: {exc}") from exc


def load_checkpoint(path: str | None) -> Any:
    """``mrope.from_pretrained(path)`` (the model served as ``MROPE_MODEL_NAME``), or ``None``."""
    if path is None:
        return None
    try:
        return mrope.from_pretrained(path)
    except mrope.MRopeError as exc:
        raise RuntimeError(
            f"MROPE_MODEL_DIR={path!r} cannot be loaded as a checkpoint folder: {exc}"
        ) from exc


@dataclass
class ServiceState:
    """What the routes share: settings, the tokenizer, the temp budget, the media reader slots, the
    metrics, and whether the worker is ready."""

    settings: Settings
    tokenizer: Any
    budget: TempBudget
    presets_body: bytes
    limits: jsonbody.BodyLimits
    metrics: Metrics
    slots: media.MediaSlots
    checkpoint: Any = None
    ready: bool = False

    def served_model(self, data: Any) -> Any:
        """The checkpoint of ``MROPE_MODEL_DIR`` when a raw request names it (``MROPE_MODEL_NAME``), else
        ``None``. The request's ``model`` becomes the checkpoint's family name, so the schema validates
        it as usual; the caller builds with the checkpoint itself."""
        if (
            self.checkpoint is None
            or not isinstance(data, dict)
            or data.get("model") != self.settings.model_name
        ):
            return None
        data["model"] = self.checkpoint.name
        return self.checkpoint

    async def offload(self, fn: Callable[[], T], inline: bool) -> T:
        """Run ``fn`` here when it is small, else in a worker thread."""
        return fn() if inline else await run_in_threadpool(fn)


def _presets_body() -> bytes:
    return orjson.dumps(
        {
            "presets": {
                family.name: {"spec": family.spec.to_dict(), "rules": family.rules.to_dict()}
                for family in registry.families()
            }
        }
    )


# ---------------------------------------------------------------------------------- computations


def count_build_render(
    segments: list[mrope.Text | mrope.Image | mrope.Video],
    weight: convert.Weight,
    model: Any,
    rules: LayoutRules,
    fmt: OutputFormat,
    state: ServiceState,
    extra: dict[str, Any] | None = None,
    conversation: Conversation | None = None,
) -> Response:
    """Token cap, then the library's positions, rendered (``weight``: :func:`mrope.service.convert.weigh`
    of the segments; ``conversation``: the request's continued conversation, if any).

    The cap is checked before any position is written: exactly (:func:`mrope.count_tokens`), or, for a
    request that :meth:`~mrope.service.convert.Weight.surely_under_cap` places far below it by arithmetic,
    after building (the count would cost as much again as the build).
    """
    settings = state.settings
    weight.check_work(settings)
    counted = not weight.surely_under_cap(settings)
    if counted:
        convert.count_tokens(segments, rules, settings, state.tokenizer, weight.token_floor)
    after: mrope.ConversationState | None = None
    if conversation is not None and conversation.previous is not None:
        # a turn is laid out from where the conversation stands (its own tokens' work): only bounded
        check_turn_start(conversation.previous, conversation.generated)
        turn = mrope.continue_positions(
            conversation.previous,
            segments,
            generated=conversation.generated,
            model=model,
            rules=rules,
            tokenizer=state.tokenizer,
        )
        pos, after = turn.positions, turn.state
    else:
        pos = mrope.build_positions(segments, model=model, rules=rules, tokenizer=state.tokenizer)
    if not counted:
        convert.check_tokens(pos.num_tokens, settings)
    if conversation is not None and conversation.return_state:
        after = after if after is not None else mrope.conversation_state(pos)
        extra = {**(extra or {}), "state": after.to_dict()}
    state.metrics.tokens.inc(pos.num_tokens)
    return render.render_positions(pos, fmt, state.settings.npy_max_header_bytes, extra)


@dataclass(frozen=True)
class Conversation:
    """A positions request's conversation fields: the state it continues (``None``: a new one), the
    tokens generated since, whether to return the state after it."""

    previous: mrope.ConversationState | None
    generated: int
    return_state: bool

    @classmethod
    def of(cls, body: PositionsRequest, rules: LayoutRules) -> Conversation | None:
        """``None`` when the request names neither ``state`` nor ``return_state``."""
        if body.state is None and not body.return_state:
            return None
        return cls(request_state(body.state, rules), body.generated or 0, bool(body.return_state))


def check_rope_index_size(body: RopeIndexRequest, rules: LayoutRules, settings: Settings) -> int:
    """Cheap caps of a rope-index request; returns ``B * L``."""
    rows = len(body.input_ids)
    if rows > settings.max_batch:
        raise over_cap(
            "too_many_rows", "the batch size (input_ids rows)", rows, "MROPE_MAX_BATCH", settings.max_batch
        )
    length = max((len(r) for r in body.input_ids), default=0)
    if rows == 0 or length == 0:
        raise ServiceError(
            422,
            "invalid_input",
            f"input_ids must hold at least one row of at least one token id; got {rows} row(s) of "
            f"{length} id(s)",
        )
    size = rows * length
    convert.check_tokens(size, settings, "the token count B*L of input_ids")
    m2 = rules.merge_size * rules.merge_size
    for name in ("image_grid_thw", "video_grid_thw"):
        for i, (t, h, w) in enumerate(getattr(body, name) or ()):
            convert.check_tokens(t * h * w // m2, settings, f"the token count of {name}[{i}]")
    return size


def precheck_positions(data: Any, settings: Settings) -> None:
    """The segment cap on the raw body, before any segment is validated."""
    segments = data.get("segments") if isinstance(data, dict) else None
    if isinstance(segments, list):
        convert.check_segment_count(len(segments), settings)
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list):  # every message item is a segment (or text run) of its own
        convert.check_segment_count(
            sum(
                len(m["content"]) if isinstance(m, dict) and isinstance(m.get("content"), list) else 1
                for m in messages
            ),
            settings,
        )


def precheck_rope_index(data: Any, settings: Settings) -> None:
    """The batch and token caps on the raw body, before any id is validated."""
    ids = data.get("input_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        return
    if len(ids) > settings.max_batch:
        raise over_cap(
            "too_many_rows",
            "the batch size (input_ids rows)",
            len(ids),
            "MROPE_MAX_BATCH",
            settings.max_batch,
        )
    longest = max((len(row) for row in ids if isinstance(row, list)), default=0)
    convert.check_tokens(len(ids) * longest, settings, "the token count B*L of input_ids")


def decode_positions(
    raw: bytes, state: ServiceState
) -> tuple[PositionsRequest, Any, LayoutRules, list[mrope.Text | mrope.Image | mrope.Video] | None]:
    """A positions body: bounded decode and validation, then the library segments (``None`` when a
    segment names a media file: those are read in a media slot). Returns the body, the model (a name,
    or the checkpoint of ``MROPE_MODEL_DIR``), its rules and the segments."""
    settings = state.settings
    served: list[Any] = [None]

    def precheck(data: Any) -> None:
        precheck_positions(data, settings)
        served[0] = state.served_model(data)

    body = jsonbody.decode(raw, PositionsRequest, state.limits, precheck)
    model = served[0] or body.model
    rules = resolve_rules(model, rules_dict(body.rules), body.convention or "released")
    if convert.reads_media(convert.request_items(body)):
        return body, model, rules, None
    return body, model, rules, convert.request_segments(body, rules, settings, state.tokenizer)


def decode_rope_index(raw: bytes, state: ServiceState) -> tuple[RopeIndexRequest, Any, int]:
    """A rope-index body: bounded decode and validation, then its caps; returns it, its model and
    ``B * L``."""
    served: list[Any] = [None]

    def precheck(data: Any) -> None:
        precheck_rope_index(data, state.settings)
        served[0] = state.served_model(data)

    body = jsonbody.decode(raw, RopeIndexRequest, state.limits, precheck)
    model = served[0] or body.model
    rules = resolve_rules(model, rules_dict(body.rules))
    return body, model, check_rope_index_size(body, rules, state.settings)


def compute_rope_index(
    body: RopeIndexRequest, model: Any, fmt: OutputFormat, state: ServiceState
) -> Response:
    position_ids, deltas = mrope.numpy_rope_index(
        body.input_ids,
        body.image_grid_thw,
        body.video_grid_thw,
        body.attention_mask,
        model=model,
        rules=rules_dict(body.rules),
        second_per_grid_ts=body.second_per_grid_ts,
        mm_token_type_ids=body.mm_token_type_ids,
        pad_position=body.pad_position,
        audio_seqlens=body.audio_seqlens,
        use_audio_in_video=body.use_audio_in_video,
    )
    state.metrics.tokens.inc(position_ids.shape[1] * position_ids.shape[2])
    return render.render_rope_index(position_ids, deltas, fmt, state.settings.npy_max_header_bytes)


def parse_upload_fields(form: UploadForm, state: ServiceState) -> tuple[UploadFields, Any]:
    """The ``model``, ``layout`` and ``rules`` form fields, validated like a JSON body (bounded walk,
    no repeated keys, skeleton first; 422 with at most a few pydantic details)."""
    data: dict[str, Any] = {}
    shape = jsonbody.Shape()
    for name, text in form.fields.items():
        if name == "model":
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
            expected = "an array of layout items" if name == "layout" else "an object of rule overrides"
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


# ------------------------------------------------------------------------------------------ app


def create_app(settings: Settings | None = None) -> FastAPI:
    """The service app for ``settings`` (default: from the environment)."""
    settings = settings if settings is not None else Settings.from_env()
    settings.check()
    metrics = Metrics()
    checkpoint = load_checkpoint(settings.model_dir)
    tokenizer = service_tokenizer(settings.tokenizer)
    if tokenizer is None and checkpoint is not None:
        tokenizer = checkpoint.tokenizer
    state = ServiceState(
        settings=settings,
        tokenizer=tokenizer,
        checkpoint=checkpoint,
        budget=TempBudget(settings.max_temp_bytes),
        presets_body=_presets_body(),
        limits=jsonbody.BodyLimits.from_settings(settings),
        metrics=metrics,
        slots=media.MediaSlots(settings.media_threads, metrics.media_busy),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # notes are returned in every response; the warning copies would only flood the server log
        warnings.filterwarnings("ignore", category=MRopeWarning)
        pin_mmap_threshold()
        swept = sweep_stale_spools(settings.temp_root)
        if swept:
            log.warning(
                "removed %d upload folder(s) left by dead processes: %s", len(swept), ", ".join(swept)
            )
        state.ready = True
        try:
            yield
        finally:
            state.ready = False

    app = FastAPI(
        title="mrope",
        version=mrope.__version__,
        summary="Multimodal M-RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V) over HTTP",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = state
    install_handlers(app)

    async def positions(request: Request) -> Response:
        """Positions of a sequence of segments: identical to ``mrope.build_positions``."""
        raw = await read_body(request.receive)
        body, model, rules, segments = await state.offload(
            functools.partial(decode_positions, raw, state), inline=len(raw) <= INLINE_BODY_BYTES
        )
        conversation = Conversation.of(body, rules)
        if segments is None:  # allowlisted media URLs: off the loop, in a media slot, under its timeout
            to_segments = functools.partial(convert.request_segments, body, rules, settings, state.tokenizer)
            segments = await media.run_bounded(
                lambda _deadline: to_segments(), state.slots, settings.media_timeout_s, "the media URLs"
            )
        weight = convert.weigh(segments, rules)
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

    async def rope_index(request: Request) -> Response:
        """The token-id form: identical to ``mrope.get_rope_index`` (numpy core ``mrope.numpy_rope_index``)."""
        raw = await read_body(request.receive)
        body, model, size = await state.offload(
            functools.partial(decode_rope_index, raw, state), inline=len(raw) <= INLINE_BODY_BYTES
        )
        return await state.offload(
            functools.partial(compute_rope_index, body, model, request_format(request), state),
            inline=size < settings.inline_tokens,
        )

    # innermost of the service's middlewares: the hot endpoints skip the router (see mrope.service.direct)
    app.add_middleware(
        DirectRoutes,
        endpoints={POSITIONS_PATH: positions, ROPE_INDEX_PATH: rope_index},
        handlers=app.exception_handlers,
    )
    json_route = Route(
        settings.max_body_bytes,
        "MROPE_MAX_BODY_BYTES",
        ("application/json",),
        "a JSON body (Content-Type: application/json)",
        negotiates=True,
        body_timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(
        RequestGuard,
        routes={
            POSITIONS_PATH: json_route,
            ROPE_INDEX_PATH: json_route,
            UPLOAD_PATH: Route(
                settings.max_upload_bytes,
                "MROPE_MAX_UPLOAD_BYTES",
                ("multipart/form-data",),
                "a multipart form (Content-Type: multipart/form-data)",
                negotiates=True,
                body_timeout_s=settings.upload_timeout_s,
                body_timeout_cap="MROPE_UPLOAD_TIMEOUT_S",
            ),
        },
        default=Route(
            settings.max_body_bytes, "MROPE_MAX_BODY_BYTES", body_timeout_s=settings.body_timeout_s
        ),
        pace=BodyPace(settings.read_timeout_s, float(settings.min_upload_rate)),
    )
    app.add_middleware(ConcurrencyLimit, limit=settings.max_concurrent, metrics=metrics, exempt=PROBE_PATHS)
    if settings.api_key_list:
        app.add_middleware(ApiKeys, keys=settings.api_key_list, open_paths=(HEALTH_PATH,))
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origin_list),
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "accept", "x-request-id"],
            expose_headers=["x-request-id", "x-mrope-delta", "x-mrope-num-tokens"],
        )
    build_stack = app.build_middleware_stack

    def with_access_log() -> Any:
        # outermost, around Starlette's own error middleware: even a 500 gets its id and its line
        return AccessLog(build_stack(), metrics, ENDPOINTS)

    app.build_middleware_stack = with_access_log  # type: ignore[method-assign]
    docs.install(app)
    install_page(app)  # GET /inspect: the inspection page

    @app.get(HEALTH_PATH, response_model=HealthResponse, tags=["meta"])
    async def healthz() -> Response:
        """Liveness: the process answers (no API key needed)."""
        return Response(_HEALTH, media_type=render.JSON)

    @app.get(READY_PATH, response_model=HealthResponse, tags=["meta"])
    async def readyz() -> Response:
        """Readiness: started (tokenizer loaded, stale uploads swept), not shutting down, and the upload
        folder writable; 503 otherwise."""
        problem = None
        if not state.ready:
            problem = "the worker is starting or shutting down"
        elif not os.access(settings.temp_root, os.W_OK | os.X_OK):
            problem = f"the upload folder {settings.temp_root!r} is not writable"
        if problem is not None:
            raise ServiceError(503, "not_ready", problem, headers={"Retry-After": "1"})
        return Response(_HEALTH, media_type=render.JSON)

    @app.get(METRICS_PATH, tags=["meta"], response_class=Response)
    async def metrics_text() -> Response:
        """Prometheus metrics of this worker (text exposition format)."""
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get(PRESETS_PATH, response_model=PresetsResponse, tags=["meta"])
    async def presets() -> Response:
        """The RopeSpec and LayoutRules of every model preset."""
        return Response(state.presets_body, media_type=render.JSON)

    app.post(
        POSITIONS_PATH,
        response_model=PositionsResponse,
        responses=_ok(PositionsResponse, "Positions [3][T] (JSON), or the array (npy) with headers"),
        openapi_extra=_json_body(PositionsRequest),
        tags=["positions"],
    )(positions)
    app.post(
        ROPE_INDEX_PATH,
        response_model=RopeIndexResponse,
        responses=_ok(RopeIndexResponse, "position_ids [3][B][L] and deltas [B] (JSON), or the array (npy)"),
        openapi_extra=_json_body(RopeIndexRequest),
        tags=["positions"],
    )(rope_index)

    @app.post(
        UPLOAD_PATH,
        response_model=UploadResponse,
        responses=_ok(UploadResponse, "Positions plus the grids derived from the files"),
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"multipart/form-data": {"schema": upload_form_schema()}},
            }
        },
        tags=["positions"],
    )
    async def upload(request: Request, fmt: OutputFormat = Depends(output_format)) -> Response:
        """Positions of images and videos sent as files (sizes and metadata are read, nothing decoded)."""
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
                    form.files, file_items, model, rules, settings, state.slots, metrics.media_seconds
                )
            )
            reader = convert.ServiceReader(rules, settings, state.tokenizer)
            segments: list[mrope.Text | mrope.Image | mrope.Video] = []
            infos: dict[int, dict[str, Any]] = {}  # one entry per distinct load, in layout order
            for k, item in enumerate(layout):
                if isinstance(item, FileItem):
                    done = next(loaded)
                    segments.append(done.segment)
                    infos.setdefault(id(done), done.info)
                else:
                    segments.append(reader.text(item, f"layout item {k}"))
            extra = {"files": list(infos.values())}
            weight = convert.weigh(segments, rules)
            return await state.offload(
                functools.partial(count_build_render, segments, weight, model, rules, fmt, state, extra),
                inline=weight.light(settings),
            )

    _add_body_schemas(app, (PositionsRequest, RopeIndexRequest))
    return app


_HEALTH = orjson.dumps({"status": "ok", "version": mrope.__version__})

_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``mrope.service.app.app``: the app for the environment's settings, made on first access (so importing
    this module never reads the environment; ``uvicorn mrope.service.app:app`` triggers it)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
