"""PositionProgram: a sequence's positions as runs (O(segments) space), its expansion and its two codecs.

A run covers ``length`` consecutive tokens: ``repeat`` groups, each ``lead`` text tokens followed by a
block of shape ``(d0, d1, d2)`` (``length == repeat * (lead + d0 * d1 * d2)``). Group ``g`` starts at
``base = origin + g * advance`` (per axis): its text token ``u < lead`` is at ``base + u`` on every axis
(text counts up by one on each), and its block token ``i = (i0 * d1 + i1) * d2 + i2`` (row-major, the last
index fastest) at ``base + lead + strides[a, 0] * i0 + strides[a, 1] * i1 + strides[a, 2] * i2`` on axis
``a``, added left to right. A plain run is one group without text (``lead`` 0, ``advance`` 0): a text line
is ``(1, 1, n)`` with every stride ``(0, 0, 1)``, an image grid ``(1, H', W')`` with the t axis still, h
stepping with ``i1`` and w with ``i2``, a video's time stride its temporal step. A timestamped video (each
frame a block after its timestamp text) is one run per stretch of frames whose timestamps have the same
number of tokens. An *explicit* run (``explicit >= 0``, one plain group) stores its positions in
``pool[:, explicit : explicit + length]`` (a pruned, irregular set of tokens). Programs of float positions
(fractional time) have plain runs only.

The binary form (:meth:`PositionProgram.to_bytes`, all little-endian) is documented in docs/engine.md,
"Position programs"; the JSON form (:meth:`PositionProgram.to_dict`) holds the same fields as lists.
Two programs are equal when their binary forms are (:meth:`PositionProgram.__eq__`).
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from mrope._errors import ProgramError
from mrope._grid import MAX_POSITION

FORMAT_VERSION = 2
"""The version of the binary and JSON forms; a reader refuses any other."""
MAGIC = b"MRPG"
MAX_AXES = 8
MAX_TOKENS = 1 << 31
"""The most tokens a program read from bytes or JSON may expand to (a reader's ``max_tokens`` can only lower it)."""
_HEADER = struct.Struct("<4sHHIQQQ8s32s")
"""magic, version, flags, num_axes, num_tokens, num_runs, pool_length, delta (int64 or float64), rules digest."""
_FLOAT = 1  # flags bit 0: positions are float32 (fractional time), origins and strides float64
_JSON_FORMAT = "mrope-position-program"
_LITTLE = sys.byteorder == "little"


@dataclass(frozen=True, eq=False)
class PositionProgram:
    """Positions ``[A, T]`` of one sequence as ``R`` runs.

    Attributes:
        num_tokens: ``T``.
        delta: the sequence's decode delta (:attr:`mrope.Positions.delta`): token ``i >= T`` decodes at
            ``i + delta`` on every axis (:func:`mrope.next_positions`).
        rules_digest: :func:`mrope.rules_digest` of the rules the positions were built under (``""``
            when unknown).
        lengths: int64 ``[R]`` tokens per run (each >= 1, summing to ``T``).
        shape: int64 ``[R, 3]`` block ``(d0, d1, d2)`` of each group (``(1, 1, length)`` for explicit).
        origin: ``[R, A]`` first position of each affine run (int64; float64 for float32 positions).
        strides: ``[R, A, 3]`` position step per block index, same dtype as ``origin``.
        explicit: int64 ``[R]``: ``-1`` for an affine run, else the run's offset into ``pool``.
        pool: ``[A, P]`` the stored positions of explicit runs, in the positions' dtype.
        lead: int64 ``[R]`` text tokens before each group's block (0 for a plain run).
        advance: ``[R, A]`` position step from one group to the next (0 for a run of one group), same
            dtype as ``origin``.

    Equality and hashing are by value: two programs are equal when their :meth:`to_bytes` are (the same
    runs, delta, rules digest and dtype).
    """

    num_tokens: int
    delta: int | float
    rules_digest: str
    lengths: np.ndarray
    shape: np.ndarray
    origin: np.ndarray
    strides: np.ndarray
    explicit: np.ndarray
    pool: np.ndarray
    lead: np.ndarray
    advance: np.ndarray

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionProgram):
            return NotImplemented
        return self is other or self.to_bytes() == other.to_bytes()

    def __hash__(self) -> int:
        return hash(self.to_bytes())

    @property
    def num_axes(self) -> int:
        return int(self.pool.shape[0])

    @property
    def num_runs(self) -> int:
        return int(self.lengths.size)

    @property
    def dtype(self) -> np.dtype:
        """The positions' dtype: int64, or float32 under fractional time."""
        return self.pool.dtype

    @cached_property
    def starts(self) -> np.ndarray:
        """int64 ``[R]``: the first token of each run (computed once)."""
        return np.cumsum(self.lengths) - self.lengths

    @cached_property
    def repeat(self) -> np.ndarray:
        """int64 ``[R]``: the groups of each run, ``lengths // (lead + d0 * d1 * d2)``."""
        return self.lengths // (self.lead + self.shape.prod(axis=1))

    def arrays(self) -> dict[str, np.ndarray]:
        """The run arrays by the names :func:`mrope.ops.expand_program` takes."""
        return {
            "lengths": self.lengths,
            "shape": self.shape,
            "origin": self.origin,
            "strides": self.strides,
            "explicit": self.explicit,
            "pool": self.pool,
            "lead": self.lead,
            "advance": self.advance,
        }

    def expand(self, out: np.ndarray | None = None) -> np.ndarray:
        """The positions ``[A, T]`` (int64, or float32 under fractional time), exactly as built: each run of
        several groups (or with text before its block) written as one broadcast over its groups, the plain
        affine runs of one block shape together as one broadcast (a loop over runs of groups, distinct
        shapes and stored runs, none over tokens or groups). ``out``: the caller's ``[A, T]`` buffer of
        that dtype, written and returned (then nothing of the result's size is allocated but one block's
        values)."""
        shape = (self.num_axes, self.num_tokens)
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        elif not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != self.dtype:
            got = f"{out.dtype} {list(out.shape)}" if isinstance(out, np.ndarray) else type(out).__name__
            raise ProgramError(f"expand: out must be a {self.dtype} array of shape {list(shape)}; got {got}")
        starts = self.starts
        stored = self.explicit >= 0
        for r in np.flatnonzero(stored).tolist():
            at, n, offset = int(starts[r]), int(self.lengths[r]), int(self.explicit[r])
            out[:, at : at + n] = self.pool[:, offset : offset + n]
        grouped = (self.lead > 0) | (self.repeat > 1)
        for r in np.flatnonzero(grouped).tolist():
            self._groups_into(out, r)
        affine = np.flatnonzero(~stored & ~grouped)
        if not affine.size:
            return out
        shapes, group = np.unique(self.shape[affine], axis=0, return_inverse=True)
        for g, dims in enumerate(shapes.tolist()):
            members = affine[group.reshape(-1) == g]
            if members.size == 1:  # one block: its last axis added straight into ``out``
                m, (d0, d1, d2) = int(members[0]), dims
                at = int(starts[m])
                rows = block_values(self.origin[m], self.strides[m], (d0, d1, 1), self.origin.dtype)
                target = out[:, at : at + d0 * d1 * d2].view()
                target.shape = (self.num_axes, d0 * d1, d2)  # a view: only the last axis splits
                step = self.strides[m, :, 2:] * np.arange(d2)  # [A, d2]
                np.add(rows[:, :, None], step[:, None, :], out=target, casting="unsafe")
                continue
            vals = block_values(self.origin[members], self.strides[members], dims, self.dtype)  # [G, A, n]
            out[:, starts[members][:, None] + np.arange(vals.shape[2])] = vals.transpose(1, 0, 2)
        return out

    def _groups_into(self, out: np.ndarray, r: int) -> None:
        """Write run ``r`` (integer: groups are never float) into ``out`` ``[A, T]``: its tokens as a view
        ``[A, groups, lead + block]``, the text of every group one add, the blocks another."""
        k, n, at = int(self.repeat[r]), int(self.lead[r]), int(self.starts[r])
        target = out[:, at : at + int(self.lengths[r])].view()
        target.shape = (self.num_axes, k, -1)  # a view: only the last axis splits
        base = self.origin[r][:, None] + self.advance[r][:, None] * np.arange(k)  # [A, k]
        if n:
            np.add(base[:, :, None], np.arange(n), out=target[:, :, :n])
        zero = np.zeros(self.num_axes, dtype=self.origin.dtype)
        block = block_values(zero, self.strides[r], self.shape[r].tolist(), self.origin.dtype)  # [A, B]
        np.add((base + n)[:, :, None], block[:, None, :], out=target[:, :, n:])

    def window(self, start: int, stop: int) -> np.ndarray:
        """Positions ``[A, stop - start]`` of tokens ``start .. stop-1`` (``0 <= start <= stop <= T``),
        in O(stop - start) work past a binary search over the runs. Decode positions past the prompt are
        :func:`mrope.next_positions` of :attr:`delta`."""
        for name, v in (("start", start), ("stop", stop)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ProgramError(f"window {name} must be an int; got {v!r}")
        if not 0 <= start <= stop <= self.num_tokens:
            raise ProgramError(
                f"window needs 0 <= start <= stop <= {self.num_tokens} (the program's tokens); "
                f"got start={start}, stop={stop}"
            )
        index = np.arange(start, stop, dtype=np.int64)
        run = np.searchsorted(self.starts, index, side="right") - 1
        return self._values(index, run)

    def _values(self, index: np.ndarray, run: np.ndarray) -> np.ndarray:
        """Positions ``[A, n]`` of tokens ``index`` lying in runs ``run`` (both ``[n]``): the group, then
        the text token or the block index within it (the order of additions of the module docstring)."""
        local = index - self.starts[run]
        lead = self.lead[run]
        dims = self.shape[run]
        size = lead + dims.prod(axis=1)
        g = local // size
        u = local - g * size
        rest, i2 = np.divmod(u - lead, dims[:, 2])
        i0, i1 = np.divmod(rest, dims[:, 1])
        s = self.strides[run]  # [n, A, 3]
        base = self.origin[run].T + self.advance[run].T * g
        block = base + lead + s[:, :, 0].T * i0 + s[:, :, 1].T * i1 + s[:, :, 2].T * i2
        out = np.where(u < lead, base + u, block).astype(self.dtype, copy=False)
        offset = self.explicit[run]
        stored = offset >= 0
        if stored.any():
            out[:, stored] = self.pool[:, offset[stored] + local[stored]]
        return out

    def to_bytes(self) -> bytes:
        """The little-endian binary form: a 76-byte header, then ``lengths``, ``shape``, ``explicit``,
        ``lead``, ``origin``, ``strides``, ``advance`` (C order) and ``pool`` (docs/engine.md, "Position
        programs")."""
        is_float = self.dtype.kind == "f"
        delta = struct.pack("<d", float(self.delta)) if is_float else struct.pack("<q", int(self.delta))
        header = _HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            _FLOAT if is_float else 0,
            self.num_axes,
            self.num_tokens,
            self.num_runs,
            int(self.pool.shape[1]),
            delta,
            self.rules_digest.encode("ascii"),
        )
        parts = (
            self.lengths,
            self.shape,
            self.explicit,
            self.lead,
            self.origin,
            self.strides,
            self.advance,
            self.pool,
        )
        # tobytes writes C order; an array not already little-endian is converted first
        return b"".join(
            [header, *(p.tobytes() if p.dtype.isnative and _LITTLE else _little(p).tobytes() for p in parts)]
        )

    @classmethod
    def from_bytes(
        cls, data: bytes | bytearray | memoryview, *, max_tokens: int = MAX_TOKENS
    ) -> PositionProgram:
        """The program :meth:`to_bytes` wrote, checked before anything is allocated.

        Raises:
            ProgramError: not a program (magic), another version, unknown flags, sizes that disagree with
                the buffer's length, more than ``max_tokens`` tokens, or runs that do not tile the tokens
                or reach positions past 2**62.
        """
        buf = memoryview(data).cast("B")
        if len(buf) < _HEADER.size:
            raise ProgramError(
                f"a position program starts with a {_HEADER.size}-byte header; got {len(buf)} bytes"
            )
        magic, version, flags, axes, tokens, runs, pool, delta_raw, digest = _HEADER.unpack_from(buf)
        if magic != MAGIC:
            raise ProgramError(f"not a position program: magic {magic!r}, expected {MAGIC!r}")
        if version != FORMAT_VERSION:
            raise ProgramError(
                f"position program version {version}; this reader takes version {FORMAT_VERSION}"
            )
        if flags & ~_FLOAT:
            raise ProgramError(f"unknown position program flags {flags:#06x}")
        _check_counts(axes, tokens, runs, pool, max_tokens)
        is_float = bool(flags & _FLOAT)
        ids_size = 4 if is_float else 8
        want = _HEADER.size + 8 * (runs * (6 + 5 * axes)) + ids_size * axes * pool
        if len(buf) != want:
            raise ProgramError(
                f"a position program of {axes} axes, {runs} runs and {pool} stored positions takes {want} "
                f"bytes; got {len(buf)}"
            )
        num = "<f8" if is_float else "<i8"
        at = _HEADER.size
        fields = []
        for count, dtype, dims in (
            (runs, "<i8", (runs,)),
            (runs * 3, "<i8", (runs, 3)),
            (runs, "<i8", (runs,)),
            (runs, "<i8", (runs,)),
            (runs * axes, num, (runs, axes)),
            (runs * axes * 3, num, (runs, axes, 3)),
            (runs * axes, num, (runs, axes)),
            (axes * pool, "<f4" if is_float else "<i8", (axes, pool)),
        ):
            arr = np.frombuffer(buf, dtype=dtype, count=count, offset=at).reshape(dims)
            at += arr.nbytes
            fields.append(arr.astype(arr.dtype.newbyteorder("=")))
        try:
            text = bytes(digest).rstrip(b"\0").decode("ascii")
        except UnicodeDecodeError:
            raise ProgramError("a position program's rules digest is ASCII") from None
        delta = struct.unpack("<d" if is_float else "<q", delta_raw)[0]
        lengths, shape, explicit, lead, origin, strides, advance, pool_ids = fields
        return _checked(
            cls(tokens, delta, text, lengths, shape, origin, strides, explicit, pool_ids, lead, advance)
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``format``, ``version``, ``dtype``, ``num_axes``, ``num_tokens``, ``delta``,
        ``rules_digest`` and the eight arrays as nested lists."""
        is_float = self.dtype.kind == "f"
        return {
            "format": _JSON_FORMAT,
            "version": FORMAT_VERSION,
            "dtype": "float32" if is_float else "int64",
            "num_axes": self.num_axes,
            "num_tokens": self.num_tokens,
            "delta": float(self.delta) if is_float else int(self.delta),
            "rules_digest": self.rules_digest,
            **{name: arr.tolist() for name, arr in self.arrays().items()},
        }

    @classmethod
    def from_dict(cls, data: Any, *, max_tokens: int = MAX_TOKENS) -> PositionProgram:
        """The program :meth:`to_dict` gave (e.g. read back from JSON), checked as :meth:`from_bytes`."""
        if not isinstance(data, dict):
            raise ProgramError(f"a position program's JSON form is an object; got {type(data).__name__}")
        if data.get("format") != _JSON_FORMAT or data.get("version") != FORMAT_VERSION:
            raise ProgramError(
                f"expected format {_JSON_FORMAT!r} version {FORMAT_VERSION}; "
                f"got {data.get('format')!r} version {data.get('version')!r}"
            )
        kind = data.get("dtype")
        if kind not in ("int64", "float32"):
            raise ProgramError(f"a position program's dtype is 'int64' or 'float32'; got {kind!r}")
        axes, tokens, digest = data.get("num_axes"), data.get("num_tokens"), data.get("rules_digest")
        lengths = data.get("lengths")
        pool = data.get("pool")
        if not (isinstance(lengths, list) and isinstance(pool, list) and isinstance(digest, str)):
            raise ProgramError(
                "a position program needs 'lengths' and 'pool' lists and a 'rules_digest' string"
            )
        _check_counts(
            axes, tokens, len(lengths), len(pool[0]) if pool and isinstance(pool[0], list) else 0, max_tokens
        )
        num = np.float64 if kind == "float32" else np.int64
        runs = len(lengths)
        try:
            fields = [
                _array(data, "lengths", np.int64, (runs,)),
                _array(data, "shape", np.int64, (runs, 3)),
                _array(data, "origin", num, (runs, axes)),
                _array(data, "strides", num, (runs, axes, 3)),
                _array(data, "explicit", np.int64, (runs,)),
                _array(data, "pool", np.dtype(kind), (axes, -1)),
                _array(data, "lead", np.int64, (runs,)),
                _array(data, "advance", num, (runs, axes)),
            ]
        except ProgramError:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProgramError(
                f"a position program's arrays must be numbers of the documented shapes: {exc}"
            ) from None
        delta = data.get("delta")
        if isinstance(delta, bool) or not isinstance(delta, int if kind == "int64" else (int, float)):
            raise ProgramError(
                f"a position program's delta is {'an int' if kind == 'int64' else 'a number'}; got {delta!r}"
            )
        return _checked(cls(tokens, float(delta) if kind == "float32" else delta, digest, *fields))


def _little(p: np.ndarray) -> np.ndarray:
    """``p`` with little-endian numbers."""
    return p.astype(p.dtype.newbyteorder("<"))


def block_values(origin: np.ndarray, strides: np.ndarray, dims: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """Positions ``[..., A, d0 * d1 * d2]`` of affine runs of one shape (``origin`` ``[..., A]``, ``strides``
    ``[..., A, 3]``): ``((origin + s0 * i0) + s1 * i1) + s2 * i2`` in the dtype of ``origin`` (the order
    :meth:`PositionProgram.window` and :func:`mrope.ops.expand_program` add in too), cast to ``dtype``."""
    d0, d1, d2 = dims
    column = (..., None, None, None)
    v = origin[column] + strides[..., 0][column] * np.arange(d0)[:, None, None]
    v = v + strides[..., 1][column] * np.arange(d1)[:, None]
    v = v + strides[..., 2][column] * np.arange(d2)
    return v.reshape(*origin.shape, -1).astype(dtype, copy=False)


def _array(data: dict, name: str, dtype: Any, dims: tuple[int, ...]) -> np.ndarray:
    """``data[name]`` as an array of ``dtype`` and shape ``dims`` (``-1``: any), refused when its numbers
    are of another kind (a fraction where ints are due, a bool, a string) or its shape differs."""
    value = data.get(name)
    if not isinstance(value, list):
        raise ProgramError(f"a position program's {name!r} is a list; got {type(value).__name__}")
    raw = np.asarray(value)
    kinds = "iu" if np.dtype(dtype).kind in "iu" else "iuf"
    if raw.size and raw.dtype.kind not in kinds:
        raise ProgramError(
            f"a position program's {name!r} holds {'ints' if kinds == 'iu' else 'numbers'}; got {raw.dtype}"
        )
    arr = raw.astype(dtype)
    if dims[-1] == -1 and arr.size == 0:
        return arr.reshape(dims[0], 0)
    if arr.ndim != len(dims) or any(d not in (-1, s) for d, s in zip(dims, arr.shape, strict=True)):
        raise ProgramError(
            f"a position program's {name!r} has shape {list(arr.shape)}; expected {list(dims)}"
        )
    return arr


def _check_counts(axes: Any, tokens: Any, runs: int, pool: int, max_tokens: int) -> None:
    """Refuse sizes out of bounds before anything of their size is allocated."""
    for name, value in (("num_axes", axes), ("num_tokens", tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProgramError(f"a position program's {name} is an int >= 0; got {value!r}")
    if not 1 <= axes <= MAX_AXES:
        raise ProgramError(f"a position program has 1 to {MAX_AXES} axes; got {axes}")
    if tokens > min(max_tokens, MAX_TOKENS):
        raise ProgramError(
            f"a position program of {tokens:,} tokens; this reader takes at most {min(max_tokens, MAX_TOKENS):,}"
        )
    if runs > tokens or pool > tokens:
        raise ProgramError(
            f"a position program of {tokens} tokens has at most {tokens} runs and stored positions; "
            f"got {runs} runs and {pool} stored positions"
        )


def _checked(p: PositionProgram) -> PositionProgram:
    """``p`` once its runs tile its tokens and stay in bounds (a read program, before any expansion)."""
    if not (p.rules_digest.isascii() and len(p.rules_digest) <= 32 and "\0" not in p.rules_digest):
        raise ProgramError(
            f"a position program's rules digest is at most 32 ASCII characters; got {p.rules_digest!r:.80}"
        )
    lengths, shape, explicit = p.lengths, p.shape, p.explicit
    pool_len = p.pool.shape[1]
    if (lengths < 1).any() or int(lengths.sum()) != p.num_tokens:
        raise ProgramError(
            f"a position program's run lengths are >= 1 and sum to num_tokens ({p.num_tokens})"
        )
    if (shape < 1).any() or (shape > p.num_tokens).any():
        raise ProgramError("a position program's block shapes are ints from 1 to num_tokens")
    lead = p.lead
    if (lead < 0).any() or (lead > p.num_tokens).any() or (explicit < -1).any():
        raise ProgramError(
            "a position program's leads are ints from 0 to num_tokens; explicit offsets are -1 or >= 0"
        )
    front = shape[:, 0] * shape[:, 1]  # < 2**62: each side is at most num_tokens <= 2**31
    block = front * shape[:, 2]
    if (front > lengths).any() or (block > lengths).any() or (lengths % (lead + block)).any():
        raise ProgramError(
            "a run's length is a whole number of groups, each its lead and its block's product of sides"
        )
    repeat = lengths // (lead + block)
    affine = explicit < 0
    stored = ~affine
    if (lead[stored] != 0).any() or (repeat[stored] != 1).any():
        raise ProgramError("an explicit run is one group of its stored positions, without lead")
    if (p.advance[repeat == 1] != 0).any():
        raise ProgramError("a run of one group has advance 0")
    if p.dtype.kind == "f" and (lead.any() or (repeat != 1).any()):
        raise ProgramError("a program of float positions has runs of one group without lead")
    ends = explicit[stored] + lengths[stored]
    if (ends > pool_len).any():
        raise ProgramError(f"an explicit run reaches past the {pool_len} stored positions")
    reach = (
        np.abs(p.origin[affine].astype(np.float64))
        + np.abs(p.advance[affine].astype(np.float64)) * (repeat[affine, None] - 1)
        + lead[affine, None]
        + (np.abs(p.strides[affine].astype(np.float64)) * (shape[affine, None, :] - 1)).sum(axis=2)
    )
    if not (np.isfinite(reach).all() and (reach < MAX_POSITION).all()):
        raise ProgramError(f"a position program's runs reach positions past {MAX_POSITION:.3g} (2**62)")
    if p.pool.size and not (np.isfinite(p.pool).all() and (np.abs(p.pool) < MAX_POSITION).all()):
        raise ProgramError(f"a position program's stored positions are finite and below {MAX_POSITION:.3g}")
    if not (np.isfinite(p.delta) and abs(p.delta) < MAX_POSITION):
        raise ProgramError(
            f"a position program's delta is finite and below {MAX_POSITION:.3g}; got {p.delta!r}"
        )
    return p


__all__ = ["FORMAT_VERSION", "MAX_TOKENS", "PositionProgram", "block_values"]
