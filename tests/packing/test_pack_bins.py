"""mrope.pack's rows without a model: boundaries as transformers reads them, bins against an independent
first-fit-decreasing, streaming order, the padded form, refusals."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers.masking_utils import find_packed_sequence_indices

import mrope
from mrope import Image, Text, Video


def _samples(n: int, seed: int) -> list[list]:
    """Segment lists of mixed lengths: text counts, images, some videos (Qwen2-VL rules, merge 2)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seg = [Text(rng.randint(1, 40))]
        if rng.random() < 0.7:
            seg += [Image(grid=(1, 2 * rng.randint(1, 4), 2 * rng.randint(1, 4))), Text(rng.randint(1, 10))]
        if rng.random() < 0.2:
            seg += [Video(grid=(2 * rng.randint(1, 2), 4, 4), fps=2.0), Text(3)]
        out.append(seg)
    return out


def _ffd_rows(lengths: list[int], capacity: int) -> int:
    """First-fit-decreasing as published (Johnson 1973), written out plainly: sort descending, put each
    item into the first bin with room, open a bin when none has. Returns the number of bins."""
    bins: list[int] = []
    for n in sorted(lengths, reverse=True):
        for b, used in enumerate(bins):
            if used + n <= capacity:
                bins[b] += n
                break
        else:
            bins.append(n)
    return len(bins)


@pytest.mark.parametrize("mode", ["ffd", "stream"])
def test_rows_hold_every_sample_once_within_max_length(mode: str) -> None:
    samples = _samples(120, seed=1)
    alone = [mrope.build_positions(s, model="qwen2-vl") for s in samples]
    rows = list(mrope.pack(samples, model="qwen2-vl", max_length=256, mode=mode))
    placed = sorted(i for row in rows for i in row.samples)
    assert placed == list(range(len(samples)))
    assert all(row.num_tokens <= 256 for row in rows)
    lengths = [p.num_tokens for p in alone]
    if mode == "ffd":
        assert len(rows) <= _ffd_rows(lengths, 256)
    for row in rows:
        # the text row, as transformers reads it, splits the row exactly at cu_seqlens
        text = torch.from_numpy(row.position_ids[:1])
        ids = find_packed_sequence_indices(text)
        starts = np.flatnonzero(np.diff(ids[0].numpy(), prepend=-1)).tolist() if ids is not None else [0]
        assert starts == row.cu_seqlens[:-1].tolist()
        assert row.cu_seqlens[-1] == row.num_tokens and row.cu_seqlens.dtype == np.int32
        assert row.max_seqlen == max(lengths[i] for i in row.samples)
        for k, i in enumerate(row.samples):  # rows 1..A: the sample's positions alone, untouched
            a, b = row.cu_seqlens[k], row.cu_seqlens[k + 1]
            np.testing.assert_array_equal(row.position_ids[1:, a:b], alone[i].ids)
            np.testing.assert_array_equal(row.input_ids[a:b], alone[i].input_ids)
            np.testing.assert_array_equal(row.mm_token_type_ids[a:b], alone[i].mm_token_type_ids)
            assert row.deltas[k] == alone[i].delta
        grids = [alone[i].image_grid_thw for i in row.samples]
        np.testing.assert_array_equal(row.image_grid_thw, np.concatenate(grids).reshape(-1, 3))


def test_ffd_packs_tighter_than_next_fit_and_stream_keeps_order() -> None:
    samples = _samples(200, seed=2)
    ffd = mrope.pack(samples, model="qwen2-vl", max_length=300)
    nextfit = list(mrope.pack(iter(samples), model="qwen2-vl", max_length=300, mode="stream", open_rows=1))
    assert [i for row in nextfit for i in row.samples] == list(range(len(samples)))  # order kept
    buffered = list(mrope.pack(iter(samples), model="qwen2-vl", max_length=300, mode="stream", open_rows=4))
    assert all(list(r.samples) == sorted(r.samples) for r in buffered)
    tokens = ffd.num_tokens
    assert tokens == sum(r.num_tokens for r in nextfit)
    assert ffd.efficiency == pytest.approx(tokens / (len(ffd) * 300))
    assert len(ffd) <= len(buffered) <= len(nextfit)
    assert len(ffd) < len(nextfit)  # the control: order-keeping packs looser here


def test_stream_takes_a_generator_and_holds_few_samples() -> None:
    made = []

    def gen():
        for i, s in enumerate(_samples(50, seed=3)):
            made.append(i)
            yield s

    rows = mrope.pack(gen(), model="qwen2-vl", max_length=128, mode="stream", open_rows=2)
    first = next(rows)
    assert len(made) < 50  # rows come out before the input is read to its end
    assert first.samples[0] == 0


def test_positions_samples_and_padded_form() -> None:
    samples = _samples(9, seed=4)
    given = [mrope.build_positions(s, model="qwen2-vl") for s in samples]
    batch = mrope.pack(given, max_length=200)  # Positions need no model
    pad = batch.padded(pad_token_id=7)
    rows, width = len(batch), pad.input_ids.shape[1]
    assert pad.position_ids.shape == (4, rows, width)
    flat_text = torch.from_numpy(pad.position_ids[0].reshape(1, -1))
    ids = find_packed_sequence_indices(flat_text)[0].numpy()
    starts = np.flatnonzero(np.diff(ids, prepend=-1)).tolist()
    assert starts == pad.cu_seqlens[:-1].tolist()  # padding included, a segment of its own
    for r, row in enumerate(batch):
        n = row.num_tokens
        assert (
            (pad.input_ids[r, n:] == 7).all()
            and not pad.is_sample[r, n:].any()
            and pad.is_sample[r, :n].all()
        )
        np.testing.assert_array_equal(pad.position_ids[:, r, :n], row.position_ids)
    kw = pad.model_inputs()
    assert kw["position_ids"].shape == (4, rows, width) and "attention_mask" not in kw
    assert kw["cu_seq_lens_q"].dtype == torch.int32 and kw["max_length_q"] == pad.max_seqlen


def test_refusals_name_the_sample() -> None:
    samples = [[Text(5)], [Text(10), Image(grid=(1, 28, 28))], [Text(3)]]
    with pytest.raises(mrope.PackingError, match=r"sample 1 has 208 tokens, more than max_length=100"):
        mrope.pack(samples, model="qwen2-vl", max_length=100)
    with pytest.raises(mrope.PackingError, match="sample 1 has 208 tokens"):
        list(mrope.pack(iter(samples), model="qwen2-vl", max_length=100, mode="stream"))
    with pytest.raises(mrope.PackingError, match="mode must be one of"):
        mrope.pack(samples, model="qwen2-vl", max_length=100, mode="best")
    with pytest.raises(mrope.MRopeError, match="sample 2"):
        mrope.pack([[Text(3)], [Text(3)], [Image(grid=(1, 3, 3))]], model="qwen2-vl", max_length=100)
    row = mrope.pack([[Text(4)], [Text(5)]], model="hunyuan-ocr", max_length=16)[0]
    assert row.position_ids.shape == (5, 9)  # the positions are built; the model input is refused
    with pytest.raises(
        mrope.PackingError, match="hunyuan-ocr: cannot take packed input.*modeling_hunyuan_vl"
    ):
        row.model_inputs()
    with pytest.raises(mrope.PackingError, match="qwen3.5: packed input needs fla.*flash-linear-attention"):
        mrope.pack([[Text(4)]], model="qwen3.5", max_length=16)[0].model_inputs()


def test_bench_pack_runs_small() -> None:
    """benchmarks/bench_pack.py still runs (300 records, in this process); no timing is asserted."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_pack.py"
    spec = importlib.util.spec_from_file_location("bench_pack", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = bench.main(["--records", "300", "--max-length", "2048"])
    assert 0.9 < out["ffd_efficiency"] <= 1.0 and out["stream_efficiency"] <= out["ffd_efficiency"]
