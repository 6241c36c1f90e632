"""LearnedRotary: a rotation whose frequencies are a checkpoint tensor, not a formula (the value type).

A :class:`~mrope.RopeSpec` computes every frequency from ``theta``; Falcon-OCR's golden-gate RoPE turns half
of each head by a learned buffer (``freqs_cis_golden`` ``[n_heads, head_dim / 4, 2]``, TII's
``falcon-perception`` 1.0.0 ``falcon_perception/model.py``:336-340, a persistent buffer loaded from the
weights). A family whose rotation needs such a tensor carries a :class:`LearnedRotary`: which buffer, which
pair-table builder of :mod:`mrope.ops` turns it into a rotation, and, once :func:`mrope.from_pretrained` has
read a checkpoint's weights, the buffer's values (float32 bytes and a shape, so the value stays hashable
and compares by its contents). Without the values every rotating face refuses, naming the buffer and the
builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

import numpy as np

from mrope._errors import SpecError

LearnedKind = Literal["golden_gate"]
LEARNED_KINDS: tuple[str, ...] = get_args(LearnedKind)
"""The learned rotations mrope applies: ``"golden_gate"`` (:func:`mrope.ops.golden_gate_table` with
:func:`mrope.ops.golden_gate_positions`)."""


@dataclass(frozen=True)
class LearnedRotary:
    """A rotation that needs a checkpoint tensor (see the module docstring).

    Attributes:
        kind: the rotation: ``"golden_gate"`` (the spec's 1-D half on ``[0, D/2)``, the learned 2-D half
            on ``[D/2, D)``).
        buffer: the checkpoint tensor's name in ``model.safetensors`` (``"freqs_cis_golden"``).
        values: the tensor as little-endian float32 bytes; empty until a checkpoint's weights are read.
        shape: the tensor's shape (``[n_heads, head_dim / 4, 2]`` for ``"golden_gate"``); ``()`` without
            values.
        source: the file the values were read from (for messages); ``""`` without values.
    """

    kind: LearnedKind
    buffer: str
    values: bytes = field(default=b"", repr=False)
    shape: tuple[int, ...] = ()
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in LEARNED_KINDS:
            raise SpecError(f"LearnedRotary.kind must be one of {list(LEARNED_KINDS)}; got {self.kind!r}")
        if not isinstance(self.buffer, str) or not self.buffer:
            raise SpecError(f"LearnedRotary.buffer must name a checkpoint tensor; got {self.buffer!r}")
        if not isinstance(self.values, bytes):
            raise SpecError(f"LearnedRotary.values must be bytes (float32); got {type(self.values).__name__}")
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        if len(self.values) != 4 * int(np.prod(self.shape, dtype=np.int64)) * bool(self.shape):
            raise SpecError(
                f"LearnedRotary: {len(self.values)} bytes of values do not hold a float32 tensor of shape "
                f"{list(self.shape)}"
            )

    @property
    def table_builder(self) -> str:
        """The public op that turns the tensor into a pair table (for messages and docs)."""
        return f"mrope.ops.{self.kind}_table"

    @property
    def loaded(self) -> bool:
        """Whether the values were read from a checkpoint."""
        return bool(self.shape)

    def with_values(self, tensor: np.ndarray, source: str) -> LearnedRotary:
        """A copy holding ``tensor`` (cast to float32) read from ``source``."""
        arr = np.ascontiguousarray(tensor, dtype="<f4")
        return replace(self, values=arr.tobytes(), shape=arr.shape, source=source)

    def frequencies(self, model: str) -> np.ndarray:
        """The tensor, a new float32 array.

        Args:
            model: the family's name, for the message.

        Raises:
            SpecError: no values (a registry family, or a checkpoint folder without its weights): the
                message names the buffer and :attr:`table_builder`.
        """
        if not self.loaded:
            raise SpecError(
                f"model {model!r} rotates part of each head by the checkpoint tensor {self.buffer!r}, which "
                "this model description does not hold: load mrope.from_pretrained(<checkpoint folder>) whose "
                f"model.safetensors has {self.buffer!r}, or build the rotation yourself with "
                f"{self.table_builder}({self.buffer}, theta=...) and mrope.ops.{self.kind}_positions"
            )
        return np.frombuffer(self.values, dtype="<f4").reshape(self.shape).copy()


def golden_gate_frequencies(values: object, name: str = "freqs_golden") -> np.ndarray:
    """``values`` as the float32 ``[n_heads, F, 2]`` learned frequencies of golden-gate RoPE, checked: the
    one check of a checkpoint's tensor (:func:`mrope.from_pretrained`) and of the op's argument
    (:func:`mrope.ops.golden_gate_table`).

    Args:
        values: numbers of shape ``[n_heads, F, 2]``, ``n_heads, F >= 1``, finite.
        name: what the messages call them.

    Raises:
        SpecError: values that are not numbers, of another shape, or not finite.
    """
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{name} must be numbers [n_heads, F, 2]; got {values!r} ({exc})") from None
    if arr.ndim != 3 or arr.shape[2] != 2 or 0 in arr.shape:
        raise SpecError(f"{name} must be [n_heads, F, 2] with n_heads, F >= 1; got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise SpecError(f"{name} must be finite")
    return arr


__all__ = ["LEARNED_KINDS", "LearnedKind", "LearnedRotary", "golden_gate_frequencies"]
