"""The builder: literal cases, rules, tiles, crops, batches, decode, properties and errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mrope
from mrope import (
    Image,
    LayoutError,
    LayoutRules,
    MRopeWarning,
    Text,
    Video,
    build_batch,
    build_positions,
    next_positions,
    text_positions,
)
from mrope.models import get_family


def rows(p: mrope.Positions) -> list[list[int]]:
    return p.ids.tolist()


# ------------------------------------- literal cases (hand derivation of docs/conventions.md's rules)


def test_text_image_text_literal() -> None:
    p = build_positions([Text(2), Image(grid=(1, 4, 4), wrap=False), Text(2)], model="qwen2-vl")
    assert rows(p) == [
        [0, 1, 2, 2, 2, 2, 4, 5],
        [0, 1, 2, 2, 3, 3, 4, 5],
        [0, 1, 2, 3, 2, 3, 4, 5],
    ]
    assert p.delta == 6 - 8


def test_image_advances_by_max_side_not_token_count() -> None:
    # merged grid 3 x 5: 15 tokens, but the counter moves by max(H', W') = 5
    p = build_positions([Image(grid=(1, 6, 10), wrap=False), Text(1)], model="qwen2-vl")
    assert p.ids[:, -1].tolist() == [5, 5, 5]
    assert p.delta == 6 - 16


def test_wrappers_are_ordinary_text_tokens() -> None:
    p = build_positions([Text(1), Image(grid=(1, 2, 2)), Text(1)], model="qwen2-vl")
    assert rows(p) == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    assert p.input_ids.tolist() == [0, 151652, 151655, 151653, 0]
    assert [s.kind for s in p.spans] == ["text", "wrapper", "image", "wrapper", "text"]


def test_video_resumes_after_temporal_extent_max_plus_one() -> None:
    # Qwen2-VL: tau(i) = i; a 4-patch video of 1x1 merged tokens ends at t = s + 3, so text resumes at
    # s + 4 (transformers 5.3+ would resume at s + 1 and overlap the video's t values).
    p = build_positions([Text(1), Video(grid=(4, 2, 2), wrap=False), Text(1)], model="qwen2-vl")
    assert rows(p) == [[0, 1, 2, 3, 4, 5], [0, 1, 1, 1, 1, 5], [0, 1, 1, 1, 1, 5]]
    spatial = build_positions(
        [Text(1), Video(grid=(4, 2, 2), wrap=False), Text(1)], rules={"advance": "spatial"}, model="qwen2-vl"
    )
    assert spatial.ids[:, -1].tolist() == [2, 2, 2]  # the transformers 5.x divergence, reproduced on request


def test_qwen25_seconds_multiply_then_floor() -> None:
    # 3 fps: second_per_grid = 2/3, tau = floor(i * 2/3 * 2) = floor(4i/3); old transformers truncated
    # second_per_grid to int(2/3) = 0 and collapsed every t to the start
    p = build_positions([Video(grid=(5, 2, 2), fps=3.0, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0].tolist() == [0, 1, 2, 4, 5]
    assert p.second_per_grid_ts.tolist() == pytest.approx([2 / 3])
    # 1 fps: 2 s per patch -> t steps by 4
    p = build_positions([Video(grid=(3, 2, 2), fps=1.0, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0].tolist() == [0, 4, 8]
    # explicit second_per_grid wins over fps
    p = build_positions([Video(grid=(3, 2, 2), fps=1.0, second_per_grid=0.5, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0].tolist() == [0, 1, 2]


def test_high_fps_time_collision_is_reported_not_hidden() -> None:
    with pytest.warns(MRopeWarning, match="share t offset"):
        p = build_positions([Video(grid=(4, 2, 2), fps=8.0, wrap=False)], model="qwen2.5-vl")
    assert p.ids[0].tolist() == [0, 0, 1, 1]
    assert p.notes and "time resolution is lost above 4 fps" in p.notes[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_positions([Video(grid=(4, 2, 2), fps=4.0, wrap=False)], model="qwen2.5-vl")


def test_qwen3_timestamps_split_video_into_per_patch_blocks() -> None:
    seen: list[str] = []

    def tokenizer(text: str) -> list[int]:
        seen.append(text)
        return [1000 + i for i in range(len(text))]

    # 4 sampled frames at 0, 0.5, 1.0, 1.5 s -> two patches at 0.25 s and 1.25 s
    video = Video(grid=(2, 4, 4), fps=2.0)
    p = build_positions([Text(1), video], model="qwen3-vl", tokenizer=tokenizer)
    assert seen == ["<0.2 seconds>", "<1.2 seconds>"]  # Python's .1f rounds half to even
    kinds = [s.kind for s in p.spans]
    assert kinds == ["text", "timestamp", "wrapper", "video", "wrapper"] * 1 + [
        "timestamp",
        "wrapper",
        "video",
        "wrapper",
    ]
    # each patch block starts fresh at max + 1 with t equal to its start (tau = 0)
    first = next(s for s in p.spans if s.kind == "video")
    block = p.ids[:, first.start : first.stop]
    assert (block[0] == block[0, 0]).all() and block[1].max() - block[1].min() == 1
    # frame_times given explicitly (e.g. a variable-rate file), padded by repeating the last frame
    seen.clear()
    build_positions(
        [Video(grid=(2, 4, 4), frame_times=(0.0, 0.4, 1.1))], model="qwen3-vl", tokenizer=tokenizer
    )
    assert seen == ["<0.2 seconds>", "<1.1 seconds>"]


def test_qwen3_video_without_tokenizer_names_the_option() -> None:
    with pytest.raises(LayoutError, match="tokenizer="):
        build_positions([Video(grid=(2, 4, 4))], model="qwen3-vl")
    # bare vision tokens need no tokenizer
    p = build_positions([Video(grid=(2, 4, 4), wrap=False)], model="qwen3-vl")
    assert p.ids[0].tolist() == [0, 0, 0, 0, 2, 2, 2, 2]


def test_qwen3_accepts_a_tokenizers_tokenizer() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate("<>.0123456789 secondsUNK")}
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    p = build_positions([Video(grid=(1, 2, 2))], model="qwen3-vl", tokenizer=tok)
    stamp = [s for s in p.spans if s.kind == "timestamp"][0]
    assert stamp.stop - stamp.start == len("<0.2 seconds>")


def test_a_tokenizer_json_path_is_loaded_as_the_pipeline_loads_it(tmp_path) -> None:
    """``tokenizer="path/to/tokenizer.json"`` (str or Path) gives what the loaded tokenizer gives, as the
    pipeline's and the command line's ``tokenizer`` paths do; a file that is no tokenizer.json is named."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate("<>.0123456789 secondsUNK")}
    vocab["[UNK]"] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    segs = [Video(grid=(4, 2, 2), fps=1.0)]
    want = build_positions(segs, model="qwen3-vl", tokenizer=tok)
    for source in (str(path), path):
        got = build_positions(segs, model="qwen3-vl", tokenizer=source)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.input_ids, want.input_ids)
        assert mrope.count_tokens(segs, model="qwen3-vl", tokenizer=source) == want.num_tokens
    # negative control: the one-token-per-stamp count without a tokenizer differs
    assert mrope.count_tokens(segs, model="qwen3-vl") != want.num_tokens
    bad = tmp_path / "not-a-tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(LayoutError, match="not-a-tokenizer.json.*as a tokenizer.json"):
        build_positions(segs, model="qwen3-vl", tokenizer=str(bad))


# ------------------------------------------------------------------------------- spatial rules


def test_spatial_reset_and_centered() -> None:
    segs = [Text(3), Image(grid=(1, 4, 8), wrap=False), Text(1)]
    reset = build_positions(segs, rules={"spatial": "reset"}, model="qwen2-vl")
    assert reset.ids[0, 3:11].tolist() == [3] * 8
    assert reset.ids[1, 3:11].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert reset.ids[2, 3:11].tolist() == [0, 1, 2, 3] * 2
    assert reset.ids[:, -1].tolist() == [4, 4, 4]  # max so far (3) + 1
    centered = build_positions(segs, rules={"spatial": "centered"}, model="qwen2-vl")
    # 2 x 4 grid centred in the 4 x 4 square starting at s = 3: rows at 4, 5
    assert sorted(set(centered.ids[1, 3:11].tolist())) == [4, 5]
    assert sorted(set(centered.ids[2, 3:11].tolist())) == [3, 4, 5, 6]


# -------------------------------------------------------------------------------- tiles and crops


def test_global_tiles_keep_untiled_geometry_in_any_order() -> None:
    whole = build_positions([Image(grid=(1, 8, 12), wrap=False)], model="qwen2-vl")  # merged 4 x 6
    coords_whole = {(h, w): t for t, h, w in whole.ids.T.tolist()}
    for order in [None, (5, 0, 3, 1, 4, 2)]:
        tiled = build_positions(
            [Image(grid=(1, 8, 12), tiles=(3, 2), tile_order=order, wrap=False)], model="qwen2-vl"
        )
        assert tiled.num_tokens == whole.num_tokens
        assert {(h, w) for _, h, w in tiled.ids.T.tolist()} == set(coords_whole)
        for span in tiled.spans:
            r, c = span.tile
            block = tiled.ids[:, span.start : span.stop]
            assert block[1].min() == r * 2 and block[2].min() == c * 2
        assert tiled.delta == whole.delta


def test_independent_tiles_and_thumbnail() -> None:
    p = build_positions(
        [Image(grid=(1, 4, 8), tiles=(2, 1), thumbnail=True)],
        rules={"tiles": "independent"},
        model="qwen2-vl",
    )
    tiles = [s for s in p.spans if s.kind == "image"]
    thumb = [s for s in p.spans if s.kind == "thumbnail"]
    assert [s.tile for s in tiles] == [(0, 0), (0, 1)] and len(thumb) == 1
    starts = [int(p.ids[0, s.start]) for s in tiles + thumb]
    assert starts == [1, 3, 5]  # each its own block: s, then max + 1


def test_tiles_must_divide_the_grid() -> None:
    with pytest.raises(LayoutError, match="does not split into 3 rows"):
        build_positions([Image(grid=(1, 8, 8), tiles=(2, 3))], model="qwen2-vl")
    with pytest.raises(LayoutError, match="permutation"):
        Image(grid=(1, 8, 8), tiles=(2, 2), tile_order=(0, 1, 2, 2))


def test_crop_origin_keep_and_reset() -> None:
    # whole image: merged 6 x 8; crop of merged 2 x 3 at origin (row 3, col 4)
    whole = build_positions([Image(grid=(1, 12, 16), wrap=False)], rules={"crop": "keep"}, model="qwen2-vl")
    crop = Image(grid=(1, 4, 6), origin=(3, 4), wrap=False)
    kept = build_positions([crop], rules={"crop": "keep"}, model="qwen2-vl")
    hw_whole = whole.ids[1:].reshape(2, 6, 8)[:, 3:5, 4:7].reshape(2, -1)
    np.testing.assert_array_equal(kept.ids[1:], hw_whole)
    reset = build_positions([crop], model="qwen2-vl")  # the released models' behaviour
    assert reset.ids[1].min() == 0 and reset.ids[2].min() == 0


# ------------------------------------------------------------------------------ batches and decode


def test_batch_left_and_right_padding_agree() -> None:
    samples = [[Text(3), Image(grid=(1, 4, 4)), Text(2)], [Text(1)], [Video(grid=(2, 4, 4)), Text(4)]]
    left = build_batch(samples, padding_side="left", model="qwen2-vl")
    right = build_batch(samples, padding_side="right", model="qwen2-vl")
    for row in range(3):
        lv = left.ids[:, row][:, left.attention_mask[row] == 1]
        rv = right.ids[:, row][:, right.attention_mask[row] == 1]
        np.testing.assert_array_equal(lv, rv)
        np.testing.assert_array_equal(lv, build_positions(samples[row], model="qwen2-vl").ids)
    assert (left.ids[:, 1, :-1] == 1).all()  # pad fill value
    assert left.deltas.tolist() == [p.delta for p in left.sequences]
    zero = build_batch(samples, pad_position=0, model="qwen2-vl")
    assert (zero.ids[:, 1, :-1] == 0).all()
    pos, mask, deltas = left.torch()
    assert tuple(pos.shape) == (3, 3, left.ids.shape[2]) and tuple(deltas.shape) == (3, 1)


def test_to_dict_is_json_ready() -> None:
    import json

    p = build_positions([Text(2), Image(grid=(1, 4, 4)), Video(grid=(2, 4, 4), fps=1.0)], model="qwen2.5-vl")
    d = json.loads(json.dumps(p.to_dict()))
    assert d["positions"] == p.ids.tolist() and d["delta"] == p.delta and d["num_tokens"] == p.num_tokens
    assert d["image_grid_thw"] == [[1, 4, 4]] and d["video_grid_thw"] == [[2, 4, 4]]
    assert d["second_per_grid_ts"] == [2.0] and d["notes"] == []
    assert d["spans"][2] == {"kind": "image", "start": 3, "stop": 7, "index": 1, "grid": [1, 2, 2]}
    assert set(p.metadata()) == set(d) - {"positions"}


def test_next_positions_and_window() -> None:
    p = build_positions([Text(2), Image(grid=(1, 8, 8)), Text(1)], model="qwen2-vl")
    assert next_positions(p.delta, p.num_tokens, 3).tolist() == [[p.ids.max() + 1 + i for i in range(3)]] * 3
    full = build_positions([Text(2), Image(grid=(1, 8, 8)), Text(1), Text(5)], model="qwen2-vl")
    np.testing.assert_array_equal(p.window(0, p.num_tokens + 5), full.ids)
    np.testing.assert_array_equal(p.window(5, 12), full.ids[:, 5:12])
    for a, b in ((5, 12), (0, 4), (p.num_tokens - 2, p.num_tokens + 3), (p.num_tokens, p.num_tokens + 2)):
        buffer = np.full((3, b - a), -7, dtype=np.int64)  # into the caller's buffer: the same window
        assert p.window(a, b, out=buffer) is buffer
        np.testing.assert_array_equal(buffer, full.ids[:, a:b])
    for bad in (np.zeros((3, 6), dtype=np.int64), np.zeros((3, 7), dtype=np.int32)):
        with pytest.raises(LayoutError, match=r"out must be a int64 array of shape \[3, 7\]"):
            p.window(5, 12, out=bad)
    batch = next_positions(np.array([0, -3]), 4, 2)
    assert batch.shape == (3, 2, 2) and batch[0].tolist() == [[4, 5], [1, 2]]
    with pytest.raises(LayoutError):
        next_positions(0, -1, 2)
    with pytest.raises(LayoutError):
        next_positions(np.array([[1]]), 0, 2)


# ------------------------------------------------------------------------------------ properties


@st.composite
def segment_lists(draw: st.DrawFn) -> list:
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["text", "image", "video", "tiled"]))
        if kind == "text":
            out.append(Text(draw(st.integers(0, 7))))
        elif kind == "image":
            out.append(Image(grid=(1, 2 * draw(st.integers(1, 5)), 2 * draw(st.integers(1, 5)))))
        elif kind == "tiled":
            cols, rows_ = draw(st.integers(1, 3)), draw(st.integers(1, 3))
            out.append(
                Image(
                    grid=(1, 2 * rows_ * draw(st.integers(1, 2)), 2 * cols * draw(st.integers(1, 2))),
                    tiles=(cols, rows_),
                    thumbnail=draw(st.booleans()),
                )
            )
        else:
            out.append(
                Video(grid=(draw(st.integers(1, 5)), 4, 2), fps=draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])))
            )
    return out


def stamp_tokens(text: str) -> list[int]:
    return [ord(c) for c in text]


@given(st.integers(0, 300))
def test_text_only_is_0_to_t_minus_1_on_every_axis(n: int) -> None:
    p = build_positions([Text(n)], model="qwen2-vl")
    np.testing.assert_array_equal(p.ids, text_positions(n))
    assert p.delta == 0


@settings(max_examples=60, deadline=None)
@given(segment_lists(), st.sampled_from(["qwen2-vl", "qwen2.5-vl", "glm-4.1v"]), st.integers(1, 6))
def test_properties(segs: list, model: str, k: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MRopeWarning)
        p = build_positions(segs, model=model, tokenizer=stamp_tokens)
        assert mrope.count_tokens(segs, model=model, tokenizer=stamp_tokens) == p.num_tokens
        # spans cover every token exactly once, in order
        cursor = 0
        for span in p.spans:
            assert span.start == cursor and span.stop > span.start
            cursor = span.stop
        assert cursor == p.num_tokens
        # delta definition
        top = int(p.ids.max()) if p.num_tokens else -1
        assert p.delta == top + 1 - p.num_tokens
        # every piece starts past everything before it
        for span in p.spans:
            if span.start and span.kind in ("text", "wrapper"):
                assert p.ids[0, span.start] == p.ids[:, : span.start].max() + 1
        # prefix + decode continuation equals the whole sequence
        whole = build_positions(segs + [Text(k)], model=model, tokenizer=stamp_tokens)
        np.testing.assert_array_equal(p.window(0, p.num_tokens + k), whole.ids)
        # time is non-decreasing along every video
        for span in p.spans:
            if span.kind == "video":
                assert np.all(np.diff(p.ids[0, span.start : span.stop]) >= 0)


# ------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: build_positions([Image(grid=(1, 0, 4))], model="qwen2-vl"), "positive ints"),
        (lambda: build_positions([Image(grid=(1, -2, 4))], model="qwen2-vl"), "positive ints"),
        (lambda: build_positions([Image(grid=(1, 3, 4))], model="qwen2-vl"), "multiples of the merge size 2"),
        (lambda: build_positions([Image(grid=(1, 2.5, 4))], model="qwen2-vl"), "positive ints"),
        (lambda: build_positions([Image(grid=(1, 2))], model="qwen2-vl"), "positive ints"),
        (lambda: build_positions([Text(1)], model="llava"), "unknown model 'llava'"),
        (lambda: build_positions(["hello"], model="qwen2-vl"), "expected mrope.Text"),
        (lambda: build_positions(Text(3), model="qwen2-vl"), "must be a list"),
        (lambda: build_positions([Text(-1)], model="qwen2-vl"), ">= 0"),
        (
            lambda: build_positions([Video(grid=(2, 4, 4), fps=0.0)], model="qwen2-vl"),
            "fps must be a finite number > 0",
        ),
        (lambda: build_positions([Video(grid=(2, 4, 4), fps=float("nan"))], model="qwen2-vl"), "fps must be"),
        (
            lambda: build_positions([Text(1)], rules={"temporal": "frames"}, model="qwen2-vl"),
            "temporal must be one of",
        ),
        (
            lambda: build_positions([Text(1)], rules={"bogus": 1}, model="qwen2-vl"),
            "unknown LayoutRules fields",
        ),
        (lambda: build_batch([[Text(1)]], padding_side="middle", model="qwen2-vl"), "padding_side"),
        (lambda: build_batch([], model="qwen2-vl"), "non-empty"),
        (lambda: Video(grid=(2, 4, 4), frame_times=(1.0, 0.5)), "non-decreasing"),
        (lambda: build_positions([Video(grid=(4, 4, 4), fps=1e-300)], model="qwen2.5-vl"), "overflow"),
        (
            lambda: build_positions(
                [Image(grid=(1, 4, 4), origin=(2**39, 0))], rules={"crop": "keep"}, model="qwen2-vl"
            ),
            None,
        ),
        (lambda: Image(grid=(1, 4, 4), origin=(2**70, 0)), r"\[0, 2\*\*40\)"),
        (lambda: Text([2**64]), r"\[0, 2\*\*63\)"),
        (lambda: Text([1.5, 2.0]), "integer token ids"),  # 2.0 too: no silent truncation
        (lambda: Text([True, 2]), "integer token ids"),
        (lambda: Text(np.array([1.0, 2.0])), "integer token ids"),
        (lambda: Text(np.array([[1, 2]])), "integer token ids"),
        (lambda: Text(np.array([True])), "integer token ids"),
        (lambda: Text([1] * 10_000 + [0.5]), r"\[1, 1, 1, 1, 1, 1, \.\.\.\]$"),  # a bounded message
        (lambda: Image(grid=(1, 4, 4), origin=(1.5, 0.2)), "origin must be"),
        (lambda: Image(grid=(1, 4, 4), tiles=(2.7, 1)), "tiles must be"),
        (lambda: Image(grid=(1, 4, 4), tiles=(2, 1), tile_order=["a", 1]), "permutation"),
        (lambda: Image(grid=(1, 4, 4), tiles=(2, 1), tile_order=5), "permutation"),
        (lambda: Image(grid="144"), "grid must be"),
        (lambda: Image(grid=(1, True, 4)), "grid must be"),
        (
            lambda: build_positions([Image(grid=(1, 2**21, 2**21), tiles=(2**10, 2**10))], model="qwen2-vl"),
            "at most 65536",
        ),
        (
            lambda: build_positions(
                [Video(grid=(2, 4, 4), frame_times=(0.0,) * 7)], model="qwen3-vl", tokenizer=lambda s: [1]
            ),
            "grid has t = 2",
        ),
    ],
)
def test_bad_input_is_a_clear_project_error(make, needle: str | None) -> None:
    if needle is None:  # legal at the edge: must work, not overflow
        make()
        return
    with pytest.raises(mrope.MRopeError, match=needle):
        make()


def test_count_tokens_needs_no_positions() -> None:
    huge = [Text(5), Image(grid=(1, 20000, 20000)), Video(grid=(1000, 200, 200))]
    assert mrope.count_tokens(huge, model="qwen2-vl") == 5 + 2 + 10000 * 10000 + 2 + 1000 * 100 * 100
    # without a tokenizer each timestamp counts as one token
    assert mrope.count_tokens([Video(grid=(3, 4, 4))], model="qwen3-vl") == 3 * (1 + 1 + 4 + 1)
    assert mrope.count_tokens([Video(grid=(3, 4, 4))], model="glm-4.1v") == 2 + 3 * (1 + 1 + 4 + 1)
    # arithmetic for any video length
    assert mrope.count_tokens([Video(grid=(10**9, 2, 2))], model="qwen3-vl") == 10**9 * 4
    for model in ("qwen2-vl", "qwen3-vl", "glm-4.1v"):
        for video in (Video(grid=(3, 4, 6)), Video(grid=(2, 2, 2), wrap=False)):
            built = build_positions([video], model=model, tokenizer=lambda s: [9])
            assert mrope.count_tokens([video], model=model) == built.num_tokens


def test_rules_presets_and_replace() -> None:
    assert get_family("qwen2.5-vl").rules.temporal == "seconds"
    assert get_family("qwen3-vl").rules.temporal == "timestamps"
    assert get_family("qwen3-vl").rules.resize_factor == 32
    assert get_family("qwen2-vl").rules.resize_factor == 28
    rules = get_family("qwen2-vl").rules.replace(tiles="independent")
    assert LayoutRules.from_dict(rules.to_dict()) == rules


def test_text_takes_integer_arrays_and_tensors_as_python_ints() -> None:
    import torch

    for ids in (np.array([7, 8], dtype=np.uint8), torch.tensor([7, 8], dtype=torch.int32), [np.int64(7), 8]):
        text = Text(ids)
        assert text.token_ids == (7, 8) and all(type(i) is int for i in text.token_ids)
    with pytest.raises(mrope.MRopeError, match="integer token ids"):
        Text(torch.tensor([7.0, 8.0]))
