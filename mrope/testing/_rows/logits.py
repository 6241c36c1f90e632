"""The rows that run the whole model: prefill = decode, batch padding, short-context regression.

Each compares the model's outputs on the same tokens computed two ways, with the positions the model
computes itself (its own ``get_rope_index`` on the prompt mrope builds: text, an image, text, a video,
text; vision placeholders keep their token embeddings, no pixels). The outputs compared are the final
hidden states, the lm_head's input (the logits are a fixed linear map of them; comparing them spares the
vocabulary-wide product). They agree when ``max |a - b| <= 1e-5 + 1e-4 * max |a|`` (:func:`logit_tolerance`).
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from mrope._segments import Image, Text
from mrope.testing._report import FAIL, NOT_APPLICABLE, PASS, RowResult
from mrope.testing._rows.rotation import prompt_segments
from mrope.testing._rows.subject import Subject

DECODED = 3
"""Tokens decoded one by one after the prompt (2 under ``quick``)."""


def logit_tolerance(reference: torch.Tensor) -> float:
    """``1e-5 + 1e-4 * max |reference|``: fp32 reassociation over a forward pass, not a position error."""
    return 1e-5 + 1e-4 * float(reference.abs().max())


def prefill_decode(subject: Subject, quick: bool) -> RowResult:
    """The whole sequence's logits equal a prefill of the prompt followed by token-by-token decode with
    the KV cache (the model places each decoded token from its own cache state)."""
    if subject.rules is not None and subject.rules.generates_images:
        return RowResult(
            "prefill_decode",
            NOT_APPLICABLE,
            "an image generator decodes the images it generates (positions cached at prefill from the target "
            "grids); the model has no text continuation to decode",
        )
    sample = prompt_segments(subject)
    decoded = DECODED - 1 if quick else DECODED
    prompt = subject.inputs([sample])["input_ids"].shape[1]
    kw = subject.inputs([[*sample, Text(subject.text(decoded, 9))]])
    full = subject.hidden(kw)
    steps = subject.decode_hidden(kw, prompt)
    err, tol = float((steps - full).abs().max()), logit_tolerance(full)
    measured = {"prompt_tokens": prompt, "decoded_tokens": decoded, "max_abs_error": err, "tolerance": tol}
    if err > tol:
        worst = int((steps - full).abs().amax(dim=-1)[0].argmax())
        return RowResult(
            "prefill_decode", FAIL, f"token {worst} differs by {err:.3g} (tolerance {tol:.3g})", measured
        )
    return RowResult(
        "prefill_decode", PASS, f"prefill of {prompt} tokens + {decoded} decoded == one pass", measured
    )


def padding(subject: Subject, quick: bool) -> RowResult:
    """Two rows of different lengths, left- and right-padded: each row's real tokens get the same outputs
    both ways, and (not under ``quick``) the same as the row alone."""
    if subject.rules is None:
        rows = [[Text(subject.text(12, 4))], [Text(subject.text(5, 5))]]
    else:
        m = subject.rules.merge_size
        short = [Text(subject.text(2, 4)), Image(grid=(1, 2 * m, 2 * m)), Text(subject.text(2, 5))]
        rows = [prompt_segments(subject), short]
    valid: dict[str, list[torch.Tensor]] = {}
    for side in ("left", "right"):
        kw = subject.inputs(rows, padding_side=side)
        valid[side] = [out[m] for out, m in zip(subject.hidden(kw), kw["attention_mask"].bool(), strict=True)]
    if not quick:
        valid["alone"] = [subject.hidden(subject.inputs([row]))[0] for row in rows]
    errors = {
        f"right_vs_{k}": max(float((a - b).abs().max()) for a, b in zip(valid["right"], v, strict=True))
        for k, v in valid.items()
        if k != "right"
    }
    tol = max(logit_tolerance(a) for a in valid["right"])
    lengths = [int(m.sum()) for m in subject.inputs(rows)["attention_mask"]]
    measured = {"row_tokens": lengths, **errors, "tolerance": tol}
    bad = [k for k, v in errors.items() if v > tol]
    if bad:
        return RowResult(
            "padding",
            FAIL,
            "the real tokens' outputs depend on the padding: "
            + ", ".join(f"{k.replace('_', ' ')} differ by {errors[k]:.3g}" for k in bad)
            + f" (tolerance {tol:.3g})",
            measured,
        )
    same = " == ".join(["right", *(k.removeprefix("right_vs_") for k in errors)])
    return RowResult("padding", PASS, f"rows of {lengths} tokens: {same}", measured)


_SCALING_KEYS = (
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "attention_factor",
    "truncate",
    "alpha",
    "long_factor",
    "short_factor",
    "low_freq_factor",
    "high_freq_factor",
)


def _unscaled(params: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in params.items() if k not in _SCALING_KEYS}
    out["rope_type"] = "default"
    return out


def unscaled_rotary(rotary: torch.nn.Module) -> torch.nn.Module:
    """A rotary module of the same class built from the same config without its length scaling
    (``rope_type="default"``, the scaling's own keys dropped)."""
    config = copy.deepcopy(rotary.config)
    params = dict(config.rope_parameters)
    if "rope_type" in params or "rope_theta" in params:
        config.rope_parameters = _unscaled(params)
    else:  # keyed by layer type
        config.rope_parameters = {k: None if v is None else _unscaled(v) for k, v in params.items()}
    buffer = next(iter(rotary.buffers()))
    return type(rotary)(config).to(buffer.device)


def short_context(subject: Subject, quick: bool) -> RowResult:
    """Inside ``L0``, the logits with the config's length scaling equal those without it, where the
    scaling promises that (dynamic NTK grows only past ``L0``); for a scaling that changes every
    frequency (linear, YaRN, NTK-alpha) the difference is measured and no equality is asked."""
    kind = subject.spec.scaling.type
    if kind == "none":
        return RowResult("short_context", NOT_APPLICABLE, "the config names no length scaling")
    kw = subject.inputs([prompt_segments(subject)])
    tokens = kw["input_ids"].shape[1]
    if tokens >= subject.length_l0:
        return RowResult(
            "short_context", NOT_APPLICABLE, f"L0 = {subject.length_l0} is below the prompt's {tokens} tokens"
        )
    scaled = subject.hidden(kw)
    try:
        with subject.rotaries_replaced(unscaled_rotary):
            plain = subject.hidden(kw)
    except (AttributeError, TypeError, ValueError, KeyError) as exc:
        return RowResult(
            "short_context",
            NOT_APPLICABLE,
            f"cannot rebuild {type(subject.rotaries[0]).__name__} without its scaling ({type(exc).__name__}: {exc})",
        )
    err, tol = float((scaled - plain).abs().max()), logit_tolerance(plain)
    measured = {"scaling": kind, "tokens": tokens, "L0": subject.length_l0, "max_abs_difference": err}
    if kind != "dynamic":
        return RowResult(
            "short_context",
            NOT_APPLICABLE,
            f"{kind} scaling changes every frequency, inside L0 too: no equality promised (difference measured)",
            measured,
        )
    measured["tolerance"] = tol
    if err > tol:
        return RowResult(
            "short_context",
            FAIL,
            f"{tokens} tokens inside L0 = {subject.length_l0}: the scaled model differs by {err:.3g} (tolerance {tol:.3g})",
            measured,
        )
    return RowResult("short_context", PASS, f"{tokens} tokens inside L0: scaled == unscaled", measured)


__all__ = ["logit_tolerance", "padding", "prefill_decode", "short_context", "unscaled_rotary"]
