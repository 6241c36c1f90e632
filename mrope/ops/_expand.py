"""Expand a position program's runs into positions on a torch device, with no Python loop per token.

The arrays are those :meth:`mrope.PositionProgram.arrays` gives (see :mod:`mrope._program` for what a run
is); each token finds its run by ``repeat_interleave``, its group and its place in the group (a text token
or a block index) by integer division, and takes ``origin + advance * g`` plus its text offset, or plus
``lead + strides @ (i0, i1, i2)``, evaluated in the same order as the numpy expansion (so float programs
round alike), or its stored position when its run is explicit.
"""

from __future__ import annotations

from typing import Any

import torch

from mrope._errors import ApplyError


def _tensor(x: Any, name: str, device: torch.device | str | None, ndim: int) -> torch.Tensor:
    out = torch.as_tensor(x, device=device)
    if out.ndim != ndim:
        raise ApplyError(f"expand_program: {name} must have {ndim} dimensions; got shape {list(out.shape)}")
    return out


def expand_program(
    lengths: Any,
    shape: Any,
    origin: Any,
    strides: Any,
    explicit: Any,
    pool: Any,
    lead: Any,
    advance: Any,
    *,
    num_tokens: int | None = None,
    device: torch.device | str | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Positions ``[A, T]`` of a program's runs (tensors or numpy arrays, moved to ``device``).

    Args:
        lengths: int64 ``[R]``; shape: int64 ``[R, 3]``; origin: ``[R, A]``; strides: ``[R, A, 3]``;
            explicit: int64 ``[R]``; pool: ``[A, P]`` (its dtype is the result's: int64, or float32 under
            fractional time, whose origins and strides are float64); lead: int64 ``[R]`` text tokens
            before each group's block; advance: ``[R, A]`` the step from one group to the next.
        num_tokens: ``T`` (the program's); given, the expansion reads nothing back from the device.
        device: where to expand (default: where the arrays are).
        out: the caller's persistent ``[A, T]`` tensor of the result's dtype on the expansion's device;
            the positions are written into it and it is returned.

    Returns:
        int64 (or float32) ``[A, T]``, equal to :meth:`mrope.PositionProgram.expand`.

    On a device, with ``num_tokens`` given and the arrays already there, the expansion reads nothing back
    to the host (no synchronisation) and ``out`` keeps the result at one address, as a captured CUDA graph
    needs; its intermediate tensors then come from the graph's memory pool.

    Raises:
        ApplyError: arrays whose shapes do not agree, or an ``out`` of another shape, dtype or device.
    """
    lengths = _tensor(lengths, "lengths", device, 1).long()
    dev = lengths.device
    shape = _tensor(shape, "shape", dev, 2).long()
    origin = _tensor(origin, "origin", dev, 2)
    strides = _tensor(strides, "strides", dev, 3)
    explicit = _tensor(explicit, "explicit", dev, 1).long()
    pool = _tensor(pool, "pool", dev, 2)
    lead = _tensor(lead, "lead", dev, 1).long()
    advance = _tensor(advance, "advance", dev, 2)
    runs, axes = origin.shape
    given = (lengths, shape, origin, strides, explicit, pool, lead, advance)
    if (
        lengths.shape[0] != runs
        or tuple(shape.shape) != (runs, 3)
        or tuple(strides.shape) != (runs, axes, 3)
        or explicit.shape[0] != runs
        or pool.shape[0] != axes
        or lead.shape[0] != runs
        or tuple(advance.shape) != (runs, axes)
    ):
        raise ApplyError(
            "expand_program: lengths [R], shape [R, 3], origin [R, A], strides [R, A, 3], explicit [R], "
            f"pool [A, P], lead [R], advance [R, A]; got {[list(t.shape) for t in given]}"
        )
    total = int(lengths.sum()) if num_tokens is None else int(num_tokens)
    if out is not None and (
        tuple(out.shape) != (axes, total) or out.dtype != pool.dtype or out.device != dev
    ):
        raise ApplyError(
            f"expand_program: out must be {pool.dtype} [{axes}, {total}] on {dev}; "
            f"got {out.dtype} {list(out.shape)} on {out.device}"
        )
    run = torch.repeat_interleave(torch.arange(runs, device=dev), lengths, output_size=total)
    group = lead + shape.prod(1)
    per_run = torch.stack(
        [torch.cumsum(lengths, 0) - lengths, shape[:, 1], shape[:, 2], explicit, lead, group], 1
    )
    start, d1, d2, offset, n, size = per_run.index_select(0, run).unbind(1)  # [T] each
    # one row per coefficient, gathered along the tokens: origin [A], advance [A], strides k = 0, 1, 2 [A]
    table = torch.cat([origin.T, advance.T, strides.permute(2, 1, 0).reshape(3 * axes, runs)], 0)
    coef = table.index_select(1, run)  # [5A, T]
    local = torch.arange(total, device=dev) - start
    g = torch.div(local, size, rounding_mode="floor")
    u = local - g * size
    b = u - n  # the block index (negative on the group's text)
    rest = torch.div(b, d2, rounding_mode="floor")
    i2 = b - rest * d2
    i0 = torch.div(rest, d1, rounding_mode="floor")
    i1 = rest - i0 * d1
    o, step, s0, s1, s2 = coef.view(5, axes, total).unbind(0)
    base = o + step * g
    values = torch.where(u < n, base + u, base + n + s0 * i0 + s1 * i1 + s2 * i2).to(pool.dtype)
    if pool.shape[1]:
        at = (offset + local).clamp(0, pool.shape[1] - 1)
        values = torch.where(offset >= 0, pool[:, at], values)
    return values.contiguous() if out is None else out.copy_(values)


__all__ = ["expand_program"]
