"""The registry of the library's caches: each module that keeps one registers it here, so that
:func:`clear_caches` empties them all and :func:`cache_info` reports them.

A cache is registered when its module is imported (a module never imported has nothing cached), under a
name that says what it holds (``"layout.block_templates"``). Memoised functions use :func:`cached`
(``functools.lru_cache`` registered under a name); other caches (dicts with their own bounds) use
:func:`register` with a function that empties them and one that counts what they hold. The value types
(:mod:`mrope._rules`, :mod:`mrope._timestamp_format`) import nothing but :mod:`mrope._errors` and each other, so this module registers their memos itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from mrope import _rules as rules
from mrope import _timestamp_format as timestamp_format

F = TypeVar("F", bound=Callable[..., Any])

CacheStats = dict[str, int | None]
"""``{"hits", "misses", "size", "maxsize"}``: hits and misses where the cache counts them (``None``
elsewhere), what it holds now and its bound (``None``: unbounded), in its own unit (entries unless the
cache says otherwise)."""


@dataclass(frozen=True)
class _Cache:
    """How to empty one registered cache and how to read its counts."""

    clear: Callable[[], None]
    stats: Callable[[], CacheStats]


_CACHES: dict[str, _Cache] = {}


def register(
    name: str, clear: Callable[[], None], size: Callable[[], int], maxsize: int | None = None
) -> None:
    """Register a cache under ``name``: ``clear`` empties it, ``size`` counts what it holds now (in units
    of ``maxsize``, its bound). Registering a name again replaces the entry (a reloaded module)."""

    def stats() -> CacheStats:
        return {"hits": None, "misses": None, "size": size(), "maxsize": maxsize}

    _CACHES[name] = _Cache(clear, stats)


def register_memo(name: str, memo: Any) -> None:
    """Register a ``functools.lru_cache`` wrapper under ``name`` (hits and misses counted)."""

    def stats() -> CacheStats:
        info = memo.cache_info()
        return {"hits": info.hits, "misses": info.misses, "size": info.currsize, "maxsize": info.maxsize}

    _CACHES[name] = _Cache(memo.cache_clear, stats)


def cached(name: str, maxsize: int) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize=maxsize)``, registered under ``name`` (hits and misses counted)."""

    def wrap(fn: F) -> F:
        memo = functools.lru_cache(maxsize=maxsize)(fn)
        register_memo(name, memo)
        return memo  # type: ignore[return-value]

    return wrap


def clear_caches() -> None:
    """Empty every registered cache (what the library memoised: tables, plans, templates, parsed
    settings); the next calls compute afresh. Results do not change."""
    for cache in _CACHES.values():
        cache.clear()


def cache_info() -> dict[str, CacheStats]:
    """Each registered cache's counts by name, sorted by name (see :data:`CacheStats`)."""
    return {name: _CACHES[name].stats() for name in sorted(_CACHES)}


# The value types import nothing but mrope._errors (they are leaves), so their memos are registered here.
register_memo("rules.timestamp_formats", timestamp_format._check_format_text)
register_memo("rules.digests", rules._cached_digest)

__all__ = ["CacheStats", "cache_info", "cached", "clear_caches", "register", "register_memo"]
