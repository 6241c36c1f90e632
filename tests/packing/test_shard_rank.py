"""The rank-local shard (mrope.packing.shard_samples: a rank's token ranges written from the samples'
plans) against the padded packed row written out token by token in test_shard.py and against
``mrope.packing.shard`` of the built row (its vision map included), bit for bit, for every family that
packs."""

from __future__ import annotations

import numpy as np
import pytest
from support.tiny_vlm import CONFIG_IDS
from test_shard import PACKED, WORLD_SIZES, _padded_row, _row, _samples, _tok

import mrope
from mrope import Image, Text, Video
from mrope._errors import PackingError
from mrope._layout.counter import CounterPlan
from mrope.packing import shard, shard_samples

KEYS = (
    "input_ids",
    "position_ids",
    "mm_token_type_ids",
    "labels",
    "token_index",
    "cu_seqlens_padded",
    "vision_item",
    "vision_index",
)


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("name", PACKED)
def test_rank_local_shards_equal_the_shards_of_the_built_row(name: str, layout: str) -> None:
    row = _row(name)
    samples = [_samples(name)[i] for i in row.samples]
    for world_size in WORLD_SIZES:
        expected = _padded_row(row, world_size, layout)
        built = []
        for rank in range(world_size):
            got = shard_samples(
                samples,
                model=name,
                tokenizer=_tok,
                rules=CONFIG_IDS.get(name),
                world_size=world_size,
                rank=rank,
                layout=layout,
            )
            want = shard(row, world_size=world_size, rank=rank, layout=layout)
            for key in KEYS:
                a, b = got[key], getattr(want, key)
                assert a.dtype == b.dtype and np.array_equal(a, b), (name, layout, world_size, rank, key)
            assert got["max_seqlen"] == want.max_seqlen
            built.append(got)
        assert any((g["vision_item"] >= 0).any() for g in built)  # the map is not vacuous
        order = np.argsort(np.concatenate([g["token_index"] for g in built]))
        for key, want in expected.items():  # the hand-written padded row, put back by token_index
            put_back = np.concatenate([g[key] for g in built], axis=-1)[..., order]
            assert np.array_equal(put_back, want), (name, layout, world_size, key)


def _long_samples() -> list[list]:
    """Samples whose blocks and text runs are cut by the ranks' ranges (a video, images, long text)."""
    return [
        [Text(_tok("a" * 37)), Image(grid=(1, 14, 10)), Text(_tok("b" * 5)), Video(grid=(4, 8, 6), fps=2.0)],
        [Video(grid=(6, 4, 4), fps=1.0), Text(_tok("question " * 9))],
        [Text(_tok("x" * 3)), Image(grid=(1, 6, 22)), Image(grid=(1, 10, 4)), Text(_tok("y" * 61))],
    ]


@pytest.mark.parametrize("name", ["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v"])
def test_counter_families_fill_ranges_without_building_a_sample(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = CONFIG_IDS.get(name)
    samples = _long_samples()
    (row,) = list(
        mrope.pack(samples, model=name, tokenizer=_tok, rules=rules, max_length=8192, mode="stream")
    )
    assert list(row.samples) == [0, 1, 2]

    def whole(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("the rank-local build filled a whole sample")

    monkeypatch.setattr(CounterPlan, "positions", whole)
    for layout in ("zigzag", "contiguous"):
        for world_size in (3, 8):
            for rank in range(world_size):
                got = shard_samples(
                    samples,
                    model=name,
                    tokenizer=_tok,
                    rules=rules,
                    world_size=world_size,
                    rank=rank,
                    layout=layout,
                )
                want = shard(row, world_size=world_size, rank=rank, layout=layout)
                for key in KEYS:
                    assert np.array_equal(got[key], getattr(want, key)), (layout, world_size, rank, key)
    # negative control: the same tokens one place further on in their samples differ
    shifted = shard_samples(
        samples, model=name, tokenizer=_tok, rules=rules, world_size=8, rank=1, layout="zigzag"
    )
    plain = shard(row, world_size=8, rank=2, layout="zigzag")
    assert not np.array_equal(shifted["position_ids"], plain.position_ids)


def test_rank_arrays_refuses_a_bad_split_and_no_samples() -> None:
    samples = _long_samples()
    with pytest.raises(PackingError, match="rank must be"):
        shard_samples(samples, model="qwen2-vl", tokenizer=_tok, world_size=2, rank=2)
    with pytest.raises(PackingError, match="layout must be"):
        shard_samples(samples, model="qwen2-vl", tokenizer=_tok, world_size=2, rank=0, layout="ring")
    with pytest.raises(PackingError, match="at least one sample"):
        shard_samples([], model="qwen2-vl", world_size=2, rank=0)


def test_pruned_and_built_samples_are_cut_from_their_own_build() -> None:
    keep = np.arange(7 * 5) % 3 != 1  # an image of 7 x 5 merged tokens, every third dropped
    samples = _long_samples()
    samples.insert(1, [Text(_tok("pruned")), Image(grid=(1, 14, 10), keep=keep), Text(_tok("end"))])
    samples.append(mrope.build_positions([Text(_tok("built")), Image(grid=(1, 4, 6))], model="qwen2-vl"))
    (row,) = list(mrope.pack(samples, model="qwen2-vl", tokenizer=_tok, max_length=8192, mode="stream"))
    assert list(row.samples) == list(range(len(samples)))
    assert int(np.diff(row.cu_seqlens)[1]) == 6 + int(keep.sum()) + 2 + 3  # the pruned sample is short
    for layout in ("zigzag", "contiguous"):
        for world_size in (1, 3, 4):
            for rank in range(world_size):
                got = shard_samples(
                    samples, model="qwen2-vl", tokenizer=_tok, world_size=world_size, rank=rank, layout=layout
                )
                want = shard(row, world_size=world_size, rank=rank, layout=layout)
                for key in KEYS:
                    assert np.array_equal(got[key], getattr(want, key)), (layout, world_size, rank, key)


@pytest.mark.parametrize(
    ("name", "rules"),
    [("mrope-interleave", None), ("videorope", None), ("videorope", {"temporal_stride": 1.5})],
)
def test_research_schemes_are_built_whole_and_cut(name: str, rules: dict | None) -> None:
    """The piece table evaluates the max+1 and spatial advances on int64 positions only; samples under
    the research schemes' ``block`` / ``time`` advances or a fractional stride are built whole and cut,
    so each rank's arrays equal the shard of the packed row (the table would have lifted MRoPE-I's next
    piece past the reset block's h / w, and refused float time)."""
    samples = [
        [Text(5), Image(grid=(1, 8, 12)), Text(3), Video(grid=(4, 6, 4), second_per_grid=1.0), Text(2)],
        [Text(2), Image(grid=(1, 10, 6)), Text(4)],
    ]
    (row,) = list(
        mrope.pack(samples, model=name, rules=rules, tokenizer=_tok, max_length=8192, mode="stream")
    )
    assert row.position_ids.dtype == (np.float32 if rules else np.int64)
    for layout in ("zigzag", "contiguous"):
        for rank in range(2):
            got = shard_samples(
                samples, model=name, rules=rules, tokenizer=_tok, world_size=2, rank=rank, layout=layout
            )
            want = shard(row, world_size=2, rank=rank, layout=layout)
            for key in KEYS:
                a, b = got[key], getattr(want, key)
                assert a.dtype == b.dtype and np.array_equal(a, b), (layout, rank, key)
    # negative control: the base family's row (h and w from the block start) shards otherwise
    base = "qwen3-vl" if name == "mrope-interleave" else "qwen2-vl"
    (base_row,) = list(mrope.pack(samples, model=base, tokenizer=_tok, max_length=8192, mode="stream"))
    mine = shard_samples(samples, model=name, rules=rules, tokenizer=_tok, world_size=2, rank=0)
    assert not np.array_equal(shard(base_row, world_size=2, rank=0).position_ids, mine["position_ids"])
