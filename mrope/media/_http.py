"""A seekable file over one HTTP(S) URL, read in bounded range requests that stop at a deadline.

An allowlisted media host is trusted to hold the file, not to behave: it may trickle a byte a second,
answer a small range with 48 MiB, or claim a gigabyte. :class:`RangeFile` therefore asks for one
block at a time (``Range: bytes=a-b``, RFC 9110 section 14.2), never reads more body than it asked
for (a larger answer is cut and its connection dropped), gives every socket read a timeout of the time
left, and shuts the socket when ``deadline`` (``time.monotonic()``) passes, so a blocked read wakes up
then. Redirects are never followed. Every failure is a :class:`~mrope.MediaError` naming the URL and
the HTTP status only.
"""

from __future__ import annotations

import http.client
import io
import re
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from mrope._errors import MediaError
from mrope.media._deadline import ProbeDeadlineError

READ_CHUNK = 64 * 1024
"""Most bytes taken from the socket per read (the deadline is looked at between reads)."""

MAX_WAIT_S = 60.0
"""Longest wait for one socket read when there is no deadline, seconds."""

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


class RangeFile(io.RawIOBase):
    """The file at ``url`` (an ``http://`` or ``https://`` URL already checked) read in blocks of
    ``block_size`` bytes, one range request each (the last block is cached). ``deadline``: a
    ``time.monotonic()`` value after which every read raises
    :class:`~mrope.media._deadline.ProbeDeadlineError` and the open connection is shut (by a timer
    thread that lives as long as the connection: :meth:`idle` ends both). ``name``: the URL as messages
    quote it."""

    def __init__(self, url: str, name: str, *, block_size: int, deadline: float | None = None) -> None:
        super().__init__()
        parts = urlsplit(url)
        self.name = name
        self._https = parts.scheme.lower() == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._block = max(1, int(block_size))
        self._deadline = deadline
        self._conn: http.client.HTTPConnection | None = None
        self._sock: socket.socket | None = None  # the socket of the request being read
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._pos = 0
        self._cached: tuple[int, bytes] = (0, b"")
        self.size = -1
        try:
            first = self._fetch(0)  # learns the size from Content-Range (or a short 200)
        except BaseException:
            self.close()
            raise
        self._cached = (0, first)

    # -- io.RawIOBase -------------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        pos = base + int(offset)
        if pos < 0:
            raise ValueError(f"negative seek position {pos}")
        self._pos = pos
        return pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self.size:
            start = self._pos - self._pos % self._block
            if self._cached[0] != start or not self._cached[1]:  # (an empty block: none cached)
                self._cached = (start, self._fetch(start))
            data = memoryview(self._cached[1])[self._pos - start :]
            if not data:
                break
            n = min(len(data), len(view) - done)
            view[done : done + n] = data[:n]
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        self._drop()
        super().close()

    def idle(self) -> None:
        """Close the connection (and its deadline timer) and forget the cached block until a read needs
        them again: a caller holding many files open (a video's frames) keeps one connection, one timer
        and one block at a time."""
        self._drop()
        self._cached = (0, b"")

    # -- requests ----------------------------------------------------------------------------------

    def _left(self) -> float:
        if self._deadline is None:
            return MAX_WAIT_S
        left = self._deadline - time.monotonic()
        if left <= 0:
            self._drop()
            raise ProbeDeadlineError(f"reading {self.name} stopped at the deadline")
        return min(left, MAX_WAIT_S)

    def _shut(self) -> None:
        """Shut the open socket (the deadline timer: a read blocked on it wakes up and fails)."""
        with self._lock:
            sock = self._sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _drop(self) -> None:
        """Shut and forget the connection and its timer (the reading thread only)."""
        self._shut()
        with self._lock:
            conn, self._conn, self._sock = self._conn, None, None
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if conn is not None:
            conn.close()

    def _connection(self) -> http.client.HTTPConnection:
        """The open connection, or a new one (a server that closed the last one after its answer)."""
        left = self._left()
        if self._conn is None or self._conn.sock is None:
            self._drop()
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = kind(self._host, self._port, timeout=left)
            conn.connect()
            with self._lock:
                self._conn = conn
                if self._deadline is not None:
                    self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._shut)
                    self._timer.daemon = True
                    self._timer.start()
        with self._lock:
            self._sock = self._conn.sock
        if self._deadline is not None and time.monotonic() > self._deadline:
            self._shut()
        return self._conn

    def _fetch(self, start: int) -> bytes:
        """The block at ``start``: at most ``block_size`` bytes, whatever the server sends."""
        end = start + self._block - 1 if self.size < 0 else min(start + self._block, self.size) - 1
        try:
            return self._get(start, end)
        except (MediaError, ProbeDeadlineError):
            self._drop()
            raise
        except Exception as exc:  # noqa: BLE001 - socket, TLS and HTTP parsing errors of a hostile host
            self._drop()
            self._left()  # past the deadline: say so, not "the connection failed"
            raise MediaError(
                f"cannot read {self.name}: the connection failed ({type(exc).__name__})"
            ) from None

    def _get(self, start: int, end: int) -> bytes:
        """One range request for bytes ``start..end`` (inclusive), its answer checked and cut."""
        conn = self._connection()
        sock = self._sock
        if sock is not None:
            sock.settimeout(self._left())
        conn.request(
            "GET", self._target, headers={"Range": f"bytes={start}-{end}", "Accept-Encoding": "identity"}
        )
        resp = conn.getresponse()
        want = end - start + 1
        if resp.status == 206:
            match = _CONTENT_RANGE.match(resp.getheader("Content-Range") or "")
            if match is None or int(match.group(1)) != start:
                raise MediaError(f"{self.name} answered range {start}-{end} with another range")
            if self.size < 0:
                if match.group(3) == "*":
                    raise MediaError(f"{self.name} cannot be read in ranges: the server gives no size")
                self.size = int(match.group(3))
        elif resp.status == 200:  # no ranges: only a file within its first block can be read
            length = resp.getheader("Content-Length")
            if start or length is None or not length.isdigit() or int(length) > want:
                raise MediaError(
                    f"{self.name} cannot be read in ranges: the server answers no range requests"
                )
            self.size = int(length)
        elif 300 <= resp.status < 400:
            raise MediaError(
                f"cannot open {self.name}: the server answered HTTP {resp.status} (a redirect, which is not followed here)"
            )
        else:
            raise MediaError(f"cannot open {self.name}: the server answered HTTP {resp.status}")
        body = self._body(resp, min(want, self.size - start) if self.size >= 0 else want)
        return body

    def _body(self, resp: http.client.HTTPResponse, want: int) -> bytes:
        """At most ``want`` bytes of ``resp``'s body, one socket read at a time under the deadline; the
        connection is kept only when the body ended exactly there."""
        parts: list[bytes] = []
        got = 0
        while got < want:
            sock = self._sock
            if sock is None:
                break
            sock.settimeout(self._left())
            chunk = resp.read1(min(READ_CHUNK, want - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got < want or not resp.isclosed():  # short, or more than asked: this connection is done
            self._drop()
        return b"".join(parts)
