"""End-to-end parity with the installed transformers' own processors and get_rope_index (5.24 and 5.25).

For qwen2-vl, qwen2.5-vl, qwen3-vl and glm-4.1v: real image and video files are made here (several sizes,
an EXIF-rotated JPEG, videos at several frame rates including 1.2 fps, one of the float32 time cases), run
through the family's transformers processor (its Pillow image processor with the released checkpoint's
values, and a tokenizer built with ``tokenizers`` that carries the family's special tokens at their real
ids), and then through the family's own ``get_rope_index`` (the method on a minimal object). mrope's
``load_image`` / ``load_video`` + ``build_positions`` on the same files must give the same input_ids,
mm_token_type_ids, image_grid_thw, video_grid_thw, second_per_grid_ts, positions and delta.

What is not the real transformers code, and why:
- Video processors need torchvision, which cannot be imported here (its wheel is built against the CUDA
  build of torch, not the CPU build installed here): transformers does not even export the class the
  combined processor checks its video processor against. The test relaxes
  that one class check and gives the combined processor a stand-in video processor (``VideoSide``) that
  returns the grid and ``VideoMetadata`` a released video processor returns; pixels are never needed. The
  combined processor's own text expansion, tokenisation, ``mm_token_type_ids`` and (Qwen2.5-VL)
  ``second_per_grid_ts`` then run for real. Frame metadata is read by transformers' own PyAV reader
  (``read_video_pyav``). For Qwen3-VL and GLM-4.1V the frames are sampled by the real video processor's
  ``sample_frames`` and sized by the real module's ``smart_resize`` (both run without torchvision). For
  Qwen2-VL and Qwen2.5-VL, the released folders' Qwen2VLVideoProcessor keeps every frame and sizes each by
  the image bounds of ``preprocessor_config.json`` (mrope's default route, ``"processor"``): its rule is
  written out here (``qwen2_vl_video``; the model cards' qwen-vl-utils recipe is tests/media/test_routes.py's).
- Positions are compared under ``convention="transformers5"``: 5.24's get_rope_index resumes after a block
  at ``s + max(H', W')`` (the released code: max + 1) and groups video time as ``i * (tps * spg)`` (equal
  to the release's ``(i * spg) * tps`` at the released ``tokens_per_second`` 2). The released convention is
  checked too: the same positions for qwen2-vl, qwen3-vl and glm-4.1v here; for qwen2.5-vl the 1.2 fps
  video's time extent passes max(H', W'), so the released max + 1 resumes later, as it should.
"""

from __future__ import annotations

import functools
import importlib
import math
import string
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

from support.hf_reference import released_video_processor  # noqa: E402
from support.media import write_image, write_video  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from transformers.feature_extraction_utils import BatchFeature  # noqa: E402
from transformers.processing_utils import ProcessorMixin  # noqa: E402
from transformers.video_utils import read_video_pyav  # noqa: E402

from mrope import Text, Video, build_positions, get_rope_index  # noqa: E402
from mrope.media import load_image, load_video  # noqa: E402

QWEN_SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
}
GLM_SPECIALS = {
    "<|endoftext|>": 151329,
    "[gMASK]": 151331,
    "<sop>": 151333,
    "<|user|>": 151336,
    "<|assistant|>": 151337,
    "<|begin_of_image|>": 151339,
    "<|end_of_image|>": 151340,
    "<|begin_of_video|>": 151341,
    "<|end_of_video|>": 151342,
    "<|image|>": 151343,
    "<|video|>": 151344,
}

# (width, height, EXIF orientation) of the test images: landscape, the 1280 x 853 photo, a phone
# photo stored landscape and shown portrait (orientation 6), and a tiny one the lower bound scales up
IMAGES = [(1000, 750, None), (1280, 853, None), (640, 480, 6), (40, 30, None)]
# (frames, fps, width, height) of the test videos: 1.2 fps is one of the rates where float32 time differs
# from float64; 105 frames at 30 fps sample 7 frames in transformers' Qwen3-VL processor and 6 in
# qwen-vl-utils; 16 x 16 frames are scaled up differently when the lower bound holds for the clip
VIDEOS = [(12, Fraction(6, 5), 96, 64), (25, Fraction(25, 2), 96, 64), (105, 30, 96, 64), (8, 4, 16, 16)]


def char_tokenizer(specials: dict[str, int]) -> Tokenizer:
    """One token per printable character, plus the family's special tokens at their released ids."""
    vocab = {c: i for i, c in enumerate(string.printable)}
    vocab["[UNK]"] = len(vocab)
    vocab.update(specials)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.add_special_tokens(list(specials))
    return tok


# ------------------------------------------------------------------------------------- video side


def qwen2_vl_video(metadata, patch_size: int = 14, merge_size: int = 2):
    """transformers 5.24's Qwen2VLVideoProcessor as the released Qwen2-VL / Qwen2.5-VL folders configure it
    (built from ``preprocessor_config.json``), written out from video_processing_qwen2_vl.py:
    ``do_sample_frames`` off (:130), so every frame the reader returns; ``cap_pixels_per_frame`` unset
    (:342), so each frame by ``smart_resize`` within the file's ``min_pixels`` / ``max_pixels`` 3136 ..
    12845056 (:143-151, :253-270) and no clip budget."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = patch_size * merge_size
    indices = list(range(metadata.total_num_frames))
    h, w = smart_resize(metadata.height, metadata.width, factor=factor, min_pixels=3136, max_pixels=12845056)
    return indices, (h, w)


class VideoSide:
    """Stands in for the torchvision-only video processor (see the module docstring): returns the
    ``video_grid_thw`` and ``VideoMetadata`` the released video processor returns."""

    def __init__(self, family: str) -> None:
        self.family = family
        self.merge_size, self.temporal_patch_size = 2, 2
        self.real = None
        if family in ("qwen3-vl", "glm-4.1v"):  # the released video_preprocessor_config.json
            self.real = released_video_processor(family)
        self.module = importlib.import_module(type(self.real).__module__) if self.real is not None else None
        self.patch_size = 14 if self.real is None else self.real.patch_size

    def sizing(self, path: str):
        if self.real is None:
            _, metadata = read_video_pyav(path, sample_indices_fn=lambda metadata, **kw: [0])
            indices, (h, w) = qwen2_vl_video(metadata)
            metadata.frames_indices = indices
            return metadata, len(indices), h, w
        frames, metadata = read_video_pyav(path, sample_indices_fn=self.real.sample_frames)
        n = len(metadata.frames_indices)
        size = self.real.size
        h, w = self.module.smart_resize(
            num_frames=n,
            height=frames.shape[1],
            width=frames.shape[2],
            temporal_factor=self.temporal_patch_size,
            factor=self.real.patch_size * self.real.merge_size,
            min_pixels=size.shortest_edge,
            max_pixels=size.longest_edge,
        )
        return metadata, n, h, w

    def __call__(self, videos, **kwargs) -> BatchFeature:
        grids, metas = [], []
        for path in videos:
            metadata, n, h, w = self.sizing(str(path))
            grids.append(
                [math.ceil(n / self.temporal_patch_size), h // self.patch_size, w // self.patch_size]
            )
            metas.append(metadata)
        return BatchFeature({"video_grid_thw": torch.tensor(grids), "video_metadata": metas})


# ------------------------------------------------------------------------------------- processors


def build_processor(family: str, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch):
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")
    original = ProcessorMixin.check_argument_for_proper_class

    def check(self, name, argument):
        if name == "video_processor":  # the one class transformers cannot name without torchvision
            return type(argument)
        return original(self, name, argument)

    monkeypatch.setattr(ProcessorMixin, "check_argument_for_proper_class", check)
    if family in ("qwen2-vl", "qwen2.5-vl", "qwen3-vl"):
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        if family == "qwen3-vl":
            from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor as cls

            # preprocessor_config.json of the released Qwen3-VL checkpoints
            image = Qwen2VLImageProcessorPil(
                size={"shortest_edge": 65536, "longest_edge": 16777216}, patch_size=16, merge_size=2
            )
        else:
            if family == "qwen2-vl":
                from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor as cls
            else:
                from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor as cls
            # preprocessor_config.json of the released Qwen2-VL / Qwen2.5-VL checkpoints
            image = Qwen2VLImageProcessorPil(
                size={"shortest_edge": 3136, "longest_edge": 12845056}, patch_size=14, merge_size=2
            )
    else:
        from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
        from transformers.models.glm4v.processing_glm4v import Glm4vProcessor as cls

        image = Glm4vImageProcessorPil()
    return cls(image_processor=image, tokenizer=fast, video_processor=VideoSide(family))


def hf_rope_index(family: str):
    from transformers.models.glm4v.modeling_glm4v import Glm4vModel
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    cls = {
        "qwen2-vl": Qwen2VLModel,
        "qwen2.5-vl": Qwen2_5_VLModel,
        "qwen3-vl": Qwen3VLModel,
        "glm-4.1v": Glm4vModel,
    }
    model = SimpleNamespace(
        # released config.json: spatial_merge_size 2, tokens_per_second 2 (Qwen2.5-VL)
        config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2, tokens_per_second=2))
    )
    model.get_vision_position_ids = functools.partial(cls[family].get_vision_position_ids, model)
    return functools.partial(cls[family].get_rope_index, model)


PLACEHOLDERS = {
    "qwen2-vl": (
        "<|vision_start|><|image_pad|><|vision_end|>",
        "<|vision_start|><|video_pad|><|vision_end|>",
    ),
    "qwen2.5-vl": (
        "<|vision_start|><|image_pad|><|vision_end|>",
        "<|vision_start|><|video_pad|><|vision_end|>",
    ),
    # 5.24's Qwen3VLProcessor writes every frame's own vision_start / vision_end around the bare video token
    "qwen3-vl": ("<|vision_start|><|image_pad|><|vision_end|>", "<|video_pad|>"),
    "glm-4.1v": (
        "<|begin_of_image|><|image|><|end_of_image|>",
        "<|begin_of_video|><|video|><|end_of_video|>",
    ),
}


@pytest.fixture(scope="module")
def media_files(tmp_path_factory) -> tuple[list[Path], list[Path]]:
    root = tmp_path_factory.mktemp("parity")
    images = [write_image(root / f"img{k}.jpg", w, h, orientation=o) for k, (w, h, o) in enumerate(IMAGES)]
    videos = [
        write_video(root / f"vid{k}.mp4", num_frames=n, fps=fps, width=w, height=h)
        for k, (n, fps, w, h) in enumerate(VIDEOS)
    ]
    return images, videos


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_processor_and_model_equal_mrope(family: str, media_files, monkeypatch) -> None:
    images, videos = media_files
    specials = GLM_SPECIALS if family == "glm-4.1v" else QWEN_SPECIALS
    tok = char_tokenizer(specials)
    processor = build_processor(family, tok, monkeypatch)
    image_ph, video_ph = PLACEHOLDERS[family]

    # one prompt: text, every image, text, every video, text
    texts = ["Look: ", *[" and " for _ in images[1:]], ". Now ", *[" then " for _ in videos[1:]], " ok?"]
    pieces: list[str] = [texts[0]]
    segments: list = [Text(tok.encode(texts[0]).ids)]
    for k, path in enumerate(images):
        pieces.append(image_ph)
        segments.append(load_image(path, model=family))
        text = texts[1 + k]
        pieces.append(text)
        segments.append(Text(tok.encode(text).ids))
    for k, path in enumerate(videos):
        pieces.append(video_ph)
        segments.append(load_video(path, model=family))
        text = texts[len(images) + 1 + k]
        pieces.append(text)
        segments.append(Text(tok.encode(text).ids))

    out = processor(
        text=["".join(pieces)],
        images=[str(p) for p in images],
        videos=[str(p) for p in videos],
        return_tensors="pt",
    )
    ours = build_positions(segments, model=family, tokenizer=tok, convention="transformers5")

    # what the processor hands the model
    np.testing.assert_array_equal(ours.input_ids, out["input_ids"][0].numpy())
    np.testing.assert_array_equal(ours.mm_token_type_ids, out["mm_token_type_ids"][0].numpy())
    np.testing.assert_array_equal(ours.image_grid_thw, out["image_grid_thw"].numpy())
    np.testing.assert_array_equal(ours.video_grid_thw, out["video_grid_thw"].numpy())
    if family == "qwen2.5-vl":
        spg = out["second_per_grid_ts"]
        assert spg.dtype == torch.float32
        np.testing.assert_array_equal(ours.second_per_grid_ts.astype(np.float32), spg.numpy())
        assert abs(float(spg[0]) - 2 / 1.2) < 1e-6  # the 1.2 fps video is sampled at its own rate
    else:
        spg = None

    # the family's own get_rope_index on the processor's output
    kwargs = {"second_per_grid_ts": spg} if spg is not None else {}
    hf_pos, hf_delta = hf_rope_index(family)(
        out["input_ids"],
        out["mm_token_type_ids"],
        out["image_grid_thw"],
        out["video_grid_thw"].clone(),
        attention_mask=out["attention_mask"],
        **kwargs,
    )
    np.testing.assert_array_equal(ours.ids, hf_pos[:, 0].numpy())
    assert ours.delta == int(hf_delta[0, 0])
    # mrope's token interface on the same processor output
    pos, delta = get_rope_index(
        out["input_ids"],
        out["image_grid_thw"],
        out["video_grid_thw"],
        out["attention_mask"],
        model=family,
        convention="transformers5",
        second_per_grid_ts=spg,
        mm_token_type_ids=out["mm_token_type_ids"],
    )
    np.testing.assert_array_equal(pos.numpy(), hf_pos.numpy())
    assert delta.tolist() == hf_delta.tolist()
    # and its token scan (no mm_token_type_ids): GLM-4.1V's image-id runs inside the video wrapper are video
    scanned, _ = get_rope_index(
        out["input_ids"],
        out["image_grid_thw"],
        out["video_grid_thw"],
        out["attention_mask"],
        model=family,
        convention="transformers5",
        second_per_grid_ts=spg,
    )
    np.testing.assert_array_equal(scanned.numpy(), hf_pos.numpy())
    released = build_positions(segments, model=family, tokenizer=tok)
    if family in ("qwen2-vl", "qwen2.5-vl"):
        # a video's time runs past max(H', W') (Qwen2.5-VL's 1.2 fps one to t = trunc(5 * 1.6667 * 2) = 16;
        # every frame kept, Qwen2-VL's 105-frame one to T' - 1 = 52): the released max + 1 resumes the
        # text later than 5.x's s + max(H', W')
        extents = [
            (int(released.ids[0, v.start : v.stop].max() - released.ids[0, v.start]), max(v.grid[1:]))
            for v in released.spans
            if v.kind == "video"
        ]
        assert any(t > hw for t, hw in extents) and released.delta > ours.delta
    else:
        # no temporal extent past max(H', W') (Qwen3-VL / GLM split videos into frames): the released
        # convention gives the same positions
        np.testing.assert_array_equal(released.ids, ours.ids)


def test_qwen3_vl_chat_template_video_wrapper(media_files, monkeypatch) -> None:
    """Qwen3-VL's chat template writes a video as ``<|vision_start|><|video_pad|><|vision_end|>``. mrope's
    chat path replaces that whole wrapper by the video (``template_segments``), every frame of which
    carries its own vision start / end. transformers 5.25's Qwen3VLProcessor does the same
    (``get_text_with_replacements``, processing_qwen3_vl.py:180-208, collapses the wrapper to the bare video
    token first); 5.24's (processing_qwen3_vl.py, no such method) expands the video token only and keeps
    the outer pair: one vision start before the video's first time text and one vision end after it."""
    import transformers

    _, videos = media_files
    tok = char_tokenizer(QWEN_SPECIALS)
    processor = build_processor("qwen3-vl", tok, monkeypatch)
    wrapper = "<|vision_start|><|video_pad|><|vision_end|>"
    out = processor(text=[f"See {wrapper} ok"], videos=[str(videos[0])], return_tensors="pt")
    video = load_video(videos[0], model="qwen3-vl")
    head, tail = Text(tok.encode("See ").ids), Text(tok.encode(" ok").ids)
    release = tuple(int(part) for part in transformers.__version__.split(".")[:2])
    if release >= (5, 25):
        segments = [head, video, tail]
    else:
        start, end = QWEN_SPECIALS["<|vision_start|>"], QWEN_SPECIALS["<|vision_end|>"]
        segments = [head, Text([start]), video, Text([end]), tail]
    ours = build_positions(segments, model="qwen3-vl", tokenizer=tok)
    np.testing.assert_array_equal(ours.input_ids, out["input_ids"][0].numpy())


def test_glm_video_frames_carry_the_image_id(monkeypatch) -> None:
    """Glm4vProcessor's own text expansion given ``video_grid_thw`` (1, 4, 4)."""
    from transformers.video_utils import VideoMetadata

    tok = char_tokenizer(GLM_SPECIALS)
    processor = build_processor("glm-4.1v", tok, monkeypatch)
    video = {
        "video_grid_thw": torch.tensor([[1, 4, 4]]),
        "video_metadata": [VideoMetadata(total_num_frames=2, fps=2.0, frames_indices=[0, 1])],
    }
    replacement = processor.replace_video_token(video, video_idx=0)
    text, _ = processor.get_text_with_replacements(
        ["<|begin_of_video|><|video|><|end_of_video|>"], [], [replacement]
    )
    ids = tok.encode(text[0]).ids
    types = processor.create_mm_token_type_ids([ids])[0]
    p = build_positions([Video(grid=(1, 4, 4), fps=2.0)], model="glm-4.1v", tokenizer=tok)
    assert p.input_ids.tolist() == ids
    assert p.mm_token_type_ids.tolist() == types
    assert ids.count(GLM_SPECIALS["<|image|>"]) == 4 and GLM_SPECIALS["<|video|>"] not in ids
    assert types.count(2) == 4
