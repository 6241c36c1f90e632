"""The checks every LayoutRules value passes: each rule's type, range and the combinations it needs.

:class:`mrope.LayoutRules` runs :func:`check_rules` when it is made, so every face (builder, schema, service,
CLI) refuses the same bad rules with the same :class:`mrope.LayoutError`. The ranges here
(:data:`RULE_BOUNDS`) are also the request schema's bounds on rule overrides (:mod:`mrope.schema`).
"""

from __future__ import annotations

import math
from typing import Any

from mrope._errors import LayoutError
from mrope._timestamp_format import check_timestamp_format

Rules = Any
"""A :class:`mrope.LayoutRules` (typed loosely: :mod:`mrope._rules` imports this module, not the reverse)."""


MAX_PIXELS_RULE = 2**50
"""Largest pixel-count rule (``image_max_pixels``, ``video_total_pixels``, ...): far above any family's."""
NO_CLIP_BUDGET = MAX_PIXELS_RULE
"""``video_total_pixels`` of a processor that shares no clip budget out among the frames: the largest
rule, so the per-frame share never binds."""
MAX_FRAMES_RULE = 1 << 20
"""Largest frame-count rule (``min_frames``, ``max_frames``)."""

RULE_BOUNDS: dict[str, tuple[float, float]] = {
    "merge_size": (1, 64),
    "temporal_patch_size": (1, 64),
    "temporal_merge_size": (1, 64),
    "temporal_stride": (0.0, 4096.0),
    "vision_step": (0.0, 4096.0),
    "circle_radius": (0.0, 1e6),
    "circle_alpha": (0.0, 1.0),
    "patch_size": (1, 4096),
    "image_min_pixels": (0, MAX_PIXELS_RULE),
    "image_max_pixels": (1, MAX_PIXELS_RULE),
    "video_min_pixels": (0, MAX_PIXELS_RULE),
    "video_max_pixels": (1, MAX_PIXELS_RULE),
    "video_total_pixels": (1, MAX_PIXELS_RULE),
    "video_frame_max_pixels": (1, MAX_PIXELS_RULE),
    "min_frames": (1, MAX_FRAMES_RULE),
    "max_frames": (1, MAX_FRAMES_RULE),
    "fps": (1e-3, 1000.0),
    "tokens_per_second": (0.0, 1000.0),
    "second_per_grid_fps": (1e-3, 1000.0),
    "max_duration": (0.0, 1e7),
    "seconds_per_chunk": (0.0, 3600.0),
    "audio_window": (1, 1 << 20),
    "audio_sampling_rate": (1, 1 << 22),
    "audio_hop_length": (1, 1 << 20),
    "audio_max_frames": (1, 2**31 - 1),
    "audio_min_samples": (0, 2**31 - 1),
    "vision_registers": (0, 64),
}
"""The inclusive range of every sized rule (the number rules of the families all lie far inside):
a rule is a size or a rate, so each bounds work (``temporal_patch_size`` 67108864 made a list of that
length per video). Checked by :class:`LayoutRules` for every face, and the request schema's rule
overrides carry the same ranges (:mod:`mrope.schema`). A ``0.0`` lower bound of a float rule stands
for "greater than 0", which the class checks too. Token ids and ``pad_position`` are any int64."""


def _check_bounds(rules: Rules) -> None:
    for name, (lo, hi) in RULE_BOUNDS.items():
        value = getattr(rules, name)
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue  # types are checked where the rule is
        if not lo <= value <= hi:
            raise LayoutError(f"LayoutRules.{name} must be in [{lo:g}, {hi:g}]; got {value!r}")


def _check_positive_ints(rules: Rules, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(rules, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise LayoutError(f"LayoutRules.{name} must be a positive int; got {value!r}")


def _is_number(value: Any) -> bool:
    """A finite int or float, not a bool."""
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _is_positive_number(value: Any) -> bool:
    """A finite int or float > 0, not a bool."""
    return (
        not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0
    )


def _check_audio_rules(rules: Rules) -> None:
    _check_positive_ints(rules, ("audio_window", "audio_sampling_rate", "audio_hop_length"))
    if not isinstance(rules.audio_min_samples, int) or isinstance(rules.audio_min_samples, bool):
        raise LayoutError(f"LayoutRules.audio_min_samples must be an int; got {rules.audio_min_samples!r}")
    if rules.audio_max_frames is not None and (
        not isinstance(rules.audio_max_frames, int) or rules.audio_max_frames < 1
    ):
        raise LayoutError(
            f"LayoutRules.audio_max_frames must be a positive int or None; got {rules.audio_max_frames!r}"
        )
    if not _is_positive_number(rules.seconds_per_chunk):
        raise LayoutError(
            f"LayoutRules.seconds_per_chunk must be a finite number > 0; got {rules.seconds_per_chunk!r}"
        )
    ids = (rules.audio_pad_id, rules.audio_start_id, rules.audio_end_id)
    if any(i is not None for i in ids) and any(i is None for i in ids):
        raise LayoutError(
            "LayoutRules audio_pad_id, audio_start_id and audio_end_id are set together (a model with "
            f"audio) or all None; got {ids}"
        )


def _check_token_time(rules: Rules) -> None:
    """``spatial="token_time"`` places every token of a block by its index and frame alone: the rules
    that would move it otherwise (a time, a stride, a crop origin, frame blocks, another advance) are
    refused rather than ignored."""
    if rules.spatial != "token_time":
        return
    wrong = {
        "temporal": rules.temporal if rules.temporal == "seconds" else None,
        "temporal_stride": rules.temporal_stride if rules.temporal_stride != 1 else None,
        "advance": rules.advance if rules.advance != "max+1" else None,
        "crop": rules.crop if rules.crop != "reset" else None,
        "frame_block": True if rules.frame_block else None,
        "positions_base": rules.positions_base if rules.positions_base != "counter" else None,
        "audio_pad_id": rules.audio_pad_id,  # the omni timeline places blocks its own way
    }
    got = ", ".join(f"{k} {v!r}" for k, v in wrong.items() if v is not None)
    if got:
        raise LayoutError(
            "LayoutRules.spatial 'token_time' needs temporal 'index' or 'timestamps', temporal_stride 1, "
            f"advance 'max+1', crop 'reset', no frame_block, positions_base 'counter' and no audio; got {got}"
        )


_SYMMETRIC_NEEDS: dict[str, Any] = {
    "num_axes": 4,
    "positions_base": "counter",
    "advance": "max+1",
    "temporal_stride": 1,
    "crop": "reset",
    "frame_block": False,
    "row_newline": False,
    "grid_border": False,
    "audio_pad_id": None,
}
"""The rules the ``"symmetric"`` spatial rule (VRoPE's four rows) is defined under, and their values."""


def _check_symmetric(rules: Rules) -> None:
    """Refuse symmetric rules that differ from :data:`_SYMMETRIC_NEEDS`, naming every such field."""
    wrong = {k: getattr(rules, k) for k, v in _SYMMETRIC_NEEDS.items() if getattr(rules, k) != v}
    if wrong:
        need = ", ".join(f"{k}={v!r}" for k, v in _SYMMETRIC_NEEDS.items())
        got = ", ".join(f"{k}={v!r}" for k, v in wrong.items())
        raise LayoutError(f"LayoutRules.spatial='symmetric' (VRoPE's four rows) needs {need}; got {got}")


def check_rules(rules: Rules, choices: dict[str, tuple[Any, ...]], flags: tuple[str, ...]) -> None:
    """Refuse a :class:`mrope.LayoutRules` whose rule is of the wrong type, out of range or in a combination
    its layout engine does not define, naming the rule, what it takes and what came; a whole-number
    ``temporal_stride`` or ``vision_step`` given as a float (``2.0`` from JSON) becomes the int rule, so both
    spellings have one digest.

    Args:
        rules: the rules to check.
        choices: the allowed values of every rule typed by a ``Literal``.
        flags: the names of the bool rules.

    Raises:
        LayoutError: the first rule that fails.
    """
    for name, allowed in choices.items():
        value = getattr(rules, name)
        if value not in allowed:
            raise LayoutError(f"LayoutRules.{name} must be one of {list(allowed)}; got {value!r}")
    for name in flags:
        if not isinstance(getattr(rules, name), bool):
            raise LayoutError(f"LayoutRules.{name} must be true or false; got {getattr(rules, name)!r}")
    if rules.num_axes not in (3, 4) or isinstance(rules.num_axes, bool):
        raise LayoutError(f"LayoutRules.num_axes must be 3 or 4; got {rules.num_axes!r}")
    if rules.spatial == "symmetric":
        _check_symmetric(rules)
    elif rules.num_axes != 3 and rules.positions_base != "sequence":
        raise LayoutError(
            f"LayoutRules.num_axes {rules.num_axes} needs positions_base='sequence' or "
            "spatial='symmetric' (the counter rule writes three axes t, h, w)"
        )
    _check_positive_ints(
        rules,
        (
            "merge_size",
            "temporal_patch_size",
            "patch_size",
            "min_frames",
            "max_frames",
            "temporal_merge_size",
            "video_frame_max_pixels",
        ),
    )
    for name in ("temporal_stride", "vision_step"):
        value = getattr(rules, name)
        if not _is_positive_number(value):
            raise LayoutError(f"LayoutRules.{name} must be a finite number > 0; got {value!r}")
        if float(value).is_integer():  # 2.0 from JSON is the rule 2 (one digest)
            object.__setattr__(rules, name, int(value))
    if not _is_positive_number(rules.circle_radius) or not _is_number(rules.circle_alpha):
        raise LayoutError(
            "LayoutRules.circle_radius must be a finite number > 0 and circle_alpha a number in [0, 1]; "
            f"got {rules.circle_radius!r} and {rules.circle_alpha!r}"
        )
    if rules.temporal_stride != 1 and rules.temporal == "seconds":
        raise LayoutError(
            "LayoutRules.temporal_stride multiplies the 'index' rule's t (and images'); the 'seconds' "
            f"rule takes only 1; got temporal_stride {rules.temporal_stride}"
        )
    _check_bounds(rules)
    if not isinstance(rules.pad_position, int) or isinstance(rules.pad_position, bool):
        raise LayoutError(f"LayoutRules.pad_position must be an int; got {rules.pad_position!r}")
    spg_fps = rules.second_per_grid_fps
    if spg_fps is not None and not _is_positive_number(spg_fps):
        raise LayoutError(
            f"LayoutRules.second_per_grid_fps must be None or a finite number > 0; got {spg_fps!r}"
        )
    for name in ("tokens_per_second", "fps", "max_duration"):
        value = getattr(rules, name)
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise LayoutError(f"LayoutRules.{name} must be a finite number > 0; got {value!r}")
    if rules.video_pad_id == rules.image_pad_id and (
        rules.video_start_id is None or rules.video_end_id is None
    ):
        raise LayoutError(
            f"LayoutRules: video_pad_id equals image_pad_id ({rules.image_pad_id}); that needs a video wrapper "
            "(video_start_id and video_end_id) to tell video pads from image pads"
        )
    if rules.min_frames > rules.max_frames:
        raise LayoutError(
            f"LayoutRules.min_frames ({rules.min_frames}) exceeds max_frames ({rules.max_frames})"
        )
    check_timestamp_format(rules.timestamp_format)
    _check_audio_rules(rules)
    _check_token_time(rules)
    regs = rules.vision_registers
    if type(regs) is not int or (regs and rules.positions_base != "image_step"):
        raise LayoutError(
            "LayoutRules.vision_registers must be an int in [0, 64], > 0 only under "
            f"positions_base='image_step'; got {regs!r} under {rules.positions_base!r}"
        )
