"""What the routes of one app share (:class:`ServiceState`), and how it is made from the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from starlette.concurrency import run_in_threadpool

import mrope
from mrope import models as registry
from mrope.schema import RequestError
from mrope.schema._text import load_tokenizer

from . import _jsonbody as jsonbody
from . import _media as media
from ._metrics import Metrics
from ._settings import Settings
from ._uploads import TempBudget

T = TypeVar("T")


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


def presets_body() -> bytes:
    """The JSON body of ``GET /v1/presets``: every family's RopeSpec and LayoutRules, and where part of its
    rotation is a checkpoint tensor (Falcon-OCR), ``learned_rotary``: that tensor and the op that applies
    it (``spec`` is then only the formula half)."""

    def preset(family: Any) -> dict[str, Any]:
        out = {"spec": family.spec.to_dict(), "rules": family.rules.to_dict()}
        if family.learned_rotary is not None:
            learned = family.learned_rotary
            out["learned_rotary"] = {"buffer": learned.buffer, "table": learned.table_builder}
        return out

    return orjson.dumps({"presets": {family.name: preset(family) for family in registry.families()}})


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

    @classmethod
    def from_settings(cls, settings: Settings) -> ServiceState:
        """The state for checked ``settings``: loads the checkpoint and the tokenizer (the checkpoint's
        when ``MROPE_TOKENIZER`` names none); not ready until the app has started."""
        metrics = Metrics()
        checkpoint = load_checkpoint(settings.model_dir)
        tokenizer = service_tokenizer(settings.tokenizer)
        if tokenizer is None and checkpoint is not None:
            tokenizer = checkpoint.tokenizer
        return cls(
            settings=settings,
            tokenizer=tokenizer,
            checkpoint=checkpoint,
            budget=TempBudget(settings.max_temp_bytes),
            presets_body=presets_body(),
            limits=jsonbody.BodyLimits.from_settings(settings),
            metrics=metrics,
            slots=media.MediaSlots(settings.media_threads, metrics.media_busy),
        )

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
