"""Prefix-cache keys: a digest of everything a sequence's first ``n`` tokens fix about its positions.

Two prompts whose keys for their first ``n`` tokens are equal have, under the same rules, equal positions
for those tokens and equal state after them: the digest covers the rules (:func:`mrope.rules_digest`), the
positions ``[A, n]`` themselves (dtype included), and every media item the prefix reaches into, whole
(kind, token span, grid, tile, a video's seconds per temporal patch, and all its tokens' positions, so
that a pruned item's kept tokens past the prefix count too), so a
prefix that ends inside an image or video also fixes the positions of that media's remaining tokens and
the counter after it. Text is covered by the positions alone: how text is split into segments, and its
token ids, do not enter (an engine's cache keys its tokens itself). An engine's own media hashes (the KV
cache depends on pixels, positions do not) are mixed in through ``media_keys``.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._errors import LayoutError
from mrope._rules import LayoutRules, rules_digest

KEY_VERSION = b"mrope-prefix-key/1"
_NOT_MEDIA = frozenset({"text", "wrapper", "timestamp"})


def _media_order(spans: Sequence[Any]) -> list[int]:
    """The segment index of each media item (image, video, audio) in sequence order."""
    seen: list[int] = []
    for s in spans:
        if s.kind not in _NOT_MEDIA and (not seen or seen[-1] != s.index) and s.index not in seen:
            seen.append(s.index)
    return seen


def _key_bytes(key: Any, i: int) -> bytes:
    """``key`` tagged with its type and length, so that no two keys' bytes run together alike."""
    if isinstance(key, str):
        raw = b"s" + key.encode("utf-8")
    elif isinstance(key, (bytes, bytearray, memoryview)):
        raw = b"b" + bytes(key)
    else:
        raise LayoutError(
            f"media_keys[{i}] must be a str or bytes (the engine's hash of that media); got {key!r}"
        )
    return struct.pack("<Q", len(raw)) + raw


def prefix_key(
    ids: np.ndarray,
    spans: Sequence[Any],
    second_per_grid_ts: np.ndarray,
    rules: LayoutRules,
    n: int,
    media_keys: Sequence[Any] | None = None,
) -> str:
    """The hex digest (32 characters, BLAKE2b-128) keying the first ``n`` tokens of a prompt.

    Args:
        ids, spans, second_per_grid_ts, rules: the whole prompt's (as :class:`mrope.Positions` holds them).
        n: tokens in the prefix, ``0 <= n <= num_tokens``.
        media_keys: ``None``, or one key (str or bytes) per media item of the prompt in sequence order
            (images, videos and audio clips as their segments come); the keys of the items the prefix
            reaches into enter the digest.

    Raises:
        LayoutError: ``n`` out of range, or ``media_keys`` of the wrong length or type.
    """
    total = ids.shape[1]
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= total:
        raise LayoutError(f"a prefix of a {total}-token prompt has n from 0 to {total} tokens; got {n!r}")
    order = _media_order(spans)
    if media_keys is not None and (isinstance(media_keys, (str, bytes)) or len(media_keys) != len(order)):
        raise LayoutError(
            f"media_keys needs one key per media item of the prompt ({len(order)}, in sequence order); "
            f"got {media_keys!r:.200}"
        )
    keys = None if media_keys is None else [_key_bytes(k, i) for i, k in enumerate(media_keys)]
    head = np.ascontiguousarray(ids[:, :n])
    h = hashlib.blake2b(digest_size=16)
    h.update(KEY_VERSION)
    h.update(rules_digest(rules).encode("ascii"))
    h.update(struct.pack("<8sQQ", head.dtype.str.encode("ascii"), head.shape[0], n))
    h.update(head.astype(head.dtype.newbyteorder("<"), copy=False).tobytes())
    videos = [i for i in order if any(s.index == i and s.kind == "video" for s in spans)]
    inside = {s.index for s in spans if s.kind not in _NOT_MEDIA and s.start < n}
    for s in spans:
        if s.index not in inside or s.kind in _NOT_MEDIA:
            continue
        item = order.index(s.index)
        fields = [s.kind, item, s.start, s.stop, s.grid, s.tile]
        if s.kind == "video" and videos.index(s.index) < second_per_grid_ts.size:
            fields.append(float(second_per_grid_ts[videos.index(s.index)]))
        h.update(repr(fields).encode("ascii"))
        whole = np.ascontiguousarray(ids[:, s.start : s.stop])  # a pruned item's kept positions too
        h.update(whole.astype(whole.dtype.newbyteorder("<"), copy=False).tobytes())
        if keys is not None:
            h.update(keys[item])
    return h.hexdigest()


__all__ = ["KEY_VERSION", "prefix_key"]
