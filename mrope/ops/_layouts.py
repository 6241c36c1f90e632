"""Tensor layouts of q and k, and their canonical ``[B, S, H, D]`` view.

- ``"thd"``: ``[T, H, D]`` (a flattened batch of T tokens, as serving engines keep it); ``B = 1, S = T``.
- ``"bhsd"``: ``[B, H, S, D]`` (transformers' attention layout).
- ``"bshd"``: ``[B, S, H, D]``.
"""

from __future__ import annotations

import torch

LAYOUTS: tuple[str, ...] = ("thd", "bhsd", "bshd")
SHAPES = {"thd": "[T, H, D]", "bhsd": "[B, H, S, D]", "bshd": "[B, S, H, D]"}


def dims(x: torch.Tensor, layout: str) -> tuple[int, int, int]:
    """``(B, S, H)`` of q or k given in ``layout``."""
    if layout == "thd":
        return 1, x.shape[0], x.shape[1]
    if layout == "bhsd":
        return x.shape[0], x.shape[2], x.shape[1]
    return x.shape[0], x.shape[1], x.shape[2]


def canonical(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A ``[B, S, H, D]`` view of q or k given in ``layout`` (no copy)."""
    if layout == "thd":
        return x.unsqueeze(0)
    if layout == "bhsd":
        return x.transpose(1, 2)
    return x


def canonical_strides(x: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    """Element strides ``(batch, seq, head, dim)`` of q or k given in ``layout``."""
    return tuple(canonical(x, layout).stride())  # type: ignore[return-value]


def head_axis(layout: str) -> int:
    """The dimension that indexes heads in ``layout``."""
    return 2 if layout == "bshd" else 1


def no_heads(x: torch.Tensor, layout: str) -> torch.Tensor:
    """A zero-head slice of q or k given in ``layout`` (a "k" with nothing to rotate)."""
    return x.narrow(head_axis(layout), 0, 0)
