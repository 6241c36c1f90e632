"""The public ops apply_mrope, cos_sin and rerotate: input checks, layouts, backend choice, autograd.

Layouts (``layout=``):

- ``"thd"``: q ``[T, HQ, D]``, k ``[T, HK, D]``, positions ``[A, T]`` (or ``[T]``): serving engines with a
  flattened batch.
- ``"bhsd"``: q ``[B, HQ, S, D]``, k ``[B, HK, S, D]``, positions ``[A, B, S]`` (or ``[B, S]``), as in
  transformers' attention.
- ``"bshd"``: q ``[B, S, HQ, D]``, k ``[B, S, HK, D]``, positions as for ``bhsd``.

``A`` position rows: ``spec.num_axes = len(spec.mrope_section)`` for a spec (1 to 4; 3 for t, h, w), any
``R >= 1`` for a :class:`~mrope.ops._pairs.PairTable`. Positions without the leading axis are plain RoPE
(the same value on every row). Every op reads only the pair table of its spec (rows and frequencies per
rotary pair), built once per spec. Positions are integers, or floats where a family has
fractional positions (Qwen3-Omni's float32 time). Internally
positions become an ``[A, B, S]`` view (``B = 1`` for ``thd``) and the torch path works on ``[B, S, H, D]``
views of q and k; the Triton kernel takes the caller's strides directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

import mrope.ops._layouts as layouts
import mrope.ops._torch_path as torch_path
from mrope._errors import ApplyError
from mrope._learned_rotary import LearnedRotary
from mrope._spec import RopeSpec
from mrope._video_rope import VideoRope
from mrope.ops._freqs import AnglePrecision
from mrope.ops._golden_gate import learned_rotation
from mrope.ops._pairs import PairTable, as_table, tables

try:  # triton is an optional dependency (extra "triton"); the torch path never needs it
    import mrope.ops._triton_launch as _tk  # registers the mrope:: custom ops

    TRITON_IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - exercised only where triton is missing
    _tk = None
    TRITON_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

Layout = Literal["thd", "bhsd", "bshd"]
Backend = Literal["auto", "torch", "triton"]

LAYOUTS = layouts.LAYOUTS
BACKENDS: tuple[str, ...] = ("auto", "torch", "triton")
ANGLE_PRECISIONS: tuple[str, ...] = ("fp32", "exact")
DTYPES: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
POSITION_DTYPES: tuple[torch.dtype, ...] = (
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
)


@dataclass(frozen=True)
class _RotationSettings:
    """Everything but the tensors: what a forward or backward rotation needs."""

    table: PairTable
    layout: str
    backend: str  # "torch" or "triton"
    precision: str


# ------------------------------------------------------------------------------------------- checks


def _shape(x: torch.Tensor) -> str:
    return "[" + ", ".join(str(n) for n in x.shape) + "]"


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ApplyError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")


def _check_positions(
    positions: object, batch: int, seq: int, layout: str, device: torch.device, axes: int = 3
) -> torch.Tensor:
    """Validate positions and return them as an ``[A, B, S]`` view (A = ``axes``, rows t, h, w for 3)."""
    if not isinstance(positions, torch.Tensor):
        raise ApplyError(
            f"positions must be a torch.Tensor of integers or floats; got {type(positions).__name__}"
        )
    if positions.dtype.is_complex or positions.dtype == torch.bool or positions.dtype not in POSITION_DTYPES:
        raise ApplyError(
            f"positions must have an integer dtype (position ids) or a floating one (fractional positions, "
            f"e.g. Qwen3-Omni's float32 time); got {positions.dtype}"
        )
    if positions.device != device:
        raise ApplyError(
            f"positions must be on the same device as q and k ({device}); got {positions.device}"
        )
    if layout == "thd":
        mrope_shape, plain_shape = (axes, seq), (seq,)
        text = f"[{axes}, T] = [{axes}, {seq}] (M-RoPE) or [T] = [{seq}] (plain RoPE)"
    else:
        mrope_shape, plain_shape = (axes, batch, seq), (batch, seq)
        text = f"[{axes}, B, S] = [{axes}, {batch}, {seq}] (M-RoPE) or [B, S] = [{batch}, {seq}] (plain RoPE)"
    if tuple(positions.shape) == mrope_shape:
        return positions.reshape(axes, batch, seq)
    if tuple(positions.shape) == plain_shape:
        return positions.reshape(1, batch, seq).expand(axes, batch, seq)
    raise ApplyError(
        f"positions for layout {layout!r} must have shape {text} (the spec has {axes} axes: "
        f"len(mrope_section)); got {_shape(positions)}"
    )


def _check_source(spec: object) -> PairTable:
    """The pair table of ``spec`` (a RopeSpec, a VideoRope or a PairTable)."""
    if not isinstance(spec, (RopeSpec, VideoRope, PairTable)):
        raise ApplyError(
            f"spec must be a mrope.RopeSpec, a mrope.VideoRope or a mrope.ops.PairTable; got {type(spec).__name__}"
        )
    return as_table(spec)


def _model_source(spec: object, positions: object) -> tuple[object, object]:
    """A model description (a :class:`mrope.models.ModelFamily`, :func:`mrope.from_pretrained`'s result) as
    the source and positions the op reads: its ``spec``; where part of its rotation is a checkpoint tensor
    (its ``learned_rotary``), that tensor's pair table and rows (:func:`learned_rotation`: refused, naming
    the tensor, when the description holds no values). Anything else as given."""
    inner = getattr(spec, "spec", None)
    if isinstance(spec, (RopeSpec, VideoRope, PairTable)) or not isinstance(inner, RopeSpec):
        return spec, positions
    learned = getattr(spec, "learned_rotary", None)
    if not isinstance(learned, LearnedRotary):
        return inner, positions
    if not isinstance(positions, torch.Tensor):
        raise ApplyError(f"positions must be a torch.Tensor; got {type(positions).__name__}")
    return learned_rotation(learned, str(getattr(spec, "name", "")), inner.theta, positions)


def _check_inputs(
    q: object, k: object, positions: object, spec: object, layout: str, names: tuple[str, str] = ("q", "k")
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validate q, k, positions and spec; return ``(q, k, positions as [R, B, S])``."""
    table = _check_source(spec)
    for name, x in zip(names, (q, k), strict=True):
        if not isinstance(x, torch.Tensor):
            raise ApplyError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    assert isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)
    ndim = 3 if layout == "thd" else 4
    for name, x in zip(names, (q, k), strict=True):
        if x.dim() != ndim:
            raise ApplyError(
                f"{name} for layout {layout!r} must be {ndim}-D {layouts.SHAPES[layout]}; got {_shape(x)}"
            )
        if x.dtype not in DTYPES:
            raise ApplyError(f"{name} must be float32, bfloat16, float16 or float64; got {x.dtype}")
        if x.shape[-1] != table.head_dim:
            raise ApplyError(
                f"{name} head_dim (last dim) must equal spec.head_dim = {table.head_dim}; "
                f"got {x.shape[-1]} in {name} of shape {_shape(x)}"
            )
        if layouts.dims(x, layout)[2] % table.heads:
            raise ApplyError(
                f"{name} has {layouts.dims(x, layout)[2]} heads; a per-head pair table of {table.heads} "
                f"heads needs a multiple of {table.heads}"
            )
    if k.dtype != q.dtype:
        raise ApplyError(f"q and k must have the same dtype; got q {q.dtype} and k {k.dtype}")
    if k.device != q.device:
        raise ApplyError(f"q and k must be on the same device; got q on {q.device} and k on {k.device}")
    qb, qs, _ = layouts.dims(q, layout)
    kb, ks, _ = layouts.dims(k, layout)
    if (qb, qs) != (kb, ks):
        what = "tokens T" if layout == "thd" else "batch and sequence sizes (B, S)"
        raise ApplyError(
            f"q and k must have the same {what} in layout {layout!r} {layouts.SHAPES[layout]}; "
            f"got q {_shape(q)} and k {_shape(k)}"
        )
    return q, k, _check_positions(positions, qb, qs, layout, q.device, table.num_rows)


def _choose_backend(backend: str, device: torch.device) -> str:
    if backend == "torch":
        return "torch"
    if backend == "auto":
        return "triton" if device.type == "cuda" and _tk is not None else "torch"
    if _tk is None:
        raise ApplyError(
            f"backend='triton' needs the triton package (pip install 'mrope[triton]'); importing it failed "
            f"with {TRITON_IMPORT_ERROR}"
        )
    if device.type == "cpu":
        if not _tk.interpreting():
            raise ApplyError(
                "backend='triton' on CPU tensors runs the kernel in Triton's interpreter, which needs the "
                "environment variable TRITON_INTERPRET=1 (e.g. `TRITON_INTERPRET=1 python ...`); it is not "
                "set. Use backend='torch' (or 'auto') for CPU tensors otherwise."
            )
    elif device.type != "cuda":
        raise ApplyError(
            f"backend='triton' runs on CUDA tensors (or CPU tensors with TRITON_INTERPRET=1); got tensors on "
            f"{device}. Use backend='torch' there."
        )
    return "triton"


# ------------------------------------------------------------------------------------------- rotation


def _rotate(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    rows: torch.Tensor,
    freq: torch.Tensor,
    plan: _RotationSettings,
    conj: bool,
    inplace: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One rotation of q and k (by ``-angle`` when ``conj``) with the plan's backend; no autograd."""
    table = plan.table
    if plan.backend == "triton":
        assert _tk is not None
        args = (
            positions,
            rows,
            freq,
            plan.layout,
            table.rotary_dim,
            table.pairing == "gptj",
            plan.precision == "exact",
            conj,
            table.attention_factor,
            table.rotary_offset,
        )
        if inplace:
            torch.ops.mrope.rotary_(q, k, *args)
            return q, k
        q_out, k_out = torch.ops.mrope.rotary(q, k, *args)
        return q_out, k_out
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    # [R, B, S] -> [B, S, HT, F] (HT = 1: shared by every head)
    cos, sin = torch_path.cos_sin_table(positions, rows, freq, table.attention_factor, compute)
    if conj:
        sin = -sin
    outs = []
    for x in (q, k):
        out = x if inplace else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        torch_path.rotate(
            layouts.canonical(x, plan.layout),
            layouts.canonical(out, plan.layout),
            cos,
            sin,
            table,
            inplace=inplace,
        )
        outs.append(out)
    return outs[0], outs[1]


class _RotateFn(torch.autograd.Function):
    """Autograd face of the out-of-place rotation of q and k.

    The backward of a rotation is the same rotation by ``-angle`` (``conj`` flipped), by the same backend.
    The backward calls this Function again, so double backward works as well.
    """

    @staticmethod
    def forward(ctx, q, k, positions, rows, freq, plan, conj):  # type: ignore[override]
        q_out, k_out = _rotate(q, k, positions, rows, freq, plan, conj, False)
        ctx.save_for_backward(positions, rows, freq)
        ctx.plan, ctx.conj = plan, conj
        ctx.shapes, ctx.like = (q.shape, k.shape), {"dtype": q.dtype, "device": q.device}
        return q_out, k_out

    @staticmethod
    def backward(ctx, grad_q, grad_k):  # type: ignore[override]
        positions, rows, freq = ctx.saved_tensors
        # An output that got no gradient (e.g. only q was used) contributes zeros.
        grad_q = torch.zeros(ctx.shapes[0], **ctx.like) if grad_q is None else grad_q
        grad_k = torch.zeros(ctx.shapes[1], **ctx.like) if grad_k is None else grad_k
        dq, dk = _RotateFn.apply(grad_q, grad_k, positions, rows, freq, ctx.plan, not ctx.conj)
        return dq, dk, None, None, None, None, None


class _RotateInplaceFn(torch.autograd.Function):
    """Autograd face of the in-place rotation of one tensor.

    Autograd lets a Function that modifies a view in place return one tensor only, so under autograd q
    and k (typically views into one qkv buffer) are rotated in place by one call each. The backward is
    the out-of-place inverse rotation of the incoming gradient.
    """

    @staticmethod
    def forward(ctx, x, positions, rows, freq, plan):  # type: ignore[override]
        _rotate(x, layouts.no_heads(x, plan.layout), positions, rows, freq, plan, False, True)
        ctx.mark_dirty(x)
        ctx.save_for_backward(positions, rows, freq)
        ctx.plan = plan
        return x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        positions, rows, freq = ctx.saved_tensors
        empty = layouts.no_heads(grad, ctx.plan.layout)
        dx, _ = _RotateFn.apply(grad, empty, positions, rows, freq, ctx.plan, True)
        return dx, None, None, None, None


# ------------------------------------------------------------------------------------------- public


def apply_mrope(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    spec: RopeSpec | VideoRope | PairTable,
    *,
    layout: Layout = "thd",
    inplace: bool = False,
    backend: Backend = "auto",
    angle_precision: AnglePrecision = "fp32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate queries and keys by multimodal rotary position embedding (M-RoPE).

    The op reads the spec's pair table (:func:`mrope.ops.pair_table`, or a :class:`mrope.ops.PairTable`
    given as ``spec``): pair ``i`` (of ``F = rotary_dim // 2``) turns by ``angle = pos[rows[i]] * inv_freq[i]``
    radians; for a spec ``rows = spec.axis_map()`` picks the row of ``positions`` (t, h or w for three axes)
    and ``inv_freq = spec.inv_freq(seq_len)`` (dynamic NTK uses ``seq_len = max(positions) + 1``); YaRN
    multiplies cos and sin by ``spec.attention_factor()``. A NoPE pair (row -1) is left unrotated; a
    per-head table ``[HT, F]`` gives head ``h`` of q (and of k) row ``h // (H / HT)``.
    Pairs are ``o + (i, i + F)`` for ``pairing == "neox"`` and ``o + (2i, 2i + 1)`` for ``"gptj"``,
    ``o = rotary_offset``; channels outside ``[o, o + rotary_dim)`` are passed through.

    Args:
        q: queries, ``[T, HQ, D]`` (``thd``), ``[B, HQ, S, D]`` (``bhsd``) or ``[B, S, HQ, D]`` (``bshd``);
            fp32, bf16, fp16 (fp64 is accepted too, e.g. for gradcheck). ``D == spec.head_dim``.
        k: keys, same layout, dtype and device as q; its head count may differ (GQA).
        positions: position ids on q's device, ``[A, T]`` (``thd``) or ``[A, B, S]`` (``bhsd``, ``bshd``)
            with ``A = len(spec.mrope_section)`` rows (t, h, w for three axes; a table's ``num_rows``
            rows); without the leading axis
            (``[T]``, ``[B, S]``) they are plain 1-D RoPE. Integer (any int dtype) or floating (fractional
            positions such as Qwen3-Omni's float32 time; ``"fp32"`` multiplies ``float32(pos)``, ``"exact"``
            splits ``floor(pos)`` from 32 bits of fraction).
            ``angle_precision="exact"`` is exact over the whole int64 range.
        spec: the rotary spec (e.g. ``mrope.models.resolve_spec("qwen2-vl")``), or a model description whose ``spec``
            it is (a :class:`mrope.models.ModelFamily`, what :func:`mrope.from_pretrained` returns; one with a
            ``learned_rotary`` rotates by its checkpoint tensor's table, positions ``[3, ...]``, or is refused
            where it holds no values: Falcon-OCR's golden gate), or a
            :class:`mrope.ops.PairTable` (any number of position rows, NoPE pairs, per-head rows), or a
            video-generation transformer's :class:`mrope.VideoRope` (with ``angle_precision=
            rope.angle_precision``, the model's own cos / sin).
        layout: ``"thd"``, ``"bhsd"`` or ``"bshd"``.
        inplace: rotate q and k in place (they may be strided views into one packed qkv buffer) and return
            them; otherwise return new tensors, contiguous in ``layout``.
        backend: ``"auto"`` (the Triton kernel for CUDA tensors, the torch path elsewhere), ``"torch"`` or
            ``"triton"`` (the kernel; on CPU tensors it needs ``TRITON_INTERPRET=1`` and runs in Triton's
            interpreter, which is how it is tested without a GPU).
        angle_precision: ``"fp32"``: the angle is the fp32 product of position and fp32 inv_freq, exactly as
            transformers and vLLM compute it (what pretrained models saw); ``"exact"``: the angle
            ``pos * spec.inv_freq()`` (float64 frequencies taken as exact) reduced modulo 2 pi in fixed point
            and rounded to fp32 once, at any int64 position (see :mod:`mrope.ops._freqs`).

    Returns:
        ``(q_rot, k_rot)`` with the shapes and dtype of q and k. Differentiable: the backward pass is the
        inverse rotation by the same backend.

    Raises:
        ApplyError: on shapes, dtypes, devices, layouts, backends or precisions it cannot take.
        SpecError: a model description whose ``learned_rotary`` holds no values (a registry family): the
            message names the checkpoint tensor and its table builder.
    """
    _check_choice("layout", layout, LAYOUTS)
    _check_choice("backend", backend, BACKENDS)
    _check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    if not isinstance(inplace, bool):
        raise ApplyError(f"inplace must be a bool; got {inplace!r}")
    spec, positions = _model_source(spec, positions)
    q, k, pos3 = _check_inputs(q, k, positions, spec, layout)
    chosen = _choose_backend(backend, q.device)
    plan = _RotationSettings(table=as_table(spec), layout=layout, backend=chosen, precision=angle_precision)
    rows, freq = tables(spec, angle_precision, pos3)
    if not (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad)):
        return _rotate(q, k, pos3, rows, freq, plan, False, inplace)
    if inplace:
        q = _RotateInplaceFn.apply(q, pos3, rows, freq, plan)
        k = _RotateInplaceFn.apply(k, pos3, rows, freq, plan)
        return q, k
    return _RotateFn.apply(q, k, pos3, rows, freq, plan, False)


def cos_sin(
    positions: torch.Tensor,
    spec: RopeSpec | VideoRope | PairTable,
    *,
    layout: Layout = "thd",
    dtype: torch.dtype = torch.float32,
    angle_precision: AnglePrecision = "fp32",
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin in transformers' shape, for code that applies the rotation itself.

    This is what ``Qwen2VLRotaryEmbedding`` (with its mrope section selection) returns: for every token
    and rotary channel the cos / sin of the angle that drives it, times YaRN's attention factor, computed
    in fp32 and cast to ``dtype``. Channel order follows ``spec.pairing``: neox repeats the ``F`` values
    (``cat([c, c])``, for ``rotate_half``), gptj repeats each one twice (``repeat_interleave(2)``, GLM-4V).

    Args:
        positions: ``[A, T]`` or ``[T]`` (``layout="thd"``), ``[A, B, S]`` or ``[B, S]``
            (``"bhsd"``/``"bshd"``).
        spec: the rotary spec, pair table or :class:`mrope.VideoRope`. dtype: output dtype.
            angle_precision: as in :func:`apply_mrope`.

    Returns:
        ``(cos, sin)``, each ``[T, rotary_dim]`` (``thd``) or ``[B, S, rotary_dim]``, on positions' device:
        the rotary slice only (channels ``[rotary_offset, rotary_offset + rotary_dim)`` of a head). A
        per-head table of ``HT`` heads adds a head axis: ``[T, HT, rotary_dim]`` / ``[B, S, HT, rotary_dim]``.
    """
    _check_choice("layout", layout, LAYOUTS)
    _check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    table = _check_source(spec)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ApplyError(f"dtype must be a floating torch.dtype; got {dtype!r}")
    if not isinstance(positions, torch.Tensor):
        raise ApplyError(f"positions must be a torch.Tensor; got {type(positions).__name__}")
    axes = table.num_rows
    if layout == "thd":
        if positions.dim() not in (1, 2) or (positions.dim() == 2 and positions.shape[0] != axes):
            raise ApplyError(
                f"positions for layout 'thd' must be [{axes}, T] or [T]; got {_shape(positions)}"
            )
        batch, seq = 1, positions.shape[-1]
    else:
        if positions.dim() not in (2, 3) or (positions.dim() == 3 and positions.shape[0] != axes):
            raise ApplyError(
                f"positions for layout {layout!r} must be [{axes}, B, S] or [B, S]; got {_shape(positions)}"
            )
        batch, seq = positions.shape[-2], positions.shape[-1]
    pos3 = _check_positions(positions, batch, seq, layout, positions.device, axes)
    rows, freq = tables(spec, angle_precision, pos3)
    cos, sin = torch_path.cos_sin_table(pos3, rows, freq, table.attention_factor, torch.float32)
    if table.heads == 1:
        cos, sin = cos.squeeze(-2), sin.squeeze(-2)
    if table.pairing == "neox":
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    else:
        cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
    if layout == "thd":
        cos, sin = cos[0], sin[0]
    return cos.to(dtype), sin.to(dtype)


def rerotate(
    k: torch.Tensor,
    from_positions: torch.Tensor,
    to_positions: torch.Tensor,
    spec: RopeSpec | VideoRope | PairTable,
    *,
    layout: Layout = "thd",
    inplace: bool = True,
    backend: Backend = "auto",
    angle_precision: AnglePrecision = "fp32",
) -> torch.Tensor:
    """Move keys that were rotated at ``from_positions`` to ``to_positions`` (cache reuse at a new offset).

    Frequency ``i`` of every key turns by ``angle(to)[i] - angle(from)[i]``, each frequency by the
    difference on its own position row (the pair table's rows, ``spec.axis_map()`` for a spec). This is what moving a cached image block to a new
    offset, or reusing a cached prefix at shifted positions, needs: the result equals rotating the raw keys
    at ``to_positions`` (``apply_mrope``), to within fp32 rounding. In ``"exact"`` precision the two
    fixed-point turn fractions are subtracted exactly, so that holds however far the shift (any int64
    positions); in ``"fp32"`` precision the rotation is by the difference of the two fp32 angles a model
    computes (transformers' arithmetic at each position). YaRN's attention factor is already in the keys
    and is not applied again.

    Args:
        k: keys in a KV cache, rotated at ``from_positions``: ``[T, HK, D]`` (``thd``: a flat or paged cache
            viewed as slots x heads x dim, e.g. ``cache.view(-1, HK, D)``), ``[B, HK, S, D]`` (``bhsd``:
            transformers' ``DynamicCache`` keys of one layer) or ``[B, S, HK, D]`` (``bshd``: flash-attn's
            cache). Any strides (views into a larger cache are rotated in place). fp32, bf16, fp16, fp64.
        from_positions, to_positions: ``[A, T]`` / ``[A, B, S]`` (or the 1-D forms ``[T]`` / ``[B, S]``),
            integer or floating, on k's device; ``A = len(spec.mrope_section)``.
        spec: the rotary spec (or pair table) the keys were rotated with (no dynamic NTK: its frequencies depend on the
            sequence length, so a stored key does not say which ones it used).
        layout: as in :func:`apply_mrope`.
        inplace: rotate ``k`` in place (default, the cache case) and return it; otherwise return a new tensor.
        backend, angle_precision: as in :func:`apply_mrope`.

    Returns:
        The re-rotated keys (``k`` itself when ``inplace``). Not differentiable (a cache operation).

    Raises:
        ApplyError: on shapes, dtypes, devices, layouts, backends, precisions or a dynamic-NTK spec.
    """
    _check_choice("layout", layout, LAYOUTS)
    _check_choice("backend", backend, BACKENDS)
    _check_choice("angle_precision", angle_precision, ANGLE_PRECISIONS)
    if not isinstance(inplace, bool):
        raise ApplyError(f"inplace must be a bool; got {inplace!r}")
    if not isinstance(k, torch.Tensor):
        raise ApplyError(f"k must be a torch.Tensor; got {type(k).__name__}")
    if isinstance(spec, RopeSpec) and spec.scaling.type == "dynamic":
        raise ApplyError(
            "rerotate needs fixed frequencies; dynamic NTK scaling changes them with the sequence length, "
            "so keys rotated at one length cannot be moved to another by a rotation"
        )
    k, _, to3 = _check_inputs(k, k, to_positions, spec, layout, names=("k", "k"))
    table = as_table(spec)
    batch, seq, _ = layouts.dims(k, layout)
    try:
        from3 = _check_positions(from_positions, batch, seq, layout, k.device, table.num_rows)
    except ApplyError as exc:
        raise ApplyError(f"from_positions: {exc}") from None
    chosen = _choose_backend(backend, k.device)
    rows, freq = tables(spec, angle_precision, to3)
    with torch.no_grad():
        if chosen == "triton":
            args = (
                to3,
                from3,
                rows,
                freq,
                layout,
                table.rotary_dim,
                table.pairing == "gptj",
                angle_precision == "exact",
                table.rotary_offset,
            )
            if inplace:
                torch.ops.mrope.rerotate_(k, *args)
                return k
            return torch.ops.mrope.rerotate(k, *args)
        compute = torch.float64 if k.dtype == torch.float64 else torch.float32
        cos, sin = torch_path.cos_sin_table(to3, rows, freq, 1.0, compute, from_positions=from3)
        out = k if inplace else torch.empty(k.shape, dtype=k.dtype, device=k.device)
        torch_path.rotate(
            layouts.canonical(k, layout),
            layouts.canonical(out, layout),
            cos,
            sin,
            table,
            inplace=inplace,
        )
        return out
