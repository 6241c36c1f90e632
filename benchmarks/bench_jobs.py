"""Benchmark: one chat-JSONL job through the three batch faces, every record accounted for, equal outputs.

The job is what users have: a JSONL of chat records whose ``content`` is a string in some turns and a
list of items in others (text and a small PNG made here, 24 sizes), plus one record in 100 whose image is
missing (an error row, never a stop). The same file runs through

- ``mrope batch --format parquet --workers 2`` (a subprocess; its peak RSS is that of the job's largest
  process, read with ``getrusage(RUSAGE_CHILDREN)`` in a fresh wrapper process per run),
- Ray Data (``read_json(lines=True)`` + ``map_batches(process_batch)``, a local cluster), and
- Hugging Face ``datasets`` (``load_dataset("json")`` + ``map(process_record)``),

and the three outputs are checked equal row by row (by id) before any figure is printed. Records/s are
per face; the CLI is also run at a ladder of record counts, printing its peak RSS against the count
(flat means the Parquet rows are not held: they go out in row groups as the job goes).

Run: ``python benchmarks/bench_jobs.py [--records 20000] [--ladder 2500,5000,10000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image as PILImage
from tokenizers import Tokenizer, models, pre_tokenizers

MODEL = "qwen2.5-vl"
WORDS = "you are a helpful assistant describe this picture in detail what is shown here it is a photo".split()
COMPARED = (
    "id",
    "positions",
    "delta",
    "num_tokens",
    "image_grid_thw",
    "video_grid_thw",
    "second_per_grid_ts",
    "input_ids",
    "error",
    "error_code",
)
"""The columns every face writes, compared row by row."""


def write_job(folder: Path, n: int, seed: int = 0) -> Path:
    """``folder/job.jsonl`` of ``n`` mixed-type chat records, its PNGs and ``tokenizer.json``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *WORDS])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    for k in range(24):
        h, w = 56 + 28 * (k % 6), 56 + 28 * (k // 6)
        pixels = rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)
        PILImage.fromarray(pixels).save(folder / f"img{k}.png")
    path = folder / "job.jsonl"
    with path.open("w") as f:
        for i in range(n):
            words = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 40))))
            image = "missing.png" if i % 100 == 99 else f"img{int(rng.integers(24))}.png"
            user: list[dict[str, Any]] = [{"type": "image", "image": image}, {"type": "text", "text": words}]
            if i % 3 == 0:
                user = user[::-1]
            messages = [
                {"role": "system", "content": "you are a helpful assistant"},
                {"role": "user", "content": user},
                {"role": "assistant", "content": "it is a photo"},
            ]
            f.write(json.dumps({"id": f"r{i:06d}", "messages": messages}) + "\n")
    return path


def options(folder: Path) -> dict[str, Any]:
    """The pipeline options of the job (the CLI gets the same as flags)."""
    return {"model": MODEL, "base_dir": str(folder), "tokenizer": str(folder / "tokenizer.json")}


def rows_by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The compared columns of each row, as plain Python values, by id."""
    out = {}
    for row in rows:
        out[str(row["id"])] = {k: _plain(row[k]) for k in COMPARED}
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


RSS_WRAPPER = r"""
import json, resource, subprocess, sys
code = subprocess.run(sys.argv[1:]).returncode
print(json.dumps({"code": code, "maxrss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def run_cli(jsonl: Path, out_dir: Path, workers: int = 2) -> tuple[list[dict[str, Any]], float, float]:
    """``mrope batch --format parquet --workers N`` on the job: its rows, seconds and peak RSS (MB)."""
    import pyarrow.parquet as pq

    folder = jsonl.parent
    cmd = [sys.executable, "-m", "mrope", "batch", str(jsonl), "--out-dir", str(out_dir), "--quiet"]
    cmd += ["--format", "parquet", "--workers", str(workers), "--model", MODEL]
    cmd += ["--tokenizer", str(folder / "tokenizer.json")]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RSS_WRAPPER, *cmd], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["code"] not in (0, 1):  # 1: some records failed (the missing images)
        raise RuntimeError(f"mrope batch failed: {done.stderr}")
    rows = pq.read_table(out_dir / "samples.parquet").to_pylist()
    return rows, seconds, report["maxrss_kb"] / 1024


def run_ray(jsonl: Path, out_dir: Path) -> tuple[list[dict[str, Any]], float]:
    """Ray Data (an initialised local cluster) on the job: its rows and seconds."""
    import pyarrow.parquet as pq
    import ray.data

    from mrope.pipeline import process_batch

    t0 = time.perf_counter()
    ds = ray.data.read_json(str(jsonl), lines=True)  # nested records of mixed types: pandas' reader
    ds = ds.map_batches(process_batch, fn_kwargs=options(jsonl.parent), batch_format="pandas")
    ds.write_parquet(str(out_dir))
    seconds = time.perf_counter() - t0
    return pq.read_table(out_dir).to_pylist(), seconds


def run_datasets(jsonl: Path, cache: Path, num_proc: int | None = None) -> tuple[list[dict[str, Any]], float]:
    """Hugging Face ``datasets`` on the job: its rows and seconds."""
    import datasets

    from mrope.pipeline import process_record

    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    ds = datasets.load_dataset("json", data_files=str(jsonl), split="train", cache_dir=str(cache))
    drop = [c for c in ds.column_names if c != "id"]
    ds = ds.map(process_record, fn_kwargs=options(jsonl.parent), remove_columns=drop, num_proc=num_proc)
    seconds = time.perf_counter() - t0
    return ds.to_list(), seconds


def check_equal(n: int, **faces: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every face has one row per record, and the same compared values on each; returns them by id."""
    tables = {name: rows_by_id(rows) for name, rows in faces.items()}
    want = {f"r{i:06d}" for i in range(n)}
    reference_name, reference = next(iter(tables.items()))
    for name, rows in tables.items():
        count = len(faces[name])
        if count != n or set(rows) != want:
            raise AssertionError(f"{name}: {count} rows for {n} records")
        for rid, row in rows.items():
            if row != reference[rid]:
                raise AssertionError(f"{name} differs from {reference_name} on {rid}")
    return reference


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--ladder", default="2500,5000,10000", help="smaller CLI runs for the RSS curve")
    args = ap.parse_args(argv)
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    print(f"{platform.python_version()}, {os.cpu_count()} CPUs, {platform.machine()}; model {MODEL}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        jsonl = write_job(root / "job", args.records)
        cli, cli_s, cli_rss = run_cli(jsonl, root / "cli")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        ray.data.DataContext.get_current().enable_progress_bars = False
        try:
            on_ray, ray_s = run_ray(jsonl, root / "ray")
        finally:
            ray.shutdown()
        on_ds, ds_s = run_datasets(jsonl, root / "hf", num_proc=2)
        rows = check_equal(args.records, cli=cli, ray=on_ray, datasets=on_ds)
        errors = sum(1 for r in rows.values() if r["error"])
        print(f"{args.records} records: equal on all three faces; {errors} error rows (missing images)")
        for name, seconds in (("mrope batch parquet, 2 workers", cli_s), ("Ray Data, 2 CPUs", ray_s)):
            print(f"  {name:34s} {args.records / seconds:8.0f} records/s")
        print(f"  {'datasets.map, num_proc=2':34s} {args.records / ds_s:8.0f} records/s")
        print("mrope batch --format parquet --workers 2, peak RSS of the largest process:")
        for count in [int(c) for c in args.ladder.split(",") if c] + [args.records]:
            if count == args.records:
                seconds, rss = cli_s, cli_rss
            else:
                small = write_job(root / f"job{count}", count)
                _, seconds, rss = run_cli(small, root / f"cli{count}")
            print(f"  {count:7d} records  {rss:7.1f} MB  {count / seconds:7.0f} records/s")


if __name__ == "__main__":
    main()
