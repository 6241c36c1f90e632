"""A reader's deadline: the error a reader past it raises, and a file whose reads stop there."""

from __future__ import annotations

import time
from typing import IO, Any

from mrope._errors import MediaError


class ProbeDeadlineError(MediaError):
    """A reader passed its ``deadline`` (:func:`mrope.media.probe_video` counting packets, or a header
    read through :class:`DeadlineReader`)."""


class DeadlineReader:
    """A binary file whose reads stop with :class:`ProbeDeadlineError` once ``time.monotonic()`` is past
    ``deadline``: a header parser that loops over millions of tiny chunks (Pillow's PNG reader over
    empty ancillary chunks, say) ends at the caller's deadline instead of running on. Everything but
    ``read`` / ``readline`` / ``readinto`` is the wrapped file's."""

    __slots__ = ("_file", "_deadline", "_name")

    def __init__(self, file: IO[bytes], deadline: float, name: str) -> None:
        self._file = file
        self._deadline = deadline
        self._name = name

    def _check(self) -> None:
        if time.monotonic() > self._deadline:
            raise ProbeDeadlineError(f"{self._name}: reading its header stopped at the deadline")

    def read(self, n: int = -1) -> bytes:
        self._check()
        return self._file.read(n)

    def readline(self, n: int = -1) -> bytes:
        self._check()
        return self._file.readline(n)

    def readinto(self, buffer: Any) -> int:
        self._check()
        return self._file.readinto(buffer)  # type: ignore[attr-defined, no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)
