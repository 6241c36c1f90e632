"""Multipart uploads streamed into bounded temp storage.

The body is parsed as it arrives (python-multipart's push parser). File parts go straight to files in a
per-request temp folder; every byte is counted against the per-upload cap (``MROPE_MAX_UPLOAD_BYTES``,
also enforced by the body guard) and against the process-wide temp budget (``MROPE_MAX_TEMP_BYTES``).
The folder is removed when the request ends, whatever happened; folders of a process that died (a
crash, ``kill -9``) are removed when the next one starts (:func:`sweep_stale_spools`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import IO

import anyio
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from ._errors import ServiceError, over_cap
from ._settings import Settings

FILE_PART = "files"
FIELD_PARTS = ("model", "layout", "rules", "route", "layer_sets")


@dataclass
class StoredFile:
    """One uploaded file, spooled to ``path``."""

    index: int
    path: str
    filename: str | None
    content_type: str | None
    size: int = 0


@dataclass
class UploadForm:
    """The parts of an upload: text fields by name, files in the order sent."""

    fields: dict[str, str] = field(default_factory=dict)
    files: list[StoredFile] = field(default_factory=list)


class TempBudget:
    """Bytes of uploads held in temp storage by this process, against ``MROPE_MAX_TEMP_BYTES``.

    Only touched from the event loop thread, so it needs no lock.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, n: int) -> None:
        if self.used + n > self.limit:
            raise ServiceError(
                503,
                "storage_busy",
                f"upload temp storage is full ({self.used:,} of {self.limit:,} bytes held by requests in "
                "progress, MROPE_MAX_TEMP_BYTES); retry shortly",
                cap="MROPE_MAX_TEMP_BYTES",
                limit=self.limit,
                headers={"Retry-After": "1"},
            )
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n


SPOOL_PREFIX = "mrope-upload-"
_SPOOL_NAME = re.compile(
    re.escape(SPOOL_PREFIX) + r"(?P<host>[A-Za-z0-9.-]{1,64})-(?P<pid>\d{1,10})-[A-Za-z0-9_]+"
)


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "-", socket.gethostname())[:64] or "host"


def spool_prefix() -> str:
    """``mrope-upload-<host>-<pid>-``: the owner of an upload folder is in its name."""
    return f"{SPOOL_PREFIX}{_host()}-{os.getpid()}-"


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (a process of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_spools(root: str) -> list[str]:
    """Remove the upload folders under ``root`` that a dead mrope process left (a crash, ``kill -9``).

    Only folders named by :func:`spool_prefix` are touched, only real folders (not links) owned by this
    user, only those of this host whose process is gone; anything else in ``root`` is left alone.
    Returns the removed paths.
    """
    removed = []
    me, host = os.getuid(), _host()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        m = _SPOOL_NAME.fullmatch(entry.name)
        if m is None or m["host"] != host:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        pid = int(m["pid"])
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me or pid == os.getpid() or pid_alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.path)
    return removed


class _FormReader:
    """Callbacks of the multipart push parser: fields into memory (capped), files onto disk (counted)."""

    def __init__(self, folder: str, settings: Settings, budget: TempBudget) -> None:
        self.folder = folder
        self.settings = settings
        self.budget = budget
        self.form = UploadForm()
        self.held = 0  # bytes taken from the budget
        self.ended = False
        self._header_name = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._name = ""
        self._field: bytearray | None = None
        self._file: IO[bytes] | None = None
        self._stored: StoredFile | None = None

    # python-multipart callbacks ------------------------------------------------------------------
    def on_part_begin(self) -> None:
        self._headers = {}
        self._field = None
        self._file = None
        self._stored = None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def on_header_end(self) -> None:
        self._headers[self._header_name.strip().lower()] = self._header_value.strip()
        self._header_name = b""
        self._header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        if b"name" not in options:
            raise ServiceError(400, "invalid_multipart", "a form part has no name in its Content-Disposition")
        self._name = options[b"name"].decode("utf-8", errors="replace")
        if self._name == FILE_PART:
            self._open_file(options.get(b"filename"))
        elif self._name in FIELD_PARTS:
            if self._name in self.form.fields:
                raise ServiceError(422, "invalid_form", f"form field {self._name!r} is sent more than once")
            self._field = bytearray()
        else:
            raise ServiceError(
                422,
                "invalid_form",
                f"unknown form part {self._name[:100]!r}; expected {', '.join(FIELD_PARTS)} and repeated "
                f"{FILE_PART!r} parts",
            )

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        n = end - start
        if self._file is not None:
            assert self._stored is not None
            self.budget.take(n)
            self.held += n
            self._stored.size += n
            self._file.write(data[start:end])
        elif self._field is not None:
            if len(self._field) + n > self.settings.max_body_bytes:
                raise over_cap(
                    "payload_too_large",
                    f"the size in bytes of form field {self._name!r}",
                    len(self._field) + n,
                    "MROPE_MAX_BODY_BYTES",
                    self.settings.max_body_bytes,
                )
            self._field.extend(data[start:end])

    def on_part_end(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        elif self._field is not None:
            try:
                self.form.fields[self._name] = self._field.decode("utf-8")
            except UnicodeDecodeError:
                raise ServiceError(
                    422, "invalid_form", f"form field {self._name!r} is not UTF-8 text"
                ) from None
            self._field = None

    def on_end(self) -> None:
        self.ended = True

    # ----------------------------------------------------------------------------------------------
    def _open_file(self, filename: bytes | None) -> None:
        index = len(self.form.files)
        if index >= self.settings.max_files:
            raise over_cap(
                "too_many_files", "the file count", index + 1, "MROPE_MAX_FILES", self.settings.max_files
            )
        content_type = self._headers.get(b"content-type")
        stored = StoredFile(
            index=index,
            path=os.path.join(self.folder, f"file-{index}"),
            filename=filename.decode("utf-8", errors="replace") if filename is not None else None,
            content_type=content_type.decode("latin-1") if content_type else None,
        )
        self._file = open(stored.path, "wb")  # noqa: SIM115 - closed in on_part_end or close()
        self._stored = stored
        self.form.files.append(stored)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self.on_part_begin,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
            "on_header_field": self.on_header_field,
            "on_header_value": self.on_header_value,
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_end": self.on_end,
        }


def _boundary(request: Request) -> bytes:
    _, params = parse_options_header(request.headers.get("content-type", ""))
    boundary = params.get(b"boundary")
    if not boundary:
        raise ServiceError(400, "invalid_multipart", "the multipart Content-Type has no boundary parameter")
    return boundary


@asynccontextmanager
async def receive_upload(
    request: Request, settings: Settings, budget: TempBudget
) -> AsyncIterator[UploadForm]:
    """Stream a multipart body into a fresh temp folder; yield its parts; always remove the folder.

    Raises:
        ServiceError: 400 for a malformed body, 408 when the body takes longer than
            ``MROPE_UPLOAD_TIMEOUT_S``, 413 past a cap, 422 for unknown or repeated parts, 503 when the
            temp budget is exhausted.
    """
    folder = tempfile.mkdtemp(prefix=spool_prefix(), dir=settings.temp_root)
    reader = _FormReader(folder, settings, budget)
    try:
        boundary = _boundary(request)
        try:
            # inside the try: the parser refuses some boundaries (over 256 bytes) as it is built
            parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
            with anyio.fail_after(settings.upload_timeout_s):
                async for chunk in request.stream():
                    if chunk:
                        parser.write(chunk)
            parser.finalize()
        except TimeoutError:
            raise ServiceError(
                408,
                "upload_timeout",
                f"the upload body did not arrive within {settings.upload_timeout_s:g} s (MROPE_UPLOAD_TIMEOUT_S)",
                cap="MROPE_UPLOAD_TIMEOUT_S",
                limit=settings.upload_timeout_s,
            ) from None
        except FormParserError as exc:
            raise ServiceError(400, "invalid_multipart", f"the multipart body is malformed: {exc}") from None
        if not reader.ended:
            raise ServiceError(
                400, "invalid_multipart", "the multipart body ends before its closing boundary"
            )
        yield reader.form
    finally:
        reader.close()
        budget.give(reader.held)
        shutil.rmtree(folder, ignore_errors=True)
