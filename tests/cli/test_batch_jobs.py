"""``mrope batch`` as a job: Parquet in bounded row groups, ``--workers N`` in input order, and what was
written before a failure kept readable.

The expected positions come from :func:`mrope.build_positions` on the records' segments built by hand
(text-only rows from the rule written out here: every axis counts ``0..n-1``); the media are generated.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from support import media
from tokenizers import Tokenizer, models, pre_tokenizers

import mrope
from mrope import Text
from mrope._cli import _progress as progress_mod
from mrope._cli import main
from mrope.media import load_image

pytestmark = pytest.mark.timeout(120)

MODEL = "qwen2.5-vl"


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def mixed(root: Path) -> list[object]:
    """Records that succeed and fail in every way a sample can: a missing file, bad JSON, a reused id."""
    media.write_image(root / "a.png", 84, 56)
    lines: list[object] = []
    for i in range(11):
        if i % 4 == 1:
            lines.append({"id": f"s{i}", "segments": [{"type": "image", "path": "nope.png"}]})
        else:
            segs = [{"type": "text", "tokens": 3 + i}, {"type": "image", "path": "a.png"}]
            lines.append({"id": f"s{i}", "segments": segs})
    lines.insert(5, "{not json")
    lines.append({"id": "s0", "segments": [{"type": "text", "tokens": 1}]})
    return lines


def batch(*args: object) -> int:
    return main(["batch", *(str(a) for a in args), "--model", MODEL, "--quiet"])


@pytest.mark.parametrize("fmt", ["parquet", "npy"])
def test_workers_keep_the_order_and_the_error_rows(tmp_path, fmt) -> None:
    jsonl = write_jsonl(tmp_path / "mixed.jsonl", mixed(tmp_path))
    one, two = tmp_path / "one", tmp_path / "two"
    assert batch(jsonl, "--out-dir", one, "--format", fmt) == 1  # some samples fail
    assert batch(jsonl, "--out-dir", two, "--format", fmt, "--workers", 2, "--row-group", 3) == 1
    manifests = [[json.loads(x) for x in (d / "manifest.jsonl").read_text().splitlines()] for d in (one, two)]
    assert manifests[0] == manifests[1]
    ids = [m["id"] for m in manifests[1]]
    assert ids == ["s0", "s1", "s2", "s3", "s4", "mixed.jsonl-6", "s5", "s6", "s7", "s8", "s9", "s10", "s0"]
    failed = [m["id"] for m in manifests[1] if m["error"]]
    assert failed == ["s1", "mixed.jsonl-6", "s5", "s9", "s0"]
    assert "taken by sample 's0'" in manifests[1][-1]["error"]
    image = load_image(tmp_path / "a.png", model=MODEL)
    if fmt == "npy":
        for m in manifests[1]:
            if not m["error"]:
                assert np.array_equal(np.load(one / m["file"]), np.load(two / m["file"]))
        return
    tables = [pq.read_table(d / "samples.parquet") for d in (one, two)]
    assert tables[0].equals(tables[1])
    assert pq.ParquetFile(two / "samples.parquet").num_row_groups == 5  # 13 rows in groups of 3
    rows = tables[1].to_pylist()
    assert [r["id"] for r in rows] == ids
    assert [r["error_code"] for r in rows if r["error"]] == [
        "invalid_media",
        "invalid_request",
        "invalid_media",
        "invalid_media",
        "invalid_request",
    ]
    for i, row in zip(range(11), (r for r in rows if r["id"] != "mixed.jsonl-6"), strict=False):
        if i % 4 == 1:
            continue
        expected = mrope.build_positions([Text(3 + i), image], model=MODEL)
        assert row["positions"] == expected.ids.tolist(), row["id"]


@pytest.mark.parametrize("workers", [1, 2])
def test_parquet_written_before_a_failure_stays_readable(tmp_path, capsys, workers) -> None:
    """Text without a tokenizer stops the job (every later sample would fail alike): the rows before it
    are in samples.parquet, whose footer is written on the way out."""
    lines: list[object] = [{"id": f"t{n}", "segments": [{"type": "text", "tokens": n}]} for n in range(1, 8)]
    lines.append({"id": "words", "segments": [{"type": "text", "text": "needs a tokenizer"}]})
    lines += [{"id": f"late{n}", "segments": [{"type": "text", "tokens": n}]} for n in range(40)]
    jsonl = write_jsonl(tmp_path / "stops.jsonl", lines)
    out = tmp_path / "out"
    code = batch(jsonl, "--out-dir", out, "--format", "parquet", "--row-group", 2, "--workers", workers)
    assert code == 2
    assert "sample 'words' (stops.jsonl:8): " in capsys.readouterr().err
    table = pq.read_table(out / "samples.parquet")
    assert table.column("id").to_pylist() == [f"t{n}" for n in range(1, 8)]
    for n, row in zip(range(1, 8), table.column("positions").to_pylist(), strict=True):
        assert row == [list(range(n))] * 3  # text alone: every axis counts 0..n-1
    manifest = [json.loads(x)["id"] for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert manifest == [f"t{n}" for n in range(1, 8)]


def test_workers_pack_the_same_rows(tmp_path) -> None:
    """--pack packs the samples of the whole job: computed by 2 workers, the same packed.parquet."""
    jsonl = write_jsonl(tmp_path / "mixed.jsonl", mixed(tmp_path))
    one, two = tmp_path / "one", tmp_path / "two"
    assert batch(jsonl, "--out-dir", one, "--pack", 64) == 1
    assert batch(jsonl, "--out-dir", two, "--pack", 64, "--workers", 2) == 1
    tables = [pq.read_table(d / "packed.parquet") for d in (one, two)]
    assert tables[0].equals(tables[1]) and tables[0].num_rows > 1
    assert (one / "manifest.jsonl").read_text() == (two / "manifest.jsonl").read_text()


def test_progress_counts_every_sample_with_workers(tmp_path, capsys, monkeypatch) -> None:
    """The progress lines (a log's, here one per sample) count up through the job with 2 workers."""
    from mrope._cli import _batch

    def every_sample(total: int, desc: str, quiet: bool = False) -> progress_mod.Progress:
        return progress_mod.LineProgress(total, desc, sys.stderr, every_s=0.0)

    monkeypatch.setattr(_batch, "progress", every_sample)
    lines = [{"id": f"t{n}", "segments": [{"type": "text", "tokens": 2}]} for n in range(40)]
    jsonl = write_jsonl(tmp_path / "forty.jsonl", lines)
    assert (
        main(["batch", str(jsonl), "--out-dir", str(tmp_path / "o"), "--model", MODEL, "--workers", "2"]) == 0
    )
    counted = [
        x for x in capsys.readouterr().err.splitlines() if x.startswith("mrope batch: ") and "/40 (" in x
    ]
    assert counted == [f"mrope batch: {n}/40 ({100 * n / 40:.0f}%)" for n in range(1, 40)], counted


def test_option_values_are_checked(tmp_path, capsys) -> None:
    jsonl = write_jsonl(tmp_path / "one.jsonl", [{"id": "a", "segments": [{"type": "text", "tokens": 2}]}])
    for flag, value in (("--workers", 0), ("--row-group", "x")):
        assert batch(jsonl, "--out-dir", tmp_path / "o", flag, value) == 2
        assert flag in capsys.readouterr().err


def test_a_template_message_names_the_flag_that_exists(tmp_path, capsys) -> None:
    """A 'tokens' count cannot go through a chat template: the message names --chat-template none (there
    is no --no-chat-template), and that flag reads the plain turns."""
    words = {"[UNK]": 0, "hello": 1}
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'] }}: {% endfor %}")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "tokens": 4}]}]}))
    argv = [
        "positions",
        "--spec",
        str(spec),
        "--model",
        MODEL,
        "--tokenizer",
        str(tmp_path / "tokenizer.json"),
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--chat-template none" in err and "--no-chat-template" not in err
    assert main([*argv, "--chat-template", "none", "--out", str(tmp_path / "p.npy")]) == 0
    assert np.load(tmp_path / "p.npy").tolist() == [list(range(4))] * 3  # text alone: 0..n-1 on each axis


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_stopped_job_keeps_a_readable_parquet(tmp_path, how) -> None:
    """Ctrl-C (SIGINT to the whole process group, workers included) or SIGTERM to the command: it exits
    130 between two samples, and samples.parquet holds, readable, the rows the manifest lists, in input
    order."""
    lines = [{"id": f"t{n}", "segments": [{"type": "text", "tokens": 1 + n % 50}]} for n in range(20_000)]
    jsonl = write_jsonl(tmp_path / "long.jsonl", lines)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mrope", "batch", str(jsonl), "--out-dir", str(out), "--model", MODEL]
    cmd += ["--format", "parquet", "--row-group", "7", "--workers", "2", "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True)
    manifest = out / "manifest.jsonl"
    deadline = time.monotonic() + 90
    while not (manifest.exists() and manifest.read_text().count("\n") >= 30):
        assert proc.poll() is None and time.monotonic() < deadline, "the job ended before it was stopped"
        time.sleep(0.05)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err, err
    ids = pq.read_table(out / "samples.parquet").column("id").to_pylist()
    listed = [json.loads(x)["id"] for x in manifest.read_text().splitlines()]
    assert 30 <= len(ids) < len(lines) and ids == listed == [f"t{n}" for n in range(len(ids))]
