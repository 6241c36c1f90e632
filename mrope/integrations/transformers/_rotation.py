"""The :class:`Rotation` a patched rotary hands out in place of its ``(cos, sin)`` tables.

It holds the positions and the spec the table rows stood for, follows the indexing model code does on
such a table, and rotates q and k by :func:`mrope.apply_mrope` when the patched ``apply_rotary_pos_emb``
receives it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from mrope._errors import PatchError
from mrope._spec import RopeSpec
from mrope.ops import PairTable, apply_mrope, cos_sin, pair_table

_FULL_PRECISION = (torch.float32, torch.float64)
HALF_PRECISION = (torch.float16, torch.bfloat16)
"""The dtypes whose heads a patched model rotates with the model's own arithmetic."""

TABLE_ORDERS = ("neox", "gptj")
"""Channel orders of a cos / sin table: ``cat([c, c])`` (neox) or each value twice (gptj)."""


@dataclass(frozen=True, eq=False)
class Rotation:
    """What a patched rotary module returns in place of ``(cos, sin)`` (it fills both slots).

    It stands for a ``[*lead, rotary_dim]`` cos/sin table (``lead`` = ``(B, S)`` as the rotary hands it
    out) and supports the table indexing model code does on one (Qwen4-Exp's QSA indexer and attention
    slice and gather theirs): ``view[key]`` with integers and slices on the leading dims (and at most a
    full slice ``:`` on the channel dim) and ``view.index_select(dim, index)`` on a leading dim select the
    same entries of :attr:`positions`, so the rotation then uses the positions the table rows held.
    Anything else (tensor or Ellipsis keys, a partial channel slice, other tensor methods) raises
    :class:`~mrope._errors.PatchError`, never a silently wrong table.

    Attributes:
        positions: integer ``[A, *lead]`` position ids (A rows: t, h, w), ``[A, B, S]`` from the rotary.
        spec: the model's rotary spec.
        backend, angle_precision: passed to :func:`mrope.apply_mrope`.
        frequencies: the pair table of the rotary's own ``inv_freq`` buffer where it holds other values
            than the spec's fp32 frequencies (:func:`buffer_frequencies`: a half-precision buffer); ``None``:
            the spec's.
        table_dtype: the dtype of the cos / sin tables the model's own rotary returns for these hidden
            states, where q and k are to be rotated by the model's own ``apply_rotary_pos_emb`` on
            :meth:`tables` (half-precision hidden states with fp32 angles: see
            :attr:`in_model_arithmetic`); ``None``: by :func:`mrope.apply_mrope`.
        table_order: the channel order of the model's own tables (one of :data:`TABLE_ORDERS`, probed at
            patch time by ``table_form``).
    """

    positions: torch.Tensor
    spec: RopeSpec
    backend: str
    angle_precision: str
    frequencies: PairTable | None = None
    table_dtype: torch.dtype | None = None
    table_order: str | None = None

    @property
    def lead_shape(self) -> tuple[int, ...]:
        """The table's leading (token) dims, ``(B, S)`` as the rotary hands it out."""
        return tuple(self.positions.shape[1:])

    @property
    def in_model_arithmetic(self) -> bool:
        """Whether q and k are rotated by the model's own ``apply_rotary_pos_emb`` on :meth:`tables`
        rather than by :func:`mrope.apply_mrope`: for half-precision hidden states with fp32 angles (the
        model's) and a table form ``patch`` found.

        transformers rotates half-precision heads in their dtype (``q * cos + rotate_half(q) * sin``,
        5.24 modeling_qwen2_vl.py:176-177, each product and the sum rounded to the dtype), where
        :func:`mrope.apply_mrope` rotates in fp32 and rounds once; the two differ in the last place, and
        a model that chooses experts or key blocks by top-k turns that into different logits. The model's
        arithmetic on mrope's tables gives the model's logits bit for bit; mrope's op stays the more
        exact one for its own callers. ``angle_precision="exact"`` asks for other angles than the
        model's, and a model whose tables match no order has none mrope can write, so both keep mrope's
        op."""
        return self.table_dtype is not None and self.table_order is not None

    def tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)``, each ``[*lead, rotary_dim]`` in :attr:`table_dtype`: the tables the model's own
        rotary returns for these positions (:func:`mrope.cos_sin`: fp32 angles from the frequencies the
        rotary's buffer holds, fp32 trig, cast to the dtype; in :attr:`table_order`).

        Raises:
            PatchError: the Rotation is not :attr:`in_model_arithmetic`, or its table is per head."""
        if self.table_dtype is None or self.table_order is None:
            raise PatchError("patched rotary: this Rotation rotates by apply_mrope and has no model table")
        source = self.spec if self.frequencies is None else self.frequencies
        axes = len(self.positions)
        flat = self.positions.reshape(axes, 1, -1)
        cos, sin = cos_sin(
            flat,
            source,
            layout="bhsd",
            dtype=self.table_dtype,
            angle_precision=self.angle_precision,  # type: ignore[arg-type]
        )
        if cos.dim() != 3:
            raise PatchError(
                f"patched rotary: a per-head table ({tuple(cos.shape)}) has no cos/sin table of the "
                "model's shape"
            )
        if self.table_order != self.spec.pairing:  # the same values, the other channel order
            cos, sin = (_reordered(t, self.spec.pairing) for t in (cos, sin))
        shape = (*self.lead_shape, cos.shape[-1])
        return cos.reshape(shape), sin.reshape(shape)

    def _with(self, positions: torch.Tensor) -> Rotation:
        return dataclasses.replace(self, positions=positions)

    def __getitem__(self, key: Any) -> Rotation:
        """``table[key]``: integers and slices on the leading dims, a full slice on the channel dim."""
        keys = key if isinstance(key, tuple) else (key,)
        lead = len(self.lead_shape)
        if len(keys) > lead + 1:
            raise PatchError(
                f"Rotation stands for a {lead + 1}-dim cos/sin table; got {len(keys)} indices {key!r}"
            )
        picked: list[int | slice] = []
        for at, item in enumerate(keys):
            if at == lead:  # the channel dim: only the whole of it
                if not isinstance(item, slice) or item.indices(self.spec.rotary_dim) != (
                    0,
                    self.spec.rotary_dim,
                    1,
                ):
                    raise PatchError(
                        "Rotation supports only a full slice ':' on the cos/sin channel dim; got "
                        f"{item!r} (rotating part of the channels is not a rotation mrope can stand for)"
                    )
                continue
            if isinstance(item, slice):
                picked.append(item)
            elif not isinstance(item, bool) and isinstance(item, (int, np.integer)):
                picked.append(int(item))
            else:
                raise PatchError(
                    "Rotation supports integers and slices on the cos/sin table's token dims; got "
                    f"{type(item).__name__} {item!r} at dim {at}"
                )
        return self._with(self.positions[(slice(None), *picked)])

    def index_select(self, dim: int, index: torch.Tensor) -> Rotation:
        """``table.index_select(dim, index)`` on a leading (token) dim: the same rows of positions."""
        lead = len(self.lead_shape)
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not -lead - 1 <= dim <= lead:
            raise PatchError(
                f"Rotation.index_select: dim must be an int in [{-lead - 1}, {lead}]; got {dim!r}"
            )
        dim = int(dim) % (lead + 1)
        if dim == lead:
            raise PatchError("Rotation.index_select on the cos/sin channel dim is not a rotation; refusing")
        if (
            not isinstance(index, torch.Tensor)
            or index.dim() > 1
            or index.dtype.is_floating_point
            or index.dtype.is_complex
            or index.dtype == torch.bool
        ):
            raise PatchError(
                "Rotation.index_select takes a 0-d or 1-d integer tensor index; got "
                f"{type(index).__name__} {getattr(index, 'dtype', '')} {_shape_of(index)}"
            )
        return self._with(self.positions.index_select(dim + 1, index.to(self.positions.device)))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise _UnsupportedTableOp(
            f"the patched rotary hands out a Rotation (a view of positions standing for a cos/sin table); it "
            f"supports indexing with integers/slices and index_select on token dims, not {name!r}"
        )

    def apply(
        self, q: torch.Tensor, k: torch.Tensor | None, unsqueeze_dim: int = 1, *, halves: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        """Rotate q and k as ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)`` would with this table:
        ``cos.unsqueeze(unsqueeze_dim)`` broadcast against ``[..., D]`` heads, its ``rotary_dim`` first
        channels rotated (``D >= rotary_dim``). ``k=None`` rotates q alone and returns it alone. With
        ``halves`` the rotated channels come out as :func:`in_halves` orders them (what
        ``apply_rotary_pos_emb_interleave`` writes)."""
        rotated = self._apply(q, k, unsqueeze_dim)
        if not halves:
            return rotated
        spec = self._spec_for(q)
        if isinstance(rotated, torch.Tensor):
            return in_halves(rotated, spec)
        return in_halves(rotated[0], spec), in_halves(rotated[1], spec)

    def _apply(
        self, q: torch.Tensor, k: torch.Tensor | None, unsqueeze_dim: int
    ) -> tuple[torch.Tensor, torch.Tensor] | torch.Tensor:
        spec = self._spec_for(q)
        lead = self.lead_shape
        if not isinstance(unsqueeze_dim, int) or not -len(lead) - 2 <= unsqueeze_dim <= len(lead) + 1:
            raise PatchError(f"patched rotary: unsqueeze_dim {unsqueeze_dim!r} is out of range for {lead}")
        u = unsqueeze_dim % (len(lead) + 2)
        if u > len(lead):
            raise PatchError(f"patched rotary: unsqueeze_dim {unsqueeze_dim!r} would split the channel dim")
        keys = q if k is None else k
        if k is not None and (k.shape[-1] != q.shape[-1] or k.dim() != q.dim()):
            raise PatchError(f"patched rotary: q {tuple(q.shape)} and k {tuple(k.shape)} heads differ")
        if len(lead) == 2 and q.dim() == 4 and u in (1, 2) and q.shape[0] == lead[0]:
            if q.shape[3 - u] == lead[1] and (k is None or keys.shape[3 - u] == lead[1]):
                layout = "bhsd" if u == 1 else "bshd"
                if k is None:  # one key head is enough company for a query-only rotation
                    keys = q.narrow(u, 0, 1)
                q_rot, k_rot = self._rotate(q, keys, self.positions, spec, layout)
                return q_rot if k is None else (q_rot, k_rot)
        # any other broadcast: positions per element of the heads' leading dims, rotated as tokens
        shape = (*lead[:u], 1, *lead[u:])
        rotated = []
        for x in (q,) if k is None else (q, k):
            try:
                target = torch.broadcast_shapes(shape, tuple(x.shape[:-1]))
            except RuntimeError:
                target = None
            if target != tuple(x.shape[:-1]):
                raise PatchError(
                    f"patched rotary: a cos/sin table of shape {(*lead, spec.rotary_dim)} unsqueezed at "
                    f"{unsqueeze_dim} does not broadcast to heads of shape {tuple(x.shape)}"
                )
            rows = self.positions.reshape(len(self.positions), *shape).expand(-1, *target)
            flat = x.reshape(-1, 1, x.shape[-1])
            out, _ = self._rotate(flat, flat, rows.reshape(len(rows), -1), spec, "thd")
            rotated.append(out.reshape(x.shape))
        return rotated[0] if k is None else (rotated[0], rotated[1])

    def _spec_for(self, heads: torch.Tensor) -> RopeSpec:
        """The spec for heads ``[..., D]``: the table rotates the first ``rotary_dim`` channels of any
        ``D >= rotary_dim`` (an indexer's heads may be narrower or wider than the attention's)."""
        width = heads.shape[-1]
        if width == self.spec.head_dim:
            return self.spec
        if self.spec.rotary_offset != 0 or width < self.spec.rotary_dim:
            raise PatchError(
                f"patched rotary: heads of {width} channels, spec rotates channels "
                f"[{self.spec.rotary_offset}, {self.spec.rotary_offset + self.spec.rotary_dim}) of "
                f"{self.spec.head_dim}"
            )
        return dataclasses.replace(self.spec, head_dim=width)

    def _rotate(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, spec: RopeSpec, layout: str
    ) -> tuple[torch.Tensor, torch.Tensor]:
        table = self.frequencies
        if table is not None and table.head_dim != spec.head_dim:
            table = dataclasses.replace(table, head_dim=spec.head_dim)
        return apply_mrope(
            q,
            k,
            positions,
            spec if table is None else table,
            layout=layout,  # type: ignore[arg-type]
            backend=self.backend,  # type: ignore[arg-type]
            angle_precision=self.angle_precision,  # type: ignore[arg-type]
        )


def buffer_frequencies(spec: RopeSpec, buffer_dtype: torch.dtype) -> PairTable | None:
    """The pair table a rotary whose ``inv_freq`` buffer has dtype ``buffer_dtype`` rotates by, where that
    differs from ``spec``'s (``None`` for an fp32 or fp64 buffer, and for dynamic NTK, whose update writes
    an fp32 buffer).

    transformers computes ``inv_freq`` in fp32 and registers it as a buffer, so ``model.to(torch.float16)``
    (or bf16) rounds it; the rotary then multiplies the positions by the buffer cast back to fp32
    (transformers 5.24 modeling_qwen2_vl.py:130, ``self.inv_freq.to(..., dtype=torch.float)``; the same in
    every M-RoPE family's rotary): the spec's fp32 frequencies rounded to ``buffer_dtype`` and back are the
    frequencies the model uses, for both angle precisions."""
    if buffer_dtype in _FULL_PRECISION or spec.scaling.type == "dynamic":
        return None
    table = pair_table(spec)
    rounded = torch.from_numpy(table.inv_freq32.copy()).to(buffer_dtype).float().numpy()
    return dataclasses.replace(table, inv_freq=rounded.astype(np.float64), inv_freq32=rounded)


def in_halves(x: torch.Tensor, spec: RopeSpec) -> torch.Tensor:
    """``x`` ``[..., D]`` with the rotated channels ``[o, o + d)`` of ``spec`` (o = rotary_offset, d =
    rotary_dim) moved from adjacent pairs to split halves: channel o + 2i goes to o + i and o + 2i + 1 to
    o + i + d/2 (the order transformers 5.25's ``apply_rotary_pos_emb_interleave`` returns,
    modeling_hy_v4_vl.py:96-99); the other channels stay."""
    lo, hi = spec.rotary_offset, spec.rotary_offset + spec.rotary_dim
    return torch.cat([x[..., :lo], x[..., lo:hi:2], x[..., lo + 1 : hi : 2], x[..., hi:]], dim=-1)


def _reordered(table: torch.Tensor, order: str) -> torch.Tensor:
    """A ``[..., d]`` cos or sin table in channel order ``order`` written in the other one."""
    if order == "neox":
        return table[..., : table.shape[-1] // 2].repeat_interleave(2, dim=-1)
    value = table[..., ::2]
    return torch.cat((value, value), dim=-1)


class _UnsupportedTableOp(PatchError, AttributeError):
    """A tensor method model code called on a :class:`Rotation` that it does not stand for."""


def _shape_of(value: Any) -> Any:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


__all__ = ["HALF_PRECISION", "TABLE_ORDERS", "Rotation", "buffer_frequencies", "in_halves"]
