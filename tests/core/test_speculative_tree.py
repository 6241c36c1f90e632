"""Draft-tree positions and attention: a tree's logits in a patched tiny model equal each branch's
logits decoded as a chain (the chain's positions from ``mrope.next_positions``, causal attention).

Expected values: the tiny transformers 5.24 Qwen2-VL model (patched by mrope) run on every branch as a
plain chain; the depths are counted by hand in the unit tests.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv

import mrope
from mrope import LayoutError
from mrope._speculative import draft_depths, draft_positions, tree_attention_mask

PARENTS = [-1, -1, 0, 0, 1, 2, 4, 5]  # two roots, branches of depth 2 to 4
TOKENS = [1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008]


def test_depths_and_positions_by_hand() -> None:
    assert draft_depths(PARENTS).tolist() == [1, 1, 2, 2, 2, 3, 3, 4]
    got = draft_positions(PARENTS, n_done=10, delta=-3)
    assert got.dtype == np.int64 and got.shape == (3, 8)
    assert (got == np.array([7, 7, 8, 8, 8, 9, 9, 10])).all()
    chain = draft_positions([-1, 0, 1], n_done=10, delta=4)
    assert (chain == mrope.next_positions(4, 10, 3)).all()  # a chain is decode itself
    frac = draft_positions([-1, 0, -1], n_done=5, delta=2.5)
    assert frac.dtype == np.float32 and frac[0].tolist() == [7.5, 8.5, 7.5]
    assert draft_positions([-1, 0], n_done=3, delta=0, num_axes=4).shape == (4, 2)
    # parents after their children are fine too (any order without a cycle)
    assert draft_depths([2, -1, 1]).tolist() == [3, 1, 2]
    mask = tree_attention_mask([-1, 0, 0, 2])
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, False, True, False],
        [True, False, True, True],
    ]


@pytest.mark.parametrize(
    ("parents", "match"),
    [
        ([1, 2, 0], r"draft tokens \[0, 1, 2\] form a cycle"),
        ([-1, 2, 1], r"draft tokens \[1, 2\] form a cycle"),
        ([-1, 1], "draft token 1 has parent 1"),
        ([-1, 5], "draft token 1 has parent 5"),
        ([-2], "draft token 0 has parent -2"),
        ([[-1]], "1-D array of ints"),
        ([0.5], "1-D array of ints"),
    ],
)
def test_bad_trees_are_refused(parents: list, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        draft_positions(parents, n_done=4, delta=0)


def _forward(net, kw: dict, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    args = tv.forward_kwargs(kw, own_positions=False)
    extra = ids.shape[1] - kw["input_ids"].shape[1]
    args["input_ids"] = ids
    args["position_ids"] = positions
    args["attention_mask"] = mask
    types = args.get("mm_token_type_ids")
    if types is not None:
        args["mm_token_type_ids"] = torch.cat([types, torch.zeros(1, extra, dtype=types.dtype)], 1)
    with torch.no_grad():
        return net(**args, use_cache=False).logits[0, kw["input_ids"].shape[1] :]


def test_a_draft_tree_gives_each_branch_its_chain_logits() -> None:
    name = "qwen2-vl"
    net = tv.model(name)
    kw = tv.inputs(name, [tv.prompt(name)], with_pixels=False)  # positions and attention are what differ
    prompt, positions = kw["input_ids"], kw["position_ids"]
    n, delta, k = prompt.shape[1], int(kw["deltas"][0, 0]), len(PARENTS)
    tokens = torch.tensor([TOKENS])
    tree_ids = torch.cat([prompt, tokens], 1)
    tree_pos = torch.cat([positions, torch.from_numpy(draft_positions(PARENTS, n, delta))[:, None]], 2)
    mask = torch.zeros(1, 1, n + k, n + k, dtype=torch.bool)
    mask[0, 0, :, :n] = torch.tril(torch.ones(n + k, n, dtype=torch.bool))
    mask[0, 0, n:, n:] = torch.from_numpy(tree_attention_mask(PARENTS))
    with tv.patched(net):
        tree = _forward(net, kw, tree_ids, tree_pos, mask)
        by_index = tree_pos.clone()  # control: drafts numbered by their array index, not their depth
        by_index[:, :, n:] = torch.from_numpy(mrope.next_positions(delta, n, k))[:, None]
        control = _forward(net, kw, tree_ids, by_index, mask)
        for leaf in (3, 6, 7):  # every branch ends in one of these leaves
            chain, p = [], leaf
            while p >= 0:
                chain.insert(0, p)
                p = PARENTS[p]
            ids = torch.cat([prompt, tokens[:, chain]], 1)
            pos = torch.cat(
                [positions, torch.from_numpy(mrope.next_positions(delta, n, len(chain)))[:, None]], 2
            )
            want = _forward(net, kw, ids, pos, torch.ones(1, n + len(chain), dtype=torch.long))
            torch.testing.assert_close(tree[chain], want, rtol=1e-5, atol=1e-5)
            if len(chain) > 1:
                assert (control[chain] - want).abs().max() > 1e-3
