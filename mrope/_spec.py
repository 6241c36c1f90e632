"""RopeSpec: the rotary side of M-RoPE (frequencies, per-axis sections, pairing, scaling).

A :class:`RopeSpec` is everything an apply path needs besides the positions: which channels rotate,
at which frequency, and which position axis (t, h, w for three axes; 1 to 4 axes) drives each frequency.
The frequency-to-axis map (:meth:`RopeSpec.axis_map`) lives here and nowhere else; the torch path and the
Triton kernel both read it.

Conventions (as transformers 5.24 computes them: ``inv_freq`` in models/qwen2_vl/modeling_qwen2_vl.py:122,
chunked sections :142, split-half ``rotate_half`` :147; interleaved sections in
models/qwen3_vl/modeling_qwen3_vl.py:410; adjacent pairs ``rotate_half_llm`` in
models/glm4v/modeling_glm4v.py:493; h/w alternating in models/ernie4_5_vl_moe/modeling_ernie4_5_vl_moe.py:62):

- ``inv_freq[i] = theta ** (-2 i / rotary_dim)`` for ``i in [0, rotary_dim / 2)``, then scaled
  (formulas in :mod:`mrope._scaling`, one per scaling type).
- ``mrope_section = (s_0, ..., s_{A-1})`` counts frequency pairs per axis (A = 1..4 axes; ``(s_t, s_h, s_w)``
  for three). It may sum to fewer than ``rotary_dim / 2``: the remaining frequencies go to axis 0.
- ``section_layout="chunked"``: frequency i uses axis a while ``i < s_0 + ... + s_a``; past the sum, axis 0.
- ``section_layout="interleaved"``: axis ``a >= 1`` if ``i % A == a and i < A s_a``, else axis 0 (for three
  axes: h if ``i % 3 == 1 and i < 3 s_h``, w if ``i % 3 == 2 and i < 3 s_w``, else t).
- ``section_layout="hw_alternating"`` (three axes, ``s_h == s_w``): the first ``s_h + s_w`` frequencies
  alternate h (even i) and w (odd i), the rest (the lowest rates) are t.
- ``section_layout="per_head"`` (MHRoPE, JJJYmmm/Multimodal-RoPEs multimodal_ropes/freq_allocation/
  mhrope.py:20-27): ``mrope_section`` counts key-head groups per axis, not frequencies; each group reads
  its axis at every frequency (the full ladder), so the spec's pair table has ``sum(mrope_section)`` heads.
- ``nope_axes``: the frequencies a layout gives to these axes do not rotate (NoPE: cos 1, sin 0, whatever
  the positions): ``axis_map`` marks them ``-1``, and so does the pair table. HoPE (hrlics/HoPE at
  85b76c0, modeling_hope.py:266-293, ``apply_hybrid_multimodal_rotary_pos_emb``) is ``hw_alternating`` with t's
  lowest frequencies NoPE: ``nope_axes=(0,)``.
- ``pairing="neox"``: channel i pairs with ``i + rotary_dim / 2``; ``"gptj"``: channels 2i and 2i+1; both
  counted from ``rotary_offset``, the first rotary channel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, get_args

import numpy as np

from mrope._errors import SpecError
from mrope._scaling import INV_FREQ_FORMULAS, NUMPY_F64, SCALING_TYPES, ScalingType

SectionLayout = Literal["chunked", "interleaved", "hw_alternating", "per_head"]
Pairing = Literal["neox", "gptj"]

SECTION_LAYOUTS: tuple[str, ...] = get_args(SectionLayout)
PAIRINGS: tuple[str, ...] = get_args(Pairing)
MAX_AXES = 4


def _chunked_axes(sec: tuple[int, ...], n: int) -> np.ndarray:
    """Chunked sections: axis a while ``i < s_0 + ... + s_a``; past the sum, axis 0."""
    i = np.arange(n)
    axis = np.zeros(n, dtype=np.int64)
    bounds = np.cumsum(sec)
    for j in range(len(sec) - 1, 0, -1):
        axis[(i >= bounds[j - 1]) & (i < bounds[j])] = j
    return axis


def _interleaved_axes(sec: tuple[int, ...], n: int) -> np.ndarray:
    """Interleaved sections: axis ``a >= 1`` where ``i % A == a and i < A s_a``, else axis 0."""
    i = np.arange(n)
    a = len(sec)
    axis = np.zeros(n, dtype=np.int64)
    for j in range(1, a):
        axis[(i % a == j) & (i < a * sec[j])] = j
    return axis


def _hw_alternating_axes(sec: tuple[int, ...], n: int) -> np.ndarray:
    """h / w alternating: the first ``s_h + s_w`` frequencies are h (even i) and w (odd i), the rest t."""
    i = np.arange(n)
    spatial = i < sec[1] + sec[2]
    axis = np.zeros(n, dtype=np.int64)
    axis[spatial & (i % 2 == 0)] = 1
    axis[spatial & (i % 2 == 1)] = 2
    return axis


def _per_head_axes(sec: tuple[int, ...], n: int) -> np.ndarray:
    """Per head (MHRoPE): ``sec`` counts key-head groups per axis; head ``g`` of the ``sum(sec)`` reads
    axis ``a`` on every frequency while ``g < s_0 + ... + s_a`` (int64 ``[sum(sec), F]``)."""
    heads = np.repeat(np.arange(len(sec), dtype=np.int64), sec)
    return np.repeat(heads[:, None], n, axis=1)


SECTION_RULES: dict[str, Callable[[tuple[int, ...], int], np.ndarray]] = {
    "chunked": _chunked_axes,
    "interleaved": _interleaved_axes,
    "hw_alternating": _hw_alternating_axes,
    "per_head": _per_head_axes,
}
"""``section_layout`` -> its rule ``(mrope_section, num_freqs) -> axis of every frequency`` (int64 ``[F]``,
or ``[heads, F]`` for ``"per_head"``), one function per layout, chosen by name like transformers'
``ROPE_INIT_FUNCTIONS``."""


@dataclass(frozen=True)
class RopeScaling:
    """Long-context frequency scaling. It changes ``inv_freq`` only, before the axis selection.

    Attributes:
        type: ``"none"``, ``"linear"`` (``inv_freq / factor``), ``"dynamic"`` (NTK-aware base growth once
            the sequence is longer than ``original_max_position_embeddings``), ``"ntk_alpha"`` (HunYuan's
            fixed base growth ``theta * alpha ** (d / (d - 2))``) or ``"yarn"``. Formulas: :mod:`mrope._scaling`.
        factor: the context-extension factor (> 0; 1.0 for ``"none"``).
        original_max_position_embeddings: the pretraining context length ``L0`` in tokens (dynamic, yarn).
        beta_fast, beta_slow: YaRN's correction range in rotations (defaults 32 and 1).
        mscale, mscale_all_dim: YaRN's DeepSeek-style attention-factor terms (optional).
        attention_factor: YaRN's explicit attention factor; ``None`` derives it from ``factor``.
        truncate: YaRN floors/ceils the correction range (True in every released config).
        alpha: the NTK-alpha of ``"ntk_alpha"`` (> 0; HunyuanOCR: 1000).
    """

    type: ScalingType = "none"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    alpha: float | None = None

    def __post_init__(self) -> None:
        if self.type not in SCALING_TYPES:
            raise SpecError(
                f"scaling.type must be one of {', '.join(repr(t) for t in SCALING_TYPES)}; got {self.type!r}"
            )
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor > 0):
            raise SpecError(f"scaling.factor must be a finite number > 0; got {self.factor!r}")
        if self.type in ("dynamic", "yarn"):
            opm = self.original_max_position_embeddings
            if not (isinstance(opm, int) and opm > 0):
                raise SpecError(
                    f"scaling.original_max_position_embeddings must be a positive int for "
                    f"{self.type!r} scaling; got {opm!r}"
                )
        if self.type == "ntk_alpha":
            a = self.alpha
            if not (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) and a > 0):
                raise SpecError(
                    f"scaling.alpha must be a finite number > 0 for 'ntk_alpha' scaling; got {a!r}"
                )


def _check_nope_axes(spec: RopeSpec) -> None:
    """``nope_axes``: distinct axes of the spec, as a sorted tuple (stored back); not with dynamic NTK,
    whose per-call frequencies would turn the NoPE pairs."""
    axes = spec.nope_axes
    if isinstance(axes, (str, bytes)) or not hasattr(axes, "__iter__"):
        raise SpecError(f"nope_axes must be a sequence of axis indices; got {axes!r}")
    axes = tuple(axes)
    a = spec.num_axes
    ok = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) and 0 <= x < a for x in axes)
    if not ok or len(set(axes)) != len(axes):
        raise SpecError(
            f"nope_axes must be distinct axis indices in [0, {a}) (mrope_section has {a} axes); got {axes!r}"
        )
    if axes and spec.scaling.type == "dynamic":
        raise SpecError(
            "nope_axes needs scaling other than 'dynamic' (its frequencies are recomputed per call)"
        )
    object.__setattr__(spec, "nope_axes", tuple(sorted(int(x) for x in axes)))


@dataclass(frozen=True)
class RopeSpec:
    """The rotary configuration of one attention layer.

    Attributes:
        head_dim: channels per head (q and k).
        rotary_dim: channels that rotate, ``d_r <= head_dim``; the others pass through.
        theta: the frequency base (> 0).
        mrope_section: frequency pairs per position axis, 1 to 4 entries (``(s_t, s_h, s_w)`` for three
            axes; positions are then ``[A, ...]`` with ``A = len(mrope_section)``). Sums to at most
            ``rotary_dim / 2``; frequencies past the sum go to axis 0.
        section_layout: ``"chunked"`` (Qwen2/2.5-VL, GLM-4.1V, HunyuanOCR's 4 axes), ``"interleaved"``
            (Qwen3-VL, HY-V4-VL), ``"hw_alternating"`` (ERNIE-4.5-VL, VideoRoPE) or ``"per_head"``
            (MHRoPE: ``mrope_section`` counts key-head groups); see the module docstring.
        pairing: ``"neox"`` (split half, HF ``rotate_half``) or ``"gptj"`` (adjacent channels).
        scaling: long-context scaling of ``inv_freq``.
        rotary_offset: the first rotary channel: channels ``[rotary_offset, rotary_offset + rotary_dim)``
            rotate, the rest pass through (HY-V4-VL: 192, its 64-channel rope slice ends a 256-channel head).
        nope_axes: axes whose frequencies stay unrotated (NoPE pairs, ``-1`` in :meth:`axis_map`); ``()``:
            every frequency rotates. HoPE: ``(0,)``, its temporal frequencies.
    """

    head_dim: int = 128
    rotary_dim: int = 128
    theta: float = 1_000_000.0
    mrope_section: tuple[int, ...] = (16, 24, 24)
    section_layout: SectionLayout = "chunked"
    pairing: Pairing = "neox"
    scaling: RopeScaling = field(default_factory=RopeScaling)
    rotary_offset: int = 0
    nope_axes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.scaling, dict):
            object.__setattr__(self, "scaling", RopeScaling(**self.scaling))
        if not isinstance(self.scaling, RopeScaling):
            raise SpecError(f"scaling must be a RopeScaling or a dict; got {type(self.scaling).__name__}")
        for name in ("head_dim", "rotary_dim"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"{name} must be a positive int; got {value!r}")
            if value % 2:
                raise SpecError(f"{name} must be even (channels rotate in pairs); got {value}")
        off = self.rotary_offset
        if not isinstance(off, (int, np.integer)) or isinstance(off, bool) or off < 0:
            raise SpecError(f"rotary_offset must be an int >= 0; got {off!r}")
        object.__setattr__(self, "rotary_offset", int(off))
        if self.rotary_offset + self.rotary_dim > self.head_dim:
            what = "rotary_dim" if not self.rotary_offset else "rotary_offset + rotary_dim"
            raise SpecError(
                f"{what} ({self.rotary_offset + self.rotary_dim}) must not exceed head_dim ({self.head_dim})"
            )
        if not (isinstance(self.theta, (int, float)) and math.isfinite(self.theta) and self.theta > 0):
            raise SpecError(f"theta must be a finite number > 0; got {self.theta!r}")
        sec = self.mrope_section
        if isinstance(sec, (str, bytes)) or not hasattr(sec, "__len__"):
            raise SpecError(f"mrope_section must be a sequence of 1 to {MAX_AXES} ints; got {sec!r}")
        sec = tuple(sec)
        ok = all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in sec)
        if not (1 <= len(sec) <= MAX_AXES and ok):
            raise SpecError(
                f"mrope_section must be 1 to {MAX_AXES} non-negative ints (frequency pairs per axis); got {sec!r}"
            )
        sec = tuple(int(s) for s in sec)
        object.__setattr__(self, "mrope_section", sec)
        n = self.rotary_dim // 2
        if sum(sec) > n:
            raise SpecError(
                f"mrope_section {list(sec)} sums to {sum(sec)} frequency pairs, but rotary_dim "
                f"{self.rotary_dim} has only {n}"
            )
        if self.section_layout not in SECTION_LAYOUTS:
            raise SpecError(
                f"section_layout must be one of {', '.join(repr(x) for x in SECTION_LAYOUTS)}; "
                f"got {self.section_layout!r}"
            )
        a = len(sec)
        if self.section_layout == "interleaved":
            # axis j >= 1 owns slots j, j + A, ..., j + A (s_j - 1): the last one must exist
            bad = [j for j in range(1, a) if sec[j] and a * (sec[j] - 1) + j > n - 1]
            if bad:
                need = " and ".join(f"{a}*s_{j} <= {n - 1 - j + a}" for j in bad)
                raise SpecError(
                    f"interleaved mrope_section {list(sec)} needs {need} so that every slot of axis "
                    f"{', '.join(str(j) for j in bad)} exists among {n} frequencies"
                )
        if self.section_layout == "per_head" and (sum(sec) < 1 or self.scaling.type == "dynamic"):
            raise SpecError(
                "per_head needs mrope_section to count at least one key-head group (heads per axis) and "
                f"scaling other than 'dynamic'; got mrope_section {list(sec)}, scaling {self.scaling.type!r}"
            )
        if self.section_layout == "hw_alternating" and (a != 3 or sec[1] != sec[2]):
            raise SpecError(
                f"hw_alternating needs three axes (t, h, w) with s_h == s_w (h and w alternate); got "
                f"mrope_section {list(sec)}"
            )
        if self.scaling.type in ("dynamic", "ntk_alpha") and self.rotary_dim <= 2:
            raise SpecError(
                f"{self.scaling.type} scaling needs rotary_dim > 2 (its base exponent is d / (d - 2)); "
                f"got rotary_dim {self.rotary_dim}"
            )
        if self.pairing not in PAIRINGS:
            raise SpecError(f"pairing must be {' or '.join(repr(x) for x in PAIRINGS)}; got {self.pairing!r}")
        _check_nope_axes(self)

    # ------------------------------------------------------------------ frequencies

    @property
    def num_freqs(self) -> int:
        """Frequency pairs: ``rotary_dim // 2``."""
        return self.rotary_dim // 2

    @property
    def num_axes(self) -> int:
        """Position axes: ``len(mrope_section)`` (positions are ``[num_axes, ...]``)."""
        return len(self.mrope_section)

    def axis_map(self) -> np.ndarray:
        """Axis index (0 = t, 1 = h, 2 = w for three axes; -1: NoPE) of every frequency, int64
        ``[rotary_dim // 2]`` (``[heads, rotary_dim // 2]`` under ``"per_head"``).

        This is the single source of truth for which position row drives which frequency: the rule of
        ``section_layout`` in :data:`SECTION_RULES`, with ``-1`` (a NoPE frequency) where that rule gives
        an axis of ``nope_axes``.
        """
        axes = SECTION_RULES[self.section_layout](self.mrope_section, self.num_freqs)
        return np.where(np.isin(axes, self.nope_axes), -1, axes) if self.nope_axes else axes

    def inv_freq(self, seq_len: int | None = None) -> np.ndarray:
        """Scaled inverse frequencies, float64 ``[rotary_dim // 2]``, in radians per position.

        The formula is ``mrope._scaling.INV_FREQ_FORMULAS[scaling.type]`` (shared with the fp32 angle path).

        Args:
            seq_len: the current sequence length (``max(position) + 1``), used by dynamic NTK scaling
                only; ``None`` means the pretraining length (no growth).
        """
        return np.asarray(INV_FREQ_FORMULAS[self.scaling.type](NUMPY_F64, self, seq_len), dtype=np.float64)

    def yarn_ramp(self) -> tuple[float, float]:
        """YaRN's correction range ``(low, high)`` in frequency indices: frequencies below ``low`` keep
        their pretrained value, those above ``high`` are divided by ``factor``, a linear ramp between."""
        sc = self.scaling
        d = self.rotary_dim
        base = float(self.theta)
        l0 = sc.original_max_position_embeddings

        def correction_dim(rotations: float) -> float:
            return (d * math.log(l0 / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low = correction_dim(sc.beta_fast)
        high = correction_dim(sc.beta_slow)
        if sc.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high += 0.001
        return low, high

    def attention_factor(self) -> float:
        """Multiplier applied to cos and sin (YaRN's attention temperature; 1.0 otherwise)."""
        sc = self.scaling
        if sc.type != "yarn":
            return 1.0
        if sc.attention_factor is not None:
            return float(sc.attention_factor)

        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if sc.mscale and sc.mscale_all_dim:
            return float(mscale(sc.factor, sc.mscale) / mscale(sc.factor, sc.mscale_all_dim))
        return mscale(sc.factor)

    # ------------------------------------------------------------------ (de)serialisation

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_dict` turns back into an equal spec."""
        out = asdict(self)
        out["mrope_section"] = list(self.mrope_section)
        out["nope_axes"] = list(self.nope_axes)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RopeSpec:
        """Inverse of :meth:`to_dict`. Unknown keys are an error (a typo must not be ignored)."""
        if not isinstance(data, dict):
            raise SpecError(f"RopeSpec.from_dict expects a dict; got {type(data).__name__}")
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise SpecError(
                f"unknown RopeSpec fields {sorted(unknown)}; expected a subset of {sorted(known)}"
            )
        data = dict(data)
        scaling = data.get("scaling", {})
        if isinstance(scaling, dict):
            s_known = set(RopeScaling.__dataclass_fields__)
            if set(scaling) - s_known:
                raise SpecError(
                    f"unknown scaling fields {sorted(set(scaling) - s_known)}; expected a subset of "
                    f"{sorted(s_known)}"
                )
            data["scaling"] = RopeScaling(**scaling)
        try:
            return cls(**data)
        except TypeError as exc:  # wrong argument types that the dataclass itself rejects
            raise SpecError(f"cannot build RopeSpec from {data!r}: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RopeSpec:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise SpecError(f"RopeSpec JSON is malformed: {exc}") from None

    def with_scaling(self, **kwargs: Any) -> RopeSpec:
        """A copy with a new :class:`RopeScaling` built from ``kwargs``."""
        return replace(self, scaling=RopeScaling(**kwargs))
