"""The position sweep: the same evidence placed at the head, middle and tail of one context, and the
model's score for retrieving it at each depth.

The context is filler with the evidence inserted at a depth, then a question; the score is the model's
mean log-probability of the answer's tokens. With the checkpoint's tokenizer the text is a pass-key
retrieval ("The pass key is 71432. ..."); without one, token ids (a marker, a key and a value as the
evidence; the marker and the key as the question; the value as the answer). The curve is measured, not
judged: the row fails only on a non-finite score, or where ``max_spread`` is given and the scores of the
depths differ by more.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mrope.testing._report import FAIL, PASS, RowResult
from mrope.testing._rows.subject import TEXT_IDS, Subject

QUICK_DEPTHS = (0.0, 0.5, 1.0)
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
QUICK_TOKENS = 48
TOKENS = 512
"""Context lengths of the sweep (capped below ``L0``), raised to what the tokenizer needs for the evidence,
the question, the answer and one filler unit (:func:`needed_tokens`); ``sweep_tokens`` sets another."""

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
EVIDENCE = "The pass key is 71432. Remember it. 71432 is the pass key. "
QUESTION = "What is the pass key? The pass key is"
ANSWER = " 71432."
"""The pass-key text of the sweep with a tokenizer: filler (repeated), evidence, question, answer."""


def _pieces(subject: Subject) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(filler unit, evidence, question, answer)`` token ids."""
    tok = subject.tokenizer
    if tok is not None:
        enc = lambda text: list(tok(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        return enc(FILLER), enc(EVIDENCE), enc(QUESTION), enc(ANSWER)
    gen = np.random.default_rng(11)
    marker, key, value = gen.choice(np.arange(*TEXT_IDS), size=3, replace=False).tolist()
    return subject.text(37, 12), [marker, key, value], [marker, key], [value]


def needed_tokens(pieces: tuple[list[int], ...]) -> int:
    """The shortest context that holds the evidence, the question, the answer and one filler unit (the
    pass-key text's length depends on the tokenizer: a character-level one needs over 100 tokens)."""
    unit, evidence, question, answer = pieces
    return len(unit) + len(evidence) + len(question) + len(answer)


def position_sweep(
    subject: Subject, quick: bool, tokens: int | None = None, max_spread: float | None = None
) -> RowResult:
    """The model's score for the same evidence at each depth (head, middle, tail; five depths in full).
    ``tokens``: the context length (default :data:`QUICK_TOKENS` / :data:`TOKENS`, raised to
    :func:`needed_tokens`); always below ``L0``."""
    pieces = _pieces(subject)
    unit, evidence, question, answer = pieces
    limit = subject.length_l0 - 1 if subject.length_l0 > 1 else TOKENS
    needed = needed_tokens(pieces)
    total = min(tokens or max(QUICK_TOKENS if quick else TOKENS, needed), limit)
    n_filler = total - len(evidence) - len(question) - len(answer)
    if n_filler < 1:
        why = (
            f"the model's L0 - 1 is {limit}"
            if total == limit
            else "sweep_tokens (--sweep-tokens) asked for it"
        )
        return RowResult(
            "position_sweep",
            FAIL,
            f"{total} tokens cannot hold the evidence and the question ({why}); this tokenizer needs "
            f"{needed} (sweep_tokens={needed}, --sweep-tokens {needed})",
        )
    filler = (unit * (n_filler // max(len(unit), 1) + 1))[:n_filler]
    depths = QUICK_DEPTHS if quick else DEPTHS
    rows, starts = [], []
    for d in depths:
        at = round(d * n_filler)
        rows.append(filler[:at] + evidence + filler[at:] + question + answer)
        starts.append(at)
    ids = torch.tensor(rows)
    n = len(answer)
    logits = subject.last_logits({"input_ids": ids, "attention_mask": torch.ones_like(ids)}, n + 1)
    logp = torch.log_softmax(logits.double(), dim=-1)
    picked = logp[:, :-1].gather(-1, ids[:, -n:, None])[..., 0]  # [rows, n]: each answer token
    scores = [float(s) for s in picked.mean(dim=-1)]
    measured = {
        "context_tokens": int(ids.shape[1]),
        "depths": list(depths),
        "evidence_at": starts,
        "scores": scores,
        "spread": max(scores) - min(scores),
        "evidence": "pass-key text" if subject.tokenizer is not None else "token ids",
    }
    if not all(math.isfinite(s) for s in scores):
        return RowResult("position_sweep", FAIL, "non-finite scores", measured)
    if max_spread is not None and measured["spread"] > max_spread:
        return RowResult(
            "position_sweep",
            FAIL,
            f"the score moves by {measured['spread']:.3g} with the evidence's depth (allowed {max_spread:g})",
            measured,
        )
    best = depths[int(np.argmax(scores))]
    return RowResult(
        "position_sweep",
        PASS,
        f"log p(answer) at depths {list(depths)} of {ids.shape[1]} tokens (best at depth {best:g})",
        measured,
    )


__all__ = [
    "ANSWER",
    "DEPTHS",
    "EVIDENCE",
    "FILLER",
    "QUESTION",
    "QUICK_DEPTHS",
    "QUICK_TOKENS",
    "TOKENS",
    "needed_tokens",
    "position_sweep",
]
