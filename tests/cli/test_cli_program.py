"""The CLI writes position programs: ``mrope positions --out x.mrpg`` and ``mrope batch --format program``.

Expected values: ``mrope.build_positions`` of the same segments, read back from the written bytes with
``mrope.PositionProgram.from_bytes``.
"""

from __future__ import annotations

import json

import numpy as np

import mrope
from mrope import Image, PositionProgram, Text, Video
from mrope._cli import main

BODY = {
    "model": "qwen2.5-vl",
    "segments": [
        {"type": "text", "tokens": 4},
        {"type": "image", "grid": [1, 28, 28]},
        {"type": "video", "grid": [8, 28, 28], "fps": 2.0},
        {"type": "text", "tokens": 3},
    ],
}
EXPECTED = [Text(4), Image(grid=(1, 28, 28)), Video(grid=(8, 28, 28), fps=2.0), Text(3)]


def test_positions_out_mrpg_writes_the_program(capsys, tmp_path) -> None:
    spec, out = tmp_path / "spec.json", tmp_path / "pos.mrpg"
    spec.write_text(json.dumps(BODY))
    assert main(["positions", "--spec", str(spec), "--out", str(out)]) == 0
    expected = mrope.build_positions(EXPECTED, model="qwen2.5-vl")
    program = PositionProgram.from_bytes(out.read_bytes())
    np.testing.assert_array_equal(program.expand(), expected.ids)
    assert program.delta == expected.delta
    assert capsys.readouterr().out.splitlines()[-1].startswith("position program (")
    assert main(["positions", "--spec", str(spec), "--out", str(tmp_path / "pos.bin")]) == 2
    assert ".mrpg (a position program)" in capsys.readouterr().err


def test_batch_format_program_writes_one_program_per_sample(capsys, tmp_path) -> None:
    jsonl = tmp_path / "samples.jsonl"
    records = [
        {"id": "a", **BODY},
        {"id": "b", "model": "qwen2-vl", "segments": [{"type": "text", "tokens": 6}]},
    ]
    jsonl.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    code = main(["batch", str(jsonl), "--out-dir", str(tmp_path / "o"), "--format", "program", "--quiet"])
    assert code == 0, capsys.readouterr().err
    a = PositionProgram.from_bytes((tmp_path / "o" / "a.mrpg").read_bytes())
    np.testing.assert_array_equal(a.expand(), mrope.build_positions(EXPECTED, model="qwen2.5-vl").ids)
    b = PositionProgram.from_bytes((tmp_path / "o" / "b.mrpg").read_bytes())
    np.testing.assert_array_equal(b.expand(), np.tile(np.arange(6), (3, 1)))
    manifest = [json.loads(x) for x in (tmp_path / "o" / "manifest.jsonl").read_text().splitlines()]
    assert [m["file"] for m in manifest] == ["a.mrpg", "b.mrpg"]
