"""The FastAPI app: a thin HTTP face over :func:`mrope.build_positions` and :func:`mrope.rope_index`.

Run it with ``uvicorn service.app:app`` (settings from ``MROPE_*`` environment variables, see
:mod:`service.settings`) or :func:`service.server.run`. :func:`create_app` builds an app from explicit
:class:`~service.settings.Settings` (tests use it).

Every endpoint follows the same path: the guard checks content type, ``Accept`` and body size; pydantic
validates the body; the caps are checked with cheap counts; the library computes; JSON or npy is
rendered. Work over ``MROPE_INLINE_TOKENS`` tokens (or many video patches, or a body over
:data:`INLINE_BODY_BYTES`) runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import orjson
from fastapi import Depends, FastAPI, Request
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

import mrope
from mrope.builder import MRopeWarning
from mrope.rules import PRESET_NAMES, LayoutRules, resolve_rules
from mrope.spec import RopeSpec
from service import convert, media, render
from service.errors import ServiceError, describe_validation_errors, install_handlers, over_cap
from service.guards import RequestGuard, Route, output_format
from service.memory import pin_mmap_threshold
from service.models import (
    ErrorResponse,
    FileItem,
    HealthResponse,
    PositionsRequest,
    PositionsResponse,
    PresetsResponse,
    RopeIndexRequest,
    RopeIndexResponse,
    TextSegment,
    UploadFields,
    UploadResponse,
    rules_dict,
    upload_form_schema,
)
from service.render import OutputFormat
from service.settings import Settings
from service.uploads import TempBudget, UploadForm, receive_upload

POSITIONS_PATH = "/v1/positions"
ROPE_INDEX_PATH = "/v1/rope-index"
UPLOAD_PATH = "/v1/positions/upload"
INLINE_BODY_BYTES = 64 * 1024
"""JSON bodies up to this size are converted on the event loop; larger ones in a worker thread."""

T = TypeVar("T")

_ERRORS = {
    status: {"model": ErrorResponse, "description": text}
    for status, text in (
        (400, "Malformed body (bad JSON, bad multipart)"),
        (406, "Accept names neither application/json nor application/x-npy"),
        (413, "Over a configured cap; error.cap names its environment variable"),
        (415, "Wrong Content-Type"),
        (422, "Invalid input: validation, layout, grid, token or media errors"),
    )
}


def _ok(model: type, description: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "model": model,
            "description": description,
            "content": {render.NPY: {"schema": {"type": "string", "format": "binary"}}},
        },
        **_ERRORS,
    }


def load_tokenizer(path: str | None) -> Any:
    """``tokenizers.Tokenizer.from_file(path)``, or ``None`` without a path."""
    if path is None:
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # noqa: BLE001 - the Rust side raises a bare Exception
        raise RuntimeError(f"MROPE_TOKENIZER={path!r} cannot be loaded as a tokenizer.json: {exc}") from exc


@dataclass
class ServiceState:
    """What the routes share: settings, the tokenizer, the temp budget, the media thread limiter."""

    settings: Settings
    tokenizer: Any
    budget: TempBudget
    presets_body: bytes
    _limiter: anyio.CapacityLimiter | None = field(default=None, repr=False)

    @property
    def limiter(self) -> anyio.CapacityLimiter:
        # created on first use: anyio limiters belong to the running event loop
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.settings.media_threads)
        return self._limiter

    async def offload(self, fn: Callable[[], T], inline: bool) -> T:
        """Run ``fn`` here when it is small, else in a worker thread."""
        return fn() if inline else await run_in_threadpool(fn)


def _presets_body() -> bytes:
    return orjson.dumps(
        {
            "presets": {
                name: {"spec": RopeSpec.preset(name).to_dict(), "rules": LayoutRules.preset(name).to_dict()}
                for name in PRESET_NAMES
            }
        }
    )


def _body_size(request: Request) -> int:
    try:
        return int(request.headers.get("content-length", "0"))
    except ValueError:
        return 0


# ---------------------------------------------------------------------------------- computations


def count_build_render(
    segments: list[mrope.Text | mrope.Image | mrope.Video],
    model: str,
    rules: LayoutRules,
    fmt: OutputFormat,
    state: ServiceState,
    extra: dict[str, Any] | None = None,
) -> Response:
    """Token cap (exact count, before any position is written), then the library's positions, rendered."""
    convert.count_tokens(segments, rules, state.settings, state.tokenizer)
    pos = mrope.build_positions(segments, model=model, rules=rules, tokenizer=state.tokenizer)
    return render.render_positions(pos, fmt, state.settings.npy_max_header_bytes, extra)


def check_rope_index_size(body: RopeIndexRequest, rules: LayoutRules, settings: Settings) -> int:
    """Cheap caps of a rope-index request; returns ``B * L``."""
    rows = len(body.input_ids)
    if rows > settings.max_batch:
        raise over_cap(
            "too_many_rows", "the batch size (input_ids rows)", rows, "MROPE_MAX_BATCH", settings.max_batch
        )
    size = rows * max((len(r) for r in body.input_ids), default=0)
    convert.check_tokens(size, settings, "the token count B*L of input_ids")
    m2 = rules.merge_size * rules.merge_size
    for name in ("image_grid_thw", "video_grid_thw"):
        for i, (t, h, w) in enumerate(getattr(body, name) or ()):
            convert.check_tokens(t * h * w // m2, settings, f"the token count of {name}[{i}]")
    return size


def compute_rope_index(body: RopeIndexRequest, fmt: OutputFormat, settings: Settings) -> Response:
    position_ids, deltas = mrope.rope_index(
        body.input_ids,
        body.image_grid_thw,
        body.video_grid_thw,
        body.attention_mask,
        model=body.model,
        rules=rules_dict(body.rules),
        second_per_grid_ts=body.second_per_grid_ts,
        mm_token_type_ids=body.mm_token_type_ids,
        pad_position=body.pad_position,
        audio_seqlens=body.audio_seqlens,
        use_audio_in_video=body.use_audio_in_video,
    )
    return render.render_rope_index(position_ids, deltas, fmt, settings.npy_max_header_bytes)


def parse_upload_fields(form: UploadForm) -> UploadFields:
    """The ``model``, ``layout`` and ``rules`` form fields, validated (422 with the pydantic details)."""
    data: dict[str, Any] = {}
    for name, text in form.fields.items():
        if name == "model":
            data[name] = text.strip()
            continue
        try:
            data[name] = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ServiceError(422, "invalid_form", f"form field {name!r} is not valid JSON: {exc}") from None
    if "model" not in data:
        raise ServiceError(
            422, "invalid_form", "the form has no 'model' field (one of " + ", ".join(PRESET_NAMES) + ")"
        )
    try:
        return UploadFields.model_validate(data)
    except ValidationError as exc:
        message, details = describe_validation_errors(exc.errors())
        raise ServiceError(422, "validation_error", message, details=details) from None


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
    state = ServiceState(
        settings=settings,
        tokenizer=load_tokenizer(settings.tokenizer),
        budget=TempBudget(settings.max_temp_bytes),
        presets_body=_presets_body(),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # notes are returned in every response; the warning copies would only flood the server log
        warnings.filterwarnings("ignore", category=MRopeWarning)
        pin_mmap_threshold()
        yield

    app = FastAPI(
        title="mrope",
        version=mrope.__version__,
        summary="Multimodal M-RoPE position ids (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4.1V) over HTTP",
        lifespan=lifespan,
    )
    app.state.service = state
    install_handlers(app)
    json_route = Route(
        settings.max_body_bytes,
        "MROPE_MAX_BODY_BYTES",
        ("application/json",),
        "a JSON body (Content-Type: application/json)",
        negotiates=True,
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
            ),
        },
        default=Route(settings.max_body_bytes, "MROPE_MAX_BODY_BYTES"),
    )

    @app.get("/healthz", response_model=HealthResponse, tags=["meta"])
    async def healthz() -> Response:
        """Liveness: the process answers."""
        return Response(_HEALTH, media_type=render.JSON)

    @app.get("/v1/presets", response_model=PresetsResponse, tags=["meta"])
    async def presets() -> Response:
        """The RopeSpec and LayoutRules of every model preset."""
        return Response(state.presets_body, media_type=render.JSON)

    @app.post(
        POSITIONS_PATH,
        response_model=PositionsResponse,
        responses=_ok(PositionsResponse, "Positions [3][T] (JSON), or the int64 array (npy) with headers"),
        tags=["positions"],
    )
    async def positions(
        body: PositionsRequest, request: Request, fmt: OutputFormat = Depends(output_format)
    ) -> Response:
        """Positions of a sequence of segments: identical to ``mrope.build_positions``."""
        rules = resolve_rules(body.model, rules_dict(body.rules))
        to_segments = functools.partial(convert.to_segments, body.segments, rules, settings, state.tokenizer)
        if convert.reads_media(body.segments):  # allowlisted URLs: off the loop, under the media timeout
            segments = await media.run_bounded(
                to_segments, state.limiter, settings.media_timeout_s, "the media URLs"
            )
        else:
            segments = await state.offload(to_segments, inline=_body_size(request) <= INLINE_BODY_BYTES)
        return await state.offload(
            functools.partial(count_build_render, segments, body.model, rules, fmt, state),
            inline=convert.is_light(segments, rules, settings),
        )

    @app.post(
        ROPE_INDEX_PATH,
        response_model=RopeIndexResponse,
        responses=_ok(RopeIndexResponse, "position_ids [3][B][L] and deltas [B] (JSON), or the array (npy)"),
        tags=["positions"],
    )
    async def rope_index(body: RopeIndexRequest, fmt: OutputFormat = Depends(output_format)) -> Response:
        """The token-id form: identical to ``mrope.get_rope_index`` (numpy core ``mrope.rope_index``)."""
        rules = resolve_rules(body.model, rules_dict(body.rules))
        size = check_rope_index_size(body, rules, settings)
        return await state.offload(
            functools.partial(compute_rope_index, body, fmt, settings), inline=size < settings.inline_tokens
        )

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
            fields = parse_upload_fields(form)
            rules = resolve_rules(fields.model, rules_dict(fields.rules))
            layout = place_files(fields, form, settings)
            file_items = [item for item in layout if isinstance(item, FileItem)]
            loaded = iter(
                await media.load_files(form.files, file_items, fields.model, rules, settings, state.limiter)
            )
            segments: list[mrope.Text | mrope.Image | mrope.Video] = []
            infos: dict[int, dict[str, Any]] = {}  # one entry per distinct load, in layout order
            for k, item in enumerate(layout):
                if isinstance(item, FileItem):
                    done = next(loaded)
                    segments.append(done.segment)
                    infos.setdefault(id(done), done.info)
                else:
                    segments.append(convert.text_segment(item, state.tokenizer, f"layout item {k}"))
            extra = {"files": list(infos.values())}
            return await state.offload(
                functools.partial(count_build_render, segments, fields.model, rules, fmt, state, extra),
                inline=convert.is_light(segments, rules, settings),
            )

    return app


_HEALTH = orjson.dumps({"status": "ok", "version": mrope.__version__})

_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``service.app.app``: the app for the environment's settings, made on first access (so importing
    this module never reads the environment; ``uvicorn service.app:app`` triggers it)."""
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
