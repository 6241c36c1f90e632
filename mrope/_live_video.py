"""Live video: the positions of a video's temporal groups as they arrive while the conversation runs,
equal to those the whole video built at once gives them.

Every layout engine places a video's temporal groups one after another from where the video starts
(Qwen2-VL's ``t = s + tau(g)``, Qwen3-VL's and GLM's per-group blocks with their timestamp text, the
omni timeline's ``t`` in its own time units), and the time of group ``g`` depends on the frame rate, not
on how many groups follow. So the tokens of groups ``[a, b)`` of the whole video are those of the same
groups of the video cut after ``b`` groups, up to its closing tokens (a ``<|vision_end|>`` or GLM's
``<|end_of_video|>``): :func:`live_video_chunk` builds the video cut after ``a``, ``b`` and ``b + 1``
groups from the conversation's state at the video's start and keeps the tokens they share, so it
follows each family's own layout without a rule of its own. A chunk costs the tokens of the video so far.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mrope._continuation import ConversationState, Turn, continue_positions
from mrope._errors import LayoutError
from mrope._positions import Positions
from mrope._rules import LayoutRules
from mrope._segments import Video
from mrope.models import ModelLike


@dataclass(frozen=True, eq=False)
class VideoChunk:
    """The tokens a batch of arriving temporal groups adds to the conversation.

    Attributes:
        ids: positions ``[A, n]`` (the conversation's coordinates, as the whole video has them).
        input_ids: int64 ``[n]``: the token ids (the opening wrapper with the first groups, Qwen3-VL /
            GLM timestamp text with each group, the closing wrapper with the last).
        offset: the conversation index of the chunk's first token.
        state: the conversation's state after the video (``final=True``), else ``None`` (a turn cannot be
            appended inside a video).
    """

    ids: np.ndarray
    input_ids: np.ndarray
    offset: int
    state: ConversationState | None


def _shared(a: Positions, b: Positions) -> int:
    """Tokens at the start of ``a`` that ``b`` has too (equal ids on every axis and equal token ids)."""
    n = min(a.num_tokens, b.num_tokens)
    same = (a.ids[:, :n] == b.ids[:, :n]).all(axis=0) & (a.input_ids[:n] == b.input_ids[:n])
    return n if same.all() else int(np.argmin(same))


def live_video_chunk(
    start: Positions | Turn | ConversationState,
    video: Video,
    arrived: int,
    *,
    final: bool = False,
    model: ModelLike | None = None,
    rules: LayoutRules | dict[str, Any] | None = None,
    tokenizer: Any = None,
    convention: str = "released",
) -> VideoChunk:
    """The tokens of a live video's temporal patches ``[arrived, video.grid[0])``.

    Args:
        start: the conversation where the video starts (as :func:`mrope.continue_positions` takes it;
            the same for every chunk of the video).
        video: the video as it stands after this arrival: ``grid[0]`` temporal patches so far (a
            multiple of the rules' ``temporal_merge_size``, as for any video), its frame rate (``fps`` or
            ``second_per_grid``) as for the whole video.
        arrived: temporal patches sent in earlier chunks (a multiple of ``temporal_merge_size`` too).
        final: the video ends with these groups (the chunk then holds its closing tokens and the state
            after it).
        model, rules, tokenizer, convention: as :func:`mrope.continue_positions`.

    Raises:
        LayoutError: ``arrived`` not below the groups so far, a video with its own audio (interleaved in
            time chunks), given frame times or a pruning mask (a live video is timed by its rate), or
            what :func:`mrope.continue_positions` refuses.
    """
    if not isinstance(video, Video):
        raise LayoutError(f"a live video is a mrope.Video; got {type(video).__name__}")
    if video.audio is not None or video.frame_times is not None or video.keep is not None:
        raise LayoutError(
            "a live video is timed by its rate (fps or second_per_grid), without its own audio, frame_times "
            "or a pruning mask"
        )
    total = video.grid[0]
    if isinstance(arrived, bool) or not isinstance(arrived, int) or not 0 <= arrived < total:
        raise LayoutError(f"arrived must be an int in [0, {total}) (the groups so far); got {arrived!r}")

    def cut(groups: int) -> Turn:
        options = dict(model=model, rules=rules, tokenizer=tokenizer, convention=convention)
        return continue_positions(start, [replace(video, grid=(groups, *video.grid[1:]))], **options)

    now = cut(total)
    first = _shared(cut(arrived).positions, now.positions) if arrived else 0
    step = now.positions.rules.temporal_merge_size  # encoder temporal patches per LLM group
    last = now.positions.num_tokens if final else _shared(now.positions, cut(total + step).positions)
    return VideoChunk(
        ids=now.positions.ids[:, first:last],
        input_ids=now.positions.input_ids[first:last],
        offset=now.offset + first,
        state=now.state if final else None,
    )


__all__ = ["VideoChunk", "live_video_chunk"]
