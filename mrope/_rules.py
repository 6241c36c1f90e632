"""LayoutRules: the explicit rules that turn segments into coordinates.

Every choice a model makes is a field here, never an if-branch on a model name in the builder:

- ``merge_size``: an encoder grid ``(t, h, w)`` of patches becomes an LLM grid ``(t, h/m, w/m)``.
- ``temporal``: how a video's temporal patch ``i`` maps to ``tau(i)``:
  ``"index"`` (``tau(i) = i``, Qwen2-VL), ``"seconds"`` (``trunc(i * second_per_grid * tokens_per_second)``,
  Qwen2.5-VL) or ``"timestamps"`` (one block per temporal patch, each after a text timestamp, Qwen3-VL).
- ``seconds_grouping``: how the ``seconds`` rule groups its float32 product. The processor hands
  ``second_per_grid`` to the model as float32 (``spg32``) and the model multiplies in float32, so the
  grouping changes some results (26 patches at 0.04 s: the last gets 3, float64 gives 2).
  ``"(i*spg)*tps"``: ``trunc(fl32(fl32(i * spg32) * tps))``, the released Qwen2.5-VL code (transformers
  4.49) and Qwen2.5-Omni; ``"i*(tps*spg)"``: ``trunc(fl32(i * fl32(tps * spg32)))``, transformers 5.x's
  ``get_rope_index`` (offered only to reproduce it); ``"i*(spg*tps) f64"``: ``trunc(i * (f64(spg32) *
  tps))`` in float64, vLLM's (``vllm/model_executor/models/qwen2_5_vl.py`` v0.33.0 and v0.34.0:
  ``iter_mm_grid_thw`` line 1328 takes ``second_per_grid_ts.item()`` times ``tokens_per_second``,
  ``get_mrope_input_positions`` line 1371 multiplies ``np.indices`` by it and casts to int64), which
  parts from the released float32 result in about 1 random prompt in 18 (offered to reproduce vLLM).
  The omni families' video time (:func:`mrope._layout.omni_timeline.video_time`) follows it too, as
  their vLLM code multiplies the same way (``qwen2_5_omni_thinker.py`` / ``qwen3_omni_moe_thinker.py``
  ``iter_mm_features``, v0.34.0 lines 1348 / 2050).
- ``spatial``: where a block's (h, w) start: ``"offset"`` (at the block's start counter ``s``, Qwen),
  ``"reset"`` (at 0 for every block: MRoPE-Interleave's spatial reset), ``"centered"`` (the grid centred
  in the square span ``[s, s + max(H', W'))``, so an image and its transpose share a centre) or
  ``"diagonal"`` (VideoRoPE: token ``(i, j, k)`` gets ``h = t_i + j - (H' - 1) // 2`` and
  ``w = t_i + k - (W' - 1) // 2`` with ``t_i = s + tau(i)``: each frame centred on its own t) or
  ``"token_time"`` (TAD-RoPE in half steps: token ``m`` of a block, in frame ``f``, gets ``s + (m + f) / 2``
  on every axis, and text resumes at ``s + (n + T') / 2`` after a block of ``n`` tokens; with a text
  token's step of 1 these are half of TAD-RoPE's sequence index plus frame index, whose text steps by 2,
  so decoding keeps one position per token; the scheme's spec doubles every frequency so that each angle
  is TAD-RoPE's. Positions are float32; needs ``temporal`` ``"index"`` or ``"timestamps"``, stride 1,
  ``advance="max+1"``, ``crop="reset"``, no ``frame_block``, the counter positions base and no audio).
  ``"symmetric"`` (VRoPE: four position rows, ``num_axes=4``; token ``(i, j, k)`` of a block at ``s``
  gets ``f_i + j + k``, ``f_i + j + (W' - 1 - k)``, ``f_i + (H' - 1 - j) + k`` and
  ``f_i + (H' - 1 - j) + (W' - 1 - k)`` with ``f_i = s + i (H' + W' - 1)``: the grid and its three
  mirror images, frames one after another, each starting one past the last's largest position; text
  writes its position on all four rows. It takes the ``max+1`` advance, stride 1, no crop origin and no
  other single-family rule).
  ``"sequential"`` (V2PE: a block's tokens on one line, every axis equal, token ``k = 1 .. N`` in
  sequence order at ``s - 1 + k * vision_step``: one step of ``vision_step`` each from the token before).
- ``vision_step``: the position step of a vision token under ``spatial="sequential"`` (V2PE's delta, a
  number > 0); one that is not a whole number makes positions float32, computed in float64 and
  rounded once.
  ``"circle"`` (Circle-RoPE, :mod:`mrope._layout.circle`: the one-frame grid centred and mapped onto a
  circle of radius ``circle_radius`` about the block start, in the plane orthogonal to the text direction
  ``(1, 1, 1)``; ``circle_alpha`` in ``[0, 1]`` weighs the grid's angles against the raster index's. Real
  t, h and w: positions are float32, and a block of several frames is refused).
- ``temporal_stride``: ``tau(i)`` is multiplied by this number > 0 (MRoPE-Interleave's
  ``temporal_stride``, VideoRoPE's ``scale_factor`` 2) for images and for the ``"index"`` rule; the
  ``"seconds"`` rule takes only 1, and under ``"timestamps"`` every block has ``tau = 0``. A stride that
  is not a whole number makes positions float32 (:attr:`LayoutRules.fractional_time`), computed in
  float64 and rounded once.
- ``crop``: an image that carries a crop origin keeps it (``"keep"``: h and w shifted by the origin, so a
  crop's tokens get the coordinates they have in the whole image) or drops it (``"reset"``, as every
  released model does since none knows about crops).
- ``tiles``: ``"global"`` (every tile token gets the (h, w) it has in the untiled grid, one block),
  ``"independent"`` (each tile its own block, as tiling models do today) or ``"thumbnail"`` (RoPE-DHR:
  every tile token takes the position of the thumbnail token over it, so a tiled image spans its
  thumbnail's positions alone; :mod:`mrope._layout.tiles`).
- ``advance``: where the counter resumes after a block: ``"max+1"`` (one past the largest coordinate so
  far, the official rule), ``"spatial"`` (``s + max(H', W')``, ignoring time: what transformers 5.3+
  does after a video; offered only to reproduce it), ``"block"`` (one past the block's largest
  coordinate counted from ``s`` as if it were anchored there: ``s + max(tau_max, H' - 1, W' - 1) + 1``,
  MRoPE-Interleave's spatial reset) or ``"time"`` (one past the block's last t, ``s + tau_max + 1``,
  VideoRoPE; the decode delta then counts from the t row) or ``"ceil"`` (one past the ceiling of the
  float32 largest position so far, ``ceil(max) + 1``: V2PE, whose text stays on whole numbers).
- wrapper and placeholder token ids, and the per-patch timestamp text of the ``timestamps`` rule:
  where it goes (``timestamp_position``: ``"before"`` each patch block as in Qwen3-VL, ``"after"`` as in
  GLM-4.1V), which time it shows (``timestamp_time``: ``"mean"`` of the patch's first and last frame,
  or its ``"first"`` frame) and how (``timestamp_format``); an optional outer video wrapper
  (``video_start_id`` / ``video_end_id``, GLM-4.1V's ``<|begin_of_video|>``). Without timestamps, a
  video with its own wrapper ids is wrapped by them instead of the vision ones (ERNIE-4.5-VL).
  ``video_pad_id`` is the id the processor writes for video pads. GLM-4.1V writes the image id there
  (``<|image|>``, 151343) and tells video from image by the outer wrapper, so ``video_pad_id ==
  image_pad_id`` is allowed when a video wrapper is set: pads inside ``video_start_id .. video_end_id``
  are video (``mm_token_type_ids`` 2), the others image (1).
- ``pad_position``: the value written at masked (padding) slots of a batch.
- sizing of images and videos (patch size, pixel bounds, frame sampling) for the vision layer:
  ``image_bounds`` / ``video_bounds`` say what the pixel bounds limit: ``"frame"`` (one frame's
  ``h * w``: Qwen2-VL's image processor; for videos the qwen-vl-utils per-frame budget shared out of
  ``video_total_pixels``) or ``"clip"`` (the clip's ``t * h * w`` with ``t`` the frame count rounded to
  the temporal patch size, and sides below one resize factor scaled up first: GLM-4.1V's image
  processor with ``t = temporal_patch_size``, and transformers' Qwen3-VL and GLM-4.1V video
  processors); under ``"frame"``, ``video_total_pixels`` :data:`NO_CLIP_BUDGET` shares out no clip
  budget (Qwen2VLVideoProcessor without ``cap_pixels_per_frame``: each frame within the per-frame bounds
  alone). ``video_bounds`` has a third rule, ``"tokens"`` (HY-V4-VL's video processor,
  :func:`mrope.media.smart_resize_tokens`): frames are never scaled up, each is at most
  ``video_frame_max_pixels`` pixels, and the clip's ``n * rows * (cols + 1)`` tokens (``n`` sampled frames
  of ``rows x cols`` merged patches, one newline token a row) stay within ``video_max_pixels /
  resize_factor**2``. ``frame_sampling`` picks which frames a video processor samples: ``"qwen-vl-utils"``
  (``smart_nframes``, float32 ``linspace``), ``"qwen2-vl"`` (transformers' Qwen2VLVideoProcessor as
  released, sampling off: every frame; a call's ``fps`` or ``nframes`` samples by its ``sample_frames``),
  ``"vllm-qwen2-vl"`` (vLLM 0.34.0's loader for that processor: its ``sample_frames`` at 2 fps, the
  ``vllm`` route's),
  ``"qwen3-vl"`` (transformers' Qwen3VLVideoProcessor:
  ``int(frames / rate * fps)`` clamped to ``[min_frames, max_frames]`` and the frame count, float64
  ``linspace``) or ``"glm4v"`` (Glm4vVideoProcessor: one frame every ``1 / fps`` s up to
  ``max_duration`` seconds, evenly spread over the clip beyond, an even count) or ``"glm46v"``
  (Glm46VVideoProcessor: a rate set by the clip's length, 3 / 1 / 0.5 fps up to 30 / 300 / 2400 s, at
  most 640 frames) or ``"ernie"`` (Ernie4_5_VLMoeVideoProcessor: no rate by default, so every frame,
  clamped to ``[min_frames, max_frames]``, spread by ``torch.arange(0, frames, frames / n).int()``; an odd
  count repeats its last frame; ``fps`` applies only when a call passes one). ``image_bounds="edges"``
  is GLM-Image's image processor (:func:`mrope.media.smart_resize_edges`): the short side scaled up to ``sqrt(image_min_pixels)``, the
  long side down to ``sqrt(image_max_pixels)``, then both halved and rounded to the resize factor;
  sides under one factor or an aspect ratio above 4 are refused. ``image_bounds="none"``: mrope does not
  size the processor's images (MiniCPM-V 4.6 slices each picture, Qwen3-ASR takes none): files are refused. ``image_upscale_short_side``: a side
  below one resize factor is first set to it, the other side scaled alike and rounded (height first,
  then width), before the ``"frame"`` rule (PaddleOCR-VL's image processor).
- ``video_support``: what the family does with videos. ``"sized"``: its processor takes video files
  and :func:`mrope.media.load_video` sizes them by the rules above. ``"grids"``: its processor takes
  no video (transformers has no video processor for it), so ``load_video`` refuses a file, but its
  ``get_rope_index`` lays out video grids given directly (``Video(grid=...)``; PaddleOCR-VL).
  ``"none"``: neither; ``Video`` segments are refused too (GLM-Image, HunyuanOCR).

Rules of single families, each named by what it does and off by default:

- ``temporal_merge_size``: a video's temporal patches are merged this many at a time into one LLM frame
  (ERNIE-4.5-VL: 2, so ``T' = t / 2``); images are never merged in time.
- ``row_newline``: every merged row of an image or frame ends with one more token, at column ``W'``
  (HY-V4-VL, HunyuanOCR), so a frame has ``H' * (W' + 1)`` tokens.
- ``frame_block``: frame ``f`` of a video is a block of its own: ``t``, ``h`` and ``w`` all start at
  ``s + f * B`` with ``B = max(H', columns)`` (HY-V4-VL).
- ``positions_base``: ``"counter"`` (the block counter above) or ``"sequence"``: every axis is the
  token's index in the sequence, and the grid tokens of an image write ``(w, h, image index)`` on the
  last three axes (HunyuanOCR). ``num_axes`` rows (3 or 4; with 4, axis 0 stays the sequence index;
  4 also under the ``"symmetric"`` spatial rule, which needs it).
  ``"index"``: every axis of every token, vision tokens included, is the token's index in the sequence
  (the sequence engine without the grid write: MiniCPM-V 4.6 and EXAONE 4.5, whose vision features
  replace placeholder embeddings and whose text models are given ``arange`` positions; videos too,
  each one run of placeholders, where ``video_support`` allows them).
  ``"canvas"``: MiniCPM-V 4.7's canvas of a thumbnail and its detail slices (:mod:`mrope._layout.canvas`), with
  the marker ids ``slice_start_id``, ``slice_end_id`` and ``newline_id`` (``vision_start_id`` /
  ``vision_end_id`` are ``<image>`` / ``</image>``).
  ``"image_step"`` (:mod:`mrope._layout.image_step`, Falcon-OCR): t counts text tokens, a whole image
  block (wrappers included) takes one step; the image's tokens get float32 ``(h, w)`` spread evenly over
  ``[-sqrt(H/W), sqrt(H/W)] x [-sqrt(W/H), sqrt(W/H)]``, every other token ``(0, 0)``; images only.
- ``vision_registers``: register tokens after ``vision_start_id`` (ids ``vision_start_id + 1 ..``), under
  ``"image_step"`` only (Falcon-OCR's four ``<|image_reg_i|>``).
- ``grid_border``: one placeholder token before and one after each image grid, inside the vision
  wrapper; they keep sequence positions (HunyuanOCR's ``cat_extra_token``).
- ``image_index_scope``: with ``positions_base="sequence"``, the image index restarts at 0 in every
  sequence (``"sequence"``) or keeps counting across the rows of a batch (``"batch"``, what
  transformers 5.24 does).
- ``image_span``: the token interface finds an image's tokens as runs of ``image_pad_id``
  (``"placeholders"``) or as the tokens strictly between ``vision_start_id`` and ``vision_end_id``
  (``"between_wrappers"``: GLM-Image, whose model replaces placeholders by image codes first).
- ``generates_images``: grids left over after a sequence's images are the images the model will
  generate (GLM-Image): they take no prompt tokens, their positions come at decode time (2-D target
  grids, last first, then one end marker), and deltas are 0.

The rules of released models live in the registry (:mod:`mrope.models`, one module per family);
:func:`mrope.models.resolve_rules` turns a ``model=`` argument into rules.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args, get_origin, get_type_hints

from mrope._errors import LayoutError
from mrope._rule_checks import check_rules
from mrope._timestamp_format import format_seconds

TemporalRule = Literal["index", "seconds", "timestamps"]
SpatialRule = Literal[
    "offset", "reset", "centered", "diagonal", "token_time", "symmetric", "sequential", "circle"
]
CropRule = Literal["keep", "reset"]
TileRule = Literal["global", "independent", "thumbnail"]
AdvanceRule = Literal["max+1", "spatial", "block", "time", "ceil"]
TimestampPosition = Literal["before", "after"]
TimestampTime = Literal["mean", "first"]
PositionsBase = Literal["counter", "sequence", "index", "canvas", "image_step"]
ImageIndexScope = Literal["sequence", "batch"]
ImageSpan = Literal["placeholders", "between_wrappers"]
SecondsGrouping = Literal["(i*spg)*tps", "i*(tps*spg)", "i*(spg*tps) f64"]
PixelBounds = Literal["frame", "clip", "edges", "none"]
VideoPixelBounds = Literal["frame", "clip", "tokens"]
FrameSampling = Literal["qwen-vl-utils", "qwen2-vl", "vllm-qwen2-vl", "qwen3-vl", "glm4v", "glm46v", "ernie"]
VideoSupport = Literal["sized", "grids", "none"]

AudioTokenRule = Literal["stride4", "window"]
AudioFrameRule = Literal["ceil", "floor"]
AudioInVideoRule = Literal["chunks", "interleave"]
WrapperPositionRule = Literal["shared", "consecutive"]
TimeRounding = Literal["trunc", "none"]
BlockSearch = Literal["placeholder", "start"]


@dataclass(frozen=True)
class LayoutRules:
    """How segments become ``[3, T]`` positions (see the module docstring for each rule).

    Sizes are in pixels unless named otherwise; token ids are vocabulary ids.

    Audio and the omni timeline (rules with ``audio_pad_id`` set; Qwen2.5-Omni, Qwen3-Omni):

    - an audio clip is ``audio_start``, its tokens, ``audio_end``; its tokens get one position each.
      Its token count from mel frames ``L``: ``"stride4"`` is ``((L - 1) // 2 + 1 - 2) // 2 + 1``
      (Qwen2.5-Omni); ``"window"`` is 13 per ``2 * audio_window`` frames plus the remainder's
      ``((f - 1) // 2 + 1 - 1) // 2 + 1`` with ``f = (r - 1) // 2 + 1`` (Qwen3-Omni). Seconds become
      ``round(s * audio_sampling_rate)`` samples, and samples ``L = ceil`` or ``floor(samples /
      audio_hop_length)`` frames (``audio_frames``), at most ``audio_max_frames``. A clip shorter than
      ``audio_min_samples`` is first zero-padded to it, its padding counted as frames of the clip
      (Qwen3-ASR's feature extractor: 8000 samples, 0.5 s).
    - video time is ``(i * second_per_grid) * tokens_per_second`` in float32, truncated
      (``time_rounding="trunc"``) or kept fractional (``"none"``: positions are float32); an image's
      temporal patch ``i`` gets ``i * tokens_per_second``.
    - a video with audio is ``vision_start, audio_start``, the interleaved tokens, ``audio_end,
      vision_end``; its frames and its audio share one start. ``audio_in_video="chunks"`` emits them in
      chunks of ``int(tokens_per_second * seconds_per_chunk)`` time units, video chunk then audio chunk
      (Qwen2.5-Omni); ``"interleave"`` merges them one token at a time by time, video first on ties
      (Qwen3-Omni). The double start / end tokens share one position (``"shared"``) or take two
      (``"consecutive"``).
    - ``second_per_grid_fps``: the rate a video's ``second_per_grid`` is ``temporal_patch_size`` over.
      ``None``: the sampled rate (qwen-vl-utils hands it to Qwen2.5-VL's processor as ``fps``). A number:
      the processor's own ``fps`` keyword default, which it uses whatever rate the frames were sampled at
      (Qwen2.5-Omni 2.0, Qwen3-Omni 1.0; their model cards pass none); a call's ``fps`` replaces it.
    - ``block_search``: the token the model's scan finds the next image, video or audio block by:
      ``"placeholder"``, its first placeholder id (Qwen2.5-Omni), so a stray placeholder in the text
      before a block of its kind is taken as that block's start; ``"start"``, its ``vision_start`` /
      ``audio_start`` (Qwen3-Omni), so a stray placeholder is text wherever it stands. mrope refuses
      stray placeholders either way; only the lenient reading of a patched model
      (:mod:`mrope._layout.leniency`) reads them, and only where the model reads them as text.
    """

    name: str = "custom"
    merge_size: int = 2
    temporal_patch_size: int = 2
    temporal: TemporalRule = "index"
    tokens_per_second: float = 2.0
    seconds_grouping: SecondsGrouping = "(i*spg)*tps"
    spatial: SpatialRule = "offset"
    crop: CropRule = "reset"
    tiles: TileRule = "global"
    advance: AdvanceRule = "max+1"
    pad_position: int = 1
    # token ids (Qwen2/2.5/3-VL vocabulary by default)
    vision_start_id: int = 151652
    vision_end_id: int = 151653
    image_pad_id: int = 151655
    video_pad_id: int = 151656
    timestamp_format: str = "<{:.1f} seconds>"
    timestamp_position: TimestampPosition = "before"
    timestamp_time: TimestampTime = "mean"
    video_start_id: int | None = None
    video_end_id: int | None = None
    slice_start_id: int | None = None
    slice_end_id: int | None = None
    newline_id: int | None = None
    # sizing (vision layer)
    patch_size: int = 14
    image_min_pixels: int = 56 * 56
    image_max_pixels: int = 28 * 28 * 1280
    video_min_pixels: int = 128 * 28 * 28
    video_max_pixels: int = 768 * 28 * 28
    video_total_pixels: int = 24576 * 28 * 28
    fps: float = 2.0
    min_frames: int = 4
    max_frames: int = 768
    image_bounds: PixelBounds = "frame"
    video_bounds: VideoPixelBounds = "frame"
    video_frame_max_pixels: int = 1024 * 1024  # one frame's area under video_bounds="tokens"
    frame_sampling: FrameSampling = "qwen-vl-utils"
    max_duration: float = 300.0
    image_upscale_short_side: bool = False
    video_support: VideoSupport = "sized"
    # audio and time-aligned layouts (Qwen2.5-Omni, Qwen3-Omni); audio_pad_id None: no audio
    audio_pad_id: int | None = None
    audio_start_id: int | None = None
    audio_end_id: int | None = None
    audio_tokens: AudioTokenRule = "stride4"
    audio_window: int = 50
    audio_sampling_rate: int = 16000
    audio_hop_length: int = 160
    audio_frames: AudioFrameRule = "ceil"
    audio_max_frames: int | None = None
    audio_min_samples: int = 0
    audio_in_video: AudioInVideoRule = "chunks"
    audio_in_video_wrappers: WrapperPositionRule = "shared"
    seconds_per_chunk: float = 2.0
    time_rounding: TimeRounding = "trunc"
    block_search: BlockSearch = "placeholder"
    second_per_grid_fps: float | None = None  # None: the sampled rate (see the class docstring)
    # rules of single families (module docstring)
    temporal_merge_size: int = 1
    temporal_stride: float = 1
    vision_step: float = 1
    circle_radius: float = 10.0
    circle_alpha: float = 0.5
    row_newline: bool = False
    frame_block: bool = False
    positions_base: PositionsBase = "counter"
    num_axes: int = 3
    vision_registers: int = 0
    grid_border: bool = False
    image_index_scope: ImageIndexScope = "sequence"
    image_span: ImageSpan = "placeholders"
    generates_images: bool = False

    def __post_init__(self) -> None:
        check_rules(self, _CHOICES, _FLAGS)

    @property
    def has_audio(self) -> bool:
        """Whether the rules know audio (and so lay sequences out on the omni families' timeline)."""
        return self.audio_pad_id is not None

    @property
    def fractional_time(self) -> bool:
        """Whether positions are fractional (float32: ``time_rounding="none"``, a ``temporal_stride``
        that is not a whole number, ``spatial="token_time"``, a ``vision_step`` that is not a whole number
        under ``spatial="sequential"``, or the ``circle`` spatial rule) rather than int64."""
        return (
            self.time_rounding == "none"
            or not float(self.temporal_stride).is_integer()
            or self.spatial in ("token_time", "circle")
            or self.positions_base == "image_step"
            or (self.spatial == "sequential" and not float(self.vision_step).is_integer())
        )

    def format_timestamp(self, seconds: float) -> str:
        """The text of one timestamp; an integer field (``{:d}``) takes the seconds truncated to int."""
        return format_seconds(self.timestamp_format, seconds)

    @property
    def resize_factor(self) -> int:
        """Side lengths of a resized image are multiples of this: ``patch_size * merge_size``."""
        return self.patch_size * self.merge_size

    def replace(self, **changes: Any) -> LayoutRules:
        """A copy with some rules changed (unknown names are an error)."""
        unknown = set(changes) - _FIELD_NAMES
        if unknown:
            raise LayoutError(f"unknown LayoutRules fields {sorted(unknown)}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayoutRules:
        if not isinstance(data, dict):
            raise LayoutError(f"LayoutRules.from_dict expects a dict; got {type(data).__name__}")
        return cls().replace(**data)


def rules_digest(rules: LayoutRules) -> str:
    """16 hex digits of the SHA-256 of the rules' fields (:meth:`LayoutRules.to_dict` as sorted JSON): the
    exact rules (model, ``convention``, overrides) a :class:`mrope.ConversationState` was made under,
    which its name alone does not tell apart."""
    if not isinstance(rules, LayoutRules):
        raise LayoutError(f"rules_digest takes a mrope.LayoutRules; got {type(rules).__name__}")
    try:
        return _cached_digest(rules)  # (to_dict costs ~0.2 ms; a turn of a conversation, a tenth of it)
    except TypeError:  # a field that cannot be hashed
        return _digest(rules)


def _digest(rules: LayoutRules) -> str:
    text = json.dumps(rules.to_dict(), sort_keys=True, separators=(",", ":"), default=_plain_number)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain_number(value: Any) -> Any:
    """A numpy scalar or array in a rule's value, as JSON writes a Python number or list."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"a rule's value of type {type(value).__name__} has no JSON form")


_cached_digest = functools.lru_cache(maxsize=256)(_digest)


FIELD_TYPES: dict[str, Any] = get_type_hints(LayoutRules)
"""Every rule's type, read from the field annotations (``int``, ``bool``, a ``Literal`` of its choices, ...)."""
_FIELD_NAMES = frozenset(FIELD_TYPES)
_CHOICES: dict[str, tuple[str, ...]] = {
    name: get_args(kind) for name, kind in FIELD_TYPES.items() if get_origin(kind) is Literal
}
"""The allowed values of every rule typed by a ``Literal`` above."""
_FLAGS: tuple[str, ...] = tuple(name for name, kind in FIELD_TYPES.items() if kind is bool)
