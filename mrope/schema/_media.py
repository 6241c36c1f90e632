"""What a face lets a request read for segments given by ``path``: local files, URLs, allowed hosts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mrope._errors import MediaError
from mrope.media._source import check_web_url, short_repr, url_host, url_scheme

from ._errors import RequestError


@dataclass(frozen=True)
class MediaAccess:
    """What a face lets a request read for segments given by ``path``.

    Attributes:
        local_files: read local paths (relative ones against ``base_dir``) and ``file://`` URLs.
        urls: read remote URLs (``s3://``, ``gs://``, ``https://``, ... through fsspec) and ``data:``
            URIs.
        url_hosts: when set, only plain ``http://`` / ``https://`` URLs whose host (or ``host:port``) is
            listed: no other scheme, no fsspec chain (:func:`mrope.media._source.check_web_url`; ``data:``
            URIs carry their bytes and need no host).
        base_dir: the folder relative paths are resolved against.
    """

    local_files: bool = False
    urls: bool = False
    url_hosts: frozenset[str] | None = None
    base_dir: str | None = None

    @classmethod
    def everything(cls, base_dir: str | os.PathLike[str] | None = None) -> MediaAccess:
        """Local files and any URL: the command line and the pipeline."""
        return cls(True, True, None, None if base_dir is None else os.fspath(base_dir))

    def resolve(self, path: Any, where: str) -> Any:
        """The source to read for ``path`` (an absolute path or the URL; a file in memory as it is), or a
        :class:`RequestError` saying why this face does not read it."""
        if not isinstance(path, str):  # in memory (mrope.media._memory): nothing to read, nothing to allow
            return path
        scheme = url_scheme(path)
        if path[:5].lower() == "data:":
            if not self.urls:
                raise RequestError(f"{where}: media given as a data: URI are not read here; {self._how()}")
            return path
        if scheme and scheme != "file":
            if not self.urls:
                raise RequestError(
                    f"{where}: {short_repr(path)} is a URL, which is not read here; {self._how()}"
                )
            if self.url_hosts is not None:
                host = url_host(path)
                if host not in self.url_hosts and host.split(":")[0] not in self.url_hosts:
                    raise RequestError(
                        f"{where}: the host {host or '(none)'!r} of {short_repr(path)} is not in the allowlist of "
                        "media hosts"
                    )
                try:
                    return check_web_url(path)
                except MediaError as exc:
                    raise RequestError(f"{where}: {exc}") from None
            return path
        if not self.local_files:
            raise RequestError(
                f"{where}: {short_repr(path)} is a local file, which is not read here; {self._how()}"
            )
        if scheme:
            return path
        full = os.path.expanduser(path)
        if not os.path.isabs(full) and self.base_dir is not None:
            full = os.path.join(self.base_dir, full)
        return full

    def _how(self) -> str:
        if not self.local_files and not self.urls:
            return "send sizes or grids (or upload the file)"
        if self.urls:
            return "give a URL of an allowed host"
        return "give a local path"


MEDIA_NONE = MediaAccess()
"""No media reading: what the service uses for segments (unless its URL allowlist is set)."""
