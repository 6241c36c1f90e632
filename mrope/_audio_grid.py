"""Audio-token arithmetic: an audio clip's samples -> mel frames -> audio tokens, by a family's rules.

Every omni layout, the token-id scan, the media readers and the service count a clip with these
functions, so a clip means the same number of tokens everywhere.
"""

from __future__ import annotations

from mrope._errors import LayoutError
from mrope._rules import LayoutRules
from mrope._segments import Audio

MAX_AUDIO_TOKENS = 1 << 24
"""Most tokens one audio clip may have (a 300 s clip has 7500 in Qwen2.5-Omni)."""


def require_audio(rules: LayoutRules, what: str) -> None:
    """Raise :class:`~mrope.LayoutError` unless ``rules`` know audio."""
    if not rules.has_audio:
        raise LayoutError(
            f"{what}: the {rules.name!r} rules have no audio (audio_pad_id is None); use an omni model "
            "such as 'qwen2.5-omni' or 'qwen3-omni'"
        )


def audio_tokens_from_frames(mel_frames: int, rules: LayoutRules) -> int:
    """Audio tokens for a clip of ``mel_frames`` feature frames, by the rules' ``audio_tokens`` formula.

    ``"stride4"`` (Qwen2.5-Omni): ``((L - 1) // 2 + 1 - 2) // 2 + 1``. ``"window"`` (Qwen3-Omni): 13 per
    full window of ``2 * audio_window`` frames, plus ``((f - 1) // 2 + 1 - 1) // 2 + 1`` for the
    remainder ``r`` with ``f = (r - 1) // 2 + 1``.
    """
    frames = int(mel_frames)
    if rules.audio_tokens == "stride4":
        return ((frames - 1) // 2 + 1 - 2) // 2 + 1
    window = 2 * rules.audio_window
    rest = (frames % window - 1) // 2 + 1
    return ((rest - 1) // 2 + 1 - 1) // 2 + 1 + (frames // window) * 13


def frames_from_samples(samples: int, rules: LayoutRules) -> int:
    """Mel frames of ``samples`` samples at the rules' rate: ``ceil`` or ``floor(samples / hop)``
    (``audio_frames``: how the family's processor pads and masks) of at least ``audio_min_samples``
    samples, at most ``audio_max_frames``."""
    hop = rules.audio_hop_length
    samples = max(int(samples), rules.audio_min_samples)
    frames = -(-int(samples) // hop) if rules.audio_frames == "ceil" else int(samples) // hop
    if rules.audio_max_frames is not None:
        frames = min(frames, rules.audio_max_frames)
    return frames


def audio_mel_frames(audio: Audio, rules: LayoutRules) -> int | None:
    """The clip's feature length in mel frames (``None`` for ``Audio(tokens=n)``).

    ``seconds`` become ``round(seconds * audio_sampling_rate)`` samples (at least ``audio_min_samples``)
    and then ``ceil`` / ``floor(samples / audio_hop_length)`` frames (``rules.audio_frames``, as the family's
    processor pads), capped at ``audio_max_frames`` where the processor truncates.
    """
    if audio.mel_frames is not None:
        frames = audio.mel_frames
    elif audio.seconds is not None:
        return frames_from_samples(round(audio.seconds * rules.audio_sampling_rate), rules)
    else:
        return None
    if rules.audio_max_frames is not None:
        frames = min(frames, rules.audio_max_frames)
    return frames


def audio_tokens(audio: Audio, rules: LayoutRules) -> int:
    """How many audio tokens ``audio`` has under ``rules`` (given, or from its seconds / mel frames by
    the family's rule); :func:`mrope.audio_tokens` is the same count for a ``model=``.

    Raises:
        LayoutError: the rules have no audio, or the clip is too short for one token.
    """
    require_audio(rules, "an Audio segment")
    if not isinstance(audio, Audio):
        raise LayoutError(f"expected an mrope.Audio; got {type(audio).__name__}")
    if audio.tokens is not None:
        n = audio.tokens
    else:
        frames = audio_mel_frames(audio, rules)
        assert frames is not None
        n = audio_tokens_from_frames(frames, rules)
        if n < 1:
            raise LayoutError(
                f"{audio!r} is {frames} mel frames, which make {n} audio tokens under the {rules.name!r} "
                "rules; an audio clip needs at least one token"
            )
    if n > MAX_AUDIO_TOKENS:
        raise LayoutError(f"{audio!r} has {n} audio tokens; at most {MAX_AUDIO_TOKENS} are supported")
    return n


__all__ = [
    "MAX_AUDIO_TOKENS",
    "audio_mel_frames",
    "audio_tokens",
    "audio_tokens_from_frames",
    "frames_from_samples",
    "require_audio",
]
