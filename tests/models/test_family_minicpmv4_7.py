"""MiniCPM-V 4.7: the canvas rule (thumbnail stretched over the canvas, slices at their offsets, markers
pinned, merge 4 or 2).

Expected values: transformers 5.24's own ``MiniCPMV4_7Model.get_rope_index`` (bound to a minimal object
holding its config), on token sequences laid out as ``MiniCPMV4_7Processor`` writes them
(``replace_image_token`` / ``replace_video_token``: ``<image>`` thumbnail ``</image>`` then rows of
``<slice>`` crop ``</slice>`` joined by a newline, video frames back to back, optional
``<image_id>N</image_id>`` text). The marker ids are class-default ``None`` and no released config was
available offline: the ids below are stand-ins (the rule only compares ids for equality).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.hf_reference import MINICPM_IDS, MiniCPMRopeIndex
from transformers.models.minicpmv4_7.configuration_minicpmv4_7 import MiniCPMV4_7Config

from mrope import LayoutRules, TokenError
from mrope._layout.canvas import stretch
from mrope._token_ids import numpy_rope_index as rope_index

IM_START, IM_END, SLICE_START, SLICE_END, NEWLINE, IMAGE, VIDEO = MINICPM_IDS.values()  # 900 to 906
ID_START, ID_END = 907, 908
RULES = LayoutRules(
    name="minicpm-v-4.7",
    merge_size=4,
    positions_base="canvas",
    vision_start_id=IM_START,
    vision_end_id=IM_END,
    slice_start_id=SLICE_START,
    slice_end_id=SLICE_END,
    newline_id=NEWLINE,
    image_pad_id=IMAGE,
    video_pad_id=VIDEO,
    pad_position=0,
)


CHECKPOINT_CONFIG = {  # config.json of a checkpoint with the stand-in ids (the released fields mrope reads)
    "model_type": "minicpmv4_7",
    "image_token_id": IMAGE,
    "video_token_id": VIDEO,
    "image_start_id": IM_START,
    "image_end_id": IM_END,
    "slice_start_id": SLICE_START,
    "slice_end_id": SLICE_END,
    "newline_id": NEWLINE,
    "text_config": {
        "model_type": "qwen3_5_text",
        "hidden_size": 4096,
        "num_attention_heads": 16,
        "head_dim": 256,
    },
}


def _crop(rng: np.random.Generator, merge: int) -> tuple[int, int]:
    return tuple(merge * int(v) for v in rng.integers(1, 5, 2))  # type: ignore[return-value]


def _frame(rng, merge, pad, sizes, slice_grid=None) -> list[int]:
    th, tw = _crop(rng, merge)
    sizes.append((th, tw))
    out = [IM_START, *[pad] * (th * tw // merge**2), IM_END]
    rows, cols = slice_grid if slice_grid is not None else (0, 0)
    if rows and cols:
        sh, sw = _crop(rng, merge)
        lines = []
        for _ in range(rows):
            line: list[int] = []
            for _ in range(cols):
                sizes.append((sh, sw))
                line += [SLICE_START, *[pad] * (sh * sw // merge**2), SLICE_END]
            lines.append(line)
        for k, line in enumerate(lines):
            out += ([NEWLINE] if k else []) + line
    return out


def _sample(rng: np.random.Generator, merge: int, images: list, videos: list) -> list[int]:
    ids = rng.integers(100, 800, int(rng.integers(1, 4))).tolist()
    for k in range(int(rng.integers(1, 3))):
        if rng.random() < 0.6:
            if rng.random() < 0.5:
                ids += [ID_START, 100 + k, ID_END]
            grid = (0, 0) if rng.random() < 0.3 else tuple(int(v) for v in rng.integers(1, 3, 2))
            ids += _frame(rng, merge, IMAGE, images, grid)
        else:
            rows, cols = (int(v) for v in rng.integers(0, 3, 2))
            for _ in range(int(rng.integers(1, 4))):
                ids += _frame(rng, merge, VIDEO, videos, (rows, cols))
        # text after, sometimes opening with a newline token (a marker: it joins the frame)
        ids += ([NEWLINE] if rng.random() < 0.4 else []) + rng.integers(
            100, 800, int(rng.integers(0, 4))
        ).tolist()
    return ids


@pytest.mark.parametrize(("side", "mode"), [("left", "16x"), ("right", "4x")])
def test_get_rope_index_equals_transformers(side: str, mode: str) -> None:
    merge = 4 if mode == "16x" else 2
    rules = RULES.replace(merge_size=merge)
    rng = np.random.default_rng(41 if side == "left" else 42)
    shim = MiniCPMRopeIndex()
    for _ in range(8):
        images: list = []
        videos: list = []
        rows = [_sample(rng, merge, images, videos) for _ in range(3)]
        width = max(map(len, rows))
        ids = np.zeros((3, width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, row in enumerate(rows):
            sl = slice(width - len(row), width) if side == "left" else slice(0, len(row))
            ids[r, sl], mask[r, sl] = row, 1
        types = ((ids == IMAGE) + 2 * (ids == VIDEO)) * mask
        t_images = torch.tensor(images).reshape(-1, 2)
        t_videos = torch.tensor(videos).reshape(-1, 2)
        want, want_deltas = shim.get_rope_index(
            torch.from_numpy(ids),
            torch.from_numpy(types),
            t_images if len(images) else None,
            t_videos if len(videos) else None,
            mode,
            torch.from_numpy(mask),
        )
        grids_i = np.array([(1, h, w) for h, w in images]).reshape(-1, 3)
        grids_v = np.array([(1, h, w) for h, w in videos]).reshape(-1, 3)
        for kwargs in ({"mm_token_type_ids": types}, {}):
            got, deltas = rope_index(ids, grids_i, grids_v, mask, rules=rules, **kwargs)
            np.testing.assert_array_equal(got, want.numpy())
            np.testing.assert_array_equal(deltas, want_deltas.numpy()[:, 0])


def test_stretch_is_torch_linspace() -> None:
    for extent in range(1, 120):
        for steps in range(1, 60):
            want = torch.linspace(0, extent - 1, steps).round().long().numpy()
            np.testing.assert_array_equal(stretch(extent, steps), want)


def test_one_image_by_hand() -> None:
    # text; <image> 1x2 thumbnail </image>; one row of two 1x1 slices (merge 4: 4x4 patches per token)
    ids = [
        5,
        6,
        IM_START,
        IMAGE,
        IMAGE,
        IM_END,
        SLICE_START,
        IMAGE,
        SLICE_END,
        SLICE_START,
        IMAGE,
        SLICE_END,
        7,
    ]
    got, deltas = rope_index([ids], [[1, 4, 8], [1, 4, 4], [1, 4, 4]], rules=RULES)
    # canvas 1 x 2 at o = 2: thumbnail spread over columns 0..1; <image> at the halo 1; </image> at (3, 4)
    want_h = [0, 1, 1, 2, 2, 3, 2, 2, 2, 2, 2, 2, 5]
    want_w = [0, 1, 1, 2, 3, 4, 2, 2, 2, 3, 3, 3, 5]
    np.testing.assert_array_equal(got[:, 0], [[0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 5], want_h, want_w])
    assert deltas.tolist() == [5 + 1 - 13]


def test_bad_input() -> None:
    with pytest.raises(TokenError, match="marker ids"):
        rope_index([[1, IMAGE]], [[1, 4, 4]], rules=RULES.replace(newline_id=None))
    with pytest.raises(TokenError, match="canvas rule takes one"):
        rope_index([[IM_START, IMAGE, IM_END]], [[1, 8, 8]], rules=RULES)


def test_segments_give_the_model_positions() -> None:
    from mrope import Image, Text, Video, build_batch, count_tokens

    samples = [
        [
            Text([5, 6]),
            Image((1, 8, 12)),
            Text([7]),
            Image((1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8)),
        ],
        [
            Text([9]),
            Video((3, 8, 8)),
            Text([NEWLINE, 7, 8]),
            Image((1, 8, 8), tiles=(1, 2), thumbnail_grid=(1, 4, 4)),
        ],
        [
            Video((2, 16, 8), tiles=(1, 2), thumbnail_grid=(1, 4, 8)),
            Text([3]),
            Video((2, 8, 16), tiles=(2, 1), thumbnail_grid=(1, 8, 4)),
        ],
    ]
    shim = MiniCPMRopeIndex()
    for side in ("left", "right"):
        batch = build_batch(samples, rules=RULES, padding_side=side)
        first = batch.sequences[0]
        # <image> 2x3 thumbnail </image>, then <image> 3x2 thumbnail </image> and two rows of three 2x2 slices
        assert first.input_ids[2:11].tolist() == [IM_START, *[IMAGE] * 6, IM_END, 7]
        assert first.input_ids[11:19].tolist() == [IM_START, *[IMAGE] * 6, IM_END]
        assert (
            first.input_ids.tolist().count(NEWLINE) == 1 and first.input_ids.tolist().count(SLICE_START) == 6
        )
        images = np.concatenate([p.image_grid_thw for p in batch.sequences])
        videos = np.concatenate([p.video_grid_thw for p in batch.sequences])
        assert images[:3].tolist() == [[1, 8, 12], [1, 12, 8], [1, 8, 8]]
        want, want_deltas = shim.get_rope_index(
            torch.from_numpy(batch.input_ids),
            torch.from_numpy(batch.mm_token_type_ids),
            torch.from_numpy(images[:, 1:]),
            torch.from_numpy(videos[:, 1:]),
            "16x",
            torch.from_numpy(batch.attention_mask),
        )
        np.testing.assert_array_equal(batch.ids, want.numpy())
        np.testing.assert_array_equal(batch.deltas, want_deltas.numpy()[:, 0])
        assert [count_tokens(s, rules=RULES) for s in samples] == [p.num_tokens for p in batch.sequences]


def test_segments_give_the_processors_placeholders() -> None:
    """MiniCPMV4_7Processor's own expansion (``replace_image_token`` / ``replace_video_token``)."""
    from support.special_text import encode_specials
    from transformers.models.minicpmv4_7.processing_minicpmv4_7 import MiniCPMV4_7Processor

    from mrope import Image, Video, build_positions

    proc = object.__new__(MiniCPMV4_7Processor)
    proc.slice_mode = proc.video_slice_mode = True
    names = ("<image>", "</image>", "<slice>", "</slice>", "<unk>", "<vid>")
    proc.image_start_token, proc.image_end_token, proc.slice_start_token, proc.slice_end_token = names[:4]
    proc.image_token, proc.video_token = "<unk>", "<vid>"
    specials = dict(
        zip([*names, "\n"], [IM_START, IM_END, SLICE_START, SLICE_END, IMAGE, VIDEO, NEWLINE], strict=True)
    )
    # a 12x8-patch thumbnail and 2 rows x 3 columns of 8x8-patch slices (merge 4)
    inputs = {
        "grids": np.array([[2, 3]]),
        "num_patches_per_image": np.array([7]),
        "target_sizes": np.array([[12, 8]] + [[8, 8]] * 6),
    }
    text = proc.replace_image_token(inputs, 0, image_token_divisor=16)
    p = build_positions([Image((1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8))], rules=RULES)
    assert p.input_ids.tolist() == encode_specials(text, specials)
    assert p.image_grid_thw[:, 1:].tolist() == inputs["target_sizes"].tolist()
    # a clip of two frames: an 8x12-patch thumbnail and 1 row x 2 columns of 8x8-patch slices each
    inputs = {
        "target_sizes_videos": np.array([[8, 12], [8, 8], [8, 8]] * 2),
        "num_frames_per_video": np.array([2]),
        "grids_videos": np.array([[1, 2]] * 2),
    }
    text = proc.replace_video_token(inputs, 0, video_token_divisor=16)
    p = build_positions([Video((2, 8, 16), tiles=(2, 1), thumbnail_grid=(1, 8, 12))], rules=RULES)
    assert p.input_ids.tolist() == encode_specials(text, specials)
    assert p.video_grid_thw[:, 1:].tolist() == inputs["target_sizes_videos"].tolist()
    # a clip of three 8x12-patch frames without slices
    inputs = {
        "target_sizes_videos": np.array([[8, 12]] * 3),
        "num_frames_per_video": np.array([3]),
        "grids_videos": np.zeros((3, 2), dtype=np.int64),
    }
    text = proc.replace_video_token(inputs, 0, video_token_divisor=16)
    p = build_positions([Video((3, 8, 12))], rules=RULES)
    assert p.input_ids.tolist() == encode_specials(text, specials)


def test_family_rules_and_rotary() -> None:
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding, apply_rotary_pos_emb

    import mrope
    from mrope import Image, Text, build_positions
    from mrope.models import get_family

    family = get_family("minicpmv4_7")
    ids = {k: getattr(RULES, k) for k in ("vision_start_id", "vision_end_id", "image_pad_id", "video_pad_id")}
    ids |= {k: getattr(RULES, k) for k in ("slice_start_id", "slice_end_id", "newline_id")}
    assert family.rules.replace(name=RULES.name, **ids) == RULES  # the tested rules are the family's + ids
    with pytest.raises(TokenError, match="marker ids"):  # ids come from the checkpoint config
        rope_index([[1, family.rules.image_pad_id]], [[1, 4, 4]], model="minicpm-v-4.7")
    # the text model is qwen3_5_text: Qwen3.5's rotary, read from the config's text part
    rope = {
        "rope_type": "default",
        "rope_theta": 1e7,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
    }
    text = {"hidden_size": 4096, "num_attention_heads": 16, "head_dim": 256, "rope_parameters": rope}
    spec = mrope.models.spec_from_config(
        {
            "model_type": "minicpmv4_7",
            "text_config": {"model_type": "qwen3_5_text", **text, "mrope_interleaved": True},
        }
    )
    assert spec == family.spec
    p = build_positions(
        [Text([5]), Image((1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8)), Text([6])], rules=RULES
    )
    positions = torch.from_numpy(p.ids)
    n = positions.shape[1]
    gen = torch.Generator().manual_seed(4)
    q, k = torch.randn(n, 2, 256, generator=gen), torch.randn(n, 1, 256, generator=gen)
    cos, sin = Qwen3_5TextRotaryEmbedding(Qwen3_5TextConfig(**text))(q, positions[:, None, :])
    want_q, want_k = apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    got_q, got_k = mrope.apply_mrope(q, k, positions, spec, backend="torch")
    torch.testing.assert_close(got_q, want_q[0].transpose(0, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k, want_k[0].transpose(0, 1), rtol=1e-5, atol=1e-5)


def test_sizes_are_bounded() -> None:
    from mrope import Image, LayoutError, Video, build_positions, count_tokens

    assert count_tokens([Video((10**9, 4, 4))], rules=RULES) == 3 * 10**9  # arithmetic, no loop
    with pytest.raises(LayoutError, match="at most 65536 are supported"):
        build_positions(
            [Image((1, 4 * 300, 4 * 300), tiles=(300, 300), thumbnail_grid=(1, 4, 4))], rules=RULES
        )


def test_marker_ids_come_from_the_checkpoint_config() -> None:
    import mrope
    from mrope import Image, Text

    family = mrope.from_pretrained(CHECKPOINT_CONFIG)
    assert family.rules.replace(name=RULES.name) == RULES
    segs = [Text([5]), Image((1, 16, 24), tiles=(3, 2), thumbnail_grid=(1, 12, 8))]
    np.testing.assert_array_equal(
        mrope.build_positions(segs, model=family).ids, mrope.build_positions(segs, rules=RULES).ids
    )


def test_sliced_frames_need_the_canvas_rule() -> None:
    from mrope import LayoutError, Video, build_positions

    with pytest.raises(LayoutError, match="need the canvas rule"):
        build_positions([Video((2, 8, 8), tiles=(1, 1), thumbnail_grid=(1, 4, 4))], model="qwen2-vl")
    with pytest.raises(LayoutError, match="go together"):
        Video((2, 8, 8), tiles=(1, 1))


def _processor(folder, mode_of_call: str | None = None):
    """MiniCPMV4_7Processor's own image expansion with the image processor transformers loads from
    ``folder`` (the Pil backend: torchvision cannot be imported here); tokenizer-free, markers by name."""
    import warnings

    from transformers import AutoImageProcessor
    from transformers.models.minicpmv4_7.processing_minicpmv4_7 import MiniCPMV4_7Processor

    proc = object.__new__(MiniCPMV4_7Processor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc.image_processor = AutoImageProcessor.from_pretrained(str(folder))
    proc.slice_mode = True
    proc.image_start_token, proc.image_end_token, proc.slice_start_token, proc.slice_end_token = (
        "<image>",
        "</image>",
        "<slice>",
        "</slice>",
    )
    proc.image_token = "<unk>"
    return proc


def _processor_file(mode: str) -> dict:
    return {"image_processor_type": "MiniCPMV4_6ImageProcessorPil", "patch_size": 16, "downsample_mode": mode}


def test_from_pretrained_follows_the_checkpoints_downsample_mode(tmp_path) -> None:
    """A checkpoint folder in each mode: the processor's placeholders and crops (transformers, reading the
    folder) laid out by ``from_pretrained(folder)`` equal 5.24's ``get_rope_index`` with the config
    transformers reads from the same folder; the two modes place the text after the picture apart."""
    from PIL import Image as PILImage
    from support.checkpoints import write_checkpoint
    from support.special_text import encode_specials

    import mrope
    from mrope import Image, Text

    specials = {"<image>": IM_START, "</image>": IM_END, "<slice>": SLICE_START, "</slice>": SLICE_END}
    specials |= {"<unk>": IMAGE, "\n": NEWLINE}
    after_image = {}
    for mode in ("16x", "4x"):
        config = {**CHECKPOINT_CONFIG, "downsample_mode": mode}
        folder = write_checkpoint(tmp_path / mode, config, preprocessor_config=_processor_file(mode))
        family = mrope.from_pretrained(folder)
        processed, (text,) = _processor(folder)._process_images([PILImage.new("RGB", (900, 500))])
        sizes = np.asarray(processed["target_sizes"])
        (rows, cols), thumb = processed["grids"][0], sizes[0]
        assert (rows, cols) == (1, 2) and (sizes[1:] == sizes[1]).all()  # a thumbnail and 1 x 2 slices
        grid = (1, rows * sizes[1][0], cols * sizes[1][1])
        image = Image(grid, tiles=(cols, rows), thumbnail_grid=(1, *thumb))
        p = mrope.build_positions([Text([5, 6]), image, Text([7, 8])], model=family)
        assert p.input_ids.tolist() == [5, 6, *encode_specials(text, specials), 7, 8]
        assert p.image_grid_thw[:, 1:].tolist() == sizes.tolist()

        shim = MiniCPMRopeIndex(MiniCPMV4_7Config.from_pretrained(str(folder)))
        assert shim.config.downsample_mode == mode
        want, want_deltas = shim.get_rope_index(
            torch.from_numpy(p.input_ids)[None],
            torch.from_numpy(p.mm_token_type_ids)[None],
            target_sizes=torch.from_numpy(sizes),
        )
        np.testing.assert_array_equal(p.ids, want[:, 0].numpy())
        assert p.delta == int(want_deltas)
        after_image[mode] = p.ids[:, -2].tolist()
    assert after_image["4x"] != after_image["16x"]  # a 16x family would misplace the 4x prompt's text


def test_downsample_mode_errors_and_the_unified_processor_file(tmp_path) -> None:
    from support.checkpoints import write_checkpoint

    import mrope
    from mrope import LayoutError

    with pytest.raises(
        LayoutError, match=r"config.json: downsample_mode must be one of \['16x', '4x'\]; got '8x'"
    ):
        mrope.from_pretrained({**CHECKPOINT_CONFIG, "downsample_mode": "8x"})
    folder = write_checkpoint(
        tmp_path / "a",
        {**CHECKPOINT_CONFIG, "downsample_mode": "4x"},
        preprocessor_config=_processor_file("16x"),
    )
    with pytest.raises(
        LayoutError,
        match="config.json: downsample_mode = '4x' but preprocessor_config.json: downsample_mode = '16x'",
    ):
        mrope.from_pretrained(folder)
    video = {"video_processor_type": "MiniCPMV4_6VideoProcessor", "downsample_mode": "4x"}
    folder = write_checkpoint(tmp_path / "b", CHECKPOINT_CONFIG, video_preprocessor_config=video)
    with pytest.raises(
        LayoutError, match=r"downsample_mode \(not set: the class default\) = .16x. but video_pre"
    ):
        mrope.from_pretrained(folder)  # the config's class default is 16x; no key in config.json: no check
    # 5.x save_pretrained nests the processors in processor_config.json, which transformers reads first
    folder = write_checkpoint(
        tmp_path / "c",
        {**CHECKPOINT_CONFIG, "downsample_mode": "4x"},
        preprocessor_config=_processor_file("16x"),
        processor_config={"image_processor": _processor_file("4x"), "video_processor": video},
    )
    assert _processor(folder).image_processor.downsample_mode == "4x"
    assert mrope.from_pretrained(folder).rules.merge_size == 2
    # with no video processor config at all, 5.24's video processor loads the (16x) preprocessor_config.json
    # while the image processor takes the nested 4x one: a checkpoint at odds with itself
    folder = write_checkpoint(
        tmp_path / "d",
        {**CHECKPOINT_CONFIG, "downsample_mode": "4x"},
        preprocessor_config=_processor_file("16x"),
        processor_config={"image_processor": _processor_file("4x")},
    )
    with pytest.raises(LayoutError, match="no video processor config: 5.24 reads this one"):
        mrope.from_pretrained(folder)
