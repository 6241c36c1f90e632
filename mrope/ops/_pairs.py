"""PairTable: a rotary spec as a table over its rotary pairs, and the device tensors both backends read.

For each rotary pair ``p`` (of ``P = rotary_dim // 2``) the table holds the row of the positions that drives
it (``rows[p]``, into positions ``[R, ...]`` with any ``R >= 1``; ``-1``: a NoPE pair, cos 1 and sin 0) and
its inverse frequency in radians per position (``inv_freq[p]``, float64; ``inv_freq32[p]``, the fp32 value
the ``"fp32"`` angle precision multiplies). Which two channels a pair turns is ``pairing`` (``"neox"``:
``o + p`` and ``o + p + P``; ``"gptj"``: ``o + 2p`` and ``o + 2p + 1``; ``o = rotary_offset``). A per-head
table has ``rows`` and ``inv_freq`` of shape ``[HT, P]``: of a tensor with ``H`` heads (``HT`` divides
``H``), head ``h`` reads table row ``h // (H / HT)``, so q and k heads of one GQA group read the same row
when ``HT`` divides the key heads (MHRoPE: each key-head group its own axis).

A :class:`mrope.RopeSpec` becomes a table with :func:`pair_table` (cached per spec): its section layout's
rule (``RopeSpec.axis_map``, one function per layout in ``mrope._spec.SECTION_RULES``) gives the rows, its
scaling's formula (``mrope._scaling.INV_FREQ_FORMULAS``) the frequencies; a :class:`mrope.VideoRope`
becomes three rows of GPT-J pairs, each axis at its own frequency ladder. The torch path and the Triton
kernel read only the device form (:func:`tables`): int32 rows ``[HT, P]`` with NoPE pairs at row 0 and
frequency 0 (the angle is then exactly 0 for every finite position), and fp32 ``[HT, P]`` frequencies
(``"fp32"``) or int64 ``[HT * 3, P]`` turn limbs (``"exact"``, :func:`mrope.ops._freqs.turn_limbs` per head).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from mrope._caches import cached
from mrope._errors import SpecError
from mrope._spec import PAIRINGS, Pairing, RopeSpec
from mrope._video_rope import VideoRope
from mrope.ops._freqs import AnglePrecision, dynamic_freq, hf_inv_freq_fp32, turn_limbs


def _frozen(values: object, dtype: type, name: str) -> np.ndarray:
    try:
        arr = np.array(values, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"PairTable.{name} must be numbers; got {values!r} ({exc})") from None
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class PairTable:
    """The rotary pairs of one attention layer: what drives each pair and how fast it turns.

    Attributes:
        rows: int ``[P]`` or ``[HT, P]`` (per head): the position row of each pair; ``-1`` for a NoPE pair.
        inv_freq: float ``[P]`` or ``[HT, P]``: radians per position (>= 0, finite); the ``"exact"`` angle
            precision takes it as exact.
        head_dim: channels per head of q and k; rotary_offset: the first rotary channel.
        pairing: ``"neox"`` (split halves) or ``"gptj"`` (adjacent channels).
        num_rows: ``R``, the position rows a call passes (``[R, ...]``); ``None``: ``max(rows) + 1`` (at
            least 1).
        inv_freq32: the fp32 frequencies the ``"fp32"`` angle precision multiplies; ``None``:
            ``float32(inv_freq)``. (:func:`pair_table` puts transformers' fp32 arithmetic here.)
        attention_factor: cos and sin multiplier (YaRN's attention temperature; 1.0 otherwise).

    Equal tables (same values) are equal and hash alike; arrays are stored read-only.
    """

    rows: np.ndarray
    inv_freq: np.ndarray
    head_dim: int
    pairing: Pairing = "neox"
    rotary_offset: int = 0
    num_rows: int | None = None
    inv_freq32: np.ndarray | None = None
    attention_factor: float = 1.0
    num_freqs: int = field(init=False)
    """Rotary pairs ``P``."""
    rotary_dim: int = field(init=False)
    """Rotary channels ``2 P``."""
    heads: int = field(init=False)
    """Table heads ``HT``: 1 for a shared table ``[P]``."""
    _key: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rows = _frozen(self.rows, np.int32, "rows")
        inv = _frozen(self.inv_freq, np.float64, "inv_freq")
        inv32 = _frozen(inv if self.inv_freq32 is None else self.inv_freq32, np.float32, "inv_freq32")
        if rows.ndim not in (1, 2) or rows.shape[-1] == 0 or 0 in rows.shape:
            raise SpecError(f"PairTable.rows must be [P] or [HT, P] with P, HT >= 1; got shape {rows.shape}")
        if inv.shape != rows.shape or inv32.shape != rows.shape:
            raise SpecError(
                f"PairTable.inv_freq (and inv_freq32) must have the shape of rows {rows.shape}; got "
                f"{inv.shape} and {inv32.shape}"
            )
        if not (
            np.isfinite(inv).all() and (inv >= 0).all() and np.isfinite(inv32).all() and (inv32 >= 0).all()
        ):
            raise SpecError("PairTable inverse frequencies must be finite and >= 0")
        r = int(rows.max()) + 1 if self.num_rows is None else self.num_rows
        if not isinstance(r, (int, np.integer)) or isinstance(r, bool) or r < 1 or rows.max() >= r:
            raise SpecError(f"PairTable.num_rows must be an int >= 1 above every row index; got {r!r}")
        if rows.min() < -1:
            raise SpecError(f"PairTable.rows must be >= -1 (-1: a NoPE pair); got {int(rows.min())}")
        if self.pairing not in PAIRINGS:
            raise SpecError(f"PairTable.pairing must be one of {PAIRINGS}; got {self.pairing!r}")
        off, hd = self.rotary_offset, self.head_dim
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (off, hd)):
            raise SpecError(f"PairTable.head_dim and rotary_offset must be ints; got {hd!r}, {off!r}")
        if off < 0 or off + 2 * rows.shape[-1] > hd:
            raise SpecError(
                f"PairTable: rotary_offset {off} + 2 * {rows.shape[-1]} pairs must fit head_dim {hd}"
            )
        for name, value in (("rows", rows), ("inv_freq", inv), ("inv_freq32", inv32), ("num_rows", int(r))):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "head_dim", int(hd))
        object.__setattr__(self, "rotary_offset", int(off))
        object.__setattr__(self, "attention_factor", float(self.attention_factor))
        object.__setattr__(self, "num_freqs", int(rows.shape[-1]))
        object.__setattr__(self, "rotary_dim", 2 * int(rows.shape[-1]))
        object.__setattr__(self, "heads", 1 if rows.ndim == 1 else int(rows.shape[0]))
        key = (rows.shape, rows.tobytes(), inv.tobytes(), inv32.tobytes(), self.pairing, int(off), int(hd))
        object.__setattr__(self, "_key", (*key, int(r), self.attention_factor))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PairTable) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


def _ladder(theta: float, dim: int) -> RopeSpec:
    """One axis of a video rope: a one-axis spec of ``dim`` channels, whose frequencies are that axis's
    ladder ``theta ** (-2 i / dim)`` (diffusers' ``get_1d_rotary_pos_embed``, embeddings.py:928-931 of
    0.42.1: the formula transformers' default rotary computes, so its fp32 arithmetic is the same)."""
    return RopeSpec(head_dim=dim, rotary_dim=dim, theta=theta, mrope_section=(dim // 2,))


def _video_table(rope: VideoRope) -> PairTable:
    """Axis ``a``'s pairs read row ``a`` at its own ladder, t's pairs first (diffusers concatenates t, h, w
    cos / sin, transformer_wan.py:413, transformer_hunyuan_video.py:506, embeddings.py:714); adjacent
    channels pair (``repeat_interleave_real``, embeddings.py:936-940, applied as x[2i], x[2i+1]:
    transformer_wan.py:109-114, embeddings.py:988-992). fp32 frequencies: the fp32 ladder where the model
    computes in fp32, else the float64 ladder rounded (Wan, applied in ``"exact"`` precision)."""
    ladders = [_ladder(rope.theta, d) for d in rope.axis_dims]
    inv = np.concatenate([spec.inv_freq() for spec in ladders])
    if rope.freq_dtype == "float32":
        inv32 = np.concatenate([hf_inv_freq_fp32(spec).numpy() for spec in ladders])
    else:
        inv32 = inv.astype(np.float32)
    return PairTable(
        rows=np.repeat(np.arange(3), [d // 2 for d in rope.axis_dims]),
        inv_freq=inv,
        head_dim=rope.head_dim,
        pairing="gptj",
        num_rows=3,
        inv_freq32=inv32,
    )


@cached("ops.pair_tables", maxsize=256)
def pair_table(spec: RopeSpec | VideoRope) -> PairTable:
    """The pair table of a rotary spec (cached per spec): rows ``spec.axis_map()`` (per head under
    ``section_layout="per_head"``; ``-1``, NoPE, on the frequencies of ``spec.nope_axes``), frequencies ``spec.inv_freq()`` (float64) and transformers' fp32 ones
    (:func:`mrope.ops._freqs.hf_inv_freq_fp32`), ``R = spec.num_axes``. Dynamic NTK's frequencies depend
    on the positions: the op recomputes them per call for the spec (pair ``p`` is frequency ``p``); the
    table holds the pretraining-length values.

    A :class:`mrope.VideoRope` gives ``R = 3`` rows (t, h, w), each axis's block of GPT-J pairs at its own
    ladder ``theta ** (-2 i / axis_dims[a])``."""
    if isinstance(spec, VideoRope):
        return _video_table(spec)
    rows = spec.axis_map()  # [P], or [HT, P] per head: every head the same ladder
    return PairTable(
        rows=rows,
        inv_freq=np.broadcast_to(spec.inv_freq(), rows.shape),
        head_dim=spec.head_dim,
        pairing=spec.pairing,
        rotary_offset=spec.rotary_offset,
        num_rows=spec.num_axes,
        inv_freq32=np.broadcast_to(hf_inv_freq_fp32(spec).numpy(), rows.shape),
        attention_factor=spec.attention_factor(),
    )


def _table_of(source: RopeSpec | VideoRope | PairTable) -> PairTable:
    return source if isinstance(source, PairTable) else pair_table(source)


@torch.compiler.assume_constant_result
def as_table(source: RopeSpec | VideoRope | PairTable) -> PairTable:
    """``source`` itself when it is a table, else :func:`pair_table` of the spec (a constant for
    torch.compile: built at trace time, not traced)."""
    return _table_of(source)


# --------------------------------------------------------------------------- device form, cached
# Marked constant for torch.compile: dynamo calls them at trace time and bakes the small tables into the
# graph instead of tracing numpy.


@cached("ops.pair_rows", maxsize=256)
def _rows_cached(table: PairTable, device: torch.device) -> torch.Tensor:
    rows = table.rows.reshape(table.heads, table.num_freqs).clip(min=0)
    return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int32)).to(device)


@torch.compiler.assume_constant_result
def rows_tensor(source: RopeSpec | VideoRope | PairTable, device: torch.device) -> torch.Tensor:
    """int32 ``[HT, P]`` on ``device``: the row of each pair of the table of ``source``, NoPE pairs at row
    0 (their frequency is 0)."""
    return _rows_cached(_table_of(source), device)


@cached("ops.pair_freqs", maxsize=256)
def _freq_cached(table: PairTable, precision: str, device: torch.device) -> torch.Tensor:
    shape = (table.heads, table.num_freqs)
    live = table.rows.reshape(shape) >= 0
    if precision == "fp32":
        inv32 = np.where(live, table.inv_freq32.reshape(shape), np.float32(0)).astype(np.float32)
        return torch.from_numpy(inv32).to(device)
    inv = np.where(live, table.inv_freq.reshape(shape), 0.0)
    limbs = np.concatenate([turn_limbs(head) for head in inv])  # [HT * 3, P]
    return torch.from_numpy(limbs).to(device)


@torch.compiler.assume_constant_result
def freq_tensor(
    source: RopeSpec | VideoRope | PairTable, precision: str, device: torch.device
) -> torch.Tensor:
    """The frequencies of the table of ``source`` on ``device``, NoPE pairs 0: fp32 ``[HT, P]`` (``"fp32"``, radians per
    position) or int64 ``[HT * 3, P]`` (``"exact"``: per head the three limbs of
    :func:`mrope.ops._freqs.turn_limbs`)."""
    return _freq_cached(_table_of(source), precision, device)


def tables(
    source: RopeSpec | VideoRope | PairTable, precision: AnglePrecision, positions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rows, freq)`` (see :func:`rows_tensor`, :func:`freq_tensor`) for a call with ``positions``.

    A spec with dynamic NTK gets its frequencies for ``max(positions) + 1`` (:func:`mrope.ops._freqs.
    dynamic_freq`). The exact table lives on the positions' device, or on the CPU where that device has no
    float64 (MPS).
    """
    calc = positions if precision == "fp32" or positions.device.type != "mps" else positions.to("cpu")
    rows = rows_tensor(source, positions.device)
    dynamic = isinstance(source, RopeSpec) and source.scaling.type == "dynamic"
    if dynamic and positions.numel():
        return rows, dynamic_freq(source, precision, calc)
    return rows, freq_tensor(source, precision, calc.device)
