"""Positions and attention of speculative draft tokens (chains and trees: EAGLE, Medusa) after a prompt.

A draft tree is given by its parents: ``parents[i]`` is the index of draft token ``i``'s parent among the
draft tokens, or ``-1`` for a child of the last valid token. A draft token at depth ``d`` (the first
draft token has depth 1) after ``n`` valid tokens stands where the ``d``-th decoded token would: it gets
``n + d - 1 + delta`` on every axis, whatever its branch (:func:`mrope.next_positions` of its depth, so
float32 for fractional-time families). A chain is ``parents = [-1, 0, 1, ...]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mrope._errors import LayoutError
from mrope._positions import next_positions


def _parents(parents: Sequence[int] | np.ndarray) -> np.ndarray:
    arr = np.asarray(parents)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise LayoutError(f"parents must be a 1-D array of ints (-1 for a root); got {arr.dtype} {arr.shape}")
    arr = arr.astype(np.int64)
    k = arr.size
    bad = np.flatnonzero((arr < -1) | (arr >= k) | (arr == np.arange(k)))
    if bad.size:
        i = int(bad[0])
        raise LayoutError(
            f"draft token {i} has parent {int(arr[i])}: a parent is -1 (the last valid token) or the index "
            f"of another of the {k} draft tokens"
        )
    return arr


def draft_depths(parents: Sequence[int] | np.ndarray) -> np.ndarray:
    """int64 ``[k]``: each draft token's depth (1 for a child of the last valid token).

    Raises:
        LayoutError: a parent out of range, a token its own parent, or a cycle (naming its tokens).
    """
    arr = _parents(parents)
    k = arr.size
    depth = np.zeros(k, dtype=np.int64)
    if k and np.all(arr < np.arange(k)):  # parents before children (the usual order): one pass
        for i, p in enumerate(arr.tolist()):
            depth[i] = 1 if p < 0 else depth[p] + 1
        return depth
    for start in range(k):
        path: list[int] = []
        i = start
        while i >= 0 and depth[i] == 0:
            if i in path:
                cycle = path[path.index(i) :]
                raise LayoutError(f"draft tokens {cycle} form a cycle of parents; a draft tree has none")
            path.append(i)
            i = int(arr[i])
        base = 0 if i < 0 else int(depth[i])
        for j in reversed(path):
            base += 1
            depth[j] = base
    return depth


def draft_positions(
    parents: Sequence[int] | np.ndarray, n_done: int, delta: int | float, num_axes: int = 3
) -> np.ndarray:
    """Positions ``[num_axes, k]`` of a draft tree after ``n_done`` valid tokens of a sequence whose
    delta is ``delta`` (:attr:`mrope.Positions.delta`): ``n_done + depth - 1 + delta`` on every axis.

    int64 for an int delta, float32 for a float one (fractional-time families), exactly what
    :func:`mrope.next_positions` gives the decoded token at that depth.
    """
    if isinstance(num_axes, bool) or not isinstance(num_axes, int) or num_axes < 1:
        raise LayoutError(f"num_axes must be an int >= 1; got {num_axes!r}")
    depth = draft_depths(parents)
    along = next_positions(delta, n_done, int(depth.max()) if depth.size else 0)[0]
    return np.broadcast_to(along[depth - 1], (num_axes, depth.size)).copy()


def tree_attention_mask(parents: Sequence[int] | np.ndarray) -> np.ndarray:
    """bool ``[k, k]``: ``mask[i, j]`` when draft token ``i`` may attend draft token ``j`` (``j`` is ``i``
    or one of its ancestors). Every draft token also attends every valid token before the tree."""
    arr = _parents(parents)
    draft_depths(arr)  # refuses cycles
    k = arr.size
    mask = np.eye(k, dtype=bool)
    for i in range(k):
        p = int(arr[i])
        while p >= 0:
            mask[i, p] = True
            p = int(arr[p])
    return mask


__all__ = ["draft_depths", "draft_positions", "tree_attention_mask"]
