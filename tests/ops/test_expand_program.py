"""``mrope.ops.expand_program`` expands a position program with torch to the positions it was built from.

Expected values: ``Positions.ids`` of the prompt the program was compiled from (every registry family,
pruned, stored and float32 programs included), and the numpy expansion, which must agree bit for bit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from support.scripts import run_script

import mrope
from mrope import ApplyError, Image, Text, Video
from mrope.models import names
from mrope.ops import expand_program


def _prompt(name: str, seed: int) -> mrope.Positions:
    rng = np.random.default_rng(seed)
    m = max(2, mrope.models.resolve_rules(name).merge_size)  # 4 where 4 x 4 patches merge (MiniCPM-V 4.6)
    segments: list = [Text(int(rng.integers(1, 30)))]
    for _ in range(3):
        h, w = m * int(rng.integers(1, 6)), m * int(rng.integers(1, 6))
        segments += [Image(grid=(1, h, w)), Text(int(rng.integers(1, 9)))]
    try:
        with_video = [*segments, Video(grid=(4, 4, 6), fps=float(rng.choice([0.5, 2.0]))), Text(2)]
        return mrope.build_positions(with_video, model=name, tokenizer=lambda s: [7] * len(s))
    except mrope.MRopeError:  # a family without video, or one that needs its own markers
        return mrope.build_positions(segments, model=name)


def _check(p: mrope.Positions) -> None:
    program = p.program()
    got = expand_program(**program.arrays(), num_tokens=program.num_tokens)
    assert got.dtype == torch.from_numpy(p.ids).dtype
    np.testing.assert_array_equal(got.numpy(), p.ids)
    np.testing.assert_array_equal(got.numpy(), program.expand())
    # into the caller's buffer: the same positions, at the buffer's own address
    buffer = torch.full_like(got, 7)
    into = expand_program(**program.arrays(), num_tokens=program.num_tokens, out=buffer)
    assert into is buffer
    np.testing.assert_array_equal(buffer.numpy(), p.ids)
    # without num_tokens, the total is read from the lengths
    np.testing.assert_array_equal(expand_program(**program.arrays()).numpy(), p.ids)


@pytest.mark.parametrize("name", [n for n in names() if n != "minicpm-v-4.7"])
def test_torch_expansion_equals_the_positions(name: str) -> None:
    for seed in range(3):
        p = _prompt(name, seed)
        _check(p)
        if name in ("hunyuan-ocr", "glm-image"):
            continue
        keep = np.random.default_rng(seed).random(p.num_tokens) < 0.6  # stored runs next to affine ones
        _check(dataclasses.replace(p, ids=np.ascontiguousarray(p.ids[:, keep])))


@pytest.mark.parametrize("name", ["qwen3-vl", "glm-4.1v", "glm-4.6v", "qwen3.5"])
def test_runs_of_groups_expand_on_torch(name: str) -> None:
    """Timestamped videos of many frames (runs of groups, text before each block): torch equals the ids
    and numpy; control: a run's advance moved by one changes the positions."""
    rng = np.random.default_rng(7)
    segments: list = [Text(5)]
    for _ in range(2):
        grid = (2 * int(rng.integers(20, 60)), 2 * int(rng.integers(1, 4)), 2 * int(rng.integers(1, 4)))
        segments += [Video(grid=grid, fps=float(rng.choice([0.5, 2.0]))), Text(4)]
    p = mrope.build_positions(segments, model=name, tokenizer=lambda s: [7] * len(s))
    program = p.program()
    assert (program.repeat > 1).any() and program.lead.any()
    _check(p)
    arrays = program.arrays()
    folded = (np.arange(program.num_runs) == int(np.argmax(program.repeat)))[:, None]
    moved = expand_program(**{**arrays, "advance": arrays["advance"] + folded}).numpy()
    assert moved.shape == p.ids.shape and not np.array_equal(moved, p.ids)


def test_stored_ids_and_tensors_on_the_device() -> None:
    ids = np.random.default_rng(1).integers(0, 10**6, (3, 300))
    p = dataclasses.replace(mrope.build_positions([Text(300)], model="qwen2-vl"), ids=ids)
    arrays = {k: torch.from_numpy(v) for k, v in p.program().arrays().items()}
    np.testing.assert_array_equal(expand_program(**arrays, device="cpu").numpy(), ids)


def test_arrays_that_disagree_are_refused() -> None:
    arrays = mrope.build_positions([Text(5), Image(grid=(1, 4, 4))], model="qwen2-vl").program().arrays()
    with pytest.raises(ApplyError, match="strides"):
        expand_program(**{**arrays, "strides": arrays["strides"][:, :2]})
    with pytest.raises(ApplyError, match="2 dimensions"):
        expand_program(**{**arrays, "shape": arrays["shape"].reshape(-1)})
    n = int(arrays["lengths"].sum())
    for bad in (torch.empty(3, n + 1, dtype=torch.int64), torch.empty(3, n, dtype=torch.int32)):
        with pytest.raises(ApplyError, match=rf"out must be torch.int64 \[3, {n}\] on cpu"):
            expand_program(**arrays, out=bad)


def test_bench_program_runs_small() -> None:
    """benchmarks/bench_program.py still runs (its routes check they give the positions back first)."""
    out = run_script(["benchmarks/bench_program.py", "--sizes", "1000", "--repeat", "1"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert "| qwen2.5-vl | 892 | 5 | 916 |" in out.stdout and "| qwen3-vl |" in out.stdout
