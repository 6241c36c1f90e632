"""mrope.from_pretrained: checkpoint folders written here with released values (no hub is reachable).

Expected values: transformers' own image processor reading the same folder (AutoImageProcessor), the
family's own rotary through mrope.models.spec_from_config's tests, and hand derivations of the position and
time rules (docs/conventions.md, "Building positions").
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image as PILImage
from support.checkpoints import (
    QWEN2_5_VL_PREPROCESSOR,
    QWEN3_VL_CONFIG,
    QWEN3_VL_VIDEO_PREPROCESSOR,
    qwen2_5_vl_config,
)
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope import LayoutError, SpecError, Text, Video
from mrope.media import load_image, load_video
from mrope.models import ModelFamily, get_family

QWEN2_5_CONFIG = qwen2_5_vl_config(  # the released fields plus ones mrope ignores
    architectures=["Qwen2_5_VLForConditionalGeneration"], torch_dtype="bfloat16"
)
QWEN2_5_PREPROCESSOR = QWEN2_5_VL_PREPROCESSOR
QWEN3_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "size": {"shortest_edge": 65536, "longest_edge": 16777216},
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
}


def _write(folder: Path, **files: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / f"{name}.json").write_text(json.dumps(data))
    return folder


def _char_tokenizer() -> Tokenizer:
    vocab = {c: i for i, c in enumerate("<>.0123456789 secondsUNK")}
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    return tok


@pytest.mark.parametrize("unified", [False, True])
def test_qwen2_5_folder_sizes_images_like_its_own_processor(tmp_path: Path, unified: bool) -> None:
    """Also in the layout transformers 5.x save_pretrained writes: the processors nested in
    processor_config.json, which transformers reads before a preprocessor_config.json (here a stale one)."""
    from transformers import AutoImageProcessor

    files = {"preprocessor_config": QWEN2_5_PREPROCESSOR}
    if unified:
        stale = {**QWEN2_5_PREPROCESSOR, "min_pixels": 56 * 56, "max_pixels": 28 * 28 * 1280}
        files = {"preprocessor_config": stale, "processor_config": {"image_processor": QWEN2_5_PREPROCESSOR}}
    folder = _write(tmp_path / "ckpt", config=QWEN2_5_CONFIG, **files)
    model = mrope.from_pretrained(folder)
    assert isinstance(model, ModelFamily) and model.name == "qwen2.5-vl" and model.source == str(folder)
    assert (model.rules.image_min_pixels, model.rules.image_max_pixels) == (3136, 12845056)
    assert model.spec == mrope.models.get_family("qwen2.5-vl").spec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        processor = AutoImageProcessor.from_pretrained(str(folder))
    for size in [(1280, 853), (640, 480), (31, 200), (4000, 3000)]:
        photo = PILImage.new("RGB", size)
        want = processor(images=[photo], return_tensors="np")["image_grid_thw"][0].tolist()
        assert list(load_image(photo, model=model).grid) == want, size
    # the checkpoint's bounds are what differ from a bare class default (1380 vs 1247 tokens: hand
    # derivation with transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py:63 smart_resize)
    grid = load_image(PILImage.new("RGB", (1280, 853)), model=model).grid
    assert grid[1] * grid[2] // 4 == 1380


def test_the_description_works_everywhere_model_is_taken(tmp_path: Path) -> None:
    folder = _write(tmp_path / "ckpt", config=QWEN2_5_CONFIG, preprocessor_config=QWEN2_5_PREPROCESSOR)
    model = mrope.from_pretrained(folder)
    segs = [Text(3), mrope.Image(grid=(1, 4, 6)), Text(2), Video(grid=(4, 4, 4), fps=1.0)]
    p = mrope.build_positions(segs, model=model)
    np.testing.assert_array_equal(p.ids, mrope.build_positions(segs, model="qwen2.5-vl").ids)
    batch = mrope.build_batch([segs, segs[:1]], model=model)
    pos, deltas = mrope.get_rope_index(
        batch.input_ids,
        p.image_grid_thw,
        np.concatenate([p.video_grid_thw]),
        batch.attention_mask,
        model=model,
        second_per_grid_ts=p.second_per_grid_ts,
    )
    np.testing.assert_array_equal(pos[:, 0], batch.ids[:, 0])
    assert mrope.count_tokens(segs, model=model) == p.num_tokens
    q = torch.randn(p.num_tokens, 2, 128)
    got = mrope.apply_mrope(q, q, torch.from_numpy(p.ids), model, backend="torch")
    want = mrope.apply_mrope(q, q, torch.from_numpy(p.ids), model.spec, backend="torch")
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    info = mrope.media.VideoInfo(fps=30.0, num_frames=120, duration=4.0, width=640, height=360)
    assert load_video(info, model=model).grid == load_video(info, model="qwen2.5-vl").grid


def test_tokens_per_second_of_a_fine_tune(tmp_path: Path) -> None:
    config = json.loads(json.dumps(QWEN2_5_CONFIG))
    config["vision_config"]["tokens_per_second"] = 4
    model = mrope.from_pretrained(_write(tmp_path / "ckpt", config=config))
    assert model.rules.tokens_per_second == 4
    # hand derivation: 4 temporal patches of 1 s each, tau(i) = trunc(i * 1.0 * 4)
    p = mrope.build_positions([Video(grid=(4, 2, 2), second_per_grid=1.0, wrap=False)], model=model)
    assert p.ids[0].tolist() == [0, 4, 8, 12]


def test_qwen3_folder_with_tokenizer_and_video_processor(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "ckpt",
        config=QWEN3_VL_CONFIG,
        preprocessor_config=QWEN3_PREPROCESSOR,
        video_preprocessor_config=QWEN3_VL_VIDEO_PREPROCESSOR,
    )
    tok = _char_tokenizer()
    tok.save(str(folder / "tokenizer.json"))
    model = mrope.from_pretrained(folder)
    assert model.name == "qwen3-vl" and model.spec == mrope.models.get_family("qwen3-vl").spec
    r = model.rules
    assert (r.patch_size, r.image_min_pixels, r.image_max_pixels) == (16, 65536, 16777216)
    assert (r.video_min_pixels, r.video_total_pixels, r.fps, r.min_frames, r.max_frames) == (
        4096,
        25165824,
        2.0,
        4,
        768,
    )
    # timestamp text comes from the folder's tokenizer when the call passes none
    video = Video(grid=(2, 4, 4), fps=2.0)
    mine = mrope.build_positions([Text(1), video], model=model)
    explicit = mrope.build_positions([Text(1), video], model="qwen3-vl", tokenizer=tok)
    np.testing.assert_array_equal(mine.ids, explicit.ids)
    np.testing.assert_array_equal(mine.input_ids, explicit.input_ids)
    stamps = [s for s in mine.spans if s.kind == "timestamp"]
    assert [s.stop - s.start for s in stamps] == [len("<0.2 seconds>"), len("<1.2 seconds>")]


def test_glm46v_rules_are_the_top_level_family(tmp_path: Path) -> None:
    config = {
        "model_type": "glm46v",
        "image_start_token_id": 151339,
        "image_end_token_id": 151340,
        "video_start_token_id": 151361,
        "video_end_token_id": 151362,
        "image_token_id": 151343,
        "video_token_id": 151344,
        "text_config": {
            "model_type": "glm4v_text",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "head_dim": 128,
            "partial_rotary_factor": 0.5,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000, "mrope_section": [8, 12, 12]},
        },
    }
    model = mrope.from_pretrained(config)
    assert model.name == "glm-4.6v" and model.source == "config dict"
    assert (model.rules.video_start_id, model.rules.timestamp_format) == (151361, "{:.1f} seconds")
    assert model.rules.video_pad_id == 151343  # frames carry the image id
    assert model.spec.pairing == "gptj"


def test_contradictions_are_errors_and_unknown_keys_are_ignored(tmp_path: Path) -> None:
    bad = {**QWEN3_PREPROCESSOR, "patch_size": 14, "brand_new_key": {"x": 1}}
    folder = _write(
        tmp_path / "a", config={**QWEN3_VL_CONFIG, "some_future_field": 3}, preprocessor_config=bad
    )
    with pytest.raises(LayoutError, match="contradicts itself.*patch_size.*16.*14"):
        mrope.from_pretrained(folder)
    two = json.loads(json.dumps(QWEN2_5_CONFIG))
    two["position_id_per_seconds"] = 25
    with pytest.raises(LayoutError, match="tokens_per_second"):
        mrope.from_pretrained(two)
    ok = _write(
        tmp_path / "b",
        config={**QWEN3_VL_CONFIG, "some_future_field": 3},
        preprocessor_config={**QWEN3_PREPROCESSOR, "brand_new_key": 1},
        video_preprocessor_config=QWEN3_VL_VIDEO_PREPROCESSOR,
    )
    assert mrope.from_pretrained(ok).rules == get_family("qwen3-vl").rules  # the released values


def test_bad_checkpoints(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no checkpoint at"):
        mrope.from_pretrained(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SpecError, match="no config.json"):
        mrope.from_pretrained(tmp_path / "empty")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        mrope.from_pretrained(tmp_path / "broken")
    odd = _write(tmp_path / "odd", config=QWEN2_5_CONFIG, processor_config={"image_processor": [3]})
    with pytest.raises(SpecError, match="processor_config.json image_processor must be a JSON object"):
        mrope.from_pretrained(odd)
    with pytest.raises(SpecError, match="not a registered M-RoPE family"):
        mrope.from_pretrained({"model_type": "llama", "head_dim": 128})
    llama_like = {"model_type": "my_vlm", **{k: v for k, v in QWEN2_5_CONFIG.items() if k != "model_type"}}
    assert mrope.from_pretrained(llama_like, family="qwen2.5-vl").rules.tokens_per_second == 2
    with pytest.raises(LayoutError, match="token id"):
        mrope.from_pretrained({**QWEN2_5_CONFIG, "image_token_id": "151655"})
    with pytest.raises(LayoutError, match="whole number"):
        mrope.from_pretrained({**QWEN2_5_CONFIG, "vision_config": {"patch_size": 14.5}})


def test_glm_video_max_duration_samples_like_its_own_processor(tmp_path: Path) -> None:
    """GLM-4.1V samples ``max_duration * fps`` frames from a longer clip: a checkpoint's own bound (read
    by transformers' Glm4vVideoProcessor from the same file) is the one mrope samples with."""
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor
    from transformers.video_utils import VideoMetadata

    from mrope.media._sampling import glm4v_frame_indices

    folder = _write(
        tmp_path / "glm", config={"model_type": "glm4v"}, video_preprocessor_config={"max_duration": 20}
    )
    rules = mrope.from_pretrained(folder).rules
    assert rules.max_duration == 20 != get_family("glm-4.1v").rules.max_duration
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = Glm4vVideoProcessor.from_pretrained(str(folder))
    for seconds in (12, 30):  # under and over the bound
        want = real.sample_frames(
            VideoMetadata(total_num_frames=30 * seconds, fps=30.0, duration=float(seconds))
        )
        got = glm4v_frame_indices(30 * seconds, 30.0, fps=rules.fps, max_duration=rules.max_duration)
        assert got.tolist() == np.asarray(want).tolist()


def test_ernie_video_temporal_patch_size_pads_frames_and_is_not_the_grids(tmp_path: Path) -> None:
    """ERNIE-4.5-VL's 5.24 processors write temporal_patch_size 1 (images) and 2 (videos: the only value its
    video processor takes, the unit it pads the frame count to, ``grid_t = n + -n % 2``): a folder with
    both loads with the registry's rules (a grid's t counts frames), not a contradiction or t halved."""
    image = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 1}
    video = {"patch_size": 14, "merge_size": 2, "temporal_patch_size": 2}
    folder = _write(
        tmp_path / "ernie",
        config={"model_type": "ernie4_5_vl_moe"},
        preprocessor_config=image,
        video_preprocessor_config=video,
    )
    assert mrope.from_pretrained(folder).rules == get_family("ernie-4.5-vl").rules


def test_qwen3_omni_audio_window_of_the_checkpoint(tmp_path: Path) -> None:
    """Qwen3-Omni's get_rope_index counts a clip's audio tokens with ``audio_config.n_window``."""
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

    from mrope import Audio, audio_tokens

    config = {
        "model_type": "qwen3_omni_moe",
        "thinker_config": {"model_type": "qwen3_omni_moe_thinker", "audio_config": {"n_window": 25}},
    }
    model = mrope.from_pretrained(config)
    assert model.rules.audio_window == 25
    frames = np.array([49, 50, 51, 100, 149, 730])
    want = _get_feat_extract_output_lengths(frames, 25).tolist()
    assert [audio_tokens(Audio(mel_frames=int(f)), model) for f in frames] == want
    assert (
        want != _get_feat_extract_output_lengths(frames, 50).tolist()
    )  # the registry's window counts others


def test_video_processor_falls_back_to_preprocessor_config(tmp_path: Path) -> None:
    """Without video_preprocessor_config.json (nor a nested video_processor), 5.24's video processor loads
    preprocessor_config.json: its bounds size the video frames. Expected: Qwen3VLVideoProcessor loaded from
    the same folder, its own sample_frames and the module's smart_resize (no torchvision needed)."""
    import transformers.models.qwen3_vl.video_processing_qwen3_vl as real_module
    from transformers.video_utils import VideoMetadata

    image = {**QWEN3_PREPROCESSOR, "size": {"shortest_edge": 65536, "longest_edge": 16777216}}
    folder = _write(tmp_path / "ckpt", config=QWEN3_VL_CONFIG, preprocessor_config=image)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = real_module.Qwen3VLVideoProcessor.from_pretrained(str(folder))
    model = mrope.from_pretrained(folder)
    assert real.size.shortest_edge == 65536 != get_family("qwen3-vl").rules.video_min_pixels
    for width, height, seconds in [(640, 360, 4.0), (160, 90, 2.0)]:  # the second grows to the floor
        info = mrope.media.VideoInfo(
            fps=30.0, num_frames=int(30 * seconds), duration=seconds, width=width, height=height
        )
        n = len(real.sample_frames(VideoMetadata(total_num_frames=info.num_frames, fps=30.0)))
        h, w = real_module.smart_resize(
            num_frames=n,
            height=height,
            width=width,
            temporal_factor=2,
            factor=32,
            min_pixels=real.size.shortest_edge,
            max_pixels=real.size.longest_edge,
        )
        assert load_video(info, model=model).grid == ((n + 1) // 2, h // 16, w // 16), (width, height)


def test_omni_time_scale_may_be_a_float() -> None:
    config = {
        "model_type": "qwen2_5_omni",
        "thinker_config": {"model_type": "qwen2_5_omni_thinker", "position_id_per_seconds": 12.5},
    }
    rules = mrope.from_pretrained(config).rules
    assert rules.tokens_per_second == 12.5
    # hand derivation: temporal patch i of 1 s gets trunc(i * 1.0 * 12.5)
    p = mrope.build_positions([Video(grid=(3, 2, 2), second_per_grid=1.0)], rules=rules)
    assert p.ids[0].tolist()[1:-1] == [1, 13, 26]  # one token a patch, after <vision_start> at 0
    config["thinker_config"]["seconds_per_chunk"] = 1.5
    assert mrope.from_pretrained(config).rules.seconds_per_chunk == 1.5
    config["thinker_config"]["position_id_per_seconds"] = "fast"
    with pytest.raises(
        LayoutError, match="position_id_per_seconds must be a number for LayoutRules.tokens_per"
    ):
        mrope.from_pretrained(config)


def test_hunyuan_ocr_axes_follow_the_config_section(tmp_path: Path) -> None:
    """5.24 makes len(rope_parameters["mrope_section"]) position rows; expected: its get_rope_index with
    the HunYuanVLConfig read from the same folder."""
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLConfig
    from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLModel

    text = {"model_type": "hunyuan_vl_text", "hidden_size": 1024, "num_attention_heads": 16, "head_dim": 128}
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [22, 21, 21]}
    config = {"model_type": "hunyuan_vl", "text_config": {**text, "rope_parameters": rope}}
    folder = _write(tmp_path / "ocr", config=config)
    model = mrope.from_pretrained(folder)
    assert model.rules.num_axes == 3 and get_family("hunyuan-ocr").rules.num_axes == 4

    class Shim:
        get_rope_index = HunYuanVLModel.get_rope_index
        get_vision_position_ids = HunYuanVLModel.get_vision_position_ids
        config = HunYuanVLConfig.from_pretrained(str(folder))

    p = mrope.build_positions([Text(2), mrope.Image(grid=(1, 4, 6)), Text(1)], model=model)
    ids = torch.from_numpy(p.input_ids)[None]
    want, _ = Shim().get_rope_index(ids, ids == model.rules.image_pad_id, torch.tensor([[1, 4, 6]]), None)
    np.testing.assert_array_equal(p.ids, want.numpy()[:, 0])
    rope["mrope_section"] = [16, 16, 16, 8, 8]
    with pytest.raises(SpecError, match="mrope_section must be 1 to 4"):  # 5 axes: not computed here
        mrope.from_pretrained(config)


def test_video_keys_that_change_grids_are_refused_not_ignored(tmp_path: Path) -> None:
    """5.24's Qwen3VLVideoProcessor reads cap_pixels_per_frame (then max_video_tokens) and num_frames: the
    cap changes its grids (its own get_num_of_video_patches), which mrope does not compute: refused by
    name. The value mrope computes (no cap) loads."""
    import transformers.models.qwen3_vl.video_processing_qwen3_vl as real_module

    counts = {}
    for cap in (True, False):
        video = {**QWEN3_VL_VIDEO_PREPROCESSOR, "cap_pixels_per_frame": cap, "max_video_tokens": 64}
        folder = _write(tmp_path / str(cap), config=QWEN3_VL_CONFIG, video_preprocessor_config=video)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            real = real_module.Qwen3VLVideoProcessor.from_pretrained(str(folder))
        counts[cap] = real.get_num_of_video_patches(num_frames=4, height=720, width=1280)
        if cap:
            with pytest.raises(LayoutError, match="cap_pixels_per_frame must be one of .False.; got True"):
                mrope.from_pretrained(folder)
        else:
            assert mrope.from_pretrained(folder).rules.video_bounds == "clip"
    assert counts[True] != counts[False]
    video = {**QWEN3_VL_VIDEO_PREPROCESSOR, "num_frames": 16}
    folder = _write(tmp_path / "n", config=QWEN3_VL_CONFIG, video_preprocessor_config=video)
    assert real_module.Qwen3VLVideoProcessor.from_pretrained(str(folder)).num_frames == 16
    with pytest.raises(LayoutError, match="num_frames must be one of .*got 16 .a fixed frame count"):
        mrope.from_pretrained(folder)
    # Qwen2-VL / 2.5-VL (video_processing_qwen2_vl.py:253-260): the cap shares int(128000 * 28**2 * 0.9)
    # px out among the frames; without it (false, or unset as released) no clip budget applies
    two = {"cap_pixels_per_frame": True, "max_video_tokens": 128000}
    folder = _write(tmp_path / "q2", config=QWEN2_5_CONFIG, video_preprocessor_config=two)
    released = get_family("qwen2.5-vl").rules
    assert mrope.from_pretrained(folder).rules == released.replace(video_total_pixels=90_316_800)
    _write(
        tmp_path / "q2",
        config=QWEN2_5_CONFIG,
        video_preprocessor_config={**two, "cap_pixels_per_frame": False},
    )
    assert mrope.from_pretrained(folder).rules == released
    for key, value in (("max_video_tokens", 64000), ("do_sample_frames", True)):
        _write(tmp_path / "q2", config=QWEN2_5_CONFIG, video_preprocessor_config={**two, key: value})
        with pytest.raises(LayoutError, match=f"{key} must be one of"):
            mrope.from_pretrained(folder)
