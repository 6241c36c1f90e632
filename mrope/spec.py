"""RopeSpec: the rotary side of M-RoPE (frequencies, per-axis sections, pairing, scaling).

A :class:`RopeSpec` is everything an apply path needs besides the positions: which channels rotate,
at which frequency, and which of the three position axes (t, h, w) drives each frequency. The
frequency-to-axis map (:meth:`RopeSpec.axis_map`) lives here and nowhere else; the torch path and the
Triton kernel both read it.

Conventions (SPEC section 4):

- ``inv_freq[i] = theta ** (-2 i / rotary_dim)`` for ``i in [0, rotary_dim / 2)``, then scaled.
- ``mrope_section = (s_t, s_h, s_w)`` counts frequency pairs per axis, summing to ``rotary_dim / 2``.
- ``section_layout="chunked"``: frequency i uses t if ``i < s_t``, h if ``i < s_t + s_h``, else w.
- ``section_layout="interleaved"``: h if ``i % 3 == 1 and i < 3 s_h``, w if ``i % 3 == 2 and i < 3 s_w``,
  else t.
- ``pairing="neox"``: channel i pairs with ``i + rotary_dim / 2``; ``"gptj"``: channels 2i and 2i+1.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

import numpy as np

from mrope.errors import SpecError

SectionLayout = Literal["chunked", "interleaved"]
Pairing = Literal["neox", "gptj"]
ScalingType = Literal["none", "linear", "dynamic", "yarn"]

AXES = ("t", "h", "w")


@dataclass(frozen=True)
class RopeScaling:
    """Long-context frequency scaling. It changes ``inv_freq`` only, before the axis selection.

    Attributes:
        type: ``"none"``, ``"linear"`` (``inv_freq / factor``), ``"dynamic"`` (NTK-aware base growth once
            the sequence is longer than ``original_max_position_embeddings``) or ``"yarn"``.
        factor: the context-extension factor (> 0; 1.0 for ``"none"``).
        original_max_position_embeddings: the pretraining context length ``L0`` in tokens (dynamic, yarn).
        beta_fast, beta_slow: YaRN's correction range in rotations (defaults 32 and 1).
        mscale, mscale_all_dim: YaRN's DeepSeek-style attention-factor terms (optional).
        attention_factor: YaRN's explicit attention factor; ``None`` derives it from ``factor``.
        truncate: YaRN floors/ceils the correction range (True in every released config).
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

    def __post_init__(self) -> None:
        if self.type not in ("none", "linear", "dynamic", "yarn"):
            raise SpecError(
                f"scaling.type must be one of 'none', 'linear', 'dynamic', 'yarn'; got {self.type!r}"
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


@dataclass(frozen=True)
class RopeSpec:
    """The rotary configuration of one attention layer.

    Attributes:
        head_dim: channels per head (q and k).
        rotary_dim: channels that rotate, ``d_r <= head_dim``; channels ``>= rotary_dim`` pass through.
        theta: the frequency base (> 0).
        mrope_section: frequency pairs per axis ``(s_t, s_h, s_w)``; must sum to ``rotary_dim / 2``.
        section_layout: ``"chunked"`` (Qwen2/2.5-VL, GLM-4.1V) or ``"interleaved"`` (Qwen3-VL).
        pairing: ``"neox"`` (split half, HF ``rotate_half``) or ``"gptj"`` (adjacent channels).
        scaling: long-context scaling of ``inv_freq``.
    """

    head_dim: int = 128
    rotary_dim: int = 128
    theta: float = 1_000_000.0
    mrope_section: tuple[int, int, int] = (16, 24, 24)
    section_layout: SectionLayout = "chunked"
    pairing: Pairing = "neox"
    scaling: RopeScaling = field(default_factory=RopeScaling)

    def __post_init__(self) -> None:
        object.__setattr__(self, "mrope_section", tuple(self.mrope_section))
        if isinstance(self.scaling, dict):
            object.__setattr__(self, "scaling", RopeScaling(**self.scaling))
        for name in ("head_dim", "rotary_dim"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
                raise SpecError(f"{name} must be a positive int; got {value!r}")
            if value % 2:
                raise SpecError(f"{name} must be even (channels rotate in pairs); got {value}")
        if self.rotary_dim > self.head_dim:
            raise SpecError(f"rotary_dim ({self.rotary_dim}) must not exceed head_dim ({self.head_dim})")
        if not (isinstance(self.theta, (int, float)) and math.isfinite(self.theta) and self.theta > 0):
            raise SpecError(f"theta must be a finite number > 0; got {self.theta!r}")
        sec = self.mrope_section
        if len(sec) != 3 or not all(isinstance(s, (int, np.integer)) and s >= 0 for s in sec):
            raise SpecError(f"mrope_section must be three non-negative ints (t, h, w); got {sec!r}")
        object.__setattr__(self, "mrope_section", tuple(int(s) for s in sec))
        if sum(sec) != self.rotary_dim // 2:
            raise SpecError(
                f"mrope_section {list(sec)} sums to {sum(sec)} frequency pairs, but rotary_dim "
                f"{self.rotary_dim} has {self.rotary_dim // 2}"
            )
        if self.section_layout not in ("chunked", "interleaved"):
            raise SpecError(f"section_layout must be 'chunked' or 'interleaved'; got {self.section_layout!r}")
        if self.section_layout == "interleaved":
            s_t, s_h, s_w = sec
            n = self.rotary_dim // 2
            if 3 * s_h > n + 1 or 3 * s_w > n:
                raise SpecError(
                    f"interleaved mrope_section {list(sec)} needs 3*s_h <= {n + 1} and 3*s_w <= {n} "
                    f"so that every h and w slot exists among {n} frequencies"
                )
        if self.scaling.type == "dynamic" and self.rotary_dim <= 2:
            raise SpecError(
                f"dynamic NTK scaling needs rotary_dim > 2 (its base exponent is d / (d - 2)); "
                f"got rotary_dim {self.rotary_dim}"
            )
        if self.pairing not in ("neox", "gptj"):
            raise SpecError(f"pairing must be 'neox' or 'gptj'; got {self.pairing!r}")

    # ------------------------------------------------------------------ frequencies

    @property
    def num_freqs(self) -> int:
        """Frequency pairs: ``rotary_dim // 2``."""
        return self.rotary_dim // 2

    def axis_map(self) -> np.ndarray:
        """Axis index (0 = t, 1 = h, 2 = w) of every frequency, int64 ``[rotary_dim // 2]``.

        This is the single source of truth for which position row drives which frequency.
        """
        n = self.num_freqs
        i = np.arange(n)
        s_t, s_h, s_w = self.mrope_section
        if self.section_layout == "chunked":
            return np.where(i < s_t, 0, np.where(i < s_t + s_h, 1, 2)).astype(np.int64)
        axis = np.zeros(n, dtype=np.int64)
        axis[(i % 3 == 1) & (i < 3 * s_h)] = 1
        axis[(i % 3 == 2) & (i < 3 * s_w)] = 2
        return axis

    def inv_freq(self, seq_len: int | None = None) -> np.ndarray:
        """Scaled inverse frequencies, float64 ``[rotary_dim // 2]``, in radians per position.

        Args:
            seq_len: the current sequence length (``max(position) + 1``), used by dynamic NTK scaling
                only; ``None`` means the pretraining length (no growth).
        """
        d = self.rotary_dim
        exponents = np.arange(0, d, 2, dtype=np.float64) / d
        sc = self.scaling
        base = float(self.theta)
        if sc.type == "dynamic":
            l0 = sc.original_max_position_embeddings
            length = l0 if seq_len is None else max(int(seq_len), l0)
            base = base * ((sc.factor * length / l0) - (sc.factor - 1)) ** (d / (d - 2))
        pos_freqs = base**exponents
        inv = 1.0 / pos_freqs
        if sc.type == "linear":
            inv = inv / sc.factor
        elif sc.type == "yarn":
            inv = self._yarn_inv_freq(pos_freqs)
        return inv

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

    def _yarn_inv_freq(self, pos_freqs: np.ndarray) -> np.ndarray:
        low, high = self.yarn_ramp()
        ramp = np.clip((np.arange(self.rotary_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        extrapolation_weight = 1.0 - ramp
        extrapolated = 1.0 / pos_freqs
        interpolated = 1.0 / (self.scaling.factor * pos_freqs)
        return interpolated * (1 - extrapolation_weight) + extrapolated * extrapolation_weight

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

    # ------------------------------------------------------------------ registry and (de)serialisation

    @classmethod
    def preset(cls, name: str) -> RopeSpec:
        """The released rotary spec of a registered model family (a name, model_type or repo id; see
        :func:`mrope.models.get_family`)."""
        from mrope.errors import LayoutError
        from mrope.models import get_family

        try:
            return get_family(name).spec
        except LayoutError as exc:
            raise SpecError(str(exc)) from None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_dict` turns back into an equal spec."""
        out = asdict(self)
        out["mrope_section"] = list(self.mrope_section)
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
        if "mrope_section" in data:
            data["mrope_section"] = tuple(data["mrope_section"])
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

    @classmethod
    def from_hf_config(
        cls, config: dict[str, Any], *, layer_type: str | None = None, family: Any = None
    ) -> RopeSpec:
        """The rotary spec of a Hugging Face model config, given as a dict (the parsed ``config.json``;
        :func:`mrope.from_pretrained` reads checkpoint folders).

        Reads nested ``text_config`` / ``thinker_config.text_config``, ``rope_scaling`` and
        ``rope_parameters`` (per layer type too: ``layer_type=`` picks one, default ``"full_attention"``),
        ``rope_theta``, ``mrope_section``, ``mrope_interleaved``, ``partial_rotary_factor`` and ``head_dim``.
        Pairing and section layout follow the family of the text config's ``model_type`` (``family=``
        overrides it); see :mod:`mrope.models.config`.
        """
        from mrope.models.config import spec_from_config

        return spec_from_config(config, layer_type=layer_type, family=family)


def __getattr__(name: str) -> Any:
    if name == "PRESET_NAMES":  # the registry's family names (kept for callers of the old table)
        from mrope.models import names

        return names()
    raise AttributeError(f"module 'mrope.spec' has no attribute {name!r}")
