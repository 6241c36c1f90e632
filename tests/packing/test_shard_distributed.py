"""Shards in real multi-process runs (torch.distributed, gloo, 127.0.0.1, CPU): each rank runs its shard of
a packed row through a tiny random-weight model whose attention gathers keys and values from every rank
(written here: a sample's token sees the earlier tokens of its own sample, by the global token index and
the padded boundaries), and gets at every local token the logits the unsharded packed row gets there.
Positions recounted from 0 on each rank (what a framework slicing a local chunk would build) must differ.

The processes are spawned once per world size; each runs every family and both layouts.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from support import tiny_vlm as tv
from transformers import AttentionInterface

import mrope
from mrope.integrations import transformers as mt
from mrope.packing import SHARD_LAYOUTS, ShardedRow, shard

FAMILIES = ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v")
TOL = 1e-4
_ATTENTION = "mrope_test_gathered"
_STATE: dict[str, torch.Tensor] = {}  # this rank's global token indices, all ranks', the padded boundaries


def _gathered_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):  # noqa: ANN001, ANN003, ANN201, ARG001
    """Causal attention within each sample over the keys and values of every rank: ``query`` / ``key`` /
    ``value`` ``[1, heads, L_r, D]`` here, all ranks' keys gathered in rank order; a query at global
    token ``i`` of segment ``s`` sees the keys at global tokens ``j <= i`` of segment ``s``."""
    world = dist.get_world_size()
    keys = [torch.empty_like(key) for _ in range(world)]
    values = [torch.empty_like(value) for _ in range(world)]
    dist.all_gather(keys, key.contiguous())
    dist.all_gather(values, value.contiguous())
    k, v = torch.cat(keys, dim=2), torch.cat(values, dim=2)
    gq, gk, bounds = _STATE["mine"], _STATE["all"], _STATE["bounds"]
    sq, sk = torch.searchsorted(bounds, gq, right=True), torch.searchsorted(bounds, gk, right=True)
    mask = (sq[:, None] == sk[None, :]) & (gk[None, :] <= gq[:, None])
    groups = query.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def _row(name: str) -> mrope.packing.PackedRow:
    net = tv.model(name)
    samples = [
        tv.prompt(name),
        [mrope.Text(tv.tokenize("and one more, please"))],
        [mrope.Text(tv.tokenize("x"))],
    ]
    return mrope.pack(samples, model=name, rules=mt.model_rules(net), tokenizer=tv.tokenize, max_length=4096)[
        0
    ]


def _recounted(s: ShardedRow) -> np.ndarray:
    """The negative control: each sample's positions on this rank counted from 0 (its local minimum)."""
    pos = s.position_ids.copy()
    segment = np.searchsorted(s.cu_seqlens_padded, s.token_index, side="right")
    for seg in np.unique(segment):
        at = segment == seg
        pos[:, at] -= pos[:, at].min(axis=1, keepdims=True)
    return pos


def _run(net, s: ShardedRow, positions: np.ndarray) -> torch.Tensor:  # noqa: ANN001
    mine = torch.from_numpy(s.token_index)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    _STATE.update(
        mine=mine, all=torch.cat(everyone), bounds=torch.from_numpy(s.cu_seqlens_padded[1:].astype(np.int64))
    )
    kw = s.model_inputs(net)
    kw["position_ids"] = torch.from_numpy(np.ascontiguousarray(positions[:, None]))
    net.model.rope_deltas = None
    with torch.no_grad():
        return net(**kw).logits[0]


def _worker(rank: int, world_size: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    AttentionInterface.register(_ATTENTION, _gathered_attention)
    results = {}
    try:
        for name in FAMILIES:
            net = tv.model(name)
            net.set_attn_implementation(_ATTENTION)
            row = _row(name)
            for layout in SHARD_LAYOUTS:
                s = shard(row, world_size=world_size, rank=rank, layout=layout)
                results[name, layout] = (
                    s.token_index,
                    _run(net, s, s.position_ids),
                    _run(net, s, _recounted(s)),
                )
    finally:
        dist.destroy_process_group()
    torch.save(results, Path(out) / f"{rank}.pt")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("world_size", [2, 4])
def test_each_rank_gets_the_unsharded_rows_logits(world_size: int, tmp_path: Path) -> None:
    mp.spawn(_worker, args=(world_size, _free_port(), str(tmp_path)), nprocs=world_size, join=True)
    ranks = [torch.load(tmp_path / f"{r}.pt", weights_only=False) for r in range(world_size)]
    for name in FAMILIES:
        net = tv.model(name)
        row = _row(name)
        net.model.rope_deltas = None
        with torch.no_grad():
            whole = net(**row.model_inputs(net)).logits[0]
        for layout in SHARD_LAYOUTS:
            control_gap = 0.0
            checked = 0
            for results in ranks:
                index, logits, control = results[name, layout]
                bounds = shard(row, world_size=world_size, rank=0, layout=layout).cu_seqlens_padded
                segment = np.searchsorted(bounds, index, side="right") - 1
                offset = index - bounds[segment]
                lengths = np.diff(row.cu_seqlens)
                real = (segment < len(lengths)) & (offset < lengths[np.minimum(segment, len(lengths) - 1)])
                where = torch.from_numpy(row.cu_seqlens[segment[real]] + offset[real])
                gap = (logits[torch.from_numpy(real)] - whole[where]).abs().max().item()
                assert gap < TOL, (name, layout, world_size, gap)
                control_gap = max(
                    control_gap, (control[torch.from_numpy(real)] - whole[where]).abs().max().item()
                )
                checked += int(real.sum())
            assert checked == row.num_tokens
            assert control_gap > 10 * TOL, (name, layout, world_size, control_gap)
