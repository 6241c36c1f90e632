"""Rewind: the state of a conversation with its last ``k`` tokens taken back (rejected draft tokens, a
truncated turn), from which it continues exactly as if they had never been appended.

Positions are prefix-stable (each layout engine places a segment from where the sequence before it left
off, never from what follows), so the tokens that remain keep their positions, and the conversation
after a rewind is the conversation of the remaining tokens built at once. Its state is taken from what
remains, never by subtracting ``k`` from the state after the taken-back tokens: the next piece starts
where the engine's own ``next_start`` puts it after the remaining tokens (``1 + max`` over all axes of
what remains under the ``max+1`` advance, one past the last remaining token under transformers 5.24's
``spatial`` advance, the sequence engine and the omni timeline), and ``top`` is the maximum over all axes
of what remains. Taking back a text run that followed a vision block thus resumes after the block's
largest coordinate (its last temporal position on the t axis, or its largest spatial extent), not at
the first taken-back token.

Limits (each refused with a :class:`mrope.LayoutError` that names the nearest exact rewinds):

- a cut inside a segment that holds vision or audio tokens (an image, a video with its wrappers and
  timestamps, an audio clip): what remains is no sequence that any prompt builds;
- under the ``spatial`` advance, a cut right after a vision token (the counter after a block is not in
  its positions, as for :func:`mrope.conversation_state`);
- past the start of the positions given: rewind from an earlier :class:`mrope.Turn` or from the whole
  conversation's positions instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from mrope._continuation import ConversationState, Turn, check_no_generation, conversation_state
from mrope._errors import LayoutError
from mrope._grid import delta_top
from mrope._layout import engine, engine_for
from mrope._positions import Positions, Span
from mrope._rules import LayoutRules, rules_digest

_TEXT_KINDS = frozenset({"text", "wrapper", "timestamp"})
"""Span kinds a cut may fall between (tokens that are 1-D text positions)."""


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise LayoutError(f"{name} must be an int >= 0; got {value!r}")
    return int(value)


def _empty_state(rules: LayoutRules) -> ConversationState:
    """The state before token 0 under ``rules``."""
    zero: int | float = 0.0 if rules.fractional_time else 0
    return ConversationState(rules.name, engine_for(rules), 0, zero, zero - 1, 0, rules_digest(rules))


def _check_cut(spans: Sequence[Span], keep: int, n: int, generated: int) -> None:
    """Refuse a cut before token ``keep`` of ``n`` that falls inside a segment with vision or audio tokens."""
    if keep in (0, n):
        return
    starts = [s.start for s in spans]
    last, first = (
        spans[bisect.bisect_right(starts, keep - 1) - 1],
        spans[bisect.bisect_right(starts, keep) - 1],
    )
    if last.index != first.index:
        return
    members = [s for s in spans if s.index == last.index]
    kinds = sorted({s.kind for s in members} - _TEXT_KINDS)
    if kinds:
        a, b = members[0].start, members[-1].stop
        raise LayoutError(
            f"cannot rewind into the middle of segment {last.index} ({', '.join(kinds)}: tokens {a}..{b - 1} "
            f"of these positions): keeping {keep} of its tokens leaves no sequence a prompt builds; rewind "
            f"k={generated + n - a} to take the whole segment back or k={generated + n - b} to keep it"
        )


_MEDIA = {"image": frozenset({"image", "thumbnail"}), "video": frozenset({"video"})}
"""Grid rows of a :class:`Positions`: one per image segment (its tiles and thumbnail) and per video."""


def _head(positions: Positions, keep: int) -> Positions:
    """The first ``keep`` tokens of ``positions`` (a cut between segments or inside a text one)."""
    spans = tuple(s if s.stop <= keep else s._replace(stop=keep) for s in positions.spans if s.start < keep)
    seen = {kind: len({s.index for s in spans if s.kind in kinds}) for kind, kinds in _MEDIA.items()}
    ids = positions.ids[:, :keep]
    top = delta_top(ids, positions.rules)
    return Positions(
        ids=ids,
        delta=top + 1 - keep,
        spans=spans,
        input_ids=positions.input_ids[:keep],
        image_grid_thw=positions.image_grid_thw[: seen["image"]],
        video_grid_thw=positions.video_grid_thw[: seen["video"]],
        second_per_grid_ts=positions.second_per_grid_ts[: seen["video"]],
        rules=positions.rules,
    )


def rewind(previous: Positions | Turn, k: int, *, generated: int = 0) -> ConversationState:
    """The state of a conversation with its last ``k`` tokens taken back.

    Continuing from it (:func:`mrope.continue_positions`) gives exactly the positions of the whole
    conversation built at once without those tokens. Decode positions after it are ``i + delta`` of the
    returned state, as for any state.

    Args:
        previous: the conversation's whole :class:`Positions` (built from token 0), or the :class:`Turn`
            that :func:`mrope.continue_positions` returned for its last turn.
        k: tokens to take back from the end: first the ``generated`` ones, then tokens of ``previous``.
        generated: tokens decoded after ``previous`` (draft tokens included) before the rewind.

    Raises:
        LayoutError: ``k`` past the start of ``previous`` (rewind from an earlier turn or the whole
            positions), a cut inside a vision or audio segment, a cut right after a vision token under
            transformers 5.24's ``spatial`` advance, positions that end with images to generate
            (GLM-Image), or a bad ``k`` / ``generated``.
    """
    k, generated = _count("k", k), _count("generated", generated)
    if isinstance(previous, Turn):
        part, before, after = previous.positions, previous.before, previous.state
    elif isinstance(previous, Positions):
        check_no_generation(previous)
        part, before, after = previous, _empty_state(previous.rules), conversation_state(previous)
    else:
        raise LayoutError(f"previous must be a mrope.Positions or a Turn; got {type(previous).__name__}")
    n = part.num_tokens
    if k > n + generated:
        raise LayoutError(
            f"cannot take back {k} tokens: these positions hold {n} and {generated} were generated after "
            "them; rewind from an earlier turn, or from the whole conversation's positions"
        )
    if k <= generated:
        return after.after(generated - k)
    keep = n - (k - generated)
    _check_cut(part.spans, keep, n, generated)
    if keep == 0:
        return before
    head = _head(part, keep)
    top = delta_top(head.ids, head.rules)
    return ConversationState(
        rules=before.rules,
        engine=before.engine,
        num_tokens=before.num_tokens + keep,
        next_start=engine(part.rules).next_start(head),
        top=max(before.top, top),
        images=before.images + len(head.image_grid_thw),
        rules_digest=before.rules_digest,
    )


__all__ = ["rewind"]
