"""get_rope_index: agreement with the builder, transformers parity, released video layouts, bad input.

Video layouts: Qwen3-VL splits each video row into one ``(1, H', W')`` block per temporal patch
(transformers 5.24 models/qwen3_vl/modeling_qwen3_vl.py:953); GLM-4.1V writes each frame as image-wrapped
pads followed by ``int(t)`` (models/glm4v/processing_glm4v.py:182).
"""

from __future__ import annotations

import functools
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import Image, MRopeWarning, Text, TokenError, Video, build_batch, build_positions, get_rope_index


def stamp_tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


def mm_types(input_ids: np.ndarray, model: str) -> np.ndarray:
    """0/1/2 types as the processors make them; GLM-4.1V's frames carry the image id, and pads after an
    unclosed <|begin_of_video|> are video (Glm4vProcessor.create_mm_token_type_ids, written out)."""
    rules = mrope.models.get_family(model).rules
    if rules.image_pad_id != rules.video_pad_id:
        return (input_ids == rules.image_pad_id).astype(np.int64) + 2 * (input_ids == rules.video_pad_id)
    rows = np.atleast_2d(input_ids)
    flat = np.zeros(rows.shape, dtype=np.int64)
    for r, ids in enumerate(rows.tolist()):
        depth = 0
        for k, tok in enumerate(ids):
            depth += (tok == rules.video_start_id) - (tok == rules.video_end_id)
            if tok == rules.image_pad_id:
                flat[r, k] = 2 if depth > 0 else 1
    return flat.reshape(input_ids.shape)


SEGMENTS = [
    Text(5),
    Image(grid=(1, 8, 12)),
    Text(3),
    Video(grid=(4, 8, 8), fps=1.0),
    Text(2),
    Image(grid=(1, 4, 4)),
    Video(grid=(3, 4, 6), fps=3.0),
    Text(1),
]


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_token_form_equals_builder(model: str) -> None:
    p = build_positions(SEGMENTS, model=model, tokenizer=stamp_tokens)
    kwargs = dict(model=model, second_per_grid_ts=p.second_per_grid_ts)
    ids = torch.from_numpy(p.input_ids[None])
    pos, deltas = get_rope_index(ids, p.image_grid_thw, p.video_grid_thw, **kwargs)
    assert pos.dtype == torch.int64 and tuple(pos.shape) == (3, 1, p.num_tokens)
    np.testing.assert_array_equal(pos[:, 0].numpy(), p.ids)
    assert deltas.tolist() == [[p.delta]]
    # numpy ids in, numpy arrays out: the same values and shapes, no torch needed
    pos_np, deltas_np = get_rope_index(p.input_ids[None], p.image_grid_thw, p.video_grid_thw, **kwargs)
    assert isinstance(pos_np, np.ndarray) and pos_np.dtype == np.int64
    np.testing.assert_array_equal(pos_np, pos.numpy())
    assert isinstance(deltas_np, np.ndarray) and deltas_np.tolist() == [[p.delta]]
    # the 5.x form gives the same answer
    types = mm_types(p.input_ids, model)[None]
    np.testing.assert_array_equal(p.mm_token_type_ids, types[0])
    pos2, _ = get_rope_index(ids, p.image_grid_thw, p.video_grid_thw, mm_token_type_ids=types, **kwargs)
    np.testing.assert_array_equal(pos2.numpy(), pos.numpy())


def test_batch_with_padding_equals_build_batch() -> None:
    samples = [SEGMENTS[:3], [Text(2)], SEGMENTS[3:]]
    for side in ("left", "right"):
        batch = build_batch(samples, model="qwen2.5-vl", padding_side=side)
        grids_i = np.concatenate([p.image_grid_thw for p in batch.sequences])
        grids_v = np.concatenate([p.video_grid_thw for p in batch.sequences])
        spg = np.concatenate([p.second_per_grid_ts for p in batch.sequences])
        pos, deltas = get_rope_index(
            torch.from_numpy(batch.input_ids),
            grids_i,
            grids_v,
            torch.from_numpy(batch.attention_mask),
            model="qwen2.5-vl",
            second_per_grid_ts=spg,
        )
        np.testing.assert_array_equal(pos.numpy(), batch.ids)
        assert deltas[:, 0].tolist() == batch.deltas.tolist()


def test_qwen3_video_grid_rows_are_split_like_the_model() -> None:
    p = build_positions([Text(2), Video(grid=(3, 4, 4), fps=2.0)], model="qwen3-vl", tokenizer=stamp_tokens)
    assert p.video_grid_thw.tolist() == [[3, 4, 4]]  # one row per video, as the processor gives it
    pos, _ = get_rope_index(p.input_ids[None], video_grid_thw=p.video_grid_thw, model="qwen3-vl")
    np.testing.assert_array_equal(pos[:, 0], p.ids)


def test_glm_video_frames_wrap_and_timestamp_after() -> None:
    p = build_positions(
        [Video(grid=(2, 4, 4), frame_times=(0.0, 0.5, 1.5, 2.0))], model="glm-4.1v", tokenizer=stamp_tokens
    )
    rules = mrope.models.get_family("glm-4.1v").rules
    ids = p.input_ids.tolist()
    # <|begin_of_video|> (<|begin_of_image|> 4 tokens <|end_of_image|> "0") (... "1") <|end_of_video|>
    assert ids[0] == rules.video_start_id and ids[-1] == rules.video_end_id
    assert ids[1] == rules.vision_start_id and ids[6] == rules.vision_end_id and ids[7] == ord("0")
    assert ids[14] == ord("1")


# ------------------------------------------------------------------------------- transformers parity


def _hf(model: str):
    from transformers.models.glm4v.modeling_glm4v import Glm4vModel
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    cls = {
        "qwen2-vl": Qwen2VLModel,
        "qwen2.5-vl": Qwen2_5_VLModel,
        "qwen3-vl": Qwen3VLModel,
        "glm-4.1v": Glm4vModel,
    }[model]
    fake = SimpleNamespace(
        config=SimpleNamespace(vision_config=SimpleNamespace(spatial_merge_size=2, tokens_per_second=2))
    )
    fake.get_vision_position_ids = functools.partial(cls.get_vision_position_ids, fake)
    return functools.partial(cls.get_rope_index, fake)


@pytest.mark.parametrize("model", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_parity_with_transformers_5(model: str) -> None:
    """transformers 5.x takes mm_token_type_ids, fills pads with 0 and resumes after a video at
    s + max(H', W'); with those two settings spelled out, every model matches exactly."""
    samples = [SEGMENTS, SEGMENTS[:4], [Text(3), Image(grid=(1, 2, 2)), Text(1)]]
    batch = build_batch(
        samples,
        model=model,
        rules={"advance": "spatial"},
        padding_side="left",
        pad_position=0,
        tokenizer=stamp_tokens,
    )
    grids_i = torch.from_numpy(np.concatenate([p.image_grid_thw for p in batch.sequences]))
    grids_v = torch.from_numpy(np.concatenate([p.video_grid_thw for p in batch.sequences]))
    spg = torch.from_numpy(np.concatenate([p.second_per_grid_ts for p in batch.sequences]))
    input_ids = torch.from_numpy(batch.input_ids)
    mask = torch.from_numpy(batch.attention_mask)
    types = torch.from_numpy(mm_types(batch.input_ids, model)) * mask
    np.testing.assert_array_equal(batch.mm_token_type_ids, types.numpy())
    kwargs = {"second_per_grid_ts": spg} if model == "qwen2.5-vl" else {}
    hf_pos, hf_deltas = _hf(model)(input_ids, types, grids_i, grids_v.clone(), attention_mask=mask, **kwargs)
    ours, deltas = get_rope_index(
        input_ids,
        grids_i,
        grids_v,
        mask,
        model=model,
        second_per_grid_ts=spg,
        mm_token_type_ids=types,
        rules={"advance": "spatial"},
        pad_position=0,
    )
    np.testing.assert_array_equal(ours.numpy(), hf_pos.numpy())
    np.testing.assert_array_equal(deltas.numpy(), hf_deltas.numpy())
    np.testing.assert_array_equal(ours.numpy(), batch.ids)


def test_official_rule_differs_from_transformers_5_only_after_long_videos() -> None:
    # images: identical under both advance rules; video longer in time than wide: max + 1 is later
    images = build_positions([Text(2), Image(grid=(1, 8, 4)), Text(2)], model="qwen2-vl")
    assert np.array_equal(
        images.ids,
        build_positions(
            [Text(2), Image(grid=(1, 8, 4)), Text(2)], rules={"advance": "spatial"}, model="qwen2-vl"
        ).ids,
    )
    p = build_positions([Text(1), Video(grid=(8, 4, 4), wrap=False), Text(1)], model="qwen2-vl")
    video_t = p.ids[0, 1:-1]
    assert p.ids[0, -1] == video_t.max() + 1 == 1 + 7 + 1  # hand-checked: s=1, tau(7)=7
    q = build_positions(
        [Text(1), Video(grid=(8, 4, 4), wrap=False), Text(1)], rules={"advance": "spatial"}, model="qwen2-vl"
    )
    assert q.ids[0, -1] == 1 + 2 and q.ids[0, -1] <= video_t.max()  # overlaps the video's t values


def test_qwen25_time_matches_hand_computation() -> None:
    # 8 patches at 0.5 fps (4 s per patch, 2 tokens per second): tau = 8 i; text resumes at s + 56 + 1
    p = build_positions([Text(1), Video(grid=(8, 4, 4), fps=0.5, wrap=False), Text(1)], model="qwen2.5-vl")
    assert sorted(set(p.ids[0, 1:-1].tolist())) == [1 + 8 * i for i in range(8)]
    assert p.ids[0, -1] == 1 + 56 + 1


# --------------------------------------------------------------------------------------- properties


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(0, 6).map(Text),
            st.tuples(st.integers(1, 4), st.integers(1, 4)).map(
                lambda hw: Image(grid=(1, 2 * hw[0], 2 * hw[1]))
            ),
            st.tuples(st.integers(1, 4), st.sampled_from([0.5, 1.0, 2.0, 3.0, 8.0])).map(
                lambda tf: Video(grid=(tf[0], 2, 4), fps=tf[1])
            ),
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"]),
)
def test_token_form_property(segs: list, model: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MRopeWarning)
        p = build_positions(segs, model=model, tokenizer=stamp_tokens)
    pos, deltas = mrope.numpy_rope_index(
        p.input_ids[None],
        p.image_grid_thw,
        p.video_grid_thw,
        model=model,
        second_per_grid_ts=p.second_per_grid_ts,
    )
    np.testing.assert_array_equal(pos[:, 0], p.ids)
    assert deltas.tolist() == [p.delta]


# ---------------------------------------------------------------------------------------- bad input


def _ids(*parts: tuple[int, int]) -> torch.Tensor:
    return torch.tensor([[tok for tok, n in parts for _ in range(n)]])


IMG, VID, VS, VE = 151655, 151656, 151652, 151653


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (
            lambda: get_rope_index(
                _ids((1, 2), (VS, 1), (IMG, 5), (VE, 1)), [[1, 4, 4], [1, 4, 4]], model="qwen2-vl"
            ),
            "needs 4 placeholder tokens, but the run has 1 left",
        ),
        (
            lambda: get_rope_index(_ids((VS, 1), (IMG, 3), (VE, 1)), [[1, 4, 4]], model="qwen2-vl"),
            "needs 4 placeholder tokens, but the run has 3",
        ),
        (
            lambda: get_rope_index(
                _ids((VS, 1), (IMG, 4), (VE, 1), (VS, 1), (IMG, 4)), [[1, 4, 4]], model="qwen2-vl"
            ),
            "need more image_grid_thw",
        ),
        (
            lambda: get_rope_index(
                _ids((VS, 1), (IMG, 4), (VE, 1)), [[1, 4, 4], [1, 2, 2]], model="qwen2-vl"
            ),
            "2 image_grid_thw rows given but the placeholder runs use 1",
        ),
        (
            lambda: get_rope_index(_ids((VS, 1), (VID, 4), (VE, 1)), model="qwen2-vl"),
            "need more video_grid_thw",
        ),
        (
            lambda: get_rope_index(_ids((VS, 1), (IMG, 4)), [[1, 0, 4]], model="qwen2-vl"),
            "every grid dim must be >= 1",
        ),
        (
            lambda: get_rope_index(_ids((VS, 1), (IMG, 4)), [[1, -4, 4]], model="qwen2-vl"),
            "every grid dim must be >= 1",
        ),
        (
            lambda: get_rope_index(_ids((VS, 1), (IMG, 4)), [[1, 3, 4]], model="qwen2-vl"),
            "multiples of the merge size 2",
        ),
        (lambda: get_rope_index(_ids((VS, 1), (IMG, 4)), [[1, 4]], model="qwen2-vl"), r"shape \[n, 3\]"),
        (lambda: get_rope_index(torch.tensor([1, 2, 3]), model="qwen2-vl"), "input_ids must be 2-D"),
        (
            lambda: get_rope_index(
                torch.ones(1, 3, dtype=torch.long), attention_mask=torch.ones(1, 4), model="qwen2-vl"
            ),
            "attention_mask must have the shape",
        ),
        (
            lambda: get_rope_index(
                torch.ones(1, 3, dtype=torch.long), attention_mask=torch.full((1, 3), 2), model="qwen2-vl"
            ),
            "only 0 and 1",
        ),
        (
            lambda: get_rope_index(
                torch.ones(1, 3, dtype=torch.long), mm_token_type_ids=torch.ones(1, 2), model="qwen2-vl"
            ),
            "mm_token_type_ids must have",
        ),
        (
            lambda: get_rope_index(
                torch.ones(1, 3, dtype=torch.long), mm_token_type_ids=torch.full((1, 3), 5), model="qwen2-vl"
            ),
            "0 \\(text\\), 1 \\(image\\) or 2",
        ),
        (lambda: get_rope_index(torch.ones(1, 3), model="qwen9"), "unknown model"),
        (lambda: get_rope_index(torch.ones(1, 3), model="qwen2-vl"), "integer token ids"),
        (
            lambda: get_rope_index(
                _ids((VID, 4)), video_grid_thw=[[1, 4, 4]], second_per_grid_ts=[1.0, 2.0], model="qwen2-vl"
            ),
            "2 values for 1",
        ),
        (
            lambda: get_rope_index(
                _ids((VID, 4)),
                video_grid_thw=[[1, 4, 4]],
                second_per_grid_ts=[float("nan")],
                model="qwen2-vl",
            ),
            "finite and > 0",
        ),
    ],
)
def test_bad_input_is_a_token_error(call, needle: str) -> None:
    with pytest.raises(mrope.MRopeError, match=needle) as info:
        call()
    assert isinstance(info.value, (TokenError, mrope.LayoutError))


def test_grids_are_consumed_in_order_across_the_batch() -> None:
    ids = torch.tensor([[VS, IMG, IMG, IMG, IMG, VE], [VS, IMG, VE, 0, 0, 0]])
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    pos, deltas = get_rope_index(ids, [[1, 4, 4], [1, 2, 2]], attention_mask=mask, model="qwen2-vl")
    assert pos[:, 1, :3].tolist() == [[0, 1, 2]] * 3
    assert pos[:, 1, 3:].eq(1).all() and deltas.tolist() == [[-2], [0]]


def test_every_mask_layout_and_dtype_matches_transformers() -> None:
    """Full, left-padded, right-padded and holed rows (text masked out mid-row), with the mask as int64,
    int32, uint8, bool or float32, in both the token-scan and the type-ids form: transformers 5.24's own
    get_rope_index gives the expected positions and deltas (it selects each row's tokens with the mask)."""
    p = build_positions(SEGMENTS[:4] + [Text(4)], model="qwen2-vl", tokenizer=stamp_tokens)
    n, pad = p.num_tokens, 7
    ids = np.full((5, n + pad), 3, dtype=np.int64)
    mask = np.zeros_like(ids)
    ids[0, :n] = ids[1, pad:] = ids[2, :n] = ids[3, 1 : n + 1] = p.input_ids
    mask[0, :n] = mask[1, pad:] = mask[2, :n] = mask[3, 1 : n + 1] = 1
    mask[0, n:] = 1  # row 0: valid to the end (its tail is text too)
    ids[0, n:] = 5
    ids[4, :n] = p.input_ids  # row 4: holes: two text tokens masked out, before and after the image
    mask[4, :n] = 1
    mask[4, [1, n - 2]] = 0
    grids_i = torch.from_numpy(np.tile(p.image_grid_thw, (5, 1)))
    grids_v = torch.from_numpy(np.tile(p.video_grid_thw, (5, 1)))
    types = torch.from_numpy(mm_types(ids, "qwen2-vl") * mask)
    input_ids = torch.from_numpy(ids)
    hf_pos, hf_deltas = _hf("qwen2-vl")(
        input_ids, types, grids_i, grids_v, attention_mask=torch.from_numpy(mask)
    )
    for dtype in (torch.int64, torch.int32, torch.uint8, torch.bool, torch.float32):
        m = torch.from_numpy(mask).to(dtype)
        for kwargs in ({}, {"mm_token_type_ids": types}):
            pos, deltas = get_rope_index(
                input_ids, grids_i, grids_v, m, model="qwen2-vl", convention="transformers5", **kwargs
            )
            np.testing.assert_array_equal(pos.numpy(), hf_pos.numpy())
            np.testing.assert_array_equal(deltas.numpy(), hf_deltas.numpy())


def test_all_ones_mask_equals_no_mask_and_empty_rows_are_padding() -> None:
    p = build_positions(SEGMENTS, model="qwen2-vl", tokenizer=stamp_tokens)
    ids = torch.from_numpy(np.stack([p.input_ids, p.input_ids]))
    grids_i = np.tile(p.image_grid_thw, (2, 1))
    grids_v = np.tile(p.video_grid_thw, (2, 1))
    bare, bare_deltas = get_rope_index(ids, grids_i, grids_v, model="qwen2-vl")
    for mask in (torch.ones_like(ids), torch.ones_like(ids, dtype=torch.bool), np.ones(ids.shape, np.int8)):
        pos, deltas = get_rope_index(ids, grids_i, grids_v, mask, model="qwen2-vl")
        assert torch.equal(pos, bare) and torch.equal(deltas, bare_deltas)
    np.testing.assert_array_equal(bare[:, 0].numpy(), p.ids)
    # a row with no valid token: every slot holds the pad value and its delta is 0 (no token, none past it)
    mask = torch.ones_like(ids)
    mask[1] = 0
    pos, deltas = get_rope_index(
        ids, p.image_grid_thw, p.video_grid_thw, mask, model="qwen2-vl", pad_position=-3
    )
    np.testing.assert_array_equal(pos[:, 0].numpy(), p.ids)
    assert pos[:, 1].eq(-3).all() and deltas.tolist() == [[p.delta], [0]]


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"attention_mask": np.array([[1, -1, 1]], dtype=">i8")}, "only 0 and 1"),  # not native byte order
        ({"attention_mask": np.array([[1, 256, 1]], dtype=np.int16)}, "only 0 and 1"),
        ({"attention_mask": np.array([[2, 0, 0]])}, "only 0 and 1"),  # in the padding
        ({"attention_mask": np.array([[1.0, 0.5, 1.0]])}, "only 0 and 1"),
        ({"mm_token_type_ids": np.array([[0, -1, 0]], dtype=">i4")}, "0 \\(text\\), 1 \\(image\\) or 2"),
        ({"mm_token_type_ids": np.array([[7, 0, 0]])}, "0 \\(text\\), 1 \\(image\\) or 2"),  # the first run
        ({"mm_token_type_ids": np.array([[0, 0, -1]])}, "0 \\(text\\), 1 \\(image\\) or 2"),  # the last run
        (  # a bad type under the mask is still bad
            {"mm_token_type_ids": np.array([[3, 0, 0]]), "attention_mask": np.array([[0, 1, 1]])},
            "0 \\(text\\), 1 \\(image\\) or 2",
        ),
        ({"image_grid_thw": torch.tensor([[True, True, True]])}, "must hold integers"),
        ({"image_grid_thw": torch.tensor([[1.5, 2.0, 2.0]])}, "must hold integers"),
        ({"image_grid_thw": torch.tensor([[1, 2, 2, 2]])}, r"shape \[n, 3\]"),
    ],
)
def test_fast_paths_still_reject_bad_input(kwargs: dict, needle: str) -> None:
    with pytest.raises(TokenError, match=needle):
        get_rope_index(torch.tensor([[1, 2, 3]]), model="qwen2-vl", **kwargs)


def test_bfloat16_second_per_grid_is_read_as_its_values() -> None:
    """A model run in bf16 hands ``second_per_grid_ts`` as bf16 (transformers' model tests cast every float
    input to the model's dtype); numpy has no bf16, so its values are read widened to float32, exactly:
    the positions equal those of the float32 tensor of the same values. Control: 0.35 s, which bf16
    rounds to 0.349609375, gives other positions (patch 10: ``trunc(10 * 0.35 * 2) = 7``, against
    ``trunc(10 * 0.349609375 * 2) = trunc(6.99) = 6``)."""
    p = build_positions([Text(3), Video(grid=(12, 4, 4), fps=2.0), Text(2)], model="qwen2.5-vl")
    ids = torch.from_numpy(p.input_ids)[None]
    grids = torch.tensor([[12, 4, 4]])
    spg = torch.tensor([0.35]).to(torch.bfloat16)
    assert float(spg.float()[0]) == 0.349609375

    def positions(second_per_grid: torch.Tensor) -> torch.Tensor:
        return get_rope_index(
            ids, video_grid_thw=grids, second_per_grid_ts=second_per_grid, model="qwen2.5-vl"
        )[0]

    got = positions(spg)
    assert torch.equal(got, positions(spg.float()))
    t_of_patch_10 = int(got[0, 0, 3 + 1 + 10 * 4])  # after 3 text tokens and the vision start
    assert t_of_patch_10 - int(got[0, 0, 4]) == 6
    assert not torch.equal(got, positions(torch.tensor([0.35])))
