"""The rows that run the model's own rotation alone: relativity, pairing, length boundaries.

Each puts random q and k through the model's own rotary module and ``apply_rotary_pos_emb`` (what its
attention layers run) at chosen positions, and compares with :func:`mrope.apply_mrope` under the spec
read from the config: float64 with exact angles as the reference, or transformers' fp32 angle arithmetic.

The model's angles are fp32: at position ``p`` an angle is off by up to about ``p * w * 2**-23`` radians
(``w`` the largest inverse frequency), so the tolerances at a position grow with it (:func:`fp32_budget`);
the exact reference shows what the rotation is without that rounding.
"""

from __future__ import annotations

import torch

from mrope._builder import text_positions
from mrope._errors import PatchError
from mrope._segments import Image, Text, Video
from mrope.integrations.transformers import APPLY_FUNCTION, NotARotationError
from mrope.integrations.transformers._probes import check_rotary
from mrope.testing._report import FAIL, NOT_APPLICABLE, PASS, RowResult
from mrope.testing._rows.subject import Subject

RELATIVE_SHIFTS = (1, 1_000, 1_000_000)
"""Shifts of the relativity row; the last moves the prompt's largest position to 10^6."""

_EXACT_TOLERANCE = 1e-6


def fp32_budget(position: int, subject: Subject) -> float:
    """The tolerance, relative to the vectors' size, of an fp32 rotation at ``position``: twice the bound
    ``p * w * 2**-22`` of two rounded angles (each off by ``p * w * 2**-23`` at most), plus 1e-5."""
    w = float(subject.spec.inv_freq(position + 1).max()) * subject.spec.attention_factor()
    return 1e-5 + position * w * 2.0**-21


def prompt_segments(subject: Subject, seed: int = 0) -> list:
    """Text, an image, text, a video (where the family reads videos), text; text alone without rules."""
    if subject.rules is None:
        return [Text(subject.text(16, seed))]
    m = subject.rules.merge_size
    segments = [Text(subject.text(4, seed)), Image(grid=(1, 2 * m, 3 * m)), Text(subject.text(3, seed + 1))]
    if subject.rules.video_support == "sized":
        segments += [Video(grid=(2, 2 * m, 2 * m), fps=2.0), Text(subject.text(4, seed + 2))]
    return segments


def prompt_positions(subject: Subject) -> torch.Tensor:
    """``[A, T]`` positions of :func:`prompt_segments` under the model's rules (text positions without)."""
    if subject.rules is None:
        ids = text_positions(16)[:1].repeat(subject.spec.num_axes, 0)
    else:
        ids = subject.positions(prompt_segments(subject)).ids
    return torch.from_numpy(ids.copy())


def _scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``[H, T, T]`` scores of ``q`` ``[1, H, T, D]`` against ``k`` ``[1, 1, T, D]``, in float64."""
    return torch.einsum("hid,jd->hij", q[0].double(), k[0, 0].double())


def _relative_error(got: torch.Tensor, want: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> float:
    """``max |got - want| / (|q_i| |k_j|)`` over heads and token pairs (scores)."""
    norms = q[0].double().norm(dim=-1)[:, :, None] * k[0, 0].double().norm(dim=-1)[None, None, :]
    return float(((got - want).abs() / norms).max())


def relativity(subject: Subject, quick: bool) -> RowResult:
    """Shifting every q and k position by the same amount leaves the model's scores unchanged (to its
    fp32 angle rounding), up to position 10^6; mrope's float64 exact-angle rotation with the config's
    spec shows the same to 1e-9."""
    positions = prompt_positions(subject)
    top = int(positions.max())
    shifts = [*RELATIVE_SHIFTS[:-1], RELATIVE_SHIFTS[-1] - top]
    note = ""
    if subject.spec.scaling.type == "dynamic":  # frequencies grow with the length past L0
        shifts = [s for s in shifts if top + s < subject.length_l0]
        note = f"dynamic NTK frequencies grow past L0 = {subject.length_l0}: shifts kept below it; "
        if not shifts:
            return RowResult(
                "relativity", NOT_APPLICABLE, note + f"the prompt already reaches position {top}"
            )
    q, k = subject.probe_vectors(positions.shape[1], seed=1)
    base = _scores(*subject.own_rotation(positions, q, k))
    reference = _scores(*subject.reference_rotation(positions, q, k))
    drift, budget, exact = {}, {}, {}
    for s in shifts:
        moved = _scores(*subject.own_rotation(positions + s, q, k))
        drift[str(s)] = _relative_error(moved, base, q, k)
        budget[str(s)] = fp32_budget(top + s, subject)
        exact[str(s)] = _relative_error(
            _scores(*subject.reference_rotation(positions + s, q, k)), reference, q, k
        )
    measured = {"max_position": top + max(shifts, default=0), "drift": drift, "tolerance": budget}
    measured["exact_drift"] = exact
    bad = [s for s in drift if drift[s] > budget[s]]
    bad_exact = [s for s in exact if exact[s] > _EXACT_TOLERANCE]
    if bad or bad_exact:
        what = [
            f"shift {s}: the model's scores move by {drift[s]:.3g} (tolerance {budget[s]:.3g})" for s in bad
        ]
        what += [f"shift {s}: exact-angle scores move by {exact[s]:.3g}" for s in bad_exact]
        return RowResult("relativity", FAIL, note + "; ".join(what), measured)
    return RowResult(
        "relativity",
        PASS,
        note + f"{positions.shape[1]} tokens shifted by {shifts}: scores unchanged to fp32 angle rounding "
        f"(exact angles: to {max(exact.values(), default=0.0):.1g})",
        measured,
    )


def _max_error(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> tuple[float, bool]:
    """The largest ``|got - want|`` over q and k, and whether they are close (rtol 1e-4, atol 1e-5)."""
    err, close = 0.0, True
    for g, w in zip(got, want, strict=True):
        g, w = g.double(), w.double()
        err = max(err, float((g - w).abs().max()))
        close = close and bool(torch.allclose(g, w, rtol=1e-4, atol=1e-5))
    return err, close


def pairing(subject: Subject, quick: bool) -> RowResult:
    """The model's own rotation equals mrope's (same spec, fp32 angles, as transformers computes them)
    elementwise on the prompt's positions and on the same positions 997 further."""
    positions = prompt_positions(subject)
    positions = torch.cat([positions, positions + 997], dim=1)
    q, k = subject.probe_vectors(positions.shape[1], seed=2)
    err, close = _max_error(
        subject.own_rotation(positions, q, k), subject.reference_rotation(positions, q, k, "fp32")
    )
    measured = {"max_abs_error": err, "pairing": subject.spec.pairing, "layout": subject.spec.section_layout}
    what = f"{subject.spec.pairing} pairing, {subject.spec.section_layout} sections {list(subject.spec.mrope_section)}"
    if close:
        return RowResult(
            "pairing", PASS, f"{what}: equal elementwise on {positions.shape[1]} positions", measured
        )
    text = positions[:1].expand_as(positions).contiguous()
    text_err, text_close = _max_error(
        subject.own_rotation(text, q, k), subject.reference_rotation(text, q, k, "fp32")
    )
    measured["text_max_abs_error"] = text_err
    if text_close:
        try:
            apply = getattr(subject.modeling, APPLY_FUNCTION)
            check_rotary(subject.rotaries[0], apply, subject.spec, "torch", subject.layer_type)
        except NotARotationError as exc:
            return RowResult(
                "pairing",
                PASS,
                f"{what}: equal on text positions; on vision positions the model's own table is not a rotation "
                f"({' '.join(str(exc).split())[:300]})",
                measured,
            )
        except PatchError:
            pass
        return RowResult(
            "pairing",
            FAIL,
            f"{what}: equal on text positions only; the axis sections differ on vision positions (max error {err:.3g})",
            measured,
        )
    return RowResult(
        "pairing",
        FAIL,
        f"{what}: the model's own rotation differs (max error {err:.3g}, {text_err:.3g} on text)",
        measured,
    )


def length_boundaries(subject: Subject, quick: bool) -> RowResult:
    """At ``L0 - 1``, ``L0``, ``L0 + 1`` (and ``L1 - 1`` where the config names ``L1``) the model's own
    rotation equals the released formula (mrope's float64 exact-angle rotation with the config's
    scaling) to its fp32 angle rounding: no jump at the boundaries."""
    l0, l1 = subject.length_l0, subject.length_l1
    if l0 < 2:
        return RowResult("length_boundaries", NOT_APPLICABLE, "the config names no max_position_embeddings")
    points = {"L0-1": l0 - 1, "L0": l0, "L0+1": l0 + 1}
    if l1 is not None:
        points["L1-1"] = l1 - 1
    errors, budgets, fp32 = {}, {}, {}
    q, k = subject.probe_vectors(4, seed=3)
    scale = max(float(q.abs().max()), float(k.abs().max()))
    for label, p in points.items():
        window = torch.arange(p - 3, p + 1).expand(subject.spec.num_axes, -1).contiguous()
        own = subject.own_rotation(window, q, k)
        errors[label] = _max_error(own, subject.reference_rotation(window, q, k))[0] / scale
        fp32[label] = _max_error(own, subject.reference_rotation(window, q, k, "fp32"))[0] / scale
        budgets[label] = fp32_budget(p, subject)
    measured = {
        "scaling": subject.spec.scaling.type,
        "L0": l0,
        "L1": l1,
        "error": errors,
        "tolerance": budgets,
        "fp32_formula_error": fp32,
    }
    bad = [x for x in points if errors[x] > budgets[x]]
    if bad:
        return RowResult(
            "length_boundaries",
            FAIL,
            "the model's rotation leaves the released formula at "
            + ", ".join(
                f"{x} = {points[x]} (error {errors[x]:.3g}, tolerance {budgets[x]:.3g})" for x in bad
            ),
            measured,
        )
    named = "" if l1 is not None else " (the config names no L1)"
    return RowResult(
        "length_boundaries",
        PASS,
        f"{subject.spec.scaling.type} scaling: equal to the formula at {', '.join(points)}{named}",
        measured,
    )


__all__ = ["RELATIVE_SHIFTS", "fp32_budget", "length_boundaries", "pairing", "prompt_positions", "relativity"]
