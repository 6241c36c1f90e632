"""Open a media source (a path, a URL, bytes, or a binary file-like object) as a seekable binary file.

Every reader in :mod:`mrope.media` goes through :func:`open_source`, so sources are opened by Python and
FFmpeg only ever sees a byte stream (a string like ``concat:a|b`` is a file name here, nothing else), and
every error on the way is a :class:`~mrope.MediaError`.

URLs (``s3://``, ``gs://``, ``https://``, ``memory://``, ... and ``file://``) are opened with fsspec as
random-access files that fetch byte ranges on demand (:data:`URL_BLOCK_SIZE` at a time), so reading a
header costs a few small requests, not a download; ``data:`` URIs carry their bytes.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Union
from urllib.parse import unquote_to_bytes, urlsplit
from urllib.request import url2pathname

from mrope._errors import MediaError
from mrope.media._deadline import ProbeDeadlineError
from mrope.media._http import RangeFile

Source = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, IO[bytes]]
"""What the readers accept: a file path, a URL or ``data:`` URI, the file's bytes, or a binary file-like
object (read from offset 0, left open)."""

URL_BLOCK_SIZE = 1 << 18
"""Bytes fetched per range request when a URL is read (256 KiB): a header read costs one or two."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(text: str) -> str | None:
    """The scheme of a ``scheme://`` URL, lower-cased (``"file"``, ``"https"``, ...), or ``None``."""
    match = _SCHEME.match(text)
    return match.group(1).lower() if match else None


WEB_SCHEMES = ("http", "https")
"""The only URL schemes a host allowlist lets through (:func:`check_web_url`)."""

_UNSAFE_URL_CHARS = re.compile(r"[\s\\\x00-\x1f\x7f]")


def url_host(url: str) -> str:
    """The ``host`` or ``host:port`` of a URL, lower-cased (``""`` when it has none or cannot be parsed)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return ""


def check_web_url(url: str) -> str:
    """``url`` with its scheme lower-cased when it is one plain ``http://`` or ``https://`` URL; else a
    :class:`~mrope.MediaError` that quotes only the URL.

    Refused: any other scheme (``file://``, ``ftp://``, ``zip://``, ``simplecache://``, ...), an fsspec
    chain (``::`` outside a bracketed IPv6 host: fsspec would read its last link, not its first), user
    info (``user@host``), and whitespace, backslashes or control characters (parsers disagree on them).
    The check reads the string only: it never touches a file or the network.
    """
    scheme = url_scheme(url)
    if scheme not in WEB_SCHEMES:
        raise MediaError(f"{short_repr(url)} is not an http:// or https:// URL (the only schemes read here)")
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        raise MediaError(f"{short_repr(url)} is not a valid URL") from None
    bracketed = netloc[netloc.find("[") : netloc.find("]") + 1] if "[" in netloc else ""
    if "::" in (url.replace(bracketed, "", 1) if bracketed else url):
        raise MediaError(f"{short_repr(url)} is a URL chain ('::'); give one http(s) URL")
    if "@" in netloc:
        raise MediaError(f"{short_repr(url)} carries user info ('@' before the host); give a plain URL")
    if _UNSAFE_URL_CHARS.search(url):
        raise MediaError(f"{short_repr(url)} holds whitespace, a backslash or a control character")
    return scheme + url[len(scheme) :]


def is_url(text: str) -> bool:
    """Whether a string source is a URL (``scheme://``) or a ``data:`` URI rather than a local path."""
    return bool(_SCHEME.match(text)) or text[:5].lower() == "data:"


def short_repr(text: str) -> str:
    """A source string as error messages quote it: its ``repr`` cut to 120 characters, a ``data:`` URI
    by its length."""
    if text[:5].lower() == "data:":
        return f"<data: URI of {len(text)} characters>"
    return repr(text if len(text) <= 120 else text[:117] + "...")


def decode_data_uri(uri: str) -> bytes:
    """The bytes of a ``data:[<type>][;base64],<data>`` URI (RFC 2397)."""
    head, sep, payload = uri[5:].partition(",")
    if not sep:
        raise MediaError(f"{short_repr(uri)} is not a data: URI (expected data:[<type>][;base64],<data>)")
    try:
        if head.lower().endswith(";base64"):
            return base64.b64decode(unquote_to_bytes(payload), validate=True)
        return unquote_to_bytes(payload)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(f"{short_repr(uri)} holds invalid base64 data ({exc})") from None


def open_url(
    url: str,
    *,
    follow_redirects: bool = True,
    block_size: int = URL_BLOCK_SIZE,
    hosts: Collection[str] | None = None,
    deadline: float | None = None,
) -> IO[bytes]:
    """A seekable binary file for a URL, read in ranges through fsspec (``data:`` URIs in memory; an
    allowlisted host through :class:`~mrope.media._http.RangeFile`).

    Args:
        url: ``s3://``, ``gs://``, ``http(s)://``, ``memory://``, ``file://`` (any fsspec protocol whose
            package is installed, in any letter case), or ``data:``.
        follow_redirects: HTTP(S) only; ``False`` refuses a redirect (a server must not be steered to a
            host the caller did not allow).
        block_size: bytes per range request.
        hosts: when given, an allowlist (``host`` or ``host:port``): the URL must pass
            :func:`check_web_url` and name one of them, it is opened as one HTTP(S) URL (never an fsspec
            chain) read in bounded range requests, redirects are refused, and error messages name the
            URL and the HTTP status only.
        deadline: with ``hosts``, a ``time.monotonic()`` value: reads past it raise
            :class:`~mrope.media._deadline.ProbeDeadlineError` and a read blocked on the host wakes up.

    Raises:
        MediaError: no fsspec, no package for the protocol, a missing object, a failed request, or (with
            ``hosts``) a URL they do not allow.
    """
    if url[:5].lower() == "data:":
        return io.BytesIO(decode_data_uri(url))
    scheme = url_scheme(url) or ""
    url = scheme + url[len(scheme) :] if scheme else url  # fsspec knows protocols by lower-case names
    if hosts is not None:
        url = check_web_url(url)
        host = url_host(url)
        if host not in hosts and host.split(":")[0] not in hosts:
            raise MediaError(f"the host of {short_repr(url)} is not in the allowlist of media hosts")
        return io.BufferedReader(RangeFile(url, short_repr(url), block_size=block_size, deadline=deadline))
    try:
        import fsspec
    except ImportError:
        raise MediaError(f"reading {short_repr(url)} needs fsspec (pip install fsspec)") from None
    options: dict[str, Any] = {}
    if scheme in WEB_SCHEMES and not follow_redirects:
        options["allow_redirects"] = False
    try:
        f = fsspec.open(url, "rb", block_size=block_size, **options).open()
    except FileNotFoundError:
        raise MediaError(f"no such file: {short_repr(url)}") from None
    except ImportError as exc:
        raise MediaError(f"reading {short_repr(url)} needs a package for {scheme}:// ({exc})") from None
    except Exception as exc:  # fsspec backends raise their own error types (aiohttp, botocore, ...)
        raise MediaError(f"cannot open {short_repr(url)}: {type(exc).__name__}: {exc}") from None
    try:  # no size, or a redirect not followed: only a whole (unbounded) download would do
        f.seek(0, io.SEEK_END)
        f.seek(0)
    except Exception:
        f.close()
        why = "" if follow_redirects else " (or it answers with a redirect, which is not followed here)"
        raise MediaError(
            f"{short_repr(url)} cannot be read in ranges: the server gives no size{why}"
        ) from None
    return f  # type: ignore[no-any-return]


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
    if isinstance(source, str) and is_url(source):
        return short_repr(source)
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
def open_source(source: Source) -> Iterator[OpenSource]:
    """Open ``source`` for reading; a path is closed on exit, a caller's file object is not.

    Raises:
        MediaError: a missing or unreadable path, an empty source, or something that is no source.
    """
    name = describe(source)
    owned: IO[bytes] | None = None
    if isinstance(source, str) and is_url(source) and not source.lower().startswith("file://"):
        owned = open_url(source)
        f: IO[bytes] = owned
    elif isinstance(source, (str, os.PathLike)):
        if isinstance(source, str) and source.lower().startswith("file://"):
            source = url2pathname(urlsplit(source).path)
        path = os.fspath(source)
        if not isinstance(path, str):
            raise MediaError(f"a media path must be a str path; got {path!r}")
        try:
            owned = open(path, "rb")  # noqa: SIM115 (closed below)
        except FileNotFoundError:
            raise MediaError(f"no such file: {name}") from None
        except IsADirectoryError:
            raise MediaError(f"{name} is a directory; expected a media file") from None
        except OSError as exc:
            raise MediaError(f"cannot open {name}: {exc.strerror or exc}") from None
        f = owned
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
        except ProbeDeadlineError:  # (a URL past its deadline: the caller's timeout, not bad media)
            raise
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
