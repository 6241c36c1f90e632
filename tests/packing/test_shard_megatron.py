"""The zigzag layout against Megatron-Core's own split (``megatron.core.utils.get_batch_on_this_cp_rank``,
megatron-core 0.16.1) of one unpadded sequence: the same tokens and positions on every rank."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import mrope
from mrope import Image, Text
from mrope.packing import shard

with warnings.catch_warnings():  # it warns that TransformerEngine and Apex are not installed
    warnings.simplefilter("ignore")
    from megatron.core import parallel_state
    from megatron.core.utils import get_batch_on_this_cp_rank


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_zigzag_is_megatrons_split_of_one_sequence(world_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    row = mrope.pack([[Text(20), Image(grid=(1, 4, 8)), Text(34)]], model="qwen2-vl", max_length=64)[0]
    assert row.num_tokens == 64  # a multiple of 2 * world_size: no padding
    monkeypatch.setattr(parallel_state, "get_context_parallel_world_size", lambda: world_size)
    for rank in range(world_size):
        monkeypatch.setattr(parallel_state, "get_context_parallel_rank", lambda rank=rank: rank)
        theirs = get_batch_on_this_cp_rank(
            {
                "tokens": torch.from_numpy(row.input_ids)[None],
                "position_ids": torch.from_numpy(row.position_ids.T.copy())[None],  # [1, L, 1 + A]
            }
        )
        mine = shard(row, world_size=world_size, rank=rank, layout="zigzag")
        assert np.array_equal(theirs["tokens"][0].numpy(), mine.input_ids)
        assert np.array_equal(theirs["position_ids"][0].numpy().T, mine.position_ids)
        # the control: the contiguous layout's slice is not Megatron's
        other = shard(row, world_size=world_size, rank=rank, layout="contiguous")
        assert not np.array_equal(theirs["position_ids"][0].numpy().T, other.position_ids)
