"""PackedCollator(cp_size=W, cp_rank=r) against mrope.packing.shard of the same rows: put back in global order by
``token_index``, the ranks' collated rows equal the shard of the row built by ``mrope.pack`` from the same samples,
then padding to the batch's common length (a segment of its own: id 0, type 0, label -100, positions counting
from 0 on every row)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv

import mrope
from mrope import Image, Text, Video
from mrope.integrations import transformers as mt
from mrope.packing import SHARD_LAYOUTS, PackedCollator, shard

NAME = "qwen2-vl"
MAX_LENGTH = 60


def _prompts() -> list[list]:
    return [
        [Text(tv.tokenize("describe")), Image(grid=(1, 4, 6)), Text(tv.tokenize("a cat"))],
        [Text(tv.tokenize("only words here"))],
        [Text(tv.tokenize("clip")), Video(grid=(2, 4, 4), fps=2.0), Text(tv.tokenize("runs"))],
        [Image(grid=(1, 4, 4)), Text(tv.tokenize("two")), Image(grid=(1, 6, 4)), Text(tv.tokenize("dogs!"))],
    ]


def _records(rules) -> list[dict]:
    """Processor-like outputs of the prompts (ids, types, grids; labels that skip the vision tokens)."""
    out = []
    for segments in _prompts():
        p = mrope.build_positions(segments, model=NAME, rules=rules, tokenizer=tv.tokenize)
        labels = p.input_ids.copy()
        labels[p.mm_token_type_ids != 0] = -100
        record = {
            "input_ids": torch.from_numpy(p.input_ids)[None],
            "mm_token_type_ids": torch.from_numpy(p.mm_token_type_ids)[None],
            "labels": torch.from_numpy(labels)[None],
        }
        if len(p.image_grid_thw):
            record["image_grid_thw"] = torch.from_numpy(p.image_grid_thw)
        if len(p.video_grid_thw):
            record["video_grid_thw"] = torch.from_numpy(p.video_grid_thw)
        out.append(record)
    return out


def _put_back(parts: list[np.ndarray], index: list[np.ndarray]) -> np.ndarray:
    """The ranks' ``[..., L_r]`` arrays in global order by their token indices."""
    order = np.argsort(np.concatenate(index))
    return np.concatenate(parts, axis=-1)[..., order]


@pytest.mark.parametrize("pad_to_max_length", [False, True])
@pytest.mark.parametrize("layout", SHARD_LAYOUTS)
def test_collated_ranks_equal_the_shards_of_the_packed_rows(layout: str, pad_to_max_length: bool) -> None:
    rules = mt.model_rules(tv.model(NAME))
    records = _records(rules)
    rows = list(mrope.pack(_prompts(), model=NAME, rules=rules, tokenizer=tv.tokenize, max_length=MAX_LENGTH))
    assert len(rows) == 2
    for world_size in (1, 2, 3, 4, 8):
        got = [
            PackedCollator(
                NAME,
                rules=rules,
                max_length=MAX_LENGTH,
                pad_to_max_length=pad_to_max_length,
                cp_size=world_size,
                cp_rank=rank,
                cp_layout=layout,
            )(records)
            for rank in range(world_size)
        ]
        width = got[0]["input_ids"].shape[1] * world_size  # every row padded to this many tokens
        unit = 2 * world_size if layout == "zigzag" else world_size
        assert width % unit == 0
        if pad_to_max_length:
            assert width >= MAX_LENGTH
        bounds = [0]
        for r, row in enumerate(rows):
            labels = np.concatenate([records[i]["labels"][0].numpy() for i in row.samples])
            want = [
                shard(row, world_size=world_size, rank=k, layout=layout, labels=labels)
                for k in range(world_size)
            ]
            index = [g["token_index"][r].numpy() for g in got]
            assert np.array_equal(np.sort(np.concatenate(index)), np.arange(width))
            want_index = [w.token_index for w in want]
            size = sum(w.num_tokens for w in want)  # the shard's padded row; the collator pads on to `width`
            for key, column in (
                ("input_ids", "input_ids"),
                ("mm_token_type_ids", "mm_token_type_ids"),
                ("labels", "labels"),
                ("shift_labels", "labels"),
            ):
                have = _put_back([g[key][r].numpy() for g in got], index)
                assert np.array_equal(have[:size], _put_back([getattr(w, column) for w in want], want_index))
                tail = {"input_ids": 0, "mm_token_type_ids": 0}.get(key, -100)
                assert np.all(have[size:] == tail), (layout, world_size, key)
            pos = _put_back([g["position_ids"][:, r].numpy() for g in got], index)
            assert np.array_equal(pos[:, :size], _put_back([w.position_ids for w in want], want_index))
            if layout == "zigzag":  # the same tokens in the same order, then this rank's share of the tail
                for g, w in zip(got, want, strict=True):
                    assert np.array_equal(g["token_index"][r, : w.num_tokens].numpy(), w.token_index)
                real = want[0].cu_seqlens_padded[-1]
                pad = np.arange(width - real)
            else:  # the row's padding is one segment: the shard's tail, continued to `width`
                for rank, g in enumerate(got):
                    step = width // world_size
                    assert np.array_equal(
                        g["token_index"][r].numpy(), np.arange(rank * step, (rank + 1) * step)
                    )
                real = int(row.num_tokens)
                pad = np.arange(width - real)
            assert np.array_equal(pos[:, real:], np.broadcast_to(pad, (pos.shape[0], pad.size)))
            segments = want[0].cu_seqlens_padded[: len(row.samples) + 1].astype(np.int64)
            bounds += (segments[1:] + r * width).tolist() + (
                [(r + 1) * width] if segments[-1] < width else []
            )
        for g in got:
            assert np.array_equal(g["cu_seqlens_padded"].numpy(), bounds) and g["use_cache"] is False
            assert g["cu_seqlens_padded"].dtype == torch.int32
            assert torch.equal(g["image_grid_thw"], got[0]["image_grid_thw"])  # the whole batch's grids


def test_one_rank_trains_on_the_same_loss_as_the_unsharded_rows() -> None:
    """World size 1: the shifted labels reach transformers' loss through ``shift_labels``; the loss equals
    the plain collator's. The control: the same labels without ``shift_labels`` are shifted once more."""
    net = tv.model(NAME)
    records = _records(mt.model_rules(net))
    plain = PackedCollator(net, max_length=MAX_LENGTH)(records)
    cp = PackedCollator(net, max_length=MAX_LENGTH, cp_size=1, cp_rank=0)(records)
    assert "shift_labels" in cp and "token_index" in cp
    with torch.no_grad():
        want = float(net(**plain).loss)
        net.model.rope_deltas = None
        got = float(net(**cp).loss)
        net.model.rope_deltas = None
        shifted_twice = float(net(**{k: v for k, v in cp.items() if k != "shift_labels"}).loss)
    net.model.rope_deltas = None
    assert got == pytest.approx(want, rel=1e-5)
    assert abs(shifted_twice - want) > 1e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cp_size": 0}, "world_size must be an int >= 1; got 0"),
        ({"cp_size": 2, "cp_rank": 2}, r"rank must be an int in \[0, 2\); got 2"),
        ({"cp_size": 2, "cp_layout": "ring"}, "layout must be one of"),
        ({"cp_size": 2, "seq_lens": True}, "seq_lens does not go with cp_size"),
    ],
)
def test_bad_splits_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(mrope.PackingError, match=message):
        PackedCollator(NAME, max_length=MAX_LENGTH, **kwargs)
