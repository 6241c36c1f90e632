"""One mixed-type chat JSONL through the three batch faces, as documented: ``mrope batch --format parquet
--workers 2``, Ray Data on a real local cluster with 1 CPU (``read_json(lines=True)`` +
``map_batches(process_batch)``) and a real ``datasets.map(process_record)``. Every record is accounted
for and the three give equal rows; each row equals the record's positions built in this process.

The job and the faces are benchmarks/bench_jobs.py's (run here at 200 records, no timing asserted), so
the benchmark's 20,000-record figures come from the code this test checks.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from mrope.pipeline import Preprocessor

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RECORDS = 200


def bench_jobs():  # noqa: ANN201
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_jobs.py"
    spec = importlib.util.spec_from_file_location("bench_jobs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray's own DataContext fields
def test_the_three_faces_agree_on_a_mixed_type_chat_jsonl(tmp_path, monkeypatch, ray_one_cpu) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local JSON file needs no network; never try it
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    bench = bench_jobs()
    jsonl = bench.write_job(tmp_path / "job", RECORDS)
    lines = [json.loads(x) for x in jsonl.read_text().splitlines()]
    # the file is what broke the documented recipe: a turn's content is a string or a list
    assert {type(m["content"]) for r in lines for m in r["messages"]} == {str, list}
    cli, _, _ = bench.run_cli(jsonl, tmp_path / "cli", workers=2)
    on_ray, _ = bench.run_ray(jsonl, tmp_path / "ray")
    on_ds, _ = bench.run_datasets(jsonl, tmp_path / "hf")
    rows = bench.check_equal(RECORDS, cli=cli, ray=on_ray, datasets=on_ds)
    assert [r["id"] for r in cli] == [r["id"] for r in lines]  # the CLI keeps the input order
    failed = sorted(rid for rid, row in rows.items() if row["error"])
    assert failed == ["r000099", "r000199"]  # the records whose image is missing
    assert {rows[rid]["error_code"] for rid in failed} == {"invalid_media"}
    pre = Preprocessor(**bench.options(jsonl.parent))
    for record in lines:
        if record["id"] in failed:
            continue
        p = pre.positions(record)
        row = rows[record["id"]]
        np.testing.assert_array_equal(np.asarray(row["positions"]), p.ids)
        assert row["input_ids"] == p.input_ids.tolist() and row["num_tokens"] == p.num_tokens


def test_check_equal_notices_a_difference(tmp_path) -> None:
    """The negative control: a row that differs on one face, or a missing row, fails the comparison."""
    bench = bench_jobs()
    jsonl = bench.write_job(tmp_path / "job", 4)
    pre = Preprocessor(**bench.options(jsonl.parent))
    rows = [{"id": json.loads(x)["id"], **pre.record(json.loads(x))} for x in jsonl.read_text().splitlines()]
    changed = [dict(r) for r in rows]
    changed[2]["delta"] += 1
    bench.check_equal(4, a=rows, b=[dict(r) for r in rows])
    with pytest.raises(AssertionError, match="b differs from a on r000002"):
        bench.check_equal(4, a=rows, b=changed)
    with pytest.raises(AssertionError, match="3 rows for 4 records"):
        bench.check_equal(4, a=rows, b=rows[:3])
