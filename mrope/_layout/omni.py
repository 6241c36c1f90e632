"""The omni engine (Qwen2.5-Omni TMRoPE, Qwen3-Omni): segments -> an omni plan, and the engine's functions.

Rules with audio (``LayoutRules.audio_pad_id`` set) lay a sequence out as the omni models' own
``get_rope_index`` does (transformers 5.24 models/qwen2_5_omni/modeling_qwen2_5_omni.py:217): a 4.x token
scan in which every image, video and audio clip is wrapped in its start / end tokens, each piece starts one
past the largest position of the piece before it, images and videos are 3-D blocks whose time is in
``tokens_per_second`` units, audio is a 1-D run (one position per token), and a video that carries its audio
shares its start with it and interleaves with it by time.

The two omni families differ only in rule values (see :class:`~mrope.LayoutRules`): how mel frames become
audio tokens, whether time is truncated to int64 (Qwen2.5-Omni) or kept as float32 (Qwen3-Omni), how a
video's audio is interleaved (chunks of ``seconds_per_chunk``, or one token at a time) and whether the
double start / end tokens share a position.

The plan of a sequence of segments is here; the positions come from :mod:`mrope._layout.omni_timeline`
and the token-id scan from :mod:`mrope._layout.omni_scan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from mrope._audio_grid import audio_tokens
from mrope._errors import LayoutError
from mrope._grid import TEXT_FILL_ID, merged_grid
from mrope._layout.interface import LayoutEngine
from mrope._layout.omni_scan import scan_token_ids
from mrope._layout.omni_timeline import Piece, layout, video_time
from mrope._positions import Positions, Span
from mrope._rules import LayoutRules
from mrope._segments import Audio, Image, Segment, Text, Video


class OmniPlan:
    """A sequence of segments under audio rules, with the interface of the other engines' plans
    (``num_tokens``, ``notes``, ``image_grids``, ``targets``, ``positions(ids, tokens)``)."""

    def __init__(self, segments: Sequence[Any], rules: LayoutRules) -> None:
        self.rules = rules
        self.notes: list[str] = []
        self.pieces: list[Piece] = []
        self.text_ids: list[Any] = []  # per piece: the text's token ids (or the fill id), else None
        self.image_grids: list[tuple[int, int, int]] = []
        self.video_grids: list[tuple[int, int, int]] = []
        self.second_per_grid: list[float] = []
        self.audio_tokens: list[int] = []
        self.targets: list[tuple[int, int, int]] = []  # the plans' interface (no generation here)
        m = rules.merge_size
        for i, seg in enumerate(segments):
            if isinstance(seg, Text):
                ids = seg.token_ids if seg.token_ids is not None else TEXT_FILL_ID
                if seg.num_tokens:
                    self.pieces.append(Piece("text", seg.num_tokens, index=i))
                    self.text_ids.append(ids)
                continue
            if isinstance(seg, (Image, Video, Audio)) and not seg.wrap:
                raise LayoutError(
                    f"segment {i}: the {rules.name!r} rules find every image, video and audio by its "
                    "start / end tokens, so wrap=False is not supported"
                )
            if isinstance(seg, Image):
                if seg.tiles is not None or getattr(seg, "generate", False):
                    raise LayoutError(
                        f"segment {i}: the {rules.name!r} rules have no tiled or generated images"
                    )
                grid = merged_grid(seg.grid, m, f"image (segment {i})")
                self.image_grids.append(seg.grid)
                self.pieces.append(Piece("image", grid=grid, index=i))
            elif isinstance(seg, Video):
                if rules.video_support == "none":
                    raise LayoutError(
                        f"video (segment {i}): the {rules.name!r} model takes no video (its processor has "
                        "no video input; rules.video_support='none')"
                    )
                grid = merged_grid(seg.grid, m, f"video (segment {i})")
                spg = seg.resolved_second_per_grid(rules.temporal_patch_size, rules.fps)
                self.video_grids.append(seg.grid)
                self.second_per_grid.append(spg)
                if seg.audio is None:
                    self.pieces.append(Piece("video", grid=grid, second_per_grid=spg, index=i))
                else:
                    n = audio_tokens(seg.audio, rules)
                    self.audio_tokens.append(n)
                    self.pieces.append(Piece("av", n, grid=grid, second_per_grid=spg, index=i))
            elif isinstance(seg, Audio):
                n = audio_tokens(seg, rules)
                self.audio_tokens.append(n)
                self.pieces.append(Piece("audio", n, index=i))
            else:
                raise LayoutError(
                    f"segment {i} is a {type(seg).__name__}; expected mrope.Text, Image, Video or Audio"
                )
            self.text_ids.append(None)

    @property
    def num_tokens(self) -> int:
        return sum(p.num_tokens for p in self.pieces)

    def lazy_positions(self) -> Positions:
        """:meth:`positions`, filled at once (the timeline writes its positions as it lays them out)."""
        return self.positions()

    def positions(
        self,
        ids: np.ndarray | None = None,
        tokens: np.ndarray | None = None,
        image_index: int = 0,
        total: int | None = None,  # the other plans take their length; the timeline computes its own
        start: Any = 0,
    ) -> Positions:
        """Fill and describe the sequence, its first piece at ``start`` (0 but in a continued
        conversation)."""
        rules = self.rules
        pos, top, bodies = layout(self.pieces, rules, processor_order=True, start=start)
        total = pos.shape[1]
        if ids is None:
            ids = pos
        else:
            ids[...] = pos
        if tokens is None:
            tokens = np.empty(total, dtype=np.int64)
        spans: list[Span] = []
        at = 0

        def emit(kind: str, n: int, token: Any, index: int, grid: Any = None) -> None:
            nonlocal at
            tokens[at : at + n] = token
            spans.append(Span(kind, at, at + n, index, grid))
            at += n

        av = iter(bodies)
        pad = {"image": rules.image_pad_id, "video": rules.video_pad_id, "audio": rules.audio_pad_id}
        for p, text in zip(self.pieces, self.text_ids, strict=True):
            if p.kind == "text":
                emit("text", p.n, text, p.index)
                continue
            if p.kind == "audio":
                emit("wrapper", 1, rules.audio_start_id, p.index)
                emit("audio", p.n, rules.audio_pad_id, p.index)
                emit("wrapper", 1, rules.audio_end_id, p.index)
                continue
            emit("wrapper", 1, rules.vision_start_id, p.index)
            if p.kind != "av":
                emit(p.kind, p.vision_tokens, pad[p.kind], p.index, p.grid)
                emit("wrapper", 1, rules.vision_end_id, p.index)
                continue
            assert p.grid is not None
            emit("wrapper", 1, rules.audio_start_id, p.index)
            frame = p.grid[1] * p.grid[2]
            for kind, a, b in next(av):
                whole = kind == "video" and a % frame == 0 and b % frame == 0
                grid = ((b - a) // frame, p.grid[1], p.grid[2]) if whole else None
                emit(kind, b - a, pad[kind], p.index, grid)
            emit("wrapper", 1, rules.audio_end_id, p.index)
            emit("wrapper", 1, rules.vision_end_id, p.index)
        assert at == total
        n = ids.dtype.type(total)
        delta = ids.dtype.type(top + ids.dtype.type(1)) - n if total else ids.dtype.type(0)
        return Positions(
            ids=ids,
            delta=delta.item(),
            spans=tuple(spans),
            input_ids=tokens,
            image_grid_thw=np.asarray(self.image_grids, dtype=np.int64).reshape(-1, 3),
            video_grid_thw=np.asarray(self.video_grids, dtype=np.int64).reshape(-1, 3),
            second_per_grid_ts=np.asarray(self.second_per_grid, dtype=np.float64),
            rules=rules,
            notes=tuple(self.notes),
            audio_tokens=np.asarray(self.audio_tokens, dtype=np.int64),
        )


def plan_segments(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> OmniPlan:
    """The plan of one sequence of segments (the omni timeline takes no tokenizer)."""
    return OmniPlan(segments, rules)


def next_start(positions: Positions) -> int | float:
    """Where a piece appended to a whole sequence starts: one past its last token (a text token or an
    end marker: ``llm_pos_ids_list[-1].max() + 1``), in the positions' dtype."""
    if not positions.num_tokens:
        return 0
    last = positions.ids[0, -1]
    return (last + last.dtype.type(1)).item()


def continue_segments(
    segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any, start: int | float, image_index: int = 0
) -> Positions:
    """Positions of ``segments`` appended to a sequence after which the next piece starts at ``start``
    (fractional under fractional time); spans count from the first new token."""
    return plan_segments(segments, rules, tokenizer).positions(start=start)


def count_tokens(segments: Sequence[Segment], rules: LayoutRules, tokenizer: Any) -> int:
    """Tokens of a sequence under audio rules, arithmetically."""
    return OmniPlan(segments, rules).num_tokens


ENGINE = LayoutEngine(
    plan_segments=plan_segments,
    count_tokens=count_tokens,
    scan_token_ids=scan_token_ids,
    video_time=video_time,
    next_start=next_start,
    continue_segments=continue_segments,
)
"""The omni engine (the rules with audio)."""


__all__ = ["ENGINE", "OmniPlan"]
