"""mrope.packing.shard against rules written out here: the shards of a packed row, put back in global order
by ``token_index``, equal the padded packed row built here token by token; zigzag's order is
TransformerEngine's THD partition, contiguous's the Ulysses slice."""

from __future__ import annotations

import numpy as np
import pytest
from support.tiny_vlm import CONFIG_IDS

import mrope
from mrope import Image, Text, Video
from mrope._errors import MRopeError, PackingError
from mrope.models import get_family, names, resolve_rules
from mrope.packing import ShardedRow, shard

PACKED = [n for n in names() if get_family(n).packed_input != "none"]
WORLD_SIZES = (1, 2, 3, 4, 8)


def _tok(text: str) -> list[int]:
    return [1000 + ord(c) % 500 for c in text]


def _samples(name: str) -> list[list]:
    m = resolve_rules(name, None, "released").merge_size
    video = Video(grid=(2, 2 * m, 2 * m), fps=2.0)
    try:
        mrope.build_positions([video], model=name, tokenizer=_tok, rules=CONFIG_IDS.get(name))
    except MRopeError:  # rules without videos
        video = Image(grid=(1, 2 * m, 2 * m))
    return [
        [Text(_tok("describe")), Image(grid=(1, 2 * m, 3 * m)), Text(_tok("then")), video, Text(_tok("ok?"))],
        [Text(_tok("hi"))],
        [Image(grid=(1, 2 * m, 2 * m)), Text(_tok("this one, please, in detail"))],
        [Text(_tok("short")), Image(grid=(1, 4 * m, 2 * m)), Text(_tok("and done"))],
    ]


def _row(name: str) -> mrope.packing.PackedRow:
    batch = mrope.pack(
        _samples(name), model=name, tokenizer=_tok, rules=CONFIG_IDS.get(name), max_length=4096, mode="stream"
    )
    (row,) = list(batch)
    return row


def _segments(row, world_size: int, layout: str) -> list[tuple[int, int, int]]:
    """(sample or -1 for the row's padding, real tokens, padded tokens), written out from the two rules."""
    lengths = np.diff(row.cu_seqlens).tolist()
    if layout == "zigzag":
        return [(i, n, -(-n // (2 * world_size)) * 2 * world_size) for i, n in enumerate(lengths)]
    out = [(i, n, n) for i, n in enumerate(lengths)]
    tail = -sum(lengths) % world_size
    return out + ([(-1, 0, tail)] if tail else [])


def _padded_row(row, world_size: int, layout: str) -> dict[str, np.ndarray]:
    """The padded packed row, token by token: a sample's padding continues it (text row ``k``, M-RoPE rows
    ``k + delta`` as a decode step would), the row's padding restarts at 0 on every row; padding has id 0,
    type 0, label -100; a label is the sample's next token."""
    axes = row.position_ids.shape[0]
    ids, types, labels, cols = [], [], [], []
    for i, n, size in _segments(row, world_size, layout):
        start = int(row.cu_seqlens[i]) if i >= 0 else 0
        for k in range(size):
            if i < 0:
                col = np.full(axes, k, dtype=row.position_ids.dtype)
            elif k < n:
                col = row.position_ids[:, start + k]
            else:
                d = row.deltas[i]
                step = np.float32(k) + np.float32(d) if row.position_ids.dtype == np.float32 else k + int(d)
                col = np.array([k] + [step] * (axes - 1), dtype=row.position_ids.dtype)
            cols.append(col)
            real = i >= 0 and k < n
            ids.append(row.input_ids[start + k] if real else 0)
            types.append(row.mm_token_type_ids[start + k] if real else 0)
            labels.append(row.input_ids[start + k + 1] if real and k + 1 < n else -100)
    return {
        "input_ids": np.array(ids, dtype=np.int64),
        "mm_token_type_ids": np.array(types, dtype=np.int64),
        "labels": np.array(labels, dtype=np.int64),
        "position_ids": np.stack(cols, axis=1),
    }


def _te_partition(padded: list[int], world_size: int, rank: int) -> np.ndarray:
    """TransformerEngine's ``thd_partition_indices_kernel`` (transformer_engine/common/fused_attn/
    context_parallel.cu:83-106), one local token at a time: the local sequence boundaries are the padded
    ones over ``world_size``; local token ``t`` of sequence ``j`` (``index`` within it, local length
    ``s``) reads ``index + cu[j] * world_size + s / 2 * (rank if index < s / 2 else 2 * (world_size - 1)
    - rank)``."""
    cu = np.concatenate([[0], np.cumsum(padded)]) // world_size
    out = []
    for t in range(int(cu[-1])):
        j = int(np.searchsorted(cu, t, side="right")) - 1
        s = int(cu[j + 1] - cu[j])
        index = t - int(cu[j])
        offset = rank if index < s // 2 else (world_size - 1) * 2 - rank
        out.append(index + int(cu[j]) * world_size + s // 2 * offset)
    return np.array(out, dtype=np.int64)


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("name", PACKED)
def test_shards_put_back_equal_the_padded_row(name: str, layout: str) -> None:
    row = _row(name)
    assert len(row.samples) == 4
    for world_size in WORLD_SIZES:
        expected = _padded_row(row, world_size, layout)
        total = expected["input_ids"].shape[0]
        assert total % world_size == 0 and total > row.num_tokens - (layout == "contiguous")
        shards = [shard(row, world_size=world_size, rank=r, layout=layout) for r in range(world_size)]
        assert {s.num_tokens for s in shards} == {total // world_size}
        index = np.concatenate([s.token_index for s in shards])
        order = np.argsort(index)
        assert np.array_equal(index[order], np.arange(total))
        for key, want in expected.items():
            got = np.concatenate([getattr(s, key) for s in shards], axis=-1)[..., order]
            assert got.dtype == want.dtype and np.array_equal(got, want), (name, layout, world_size, key)
        types = expected["mm_token_type_ids"]
        index = np.concatenate([s.vision_index for s in shards])[order]
        item = np.concatenate([s.vision_item for s in shards])[order]
        held = [_samples(name)[i] for i in row.samples]
        for kind, segment in ((1, Image), (2, Video)):
            at = types == kind  # a kind's tokens counted along the row; items in order, one per segment
            assert np.array_equal(index[at], np.arange(at.sum()))
            count = sum(type(seg) is segment for sample in held for seg in sample)
            assert np.array_equal(np.unique(item[at]), np.arange(count))
            assert np.all(np.diff(item[at]) >= 0)
        assert np.all(index[types == 0] == -1) and np.all(item[types == 0] == -1)
        padded = [size for _, _, size in _segments(row, world_size, layout)]
        for s in shards:
            assert np.array_equal(s.cu_seqlens_padded, np.concatenate([[0], np.cumsum(padded)]))
            assert s.max_seqlen == max(padded) and s.cu_seqlens_padded.dtype == np.int32
            if layout == "zigzag":
                assert np.array_equal(s.token_index, _te_partition(padded, world_size, s.rank))
            else:
                width = total // world_size
                assert np.array_equal(s.token_index, np.arange(s.rank * width, (s.rank + 1) * width))


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_vision_map_names_each_merged_token(layout: str) -> None:
    """vision_index counts a kind's tokens along the padded row; vision_item counts items by their merged
    token counts (Qwen2-VL: t * h * w / 4 per grid, in row order)."""
    row = _row("qwen2-vl")
    for world_size in (1, 3, 4):
        expected = _padded_row(row, world_size, layout)
        types = expected["mm_token_type_ids"]
        shards = [shard(row, world_size=world_size, rank=r, layout=layout) for r in range(world_size)]
        order = np.argsort(np.concatenate([s.token_index for s in shards]))
        index = np.concatenate([s.vision_index for s in shards])[order]
        item = np.concatenate([s.vision_item for s in shards])[order]
        for kind, grids in ((1, row.image_grid_thw), (2, row.video_grid_thw)):
            at = types == kind
            assert np.array_equal(index[at], np.arange(at.sum()))
            sizes = grids.prod(-1) // 4
            assert np.array_equal(item[at], np.repeat(np.arange(len(sizes)), sizes))
            held = set()
            for s in shards:
                mine = s.images if kind == 1 else s.videos
                assert np.array_equal(mine, np.unique(s.vision_item[s.mm_token_type_ids == kind]))
                held |= set(mine.tolist())
            assert held == set(range(len(sizes)))
        assert np.all(index[types == 0] == -1) and np.all(item[types == 0] == -1)


def test_labels_given_are_shifted_within_samples() -> None:
    row = _row("qwen2-vl")
    labels = np.arange(row.num_tokens, dtype=np.int64) + 7
    s = shard(row, world_size=1, rank=0, layout="contiguous", labels=labels)
    ends = set((row.cu_seqlens[1:] - 1).tolist())
    want = np.array([-100 if k in ends else k + 8 for k in range(row.num_tokens)])
    assert np.array_equal(s.labels, want)


def test_a_recount_from_zero_per_rank_differs() -> None:
    """The negative control: a rank's positions are not its chunk's positions counted from 0."""
    row = _row("qwen2.5-vl")
    s = shard(row, world_size=4, rank=3)
    alone = mrope.pack(_samples("qwen2.5-vl")[:1], model="qwen2.5-vl", tokenizer=_tok, max_length=4096)[0]
    assert not np.array_equal(
        s.position_ids[:, : alone.num_tokens // 8], alone.position_ids[:, : alone.num_tokens // 8]
    )


def test_model_inputs_have_no_mask_no_cache() -> None:
    pytest.importorskip("torch")
    s = shard(_row("qwen2-vl"), world_size=2, rank=1)
    kw = s.model_inputs()
    assert isinstance(s, ShardedRow) and "attention_mask" not in kw and kw["use_cache"] is False
    assert kw["input_ids"].shape == (1, s.num_tokens) and kw["position_ids"].shape == (4, 1, s.num_tokens)
    assert "cu_seq_lens_q" not in kw


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"world_size": 0, "rank": 0}, "world_size must be an int >= 1; got 0"),
        ({"world_size": 2, "rank": 2}, "rank must be an int in [0, 2); got 2"),
        ({"world_size": 2, "rank": 0, "layout": "ring"}, "layout must be one of ['zigzag', 'contiguous']"),
        ({"world_size": 2, "rank": 0, "labels": np.zeros(3)}, "labels must be ["),
    ],
)
def test_bad_arguments_say_what_was_expected(kwargs: dict, message: str) -> None:
    with pytest.raises(PackingError) as info:
        shard(_row("qwen2-vl"), **kwargs)
    assert message in str(info.value)


def test_only_a_packed_row_is_taken() -> None:
    with pytest.raises(PackingError, match="shard takes a PackedRow"):
        shard([1, 2, 3], world_size=2, rank=0)  # type: ignore[arg-type]
