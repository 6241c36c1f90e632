"""Packing on the batch faces: ``mrope batch --pack`` writes the rows ``mrope.pack`` gives (with ``--cp-size W``
each row once per rank, as :func:`mrope.packing.shard` cuts it), and the pipeline's ``pack_batch`` (plain loop,
``datasets.map``) gives the same rows; a sample too long is an error row.

Expected rows come from ``mrope.pack`` over positions this test builds itself with ``build_positions`` from
hand-written segments (the records' text tokenized here with the same ``tokenizers`` tokenizer), and the text
row is checked against ``0 .. n_i - 1`` written out from ``cu_seqlens`` (the form transformers 5.24's
``masking_utils.find_packed_sequence_indices`` reads). The Ray Data run of ``pack_batch`` is in
tests/pipeline/test_pipeline.py, beside the one local Ray that module starts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope import Image, Text
from mrope._cli import main
from mrope.packing import shard
from mrope.packing._table import PACKED_COLUMNS, SHARD_COLUMNS, pack_efficiency
from mrope.pipeline import Preprocessor, pack_batch

pytestmark = pytest.mark.timeout(60)

MODEL = "qwen2.5-vl"
MAX_LEN = 64


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pack_faces")
    words = ["describe", "this", "picture", "a", "cat"]
    tok = Tokenizer(
        models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}, unk_token="[UNK]")
    )
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(d / "tokenizer.json"))
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records()))
    return d


def records() -> list[dict[str, Any]]:
    return [
        {
            "id": "r0",
            "segments": [
                {"type": "text", "text": "describe this picture"},
                {"type": "image", "grid": [1, 8, 8]},
                {"type": "text", "tokens": 5},
            ],
        },
        {"id": "r1", "segments": [{"type": "text", "tokens": 30}]},
        {"id": "r2", "segments": [{"type": "image", "grid": [1, 4, 8]}, {"type": "text", "text": "a cat"}]},
        {"id": "long", "segments": [{"type": "text", "tokens": 50}, {"type": "image", "grid": [1, 8, 8]}]},
        {"id": "bad", "segments": [{"type": "image", "path": "missing.png"}]},
        {"id": "r5", "segments": [{"type": "image", "grid": [1, 6, 6]}, {"type": "text", "tokens": 20}]},
    ]


def expected_positions(tok: Tokenizer) -> dict[str, mrope.Positions]:
    """The packable records' positions, from segments written out here."""

    def ids(text: str) -> list[int]:
        return tok.encode(text, add_special_tokens=False).ids

    segments = {
        "r0": [Text(ids("describe this picture")), Image(grid=(1, 8, 8)), Text(5)],
        "r1": [Text(30)],
        "r2": [Image(grid=(1, 4, 8)), Text(ids("a cat"))],
        "r5": [Image(grid=(1, 6, 6)), Text(20)],
    }
    return {k: mrope.build_positions(v, model=MODEL) for k, v in segments.items()}


def options(root: Path) -> dict[str, Any]:
    return {"model": MODEL, "tokenizer": str(root / "tokenizer.json"), "base_dir": str(root), "labels": True}


def run_cli(capsys, root: Path, out: Path, *extra: str) -> tuple[int, str]:
    code = main(
        ["batch", str(root / "records.jsonl"), "--out-dir", str(out), "--model", MODEL]
        + ["--tokenizer", str(root / "tokenizer.json"), *extra]
    )
    return code, capsys.readouterr().err


def text_row_restarts(position_ids: np.ndarray, cu: list[int]) -> bool:
    """Row 0 counts 0 .. n_i - 1 within each [cu[i], cu[i + 1])."""
    want = np.concatenate([np.arange(b - a) for a, b in zip(cu[:-1], cu[1:], strict=True)])
    return position_ids.shape[1] == cu[-1] and bool((position_ids[0] == want).all())


@pytest.mark.parametrize("mode", ["ffd", "stream"])
def test_cli_pack_writes_the_rows_of_mrope_pack(root, capsys, tmp_path, mode) -> None:
    code, err = run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN), "--pack-mode", mode)
    assert code == 1  # two records failed (reported), the rest packed
    table = pq.read_table(tmp_path / "packed.parquet")
    assert table.column_names == [*PACKED_COLUMNS, "labels"]
    rows = table.to_pylist()
    packed = [r for r in rows if not r["error"]]
    errors = {r["ids"][0]: r for r in rows if r["error"]}

    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    alone = expected_positions(tok)
    order = ["r0", "r1", "r2", "r5"]
    want = list(mrope.pack([alone[k] for k in order], max_length=MAX_LEN, mode=mode))
    index = {"r0": 0, "r1": 1, "r2": 2, "r5": 5}  # record indices in the input file
    assert len(packed) == len(want)
    for got, exp in zip(packed, want, strict=True):
        names = [order[j] for j in exp.samples]
        assert got["ids"] == names and got["samples"] == [index[n] for n in names]
        np.testing.assert_array_equal(np.array(got["position_ids"]), exp.position_ids)
        np.testing.assert_array_equal(got["input_ids"], exp.input_ids)
        np.testing.assert_array_equal(got["mm_token_type_ids"], exp.mm_token_type_ids)
        assert got["cu_seqlens"] == exp.cu_seqlens.tolist()
        assert got["image_grid_thw"] == exp.image_grid_thw.tolist()
        # the text row restarts at each boundary, and each sample's own rows are its positions alone
        pos = np.array(got["position_ids"])
        assert text_row_restarts(pos, got["cu_seqlens"])
        for name, a, b in zip(names, got["cu_seqlens"][:-1], got["cu_seqlens"][1:], strict=True):
            np.testing.assert_array_equal(pos[1:, a:b], alone[name].ids)
        # segments records have no turns: every label -100
        assert got["labels"] == [-100] * got["num_tokens"]
    # negative control: the temporal row of a row holding an image sample does not restart like a text row
    with_image = next(r for r in packed if r["image_grid_thw"])
    shifted = np.array(with_image["position_ids"])[1:]
    assert not text_row_restarts(shifted, with_image["cu_seqlens"])
    assert all(r["num_tokens"] <= MAX_LEN for r in packed)
    assert sorted(i for r in packed for i in r["ids"]) == sorted(order)  # each sample in exactly one row

    assert set(errors) == {"long", "bad"}
    assert errors["long"]["error_code"] == "sample_too_long" and errors["long"]["samples"] == [3]
    assert "'long'" in errors["long"]["error"] and f"max_length={MAX_LEN}" in errors["long"]["error"]
    assert errors["bad"]["error_code"] == "invalid_media" and errors["bad"]["num_tokens"] == 0
    assert "sample 'long'" in err and "failed" in err
    tokens = sum(r["num_tokens"] for r in packed)
    assert f"packing efficiency {tokens / (len(packed) * MAX_LEN):.3f}" in err
    manifest = [json.loads(line) for line in (tmp_path / "manifest.jsonl").read_text().splitlines()]
    assert [m["error_code"] for m in manifest] == ["", "", "", "sample_too_long", "invalid_media", ""]


def test_pipeline_pack_batch_equals_the_cli_rows(root, capsys, tmp_path) -> None:
    run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN))
    cli = pq.read_table(tmp_path / "packed.parquet")
    table = pack_batch(records(), max_length=MAX_LEN, **options(root))  # the plain loop: a list of records
    assert table.to_pylist() == cli.to_pylist()
    assert pack_efficiency(table, MAX_LEN) == pytest.approx(
        sum(table.column("num_tokens").to_pylist()) / ((table.num_rows - 2) * MAX_LEN)
    )
    # Preprocessor(pack=...).batch is the same function; a dict of columns is the same batch
    columns = {k: [r.get(k) for r in records()] for k in ("id", "segments")}
    assert Preprocessor(**options(root), pack=MAX_LEN).batch(columns).to_pylist() == cli.to_pylist()


def test_datasets_map_batched_pack_batch(root, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets

    datasets.disable_progress_bars()
    ds = datasets.Dataset.from_list(
        [{"id": r["id"], "segments": json.dumps(r["segments"])} for r in records()]
    )
    ds = ds.map(lambda r: {"segments": json.loads(r["segments"])}, keep_in_memory=True)
    out = ds.map(
        pack_batch,
        batched=True,
        batch_size=len(ds),
        fn_kwargs={"max_length": MAX_LEN, **options(root)},
        remove_columns=ds.column_names,
        keep_in_memory=True,
    )
    run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN))
    cli = pq.read_table(tmp_path / "packed.parquet").to_pylist()
    assert out.to_list() == cli


def test_labels_of_a_chat_record_start_with_minus_100(root) -> None:
    chat = {
        "id": "c0",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "describe this"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a cat"}]},
        ],
    }
    pre = Preprocessor(**options(root), chat_template=None)
    _, labels = pre.sample(chat)
    row = pre.with_options(pack=MAX_LEN).packed([chat, records()[1]]).to_pylist()[0]
    a, b = row["cu_seqlens"][row["ids"].index("c0") :][:2]
    assert (labels != -100).sum() > 0  # the assistant's tokens carry their ids
    assert row["labels"][a:b] == [-100, *labels[1:].tolist()]


def test_pack_needs_parquet_output(root, capsys, tmp_path) -> None:
    code, err = run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN), "--format", "npy")
    assert code == 2 and "--pack writes one packed.parquet" in err and "--format npy" in err
    assert not (tmp_path / "packed.parquet").exists()


@pytest.mark.parametrize(
    ("world_size", "layout"), [(1, "zigzag"), (2, "zigzag"), (3, "contiguous"), (4, "zigzag")]
)
def test_cli_cp_rows_are_the_shards_of_the_packed_rows(root, capsys, tmp_path, world_size, layout) -> None:
    code, err = run_cli(
        capsys, root, tmp_path, "--pack", str(MAX_LEN), "--cp-size", str(world_size), "--cp-layout", layout
    )
    assert code == 1  # two records failed, as without --cp-size
    table = pq.read_table(tmp_path / "packed.parquet")
    assert table.column_names == [*PACKED_COLUMNS, "labels", *SHARD_COLUMNS]
    rows = table.to_pylist()
    packed = [r for r in rows if not r["error"]]
    assert all(r["rank"] is None for r in rows if r["error"])

    alone = expected_positions(Tokenizer.from_file(str(root / "tokenizer.json")))
    order = ["r0", "r1", "r2", "r5"]
    want = list(mrope.pack([alone[k] for k in order], max_length=MAX_LEN))
    assert len(packed) == len(want) * world_size
    for j, row in enumerate(want):
        mine = packed[j * world_size : (j + 1) * world_size]
        assert [r["rank"] for r in mine] == list(range(world_size))
        labels = np.full(row.num_tokens, -100)  # segments records have no turns: every label -100
        for got in mine:
            exp = shard(row, world_size=world_size, rank=got["rank"], layout=layout, labels=labels)
            assert got["ids"] == [order[k] for k in exp.row.samples]
            np.testing.assert_array_equal(np.array(got["position_ids"]), exp.position_ids)
            for key in ("input_ids", "mm_token_type_ids", "labels", "token_index", "cu_seqlens_padded"):
                np.testing.assert_array_equal(got[key], getattr(exp, key), err_msg=key)
            assert got["num_tokens"] == exp.num_tokens and got["cu_seqlens"] == row.cu_seqlens.tolist()
            assert got["image_grid_thw"] == row.image_grid_thw.tolist()
        # put back by token_index, the ranks hold every token of the padded row once
        index = np.concatenate([r["token_index"] for r in mine])
        assert np.array_equal(np.sort(index), np.arange(mine[0]["cu_seqlens_padded"][-1]))
        if world_size > 1:  # the control: another rank's tokens are not this rank's
            assert mine[0]["token_index"] != mine[1]["token_index"]
    efficiency = sum(r.num_tokens for r in want) / (len(want) * MAX_LEN)
    assert f"into {len(want)} rows" in err and f"packing efficiency {efficiency:.3f}" in err


def test_cp_options_need_pack(root, capsys, tmp_path) -> None:
    code, err = run_cli(capsys, root, tmp_path, "--cp-size", "2")
    assert code == 2 and "--cp-size and --cp-layout need --pack" in err
    code, err = run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN), "--cp-size", "0")
    assert code == 2 and "--cp-size takes a number of ranks >= 1; got 0" in err
    code, err = run_cli(capsys, root, tmp_path, "--pack", str(MAX_LEN), "--cp-layout", "contiguous")
    assert code == 2 and "--cp-layout needs --cp-size" in err


def test_cli_pack_keeps_fractional_positions(capsys, tmp_path) -> None:
    """Qwen3-Omni's float32 time positions reach packed.parquet as float32 (an int64 column would cut
    19.29 to 19), equal to mrope.pack's row; the control: they are not whole numbers."""
    segments = [{"type": "text", "tokens": 3}, {"type": "video", "grid": [4, 4, 4], "fps": 1.7}]
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": "a", "segments": segments}) + "\n")
    out = tmp_path / "out"
    assert (
        main(
            ["batch", str(tmp_path / "r.jsonl"), "--out-dir", str(out), "--pack", "200"]
            + ["--model", "qwen3-omni", "--quiet"]
        )
        == 0
    )
    got = pq.read_table(out / "packed.parquet").to_pylist()[0]
    (row,) = list(
        mrope.pack([[Text(3), mrope.Video(grid=(4, 4, 4), fps=1.7)]], model="qwen3-omni", max_length=200)
    )
    pos = np.array(got["position_ids"], dtype=np.float32)
    assert row.position_ids.dtype == np.float32 and np.array_equal(pos, row.position_ids)
    assert not np.array_equal(pos, np.floor(pos))
