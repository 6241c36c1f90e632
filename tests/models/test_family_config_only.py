"""The config-only families against their own transformers 5.24 ``get_rope_index``.

Each family below reuses an existing rule set with its own ids and sizing (its 5.24 ``get_rope_index`` is
the rule set's, as this file checks; the registry's table is in docs/families.md). For each, random padded
batches (left and right padding, ``attention_mask``, ``mm_token_type_ids``) built by ``mrope.build_batch``
under ``convention="transformers5"`` must equal what the family's own ``get_rope_index`` (the 5.24 method,
called on an object holding the family's config class) computes from the same ``input_ids``, types and
grids; ``mrope.get_rope_index`` on those inputs must too, with and without ``mm_token_type_ids``. The
config objects are the 5.24 config classes with their defaults: their ``vision_config.spatial_merge_size``
(2) is the released value, and ``get_rope_index`` reads nothing else.

Adding a family here is one line in ``FAMILIES``.
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import mrope
from mrope import Image, Text, Video
from mrope.models import get_family

# family -> (transformers module, model class, top-level config class, whether it takes videos)
FAMILIES = {
    "qwen3-vl-moe": ("qwen3_vl_moe", "Qwen3VLMoeModel", "Qwen3VLMoeConfig", True),
    "cosmos3-omni": ("cosmos3_omni", "Cosmos3OmniModel", "Cosmos3OmniConfig", True),
    "qwen3.5": ("qwen3_5", "Qwen3_5Model", "Qwen3_5Config", True),
    "qwen3.5-moe": ("qwen3_5_moe", "Qwen3_5MoeModel", "Qwen3_5MoeConfig", True),
    "qwen4-exp": ("qwen4_exp", "Qwen4ExpModel", "Qwen4ExpConfig", True),
    "cosmos3-edge": ("cosmos3_edge", "Cosmos3EdgeModel", "Cosmos3EdgeConfig", True),
    "cohere-compass": ("cohere_compass", "CohereCompassModel", "CohereCompassConfig", True),
    "glm-4.5v": ("glm4v_moe", "Glm4vMoeModel", "Glm4vMoeConfig", True),
    "glm-4.6v": ("glm46v", "Glm46VModel", "Glm46VConfig", True),
    "glm-ocr": ("glm_ocr", "GlmOcrModel", "GlmOcrConfig", True),
    "paddleocr-vl": ("paddleocr_vl", "PaddleOCRVLModel", "PaddleOCRVLConfig", False),
}


class _Method:
    """The family's ``get_rope_index`` and ``get_vision_position_ids`` on an object holding its config."""

    def __init__(self, module: str, model: str, config: str) -> None:
        mod = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
        cfg = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
        self.config = getattr(cfg, config)()
        cls = getattr(mod, model)
        self.get_vision_position_ids = functools.partial(cls.get_vision_position_ids, self)
        self.get_rope_index = functools.partial(cls.get_rope_index, self)


@functools.cache
def _hf(family: str) -> _Method:
    module, model, config, _ = FAMILIES[family]
    return _Method(module, model, config)


def _tokenize(text: str) -> list[int]:
    return [1000 + ord(c) for c in text]  # timestamp text: any ids that are not the family's specials


def _sample(rng: np.random.Generator, videos: bool, temporal_patch: int) -> list:
    out: list = [Text(list(rng.integers(2000, 3000, int(rng.integers(1, 6)))))]
    for _ in range(int(rng.integers(1, 4))):
        if videos and rng.random() < 0.5:
            t = int(rng.integers(1, 4))
            grid = (t, 2 * int(rng.integers(1, 5)), 2 * int(rng.integers(1, 5)))
            out.append(Video(grid=grid, fps=float(rng.choice([1.0, 2.0, 4.0]))))
        else:
            out.append(Image(grid=(1, 2 * int(rng.integers(1, 6)), 2 * int(rng.integers(1, 6)))))
        out.append(Text(list(rng.integers(2000, 3000, int(rng.integers(0, 4))))))
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("side", ["left", "right"])
def test_get_rope_index_equals_the_familys_own(family: str, side: str) -> None:
    rules = get_family(family).rules
    hf = _hf(family)
    rng = np.random.default_rng(abs(hash((family, side))) % 2**32)
    for _ in range(4):
        samples = [_sample(rng, FAMILIES[family][3], rules.temporal_patch_size) for _ in range(3)]
        batch = mrope.build_batch(
            samples, model=family, convention="transformers5", padding_side=side, tokenizer=_tokenize
        )
        images = np.concatenate([p.image_grid_thw for p in batch.sequences])
        videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
        ids, mask = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
        types = torch.from_numpy(batch.mm_token_type_ids)
        want, want_delta = hf.get_rope_index(
            ids,
            types,
            torch.from_numpy(images) if len(images) else None,
            torch.from_numpy(videos) if len(videos) else None,
            attention_mask=mask,
        )
        np.testing.assert_array_equal(batch.ids, want.numpy())  # pads hold 0, as 5.24 writes
        np.testing.assert_array_equal(batch.deltas, want_delta.numpy()[:, 0])
        for kwargs in ({"mm_token_type_ids": types}, {}):  # 5.x type ids, and the placeholder-id scan
            got, delta = mrope.get_rope_index(
                ids, images, videos, mask, model=family, convention="transformers5", **kwargs
            )
            np.testing.assert_array_equal(got.numpy(), want.numpy())
            np.testing.assert_array_equal(delta.numpy(), want_delta.numpy())


# ------------------------------------------------------------------- the processors' text and ids
#
# build_positions from segments against the family's own 5.24 processor: its text expansion, tokenisation,
# mm_token_type_ids and grids run for real, with its Pillow image processor (released values) on images
# made here and a tokenizer built with ``tokenizers`` that carries the family's special tokens at their
# ids. Video processors need torchvision, which cannot be imported here (its wheel is built against the
# CUDA build of torch, not the CPU build installed here): a stand-in (``_VideoSide``) hands the processor
# the grid and ``VideoMetadata`` (native fps, sampled frame indices) of a video whose sampling is given,
# and mrope gets the same video as ``Video(grid, fps, frame_times)``.

QWEN_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
GLM_TOKENS = ("<|begin_of_image|>", "<|end_of_image|>", "<|image|>", "<|begin_of_video|>", "<|end_of_video|>")


def _qwen3_image():
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    # Qwen3-VL's released preprocessor_config.json
    return Qwen2VLImageProcessorPil(
        size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, merge_size=2
    )


def _pil(module: str, cls: str, **kwargs):
    mod = importlib.import_module(f"transformers.models.{module}.image_processing_pil_{module}")
    return lambda: getattr(mod, cls)(**kwargs)


# family -> (processor module, processor class, image processor factory, token strings -> ids, prompt
# placeholders (image, video)); ids are the family's released ones (the token ids of its 5.24
# configuration_<family>.py, e.g. models/qwen3_5/configuration_qwen3_5.py:179-182), written out here
_QWEN3_5_IDS = dict(zip(QWEN_TOKENS, (248053, 248054, 248056, 248057), strict=True))
_QWEN_IDS = dict(zip(QWEN_TOKENS, (151652, 151653, 151655, 151656), strict=True))
_QWEN_PH = ("<|vision_start|><|image_pad|><|vision_end|>", "<|video_pad|>")
_GLM_PH = ("<|begin_of_image|><|image|><|end_of_image|>", "<|begin_of_video|><|video|><|end_of_video|>")
PROCESSORS = {
    "qwen3-vl-moe": ("qwen3_vl", "Qwen3VLProcessor", _qwen3_image, _QWEN_IDS, _QWEN_PH),
    "cosmos3-omni": ("qwen3_vl", "Qwen3VLProcessor", _qwen3_image, _QWEN_IDS, _QWEN_PH),
    "qwen3.5": ("qwen3_vl", "Qwen3VLProcessor", _qwen3_image, _QWEN3_5_IDS, _QWEN_PH),
    "qwen3.5-moe": ("qwen3_vl", "Qwen3VLProcessor", _qwen3_image, _QWEN3_5_IDS, _QWEN_PH),
    "qwen4-exp": ("qwen3_vl", "Qwen3VLProcessor", _qwen3_image, _QWEN3_5_IDS, _QWEN_PH),
    "cosmos3-edge": (
        "cosmos3_edge",
        "Cosmos3EdgeProcessor",
        _pil("cosmos3_edge", "Cosmos3EdgeImageProcessorPil"),  # class defaults: 256^2..4096^2, patch 16
        dict(zip(QWEN_TOKENS, (20, 21, 19, 18), strict=True)),
        ("<|vision_start|><|image_pad|><|vision_end|>", "<|vision_start|><|video_pad|><|vision_end|>"),
    ),
    # no released North-Micro-Vision preprocessor values were available offline (the class default has
    # patch 14, the vision tower 16): the processor gets the registry's patch 16 and Qwen3-VL bounds
    "cohere-compass": (
        "cohere_compass",
        "CohereCompassProcessor",
        _pil(
            "cohere_compass",
            "CohereCompassImageProcessorPil",
            size={"shortest_edge": 65536, "longest_edge": 16777216},
            patch_size=16,
        ),
        dict(
            zip(
                ("<|VISION_START|>", "<|VISION_END|>", "<|IMAGE_PAD|>", "<|VIDEO_PAD|>"),
                (255028, 255029, 255031, 255032),
                strict=True,
            )
        ),
        ("<|VISION_START|><|IMAGE_PAD|><|VISION_END|>", "<|VIDEO_PAD|>"),
    ),
    "glm-4.5v": (
        "glm4v",
        "Glm4vProcessor",
        _pil("glm4v", "Glm4vImageProcessorPil"),
        {**dict(zip(GLM_TOKENS, (151339, 151340, 151363, 151341, 151342), strict=True)), "<|video|>": 151364},
        _GLM_PH,
    ),
    "glm-4.6v": (
        "glm46v",
        "Glm46VProcessor",
        _pil("glm46v", "Glm46VImageProcessorPil"),
        {**dict(zip(GLM_TOKENS, (151339, 151340, 151343, 151361, 151362), strict=True)), "<|video|>": 151344},
        _GLM_PH,
    ),
    "glm-ocr": (
        "glm4v",
        "Glm4vProcessor",
        _pil("glm4v", "Glm4vImageProcessorPil"),
        {**dict(zip(GLM_TOKENS, (59256, 59257, 59280, 59258, 59259), strict=True)), "<|video|>": 59281},
        _GLM_PH,
    ),
    "paddleocr-vl": (
        "paddleocr_vl",
        "PaddleOCRVLProcessor",
        _pil("paddleocr_vl", "PaddleOCRVLImageProcessorPil"),  # class defaults: 384^2..1536^2, patch 14
        {"<|IMAGE_START|>": 101305, "<|IMAGE_END|>": 101306, "<|IMAGE_PLACEHOLDER|>": 100295},
        ("<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>", None),
    ),
}


class _VideoSide:
    """Stands in for the torchvision-only video processor: the grid and metadata of a given sampling."""

    def __init__(self, patch_size: int, temporal_patch_size: int, sampling: dict) -> None:
        self.patch_size, self.merge_size, self.temporal_patch_size = patch_size, 2, temporal_patch_size
        self.sampling = sampling  # video name -> (frames, native fps, sampled indices, (h, w) resized)

    def __call__(self, videos, **kwargs):
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import VideoMetadata

        grids, metas = [], []
        for name in videos:
            total, native_fps, indices, (h, w) = self.sampling[name]
            t = -(-len(indices) // self.temporal_patch_size)
            grids.append([t, h // self.patch_size, w // self.patch_size])
            metas.append(VideoMetadata(total_num_frames=total, fps=native_fps, frames_indices=list(indices)))
        return BatchFeature({"video_grid_thw": torch.tensor(grids), "video_metadata": metas})


def _char_tokenizer(specials: dict[str, int]):
    import string

    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: 1000 + i for i, c in enumerate(string.printable)}  # clear of every family's specials
    vocab["[UNK]"] = 999
    vocab.update(specials)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens(list(specials))
    return tok


@pytest.mark.parametrize("family", list(PROCESSORS))
def test_build_positions_gives_what_the_processor_and_model_give(family: str, monkeypatch) -> None:
    from PIL import Image as PILImage
    from transformers import PreTrainedTokenizerFast
    from transformers.processing_utils import ProcessorMixin

    module, cls_name, image_factory, specials, (image_ph, video_ph) = PROCESSORS[family]
    rules = get_family(family).rules
    tok = _char_tokenizer(specials)
    extra = {"image_token": "<|IMAGE_PLACEHOLDER|>"} if family == "paddleocr-vl" else {}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", extra_special_tokens=extra)
    original = ProcessorMixin.check_argument_for_proper_class

    def check(self, name, argument):  # the one class transformers cannot name without torchvision
        return type(argument) if name == "video_processor" else original(self, name, argument)

    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", check)
    processor_cls = getattr(
        importlib.import_module(f"transformers.models.{module}.processing_{module}"), cls_name
    )
    sampling: dict = {}
    kwargs = {}
    if video_ph is not None:
        kwargs["video_processor"] = _VideoSide(rules.patch_size, rules.temporal_patch_size, sampling)
    processor = processor_cls(image_processor=image_factory(), tokenizer=fast, **kwargs)

    photos = [PILImage.new("RGB", (640, 480)), PILImage.new("RGB", (300, 900))]
    texts = ["Look: ", " and ", ". Now ", " ok?"]
    prompt = texts[0] + image_ph + texts[1] + image_ph + texts[2]
    segments = [Text(tok.encode(texts[0]).ids), load_image_for(photos[0], family)]
    segments += [
        Text(tok.encode(texts[1]).ids),
        load_image_for(photos[1], family),
        Text(tok.encode(texts[2]).ids),
    ]
    call = {"images": photos}
    if video_ph is not None:
        # 40 frames at 10 fps, sampled every 5th: 2 fps; 6 frames of 64 x 96 px (already on the grid)
        indices = [0, 5, 10, 15, 20, 25]
        side = 2 * rules.patch_size
        video = Video(
            grid=(
                -(-len(indices) // rules.temporal_patch_size),
                4 * side // rules.patch_size,
                6 * side // rules.patch_size,
            ),
            fps=2.0,
            frame_times=tuple(i / 10 for i in indices),
        )
        prompt += video_ph
        segments.append(video)
        sampling["clip.mp4"] = (40, 10.0, indices, (4 * side, 6 * side))
        call["videos"] = ["clip.mp4"]
    prompt += texts[3]
    segments.append(Text(tok.encode(texts[3]).ids))
    # Cosmos3EdgeProcessor lists mm_token_type_ids among its outputs but does not turn them on by default
    out = processor(text=[prompt], return_tensors="pt", return_mm_token_type_ids=True, **call)
    ours = mrope.build_positions(segments, model=family, tokenizer=tok, convention="transformers5")

    np.testing.assert_array_equal(ours.input_ids, out["input_ids"][0].numpy())
    np.testing.assert_array_equal(ours.mm_token_type_ids, out["mm_token_type_ids"][0].numpy())
    np.testing.assert_array_equal(ours.image_grid_thw, out["image_grid_thw"].numpy())
    videos = out.get("video_grid_thw")
    np.testing.assert_array_equal(ours.video_grid_thw, np.zeros((0, 3)) if videos is None else videos.numpy())
    want, delta = _hf(family).get_rope_index(
        out["input_ids"],
        out["mm_token_type_ids"],
        out["image_grid_thw"],
        None if videos is None else videos.clone(),
        attention_mask=out["attention_mask"],
    )
    np.testing.assert_array_equal(ours.ids, want[:, 0].numpy())
    assert ours.delta == int(delta[0, 0])


def load_image_for(photo, family: str):
    from mrope.media import load_image

    return load_image(photo, model=family)


# ------------------------------------------------------------------- GLM-4.6V's dynamic-fps sampling


def _glm46v_sample_frames():
    """5.24's ``Glm46VVideoProcessor.sample_frames``, compiled from its source file: the module imports
    torchvision at the top, which cannot be imported here (its wheel needs the CUDA build of torch); the
    method itself needs only numpy and the processor's ``temporal_patch_size`` (2)."""
    import ast
    import inspect
    import math
    import types

    import transformers.models.glm46v as package

    path = Path(inspect.getfile(package)).parent / "video_processing_glm46v.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Glm46VVideoProcessor")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "sample_frames")
    method.decorator_list = []
    namespace = {"np": np, "math": math, "VideoMetadata": object}
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), namespace)
    processor = types.SimpleNamespace(temporal_patch_size=2)
    return functools.partial(namespace["sample_frames"], processor)


@pytest.mark.parametrize(
    ("frames", "fps"),
    [(30, 30.0), (300, 30.0), (901, 30.0), (2500, 25.0), (9000, 30.0), (4000, 2.0), (10, 4.0), (7, 1.0)],
)
def test_glm46v_samples_the_frames_its_video_processor_samples(frames: int, fps: float) -> None:
    from transformers.video_utils import VideoMetadata

    from mrope.media import load_video
    from mrope.media._sampling import glm46v_frame_indices

    # what transformers' PyAV reader reports: duration = frames / fps
    metadata = VideoMetadata(total_num_frames=frames, fps=fps, duration=frames / fps)
    want = _glm46v_sample_frames()(metadata).tolist()
    assert glm46v_frame_indices(frames, fps).tolist() == want
    info = mrope.media.VideoInfo(fps=fps, num_frames=frames, duration=frames / fps, width=640, height=480)
    video = load_video(info, model="glm-4.6v")
    assert len(video.frame_times) == len(want)
    np.testing.assert_allclose(video.frame_times, np.asarray(want) / fps)
