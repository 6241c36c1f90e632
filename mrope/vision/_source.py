"""Normalise a media source (a path, bytes, or a binary file-like object) into a seekable binary file.

Every reader in :mod:`mrope.vision` goes through :func:`open_source`, so paths are opened by Python and
never handed to FFmpeg as a URL (a string like ``http://...`` or ``concat:a|b`` is a file name here,
nothing else), and every error on the way is a :class:`~mrope.MediaError`.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Union

from mrope.errors import MediaError

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]
"""What the readers accept: a file path, the file's bytes, or a binary file-like object (read from
offset 0, left open)."""


@dataclass
class OpenSource:
    """An opened source.

    Attributes:
        file: a seekable binary file positioned at offset 0.
        size: its length in bytes.
        name: a short description for error messages (the path, or ``"<bytes>"``).
    """

    file: IO[bytes]
    size: int
    name: str


def describe(source: Any) -> str:
    """A short name of ``source`` for error messages."""
    if isinstance(source, (str, os.PathLike)):
        return repr(os.fspath(source))
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{len(source)} bytes>"
    name = getattr(source, "name", None)
    return repr(name) if isinstance(name, str) else f"<{type(source).__name__}>"


def _size_of(f: IO[bytes]) -> int:
    pos = f.tell()
    end = f.seek(0, io.SEEK_END)
    f.seek(pos)
    return int(end)


@contextmanager
def open_source(source: Any) -> Iterator[OpenSource]:
    """Open ``source`` for reading; a path is closed on exit, a caller's file object is not.

    Raises:
        MediaError: a missing or unreadable path, an empty source, or something that is no source.
    """
    name = describe(source)
    owned: IO[bytes] | None = None
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not isinstance(path, str):
            raise MediaError(f"a media path must be a str path; got {path!r}")
        try:
            owned = open(path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            raise MediaError(
                f"no such file: {name} (mrope.vision reads local files, bytes or file objects)"
            ) from None
        except IsADirectoryError:
            raise MediaError(f"{name} is a directory; expected a media file") from None
        except OSError as exc:
            raise MediaError(f"cannot open {name}: {exc.strerror or exc}") from None
        f: IO[bytes] = owned
    elif isinstance(source, (bytes, bytearray, memoryview)):
        f = io.BytesIO(bytes(source))
    elif hasattr(source, "read"):
        f = source
        seekable = getattr(f, "seekable", None)
        if not (callable(seekable) and f.seekable()):
            try:
                data = f.read()
            except Exception as exc:  # a broken stream is bad media, whatever it raises
                raise MediaError(f"cannot read {name}: {exc}") from None
            if not isinstance(data, (bytes, bytearray)):
                raise MediaError(
                    f"{name} must be opened in binary mode; read() returned {type(data).__name__}"
                )
            f = io.BytesIO(bytes(data))
    else:
        raise MediaError(
            f"a media source must be a path, bytes or a binary file object; got {type(source).__name__}"
        )
    try:
        try:
            f.seek(0)
            size = _size_of(f)
            probe = f.read(1)
            f.seek(0)
        except Exception as exc:
            raise MediaError(f"cannot read {name}: {exc}") from None
        if isinstance(probe, str):
            raise MediaError(f"{name} must be opened in binary mode ('rb'); got a text stream")
        if size == 0:
            raise MediaError(f"{name} is empty (0 bytes); expected an image or a video")
        yield OpenSource(f, size, name)
    finally:
        if owned is not None:
            owned.close()
