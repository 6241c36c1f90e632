"""The work of the JSON endpoints between the raw body and the response, with no HTTP in it.

A positions or rope-index body is decoded under the body limits (:mod:`mrope.service._jsonbody`) with its
cheap caps checked on the raw data first, then on the validated request; the library computes; the
result is rendered as JSON or npy (:mod:`mrope.service._render`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from starlette.responses import Response

import mrope
from mrope._builder import build_lazy_positions
from mrope._continuation import check_no_generation
from mrope._position_sets import position_set_rules
from mrope._rules import LayoutRules
from mrope.models import ModelFamily, resolve_rules
from mrope.schema import PositionsRequest
from mrope.schema._fields import rules_dict
from mrope.schema._sets import sets_family
from mrope.schema._state import check_state_after, check_turn_start, request_state

from . import _convert as convert
from . import _jsonbody as jsonbody
from . import _render as render
from . import _token_caps as token_caps
from ._errors import ServiceError, over_cap
from ._render import OutputFormat
from ._settings import Settings
from ._state import ServiceState
from ._wire import RopeIndexRequest


def count_build_render(
    segments: list[mrope.Text | mrope.Image | mrope.Video],
    weight: token_caps.Weight,
    model: Any,
    rules: LayoutRules,
    fmt: OutputFormat,
    state: ServiceState,
    extra: dict[str, Any] | None = None,
    conversation: Conversation | None = None,
) -> Response:
    """Token cap, then the library's positions, rendered (``weight``: :func:`mrope.service._token_caps.weigh`
    of the segments; ``conversation``: the request's continued conversation, if any).

    The cap is checked before any position is written: exactly (:func:`mrope.count_tokens`), or, for a
    request that :meth:`~mrope.service._token_caps.Weight.surely_under_cap` places far below it by
    arithmetic, after building (the count would cost as much again as the build).
    """
    settings = state.settings
    weight.check_work(settings)
    counted = not weight.surely_under_cap(settings)
    if counted:
        token_caps.count_tokens(segments, rules, settings, state.tokenizer, weight.token_floor)
    after: mrope.ConversationState | None = None
    if conversation is not None and conversation.previous is not None:
        # a turn is laid out from where the conversation stands (its own tokens' work): only bounded
        check_turn_start(conversation.previous, conversation.generated)
        turn = mrope.continue_positions(
            conversation.previous,
            segments,
            generated=conversation.generated,
            model=model,
            rules=rules,
            tokenizer=state.tokenizer,
        )
        pos, after = turn.positions, turn.state
        check_state_after(after)
    else:
        # a program answer is made from the layout plan: no position is written for it
        if fmt == "program":
            pos = build_lazy_positions(segments, model, rules, state.tokenizer)
        else:
            pos = mrope.build_positions(segments, model=model, rules=rules, tokenizer=state.tokenizer)
    if not counted:
        token_caps.check_tokens(pos.num_tokens, settings)
    if conversation is not None and conversation.return_state:
        check_no_generation(pos)  # (GLM-Image) on a fresh request and a continued turn alike
        after = after if after is not None else mrope.conversation_state(pos)
        extra = {**(extra or {}), "state": after.to_dict()}
    state.metrics.tokens.inc(pos.num_tokens)
    return render.render_positions(pos, fmt, state.settings.npy_max_header_bytes, extra)


def count_build_render_sets(
    segments: list[mrope.Text | mrope.Image | mrope.Video],
    family: ModelFamily,
    rules: LayoutRules,
    fmt: OutputFormat,
    state: ServiceState,
    extra: dict[str, Any] | None = None,
) -> Response:
    """Every position set of ``family`` (``layer_sets`` of the request), rendered with the layer
    pattern (``extra``: more top-level fields, an upload's ``files``). The response holds a positions
    array per set, so ``MROPE_MAX_TOKENS`` bounds the work and the tokens of all the sets together, each
    set weighed under its own rules (an override may change the merge size or the temporal rule),
    exactly, before any position is written."""
    settings = state.settings
    set_rules = cast("dict[str, LayoutRules]", position_set_rules(family, rules))
    what = f"the token count of the {len(set_rules)} position sets together"
    weights = [token_caps.weigh(segments, r) for r in set_rules.values()]
    for weight in weights:
        weight.check_work(settings)
    token_caps.check_tokens(sum(w.token_floor for w in weights), settings, what)
    total = sum(token_caps.count_tokens(segments, r, settings, state.tokenizer) for r in set_rules.values())
    token_caps.check_tokens(total, settings, what)
    sets = mrope.build_position_sets(segments, family, rules, tokenizer=state.tokenizer)
    state.metrics.tokens.inc(total)
    return render.render_position_sets(
        sets, family.layer_sets.pattern, fmt, settings.npy_max_header_bytes, extra
    )


@dataclass(frozen=True)
class Conversation:
    """A positions request's conversation fields: the state it continues (``None``: a new one), the
    tokens generated since, whether to return the state after it."""

    previous: mrope.ConversationState | None
    generated: int
    return_state: bool

    @classmethod
    def of(cls, body: PositionsRequest, rules: LayoutRules) -> Conversation | None:
        """``None`` when the request names neither ``state`` nor ``return_state``."""
        if body.state is None and not body.return_state:
            return None
        return cls(request_state(body.state, rules), body.generated or 0, bool(body.return_state))


def check_rope_index_size(body: RopeIndexRequest, rules: LayoutRules, settings: Settings) -> int:
    """Cheap caps of a rope-index request; returns its work: ``B * L`` plus the tokens of its grids.

    The grids' tokens together are capped as well as ``B * L``: a prompt's images and videos lie within
    its ids, so a valid request's grids hold at most ``B * L`` tokens, but the grids left after the
    prompt's (GLM-Image's images to generate) get decode positions of their own."""
    rows = len(body.input_ids)
    if rows > settings.max_batch:
        raise over_cap(
            "too_many_rows", "the batch size (input_ids rows)", rows, "MROPE_MAX_BATCH", settings.max_batch
        )
    length = max((len(r) for r in body.input_ids), default=0)
    if rows == 0 or length == 0:
        raise ServiceError(
            422,
            "invalid_input",
            f"input_ids must hold at least one row of at least one token id; got {rows} row(s) of "
            f"{length} id(s)",
        )
    size = rows * length
    token_caps.check_tokens(size, settings, "the token count B*L of input_ids")
    m2 = rules.merge_size * rules.merge_size
    grids = 0
    for name in ("image_grid_thw", "video_grid_thw"):
        for t, h, w in getattr(body, name) or ():
            grids += t * h * w // m2
    token_caps.check_tokens(grids, settings, "the token count of image_grid_thw and video_grid_thw together")
    return size + grids


def precheck_positions(data: Any, settings: Settings) -> None:
    """The segment cap on the raw body, before any segment is validated."""
    segments = data.get("segments") if isinstance(data, dict) else None
    if isinstance(segments, list):
        convert.check_segment_count(len(segments), settings)
    messages = data.get("messages") if isinstance(data, dict) else None
    if isinstance(messages, list):  # every message item is a segment (or text run) of its own
        convert.check_segment_count(
            sum(
                len(m["content"]) if isinstance(m, dict) and isinstance(m.get("content"), list) else 1
                for m in messages
            ),
            settings,
        )


def precheck_rope_index(data: Any, settings: Settings) -> None:
    """The batch and token caps on the raw body, before any id is validated."""
    ids = data.get("input_ids") if isinstance(data, dict) else None
    if not isinstance(ids, list):
        return
    if len(ids) > settings.max_batch:
        raise over_cap(
            "too_many_rows",
            "the batch size (input_ids rows)",
            len(ids),
            "MROPE_MAX_BATCH",
            settings.max_batch,
        )
    longest = max((len(row) for row in ids if isinstance(row, list)), default=0)
    token_caps.check_tokens(len(ids) * longest, settings, "the token count B*L of input_ids")


def decode_positions(
    raw: bytes, state: ServiceState
) -> tuple[PositionsRequest, Any, LayoutRules, list[mrope.Text | mrope.Image | mrope.Video] | None]:
    """A positions body: bounded decode and validation, then the library segments (``None`` when a
    segment names a media file: those are read in a media slot). Returns the body, the model (a name,
    or the checkpoint of ``MROPE_MODEL_DIR``), its rules and the segments."""
    settings = state.settings
    served: list[Any] = [None]

    def precheck(data: Any) -> None:
        precheck_positions(data, settings)
        served[0] = state.served_model(data)

    body = jsonbody.decode(raw, PositionsRequest, state.limits, precheck)
    model = served[0] or body.model
    rules = resolve_rules(model, rules_dict(body.rules), body.convention or "released")
    if convert.reads_media(convert.request_items(body)):
        return body, model, rules, None
    return body, model, rules, convert.request_segments(body, rules, settings, state.tokenizer)


def decode_rope_index(raw: bytes, state: ServiceState) -> tuple[RopeIndexRequest, Any, int]:
    """A rope-index body: bounded decode and validation, then its caps; returns it, its model and its
    work (:func:`check_rope_index_size`)."""
    served: list[Any] = [None]

    def precheck(data: Any) -> None:
        precheck_rope_index(data, state.settings)
        served[0] = state.served_model(data)

    body = jsonbody.decode(raw, RopeIndexRequest, state.limits, precheck)
    model = served[0] or body.model
    rules = resolve_rules(model, rules_dict(body.rules))
    family = sets_family(model, body.layer_sets)
    if family is None:
        return body, model, check_rope_index_size(body, rules, state.settings)
    # a [3, B, L] answer per set: each set's caps under its own rules, then B*L over the sets together
    set_rules = cast("dict[str, LayoutRules]", position_set_rules(family, rules))
    work = sum(check_rope_index_size(body, r, state.settings) for r in set_rules.values())
    tokens = len(body.input_ids) * max(len(r) for r in body.input_ids)
    what = f"the token count B*L of input_ids over the {len(set_rules)} position sets together"
    token_caps.check_tokens(tokens * len(set_rules), state.settings, what)
    return body, model, work


def compute_rope_index(
    body: RopeIndexRequest, model: Any, fmt: OutputFormat, state: ServiceState
) -> Response:
    """``mrope.numpy_rope_index`` of a decoded request: position_ids [3][B][L] and deltas [B], rendered;
    with ``layer_sets``, those of every position set (each under its set's rules) and the layer pattern."""
    family = sets_family(model, body.layer_sets)
    if family is None:
        position_ids, deltas = _rope_index(body, model, rules_dict(body.rules))
        state.metrics.tokens.inc(position_ids.shape[1] * position_ids.shape[2])
        return render.render_rope_index(position_ids, deltas, fmt, state.settings.npy_max_header_bytes)
    rules = resolve_rules(model, rules_dict(body.rules))
    sets = {name: _rope_index(body, None, r) for name, r in position_set_rules(family, rules).items()}
    state.metrics.tokens.inc(sum(ids.shape[1] * ids.shape[2] for ids, _ in sets.values()))
    pattern = family.layer_sets.pattern
    return render.render_rope_index_sets(sets, pattern, fmt, state.settings.npy_max_header_bytes)


def _rope_index(body: RopeIndexRequest, model: Any, rules: Any) -> tuple[np.ndarray, np.ndarray]:
    """``mrope.numpy_rope_index`` of a request's arrays under ``model`` and ``rules``."""
    return mrope.numpy_rope_index(
        body.input_ids,
        body.image_grid_thw,
        body.video_grid_thw,
        body.attention_mask,
        model=model,
        rules=rules,
        second_per_grid_ts=body.second_per_grid_ts,
        mm_token_type_ids=body.mm_token_type_ids,
        pad_position=body.pad_position,
        audio_seqlens=body.audio_seqlens,
        use_audio_in_video=body.use_audio_in_video,
    )
