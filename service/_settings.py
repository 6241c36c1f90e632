"""Service settings, read from ``MROPE_*`` environment variables.

Every limit the service enforces is one field here, with the variable that sets it. A bad value (not a
number, negative, a tokenizer path that does not exist) fails at startup with a message that names the
variable, never later inside a request.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

MiB = 1024 * 1024


class SettingsError(ValueError):
    """An ``MROPE_*`` environment variable holds a value the service cannot use."""


@dataclass(frozen=True)
class Settings:
    """Limits and paths of one service process.

    Attributes:
        max_tokens: most tokens one request may produce (positions endpoints) or send (rope-index ``B*L``).
        max_body_bytes: most bytes of a JSON request body.
        max_upload_bytes: most bytes of one multipart upload request (all parts together).
        max_files: most files in one upload.
        max_segments: most segments in one request (JSON segments, or layout items of an upload).
        max_batch: most rows ``B`` in one rope-index request.
        max_image_pixels: most pixels (width x height) of an image or a video frame, as the file or the
            request states them, before resizing.
        max_video_seconds: longest video duration accepted.
        max_video_frames: most frames in a video file.
        tokenizer: path of a ``tokenizer.json`` (``tokenizers.Tokenizer.from_file``); needed for text
            given as a string and for Qwen3-VL video timestamps. ``None``: no tokenizer.
        tmp_dir: folder for upload temp files (each upload gets its own subfolder, always removed).
        max_temp_bytes: most bytes of uploads held in temp storage at once, over all requests of one
            worker process; an upload that would pass it gets 503 and may be retried.
        media_threads: most files probed at once (worker threads).
        media_timeout_s: longest time to read one file's size or metadata.
        upload_timeout_s: longest time to receive an upload body.
        npy_max_header_bytes: largest JSON value put into one ``X-MRope-*`` header of an npy response; a
            longer one (e.g. thousands of spans) is left out and named in ``X-MRope-Omitted``.
        inline_tokens: requests of fewer tokens than this are built on the event loop; larger
            ones run in a worker thread so they do not stall other requests.
        media_url_hosts: comma-separated hosts (``host`` or ``host:port``) whose media URLs a segment's
            ``path`` may name; unset: every URL is refused (no server-side request forgery). Local paths
            are always refused.
        api_keys: comma-separated API keys; when set, every endpoint but ``/healthz`` needs
            ``Authorization: Bearer <key>`` (401 otherwise). Never logged or shown.
        cors_origins: comma-separated origins allowed by CORS (``*`` for any); unset: no CORS headers.
        max_concurrent: most requests in progress at once (``/healthz``, ``/readyz`` and ``/metrics``
            not counted); past it 503 with ``Retry-After``.
        max_connections: most open connections per worker process; more are closed at once.
        max_header_bytes: most bytes of a request line and its headers together; more: 431 and the
            connection is closed.
        max_headers: most header lines in one request; more: 431 and the connection is closed.
        header_timeout_s: longest time from a connection's (or a request's) first byte to the end of
            its request headers; the connection is closed after it.
        read_timeout_s: longest wait for the next piece of a request body (408 after it).
        body_timeout_s: longest time to receive a whole JSON body (408 after it).
        min_upload_rate: slowest average upload rate in bytes per second, checked once an upload has
            run ``read_timeout_s`` seconds (408 below it), so slow uploads cannot hold the temp budget.
        shutdown_grace_s: after SIGTERM, requests in progress get this long to finish; then they are
            cancelled and the process exits (``mrope serve`` / :func:`mrope.service._server.run`).
        model_dir: a checkpoint folder (``config.json``, processor configs, ``tokenizer.json``) read at
            start-up by :func:`mrope.from_pretrained`; requests name it ``"model": <model_name>``. Its
            tokenizer serves text and timestamps when ``MROPE_TOKENIZER`` is unset.
        model_name: the name requests give the ``MROPE_MODEL_DIR`` checkpoint.
    """

    max_tokens: int = 1 << 20
    max_body_bytes: int = 16 * MiB
    max_upload_bytes: int = 256 * MiB
    max_files: int = 16
    max_segments: int = 4096
    max_batch: int = 1024
    max_image_pixels: int = 100_000_000
    max_video_seconds: float = 3600.0
    max_video_frames: int = 250_000
    tokenizer: str | None = None
    tmp_dir: str | None = None
    max_temp_bytes: int = 1024 * MiB
    media_threads: int = 4
    media_timeout_s: float = 30.0
    upload_timeout_s: float = 120.0
    npy_max_header_bytes: int = 8192
    inline_tokens: int = 32768
    media_url_hosts: str | None = None
    api_keys: str | None = field(default=None, repr=False)
    cors_origins: str | None = None
    max_concurrent: int = 64
    max_connections: int = 1024
    max_header_bytes: int = 64 * 1024
    max_headers: int = 128
    header_timeout_s: float = 10.0
    read_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    min_upload_rate: int = 32768
    shutdown_grace_s: float = 10.0
    model_dir: str | None = None
    model_name: str = "checkpoint"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from ``MROPE_<FIELD>`` variables (e.g. ``MROPE_MAX_TOKENS``); unset ones keep defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            var = env_var(f.name)
            raw = env.get(var)
            if raw is None or raw.strip() == "":
                continue
            values[f.name] = _parse(var, raw.strip(), f.default)
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """Raise :class:`SettingsError` for values the service cannot run with."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
                raise SettingsError(f"{env_var(f.name)} must be > 0; got {value!r}")
        if self.tokenizer is not None and not os.path.isfile(self.tokenizer):
            raise SettingsError(
                f"MROPE_TOKENIZER={self.tokenizer!r} is not a file (expected a tokenizer.json)"
            )
        if self.model_dir is not None and not os.path.isdir(self.model_dir):
            raise SettingsError(
                f"MROPE_MODEL_DIR={self.model_dir!r} is not a folder (expected a checkpoint folder)"
            )
        if not self.model_name.strip():
            raise SettingsError("MROPE_MODEL_NAME must not be empty")
        if self.api_keys is not None and not self.api_key_list:
            raise SettingsError("MROPE_API_KEYS is set but holds no key (expected comma-separated keys)")
        if self.tmp_dir is not None and not os.path.isdir(self.tmp_dir):
            raise SettingsError(f"MROPE_TMP_DIR={self.tmp_dir!r} is not a folder")

    @property
    def api_key_list(self) -> tuple[str, ...]:
        """The configured API keys (empty: no authentication)."""
        return tuple(k.strip() for k in (self.api_keys or "").split(",") if k.strip())

    @property
    def cors_origin_list(self) -> tuple[str, ...]:
        """The origins CORS allows (empty: CORS off)."""
        return tuple(o.strip() for o in (self.cors_origins or "").split(",") if o.strip())

    @property
    def url_hosts(self) -> frozenset[str]:
        """The allowlisted media hosts, lower-case (empty: no URL is read)."""
        raw = self.media_url_hosts or ""
        return frozenset(h.strip().lower() for h in raw.split(",") if h.strip())

    @property
    def temp_root(self) -> str:
        """The folder uploads are spooled under."""
        return self.tmp_dir or tempfile.gettempdir()


def env_var(field_name: str) -> str:
    """The environment variable of a settings field: ``max_tokens`` -> ``MROPE_MAX_TOKENS``."""
    return "MROPE_" + field_name.upper()


def _parse(var: str, raw: str, default: Any) -> Any:
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{var} must be an integer; got {raw!r}") from None
    if isinstance(default, float):
        try:
            value = float(raw)
        except ValueError:
            raise SettingsError(f"{var} must be a number; got {raw!r}") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise SettingsError(f"{var} must be a finite number; got {raw!r}")
        return value
    return raw
