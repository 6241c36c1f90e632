"""``mrope golden OUT`` and ``mrope conform SUITE RESULTS``.

The runtime under check here reads only the suite's inputs (token ids, mask, grids, seconds per grid) and
answers with ``mrope.numpy_rope_index`` and the decode rule written out here (token ``i`` after ``n``
valid tokens is at ``n + i + delta``): it agrees, and a planted off-by-one (the seed's first-decode and a
position moved by one) is found, with its first divergence printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mrope
from mrope._cli import main

KINDS = ("basic", "padding", "long-video", "fractional-time")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite")
    assert main(["golden", str(out), "--no-cos-sin"]) == 0
    return out


def _cases(suite: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (suite / "cases.jsonl").read_text().splitlines()]


def _runtime(case: dict[str, Any]) -> dict[str, Any]:
    """An answer computed from the case's inputs alone, as another runtime would."""
    x = case["inputs"]
    pos, deltas = mrope.numpy_rope_index(
        np.asarray([x["input_ids"]]),
        np.asarray(x["image_grid_thw"]).reshape(-1, 3),
        np.asarray(x["video_grid_thw"]).reshape(-1, 3),
        np.asarray([x["attention_mask"]]),
        model=case["family"],
        convention=case["convention"],
        second_per_grid_ts=np.asarray(x.get("second_per_grid_ts", []), dtype=np.float32),
        mm_token_type_ids=np.asarray([x["mm_token_type_ids"]]),
    )
    delta = deltas.reshape(-1)[0].item()
    n = sum(x["attention_mask"])
    decode = [[n + i + delta for i in range(3)] for _ in range(pos.shape[0])]
    return {"case": case["case"], "positions": pos[:, 0].tolist(), "delta": delta, "decode": decode}


def _answers(suite: Path) -> list[dict[str, Any]]:
    families = ("qwen2-vl", "qwen2.5-vl", "glm-4.1v")
    chosen = [c for c in _cases(suite) if c["family"] in families and c["kind"] in KINDS]
    return [_runtime(c) for c in chosen]


def _write(path: Path, lines: list[Any]) -> str:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def test_golden_writes_a_versioned_manifest_and_cases(suite: Path, capsys) -> None:
    manifest = json.loads((suite / "manifest.json").read_text())
    assert manifest["format"] == "mrope-golden" and manifest["version"] == 1 and manifest["cos_sin"] is False
    cases = _cases(suite)
    assert len(cases) == manifest["num_cases"] and all("rope" not in c["expected"] for c in cases)
    assert {c["convention"] for c in cases} == {"released", "transformers5"}


def test_conform_passes_a_runtime_that_agrees(suite: Path, tmp_path: Path, capsys) -> None:
    answers = _answers(suite)
    assert len(answers) == 3 * 2 * len(KINDS)
    results = _write(tmp_path / "r.jsonl", answers)
    assert main(["conform", str(suite), results, "--partial"]) == 0
    assert capsys.readouterr().out.strip().endswith(f"{len(answers)} of {len(answers)} checked cases agree")
    assert main(["conform", str(suite), results]) == 1  # every other case has no result
    assert "MISSING" in capsys.readouterr().out


def test_conform_finds_a_planted_off_by_one(suite: Path, tmp_path: Path, capsys) -> None:
    answers = _answers(suite)
    first_decode = next(a for a in answers if a["case"] == "qwen2-vl/released/basic")
    first_decode["decode"] = [[v - 1 for v in row] for row in first_decode["decode"]]
    moved = next(a for a in answers if a["case"] == "glm-4.1v/transformers5/long-video")
    moved["positions"][1][7] += 1
    assert main(["conform", str(suite), _write(tmp_path / "r.jsonl", answers), "--partial"]) == 1
    out = capsys.readouterr().out.splitlines()
    fails = [line for line in out if line.startswith("FAIL")]
    want = np.asarray(first_decode["decode"])[0, 0] + 1
    assert (
        fails[0] == f"FAIL qwen2-vl/released/basic: decode: token 0 axis t: expected {want}, got {want - 1}"
    )
    assert fails[1].startswith("FAIL glm-4.1v/transformers5/long-video: positions: token 7 axis h: expected ")
    assert len(fails) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "line 1: not JSON"),
        ({"positions": [[1]]}, "expected an object with a 'case' name"),
        ({"case": "nope/released/basic", "positions": [[1]], "delta": 0}, "'nope/released/basic' is not in"),
        ({"case": "qwen2-vl/released/basic", "positions": [1, 2], "delta": 0}, "'positions' must be a list"),
        ({"case": "qwen2-vl/released/basic", "positions": [[0], [0, 1]], "delta": 0}, "'positions' must be"),
    ],
)
def test_conform_refuses_malformed_results(
    suite: Path, tmp_path: Path, capsys, line: Any, message: str
) -> None:
    assert main(["conform", str(suite), _write(tmp_path / "r.jsonl", [line])]) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("mrope: error: ")


def test_conform_refuses_a_missing_delta_or_decode_and_other_versions(
    suite: Path, tmp_path: Path, capsys
) -> None:
    good = _answers(suite)[0]
    for drop, message in (("delta", "'delta' must be a number"), ("decode", "the result gives no 'decode'")):
        line = {k: v for k, v in good.items() if k != drop}
        assert main(["conform", str(suite), _write(tmp_path / "r.jsonl", [line])]) == 2
        assert message in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    manifest = json.loads((suite / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "version": 99}))
    assert main(["conform", str(other), str(tmp_path / "r.jsonl")]) == 2
    assert "suite version 99; this mrope reads version 1" in capsys.readouterr().err


def test_golden_without_torch_names_the_extra_and_the_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    """Without torch (seen as find_spec finding none) the cos/sin rows cannot be made: exit 2, naming the
    extra and --no-cos-sin, and nothing written."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    assert main(["golden", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "mrope[torch]"' in err and "--no-cos-sin" in err
    assert not (tmp_path / "s").exists()
