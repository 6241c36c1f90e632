"""``mrope batch --layer-sets``: every position set of the model per sample, in each output form (npy, json,
parquet, packed rows and packed rows cut for context parallelism), and the refusals (docs/cli.md).

Expected values: each set equals :func:`mrope.build_position_sets` of the record's segments, and for
``circle-rope-age`` the authors' code as tests/models/test_scheme_circle.py writes it out
(lose4578/CircleRoPE at 063fb2c, ``code/modular_qwen2_5_vl_circle_rope.py:310-329``; imported from there).
A packed row's set is the text row over the samples' ids of that set side by side, written out here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_cli import run  # the in-process runner of the CLI tests

import mrope

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_scheme_circle import _prompt, _reference, assert_close_positions, segment_json  # noqa: E402

pytestmark = pytest.mark.timeout(60)

SEEDS = range(4)


def jsonl(tmp_path: Path, extra: dict | None = None) -> Path:
    path = tmp_path / "samples.jsonl"
    lines = [
        {"id": f"r{s}", "segments": [segment_json(g) for g in _prompt(s)], **(extra or {})} for s in SEEDS
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def batch(capsys, tmp_path: Path, *args: object, extra: dict | None = None, model="circle-rope-age"):
    out = tmp_path / "out"
    code, _, err = run(
        capsys, "batch", jsonl(tmp_path, extra), "--out-dir", out, "--model", model, "--quiet", *args
    )
    manifest = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()] if code != 2 else []
    return code, err, out, manifest


def want(seed: int) -> dict[str, mrope.Positions]:
    return mrope.build_position_sets(_prompt(seed), model="circle-rope-age")


def test_npy_and_json_files_hold_every_set(capsys, tmp_path) -> None:
    """--format npy: <id>.npy is the sets stacked [2, 3, T] (float64), the mrope set the authors' index;
    --format json: the sets document; the manifest gives each set's delta."""
    code, err, out, manifest = batch(capsys, tmp_path, "--layer-sets")
    assert code == 0, err
    for seed, entry in zip(SEEDS, manifest, strict=True):
        sets = want(seed)
        saved = np.load(out / f"r{seed}.npy")
        np.testing.assert_array_equal(saved, np.stack([p.ids.astype(np.float64) for p in sets.values()]))
        m, _ = _reference(sets["circle"], use_m_index=True)
        np.testing.assert_array_equal(saved[1], m.numpy())
        assert_close_positions(saved[0].astype(np.float32), _reference(sets["circle"])[0])
        assert entry["set_deltas"] == [float(p.delta) for p in sets.values()]
        assert entry["delta"] == float(sets["circle"].delta)
        assert not np.allclose(saved[0], saved[1], atol=1e-3)  # negative control
    code, err, out, _ = batch(capsys, tmp_path, "--layer-sets", "--format", "json")
    assert code == 0, err
    doc = json.loads((out / "r0.json").read_text())
    assert doc["layer_pattern"] == ["circle", "mrope"]
    assert doc["position_sets"] == json.loads(json.dumps({k: p.to_dict() for k, p in want(0).items()}))
    code, err, out, _ = batch(capsys, tmp_path)  # the control: without --layer-sets, one set
    assert code == 0 and np.load(out / "r0.npy").shape == want(0)["circle"].ids.shape


def test_parquet_and_packed_rows_hold_every_set(capsys, tmp_path) -> None:
    """--format parquet: position_sets [2, 3, T] per row (positions the circle set, float32); --pack:
    each packed row's position_sets [2, 4, L] is the text row over the samples' sets; --cp-size 2: the
    first set of each rank's position_sets is its position_ids."""
    code, err, out, _ = batch(capsys, tmp_path, "--layer-sets", "--format", "parquet")
    assert code == 0, err
    rows = pq.read_table(out / "samples.parquet").to_pylist()
    for seed, row in zip(SEEDS, rows, strict=True):
        sets = want(seed)
        np.testing.assert_array_equal(
            np.asarray(row["position_sets"]), np.stack([p.ids.astype(np.float64) for p in sets.values()])
        )
        np.testing.assert_array_equal(np.asarray(row["positions"], np.float32), sets["circle"].ids)
        assert row["set_names"] == ["circle", "mrope"] and row["layer_pattern"] == ["circle", "mrope"]
    code, err, out, _ = batch(capsys, tmp_path, "--layer-sets", "--pack", 150)
    assert code == 0, err
    packed = pq.read_table(out / "packed.parquet").to_pylist()
    assert sorted(i for row in packed for i in row["samples"]) == list(SEEDS)
    for row in packed:
        got = np.asarray(row["position_sets"])
        for k, name in enumerate(["circle", "mrope"]):
            parts = [want(i)[name] for i in row["samples"]]
            text = np.concatenate([np.arange(p.num_tokens) for p in parts])
            body = np.concatenate([p.ids.astype(np.float64) for p in parts], axis=1)
            np.testing.assert_array_equal(got[k], np.concatenate([text[None], body]))
        assert not np.allclose(got[0], got[1], atol=1e-3)  # negative control
    code, err, out, _ = batch(capsys, tmp_path, "--layer-sets", "--pack", 150, "--cp-size", 2)
    assert code == 0, err
    for rank in pq.read_table(out / "packed.parquet").to_pylist():
        got = np.asarray(rank["position_sets"])
        assert got.shape[:2] == (2, 4) and got.shape[2] == rank["num_tokens"]
        np.testing.assert_array_equal(got[0].astype(np.float32), np.asarray(rank["position_ids"], np.float32))


def test_refusals(capsys, tmp_path) -> None:
    """--layer-sets without a model, or with --format program, stops at once (exit 2); a record's own
    layer_sets in a job without --layer-sets is that sample's error (exit 1), served with it (the
    control)."""
    path = jsonl(tmp_path)
    code, _, err = run(capsys, "batch", path, "--out-dir", tmp_path / "o", "--layer-sets")
    assert code == 2 and "layer_sets needs the job's model" in err
    code, err, _, _ = batch(capsys, tmp_path, "--layer-sets", "--format", "program")
    assert code == 2 and "a position program holds one set" in err
    code, _, _, manifest = batch(capsys, tmp_path, extra={"layer_sets": True})
    assert code == 1 and all("this job's rows hold one set" in e["error"] for e in manifest)
    code, err, _, manifest = batch(capsys, tmp_path, "--layer-sets", extra={"layer_sets": True})
    assert code == 0 and all(e["error"] == "" for e in manifest), err
