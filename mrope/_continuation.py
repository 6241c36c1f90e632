"""Continued conversations: the positions of a new turn appended to a conversation, and the small state a
server keeps per conversation instead of its whole positions.

A conversation's positions are a prefix-stable function of its tokens: every layout engine places a
segment from where the sequence before it left off (the counter's ``1 + max``, HunyuanOCR's token index
and image index, MiniCPM-V's canvas counter, the omni timeline's last piece), never from what follows.
So a turn appended after ``generated`` decoded tokens gets exactly the positions it has at the end of the
whole conversation built at once, from four numbers: the tokens so far, where the next piece starts, the
largest position and the images so far (:class:`ConversationState`), tied to the exact rules by their
digest (:func:`mrope.rules_digest`). Each engine says where its next piece starts
(``next_start``) and lays segments out from there (``continue_segments``: its plan filled from that
running state), so a turn costs its own tokens, whatever the conversation's length.

Generated tokens count as text continuing the running counter, as the family's ``get_rope_index`` places
them when the whole conversation is prefilled. Decode gives them ``i + delta``; the two agree except
after a vision block under transformers 5.24's ``spatial`` advance (``convention="transformers5"``), and
after a video with its audio in the omni timeline, where ``get_rope_index`` itself resumes below the
largest position.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from mrope._errors import LayoutError, MRopeWarning
from mrope._grid import MAX_POSITION, delta_top
from mrope._layout import engine, engine_for
from mrope._positions import Positions
from mrope._rules import LayoutRules, rules_digest
from mrope._segments import Segment
from mrope.models import ModelLike, resolve_rules, resolve_tokenizer


@dataclass(frozen=True)
class ConversationState:
    """Where a conversation stands: all a new turn's positions depend on. JSON-safe (:meth:`to_dict`).

    Attributes:
        rules: the name of the layout rules it was built under (checked when a turn is appended).
        engine: the layout engine of those rules (``"counter"``, ``"sequence"``, ``"canvas"``, ``"omni"``).
        num_tokens: valid tokens so far (every turn and every generated token).
        next_start: where the next piece starts (a float under fractional time).
        top: the largest position so far.
        images: images so far (the image index of HunyuanOCR's sequence positions).
        rules_digest: :func:`mrope.rules_digest` of the exact rules it was made under (model,
            ``convention``, overrides), which a turn's rules must match; ``None`` in a state saved
            before states carried it, which cannot be continued until it is set (``dataclasses.replace``)
            by a caller who knows its rules.
    """

    rules: str
    engine: str
    num_tokens: int
    next_start: int | float
    top: int | float
    images: int = 0
    rules_digest: str | None = None

    @property
    def delta(self) -> int | float:
        """``top + 1 - num_tokens``: the next decoded token (conversation index ``i``) gets ``i + delta``
        (float32 arithmetic under fractional time, as :attr:`Positions.delta`). Rules that generate
        images (GLM-Image) keep ``Positions.delta`` at 0 and plan their decode positions instead."""
        if isinstance(self.top, float):
            return float(np.float32(np.float32(self.top) + np.float32(1)) - np.float32(self.num_tokens))
        return self.top + 1 - self.num_tokens

    def after(self, generated: int) -> ConversationState:
        """The state after ``generated`` decoded tokens (text continuing the running counter)."""
        if isinstance(generated, bool) or not isinstance(generated, (int, np.integer)) or generated < 0:
            raise LayoutError(f"generated must be an int >= 0; got {generated!r}")
        if not generated:
            return self
        g = int(generated)
        if isinstance(self.next_start, float):
            start = float(np.float32(self.next_start) + np.float32(g))
            last = float(np.float32(start) - np.float32(1))
            top: int | float = max(float(self.top), last)
        else:
            start = self.next_start + g
            top = max(self.top, start - 1)
        return replace(self, num_tokens=self.num_tokens + g, next_start=start, top=top)

    def after_window(self, dropped: int, shift: int | float = 0, images: int = 0) -> ConversationState:
        """The state after a truncation window took ``dropped`` tokens out of the cache.

        ``shift=0``: the kept tokens keep their logical positions (the next token gets the position it
        had without the window; :attr:`delta` grows by ``dropped``, as a cache index counts fewer
        tokens). ``shift > 0``: the tokens after the gap moved down by ``shift`` on every axis (their
        cached keys re-rotated with :func:`mrope.rerotate`), so the conversation continues as if the
        dropped segments had never been in it; ``images``: the images among the dropped tokens (the image
        index of HunyuanOCR's sequence positions then counts without them)."""
        for name, value in (("dropped", dropped), ("shift", shift), ("images", images)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer)) or value < 0:
                raise LayoutError(f"{name} must be a number >= 0; got {value!r}")
        if dropped > self.num_tokens or shift > self.next_start or images > self.images:
            raise LayoutError(
                f"a window cannot drop {dropped} of {self.num_tokens} tokens and {images} of {self.images} "
                f"images, or move positions down by {shift} from {self.next_start}"
            )
        return replace(
            self,
            num_tokens=self.num_tokens - int(dropped),
            next_start=type(self.next_start)(self.next_start - shift),
            top=type(self.top)(self.top - shift),
            images=self.images - int(images),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConversationState:
        """The state :meth:`to_dict` gave (e.g. read back from JSON), checked field by field.

        A state saved without ``rules_digest`` (before states carried it) is read with ``None`` there;
        :func:`continue_positions` refuses it until the digest is set.

        Raises:
            LayoutError: a missing or unknown field, or a value of the wrong type or range.
        """
        if not isinstance(data, Mapping):
            raise LayoutError(f"a conversation state is a mapping of its fields; got {type(data).__name__}")
        names = {"rules", "engine", "num_tokens", "next_start", "top", "images", "rules_digest"}
        if set(data) - names or {"rules", "engine", "num_tokens", "next_start", "top"} - set(data):
            raise LayoutError(
                f"a conversation state has the fields {sorted(names)} (images and rules_digest optional); "
                f"got {sorted(data)}"
            )
        digest = data.get("rules_digest")
        if digest is not None and not _is_digest(digest):
            raise LayoutError(f"rules_digest must be 16 hex digits (mrope.rules_digest); got {digest!r}")
        rules, eng = data["rules"], data["engine"]
        if not isinstance(rules, str) or not isinstance(eng, str):
            raise LayoutError(f"rules and engine must be strings; got {rules!r}, {eng!r}")
        ints = {k: data.get(k, 0) for k in ("num_tokens", "images")}
        for key, value in ints.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise LayoutError(f"{key} must be an int >= 0; got {value!r}")
        numbers = {k: data[k] for k in ("next_start", "top")}
        for key, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise LayoutError(f"{key} must be a finite number; got {value!r}")
        return cls(
            rules, eng, ints["num_tokens"], numbers["next_start"], numbers["top"], ints["images"], digest
        )


def _is_digest(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 16 and all(c in "0123456789abcdef" for c in value)


@dataclass(frozen=True, eq=False)
class Turn:
    """A turn appended to a conversation.

    Attributes:
        positions: the turn's own tokens (ids ``[A, n]``, spans from 0 and from its first segment, its
            grids); its ``delta`` continues decode after the turn in the turn's own token indices, so
            :meth:`Positions.window` works as for a prompt.
        before: the conversation's state where the turn starts (after the tokens generated before it);
            :func:`mrope.rewind` takes tokens of the turn back from it.
        state: the conversation's state after the turn (keep it for the next one).
    """

    positions: Positions
    before: ConversationState
    state: ConversationState

    @property
    def offset(self) -> int:
        """The conversation index of the turn's first token (tokens before it, generated included)."""
        return self.before.num_tokens


def check_no_generation(positions: Positions) -> None:
    """Refuse a state after ``positions`` (a whole sequence or a turn) that end with images to generate
    (GLM-Image): their decode positions are planned, not a turn's, so no turn continues after them.

    Raises:
        LayoutError: ``positions`` have generation ids.
    """
    if positions.generation_ids is not None:
        raise LayoutError(
            "this sequence ends with images to generate (Image(..., generate=True)); a turn cannot be "
            "appended after them, so it has no conversation state"
        )


def conversation_state(positions: Positions) -> ConversationState:
    """The state of a conversation whose whole positions are ``positions`` (built from token 0).

    Raises:
        LayoutError: the sequence ends with images to generate (GLM-Image), whose decode positions are
            not a turn's.
    """
    if not isinstance(positions, Positions):
        raise LayoutError(f"a conversation's positions are a mrope.Positions; got {type(positions).__name__}")
    check_no_generation(positions)
    rules = positions.rules
    n = positions.num_tokens
    top = delta_top(positions.ids, rules) if n else -1
    return ConversationState(
        rules=rules.name,
        engine=engine_for(rules),
        num_tokens=n,
        next_start=engine(rules).next_start(positions),
        top=float(top) if positions.ids.dtype.kind == "f" else int(top),
        images=len(positions.image_grid_thw),
        rules_digest=rules_digest(rules),
    )


def continue_positions(
    previous: Positions | ConversationState | Turn,
    segments: Sequence[Segment],
    *,
    generated: int = 0,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    tokenizer: Any = None,
    convention: str = "released",
) -> Turn:
    """Positions of a new turn appended to a conversation after ``generated`` decoded tokens.

    Equal to the tail of the whole conversation (every turn, the generated tokens as text, this turn)
    built at once, without rebuilding it.

    Args:
        previous: the conversation so far: its whole :class:`Positions`, the :class:`Turn` this returned
            last time, or a :class:`ConversationState` (e.g. ``ConversationState.from_dict(...)``).
        segments: the new turn's segments.
        generated: tokens decoded after ``previous`` (the model's answer) before this turn.
        model, rules, convention: as :func:`mrope.build_positions`; default: the rules of ``previous``
            when it is a :class:`Positions` or a :class:`Turn`. They must be the rules it was built under.
        tokenizer: as :func:`mrope.build_positions` (Qwen3-VL / GLM video timestamps).

    Raises:
        LayoutError: rules other than those of ``previous`` (another name, engine or digest: another
            convention or overrides), a state without a digest, bad ``generated`` or segments, or
            positions past :data:`mrope._grid.MAX_POSITION`.
    """
    if isinstance(previous, Turn):
        state, given = previous.state, previous.positions.rules
    elif isinstance(previous, Positions):
        state, given = conversation_state(previous), previous.rules
    elif isinstance(previous, ConversationState):
        state, given = previous, None
    else:
        raise LayoutError(
            f"previous must be a mrope.Positions, a Turn or a ConversationState; got {type(previous).__name__}"
        )
    if model is None and rules is None:
        if given is None:
            raise LayoutError(
                "continuing from a ConversationState needs model= (or rules=): it holds only their name"
            )
        lay = given
    else:
        lay = resolve_rules(model, rules, convention)
        if given is not None and lay != given:
            raise LayoutError(
                f"the conversation was built under other {given.name!r} rules than the ones given (another "
                "convention or overrides); leave model= and rules= out to continue under its own"
            )
    if (lay.name, engine_for(lay)) != (state.rules, state.engine):
        raise LayoutError(
            f"the conversation was built under the {state.rules!r} rules ({state.engine} engine); "
            f"got the {lay.name!r} rules ({engine_for(lay)} engine)"
        )
    digest = rules_digest(lay)
    if state.rules_digest is None:
        raise LayoutError(
            f"this state of the {state.rules!r} rules has no rules_digest (it was saved before states "
            "carried one), so the exact rules it was made under (convention, overrides) are unknown; "
            "rebuild it with conversation_state(...), or, knowing its rules, set "
            "dataclasses.replace(state, rules_digest=mrope.rules_digest(rules))"
        )
    if state.rules_digest != digest:
        raise LayoutError(
            f"the conversation's state was made under other {state.rules!r} rules (rules_digest "
            f"{state.rules_digest!r}) than the {lay.name!r} rules given (rules_digest {digest!r}): another "
            "convention or rules overrides; continue under the model, convention and rules it was made under"
        )
    if isinstance(state.next_start, float) != lay.fractional_time:
        raise LayoutError(
            f"a state of the {state.rules!r} rules has {'fractional' if lay.fractional_time else 'integer'} "
            f"positions; got next_start={state.next_start!r}"
        )
    here = state.after(generated)
    if not here.next_start < MAX_POSITION:
        raise LayoutError(
            f"positions overflow: a turn would start at {here.next_start:,} (next_start {state.next_start:,} "
            f"+ generated {generated:,}); positions stay below {MAX_POSITION:,} (2**62)"
        )
    layout = engine(lay)
    turn = layout.continue_segments(
        segments, lay, resolve_tokenizer(model, tokenizer), here.next_start, here.images
    )
    for note in turn.notes:
        warnings.warn(note, MRopeWarning, stacklevel=2)
    n = turn.num_tokens
    if not n:
        return Turn(turn, here, here)
    top_turn = turn.ids.max().item()
    if not top_turn < MAX_POSITION:  # (the omni timeline writes without the fill's own bound)
        raise LayoutError(
            f"positions overflow: the turn reaches {top_turn:,}; positions stay below {MAX_POSITION:,} (2**62)"
        )
    top_turn = delta_top(turn.ids, lay)
    top = max(here.top, float(top_turn) if lay.fractional_time else int(top_turn))
    after = replace(
        here,
        num_tokens=here.num_tokens + n,
        next_start=layout.next_start(turn),
        top=top,
        images=here.images + len(turn.image_grid_thw),
    )
    if not lay.generates_images:  # (GLM-Image keeps delta 0: its decode positions are planned)
        own = replace(after, num_tokens=n).delta  # decode after the turn, in the turn's own indices
        if own != turn.delta:
            turn = replace(turn, delta=own)
    return Turn(turn, here, after)


__all__ = ["ConversationState", "Turn", "continue_positions", "conversation_state"]
