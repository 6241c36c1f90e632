"""The JSON form of a conversation's state: what a request sends back to continue a conversation and a
response returns (the fields of a :class:`mrope.ConversationState`, its ``rules_digest`` included).

A server that keeps a conversation's KV cache keeps this small object per conversation instead of the
whole conversation (docs/engine.md, docs/service.md). The digest (:func:`mrope.rules_digest`) ties
the state to the exact rules (model, ``convention`` and ``rules`` overrides): a state is refused under any
other rules, as positions continued under other rules would not be the conversation's. Its numbers, and
where the turn it continues starts, are bounded (:data:`MAX_STATE_NUMBER`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from mrope._continuation import ConversationState
from mrope._layout import ENGINES, engine_for
from mrope._rules import LayoutRules, rules_digest

from ._errors import RequestError
from ._fields import FiniteFloat, StrictModel

MAX_STATE_NUMBER = 2**53
"""Largest count or position a state (and ``generated``) may hold: exact in a JSON number (a float64)."""

StateCount = Annotated[int, Field(ge=0, le=MAX_STATE_NUMBER)]
_Position = Union[  # noqa: UP007
    Annotated[int, Field(ge=-1, le=MAX_STATE_NUMBER)],
    Annotated[FiniteFloat, Field(ge=-1, le=MAX_STATE_NUMBER)],
]
EngineName = Literal[tuple(ENGINES)]  # type: ignore[valid-type]


class ConversationStateBody(StrictModel):
    """A conversation's state as the service returned it (``"return_state": true``); send it back
    unchanged with the next turn. The fields of :class:`mrope.ConversationState` (``rules_digest``
    required here: the service makes every state it returns with one)."""

    rules: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="name of the rules the conversation was built under"
    )
    engine: EngineName = Field(description="layout engine of those rules")
    num_tokens: StateCount = Field(description="valid tokens so far (every turn and generated token)")
    next_start: _Position = Field(description="where the next piece starts (a float under fractional time)")
    top: _Position = Field(description="largest position so far (-1 for an empty conversation)")
    images: StateCount = Field(0, description="images so far")
    rules_digest: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")] = Field(
        description="digest of the exact rules (model, convention, overrides) the state was made under"
    )


def check_turn_start(state: ConversationState, generated: int) -> None:
    """Refuse a continued turn that would start past :data:`MAX_STATE_NUMBER` (the state's
    ``next_start`` plus ``generated``): its positions and the state returned after it would not be exact
    JSON numbers, nor a state this schema takes back. (Where the turn starts costs nothing: the turn is
    laid out from there, so a long conversation is no more work than a short one.)

    Raises:
        RequestError: the turn's start over the bound, named with the two numbers that make it.
    """
    start = state.after(generated).next_start
    if start > MAX_STATE_NUMBER:
        raise RequestError(
            f"state: a continued turn starts at next_start + generated = {state.next_start!r} + {generated} "
            f"= {start!r}; it must be at most {MAX_STATE_NUMBER} (2**53, the largest position a state "
            "holds exactly in JSON)"
        )


def check_state_after(after: ConversationState) -> None:
    """Refuse a continued turn whose state after it would pass :data:`MAX_STATE_NUMBER`: its positions
    and that state would not be exact JSON numbers, nor a state this schema takes back.

    Raises:
        RequestError: the first number of the state over the bound, named with the bound.
    """
    for key in ("next_start", "top", "num_tokens"):
        value = getattr(after, key)
        if value > MAX_STATE_NUMBER:
            raise RequestError(
                f"state: after this turn {key} would be {value!r}, past {MAX_STATE_NUMBER} (2**53, the "
                "largest position or count a state holds exactly in JSON); start a new conversation"
            )


def request_state(body: ConversationStateBody | None, rules: LayoutRules) -> ConversationState | None:
    """The library state of a request's ``state`` field, checked against the request's ``rules``.

    Raises:
        RequestError: a state made under other rules (name, engine, convention or overrides), or with
            numbers of the wrong kind for them (fractional positions under integer rules).
    """
    if body is None:
        return None
    if (body.rules, body.engine) != (rules.name, engine_for(rules)):
        raise RequestError(
            f"state: the conversation was built under the {body.rules!r} rules ({body.engine} engine); "
            f"this request has the {rules.name!r} rules ({engine_for(rules)} engine)"
        )
    if body.rules_digest != rules_digest(rules):
        raise RequestError(
            f"state: rules_digest {body.rules_digest!r} is not the digest of this request's rules "
            f"({rules_digest(rules)!r}): the state was made with another convention or other rules "
            "overrides, or was altered; send the request's model, convention and rules unchanged"
        )
    data = body.model_dump()
    for key in ("next_start", "top"):
        value = data[key]
        if rules.fractional_time:
            data[key] = float(value)  # (a JSON writer may drop the ".0" of a whole float)
        elif isinstance(value, float):
            raise RequestError(
                f"state: {key} must be an int under the {rules.name!r} rules (integer positions); got {value!r}"
            )
    if data["next_start"] < 0:
        raise RequestError(f"state: next_start must be >= 0; got {data['next_start']!r}")
    return ConversationState.from_dict(data)


__all__ = [
    "MAX_STATE_NUMBER",
    "ConversationStateBody",
    "StateCount",
    "check_state_after",
    "check_turn_start",
    "request_state",
]
