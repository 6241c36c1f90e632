"""``mrope positions --layer-sets`` (and a spec's ``layer_sets``): every position set and the layer pattern,
printed, as JSON and saved (docs/cli.md).

Expected values: each set equals :func:`mrope.build_position_sets` of the same segments, and for
``circle-rope-age`` the authors' code as tests/models/test_scheme_circle.py writes it out
(lose4578/CircleRoPE at 063fb2c, ``code/modular_qwen2_5_vl_circle_rope.py:310-329``; imported from there).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli import run  # the in-process runner of the CLI tests

import mrope
from mrope.models import get_family

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_scheme_circle import _reference, assert_close_positions  # noqa: E402

pytestmark = pytest.mark.timeout(60)

FLAGS = ["--text", "3", "--image-grid", "1,4,6", "--text", "2", "--image-grid", "1,6,4", "--text", "1"]
SEGMENTS = [
    mrope.Text(3),
    mrope.Image(grid=(1, 4, 6)),
    mrope.Text(2),
    mrope.Image(grid=(1, 6, 4)),
    mrope.Text(1),
]


def test_json_and_saved_sets_equal_the_library_and_the_authors_code(capsys, tmp_path) -> None:
    """--json prints every set (as the service answers it, plus the model) and the pattern; --out .npy
    holds them stacked [2, 3, T] as float64 and .json the same document."""
    want = mrope.build_position_sets(SEGMENTS, model="circle-rope-age")
    npy = tmp_path / "sets.npy"
    code, out, err = run(
        capsys, "positions", "--model", "circle-rope-age", *FLAGS, "--layer-sets", "--json", "--out", npy
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == "circle-rope-age" and doc["layer_pattern"] == ["circle", "mrope"]
    assert json.loads(json.dumps({k: p.to_dict() for k, p in want.items()})) == doc["position_sets"]
    circle, _ = _reference(want["circle"])
    m, _ = _reference(want["circle"], use_m_index=True)
    assert_close_positions(np.asarray(doc["position_sets"]["circle"]["positions"], dtype=np.float32), circle)
    np.testing.assert_array_equal(np.asarray(doc["position_sets"]["mrope"]["positions"]), m.numpy())
    saved = np.load(npy)
    assert saved.dtype == np.float64 and saved.shape == (2, 3, want["circle"].num_tokens)
    np.testing.assert_array_equal(saved[1], m.numpy())
    np.testing.assert_array_equal(saved[0], want["circle"].ids.astype(np.float64))
    assert not np.array_equal(saved[0], saved[1])  # negative control: the sets differ
    js = tmp_path / "sets.json"
    assert run(capsys, "positions", "--model", "circle-rope-age", *FLAGS, "--layer-sets", "--out", js)[0] == 0
    assert json.loads(js.read_text()) == doc


def test_the_table_shows_each_set(capsys) -> None:
    """Without --json: a line naming the sets and the pattern, then each set's summary table with its
    own delta."""
    want = mrope.build_position_sets(SEGMENTS, model="circle-rope-age")
    code, out, _ = run(capsys, "positions", "--model", "circle-rope-age", *FLAGS, "--layer-sets")
    assert code == 0
    assert (
        out.splitlines()[0]
        == "2 position sets (circle, mrope); layer i reads set pattern[i % 2] of (circle, mrope)"
    )
    assert "set circle:" in out and "set mrope:" in out
    assert f"delta {int(want['mrope'].delta)}:" in out.split("set mrope:")[1]
    # without --layer-sets the answer is the scheme's own positions (the circle set), one table
    code, plain, _ = run(capsys, "positions", "--model", "circle-rope-age", *FLAGS)
    assert "set mrope" not in plain and plain.splitlines()[0].startswith("model circle-rope-age")


def test_a_specs_own_sets(capsys, tmp_path) -> None:
    """A spec (the service's body) with layer_sets {sets, pattern} lays out its own sets on any model;
    the same words refuse a bad one as the service does (exit 2)."""
    own = {"sets": {"offset": {}, "reset": {"spatial": "reset"}}, "pattern": ["offset", "nope"]}
    segs = [{"type": "text", "tokens": 3}, {"type": "image", "grid": [1, 4, 6]}]
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "qwen2-vl", "segments": segs, "layer_sets": own}))
    code, out, err = run(capsys, "positions", "--spec", spec, "--json")
    assert code == 0, err
    family = get_family("qwen2-vl").replace(layer_sets=mrope.LayerSets(own["sets"], ("offset", "nope")))
    want = mrope.build_position_sets([mrope.Text(3), mrope.Image(grid=(1, 4, 6))], model=family)
    doc = json.loads(out)
    assert doc["layer_pattern"] == ["offset", "nope"]
    for name, p in want.items():
        np.testing.assert_array_equal(np.asarray(doc["position_sets"][name]["positions"]), p.ids)
    assert doc["position_sets"]["offset"] != doc["position_sets"]["reset"]  # negative control
    bad = {**own, "sets": {"offset": {"spatail": "reset"}}}
    spec.write_text(json.dumps({"model": "qwen2-vl", "segments": segs, "layer_sets": bad}))
    code, _, err = run(capsys, "positions", "--spec", spec)
    assert code == 2 and "layer_sets sets offset: unknown field 'spatail'" in err
    spec.write_text(
        json.dumps({"model": "qwen2-vl", "segments": segs, "layer_sets": {**own, "pattern": ["x"]}})
    )
    code, _, err = run(capsys, "positions", "--spec", spec)
    assert code == 2 and "pattern names sets ['x'] that are not in sets ['offset', 'reset']" in err


def test_a_program_is_one_sets(capsys, tmp_path) -> None:
    """A position program holds one set: --out .mrpg with --layer-sets is refused, nothing written."""
    args = ["positions", "--model", "circle-rope-age", *FLAGS, "--layer-sets", "--out", tmp_path / "p.mrpg"]
    code, _, err = run(capsys, *args)
    assert code == 2 and "position sets have no .mrpg form" in err
    assert not (tmp_path / "p.mrpg").exists()


def pixels(path) -> np.ndarray:
    from PIL import Image as PILImage

    with PILImage.open(path) as img:
        return np.asarray(img.convert("RGB"))


def test_plot_draws_every_set_or_the_one_named(capsys, tmp_path) -> None:
    """``mrope plot --layer-sets`` writes one PNG per set (FILE.<set>.png), each the picture of that set
    of build_position_sets, the mrope set's the picture of the authors' M-RoPE index; ``--set NAME``
    draws that one set to FILE.png; an unknown name is refused naming the sets."""
    from mrope._plot import render_layout

    want = mrope.build_position_sets(SEGMENTS, model="circle-rope-age")
    m, _ = _reference(want["circle"], use_m_index=True)
    authors = dataclasses.replace(want["mrope"], ids=m.numpy().astype(np.int64))
    png = tmp_path / "layout.png"
    args = ["plot", "--model", "circle-rope-age", *FLAGS, "--width", "600", "--png", png]
    code, out, err = run(capsys, *args, "--layer-sets")
    assert code == 0, err
    assert not png.exists() and f"-> {tmp_path / 'layout.circle.png'}" in out
    labels = ["3 tokens", "grid 1x4x6", "2 tokens", "grid 1x6x4", "1 tokens"]  # the CLI's own captions
    drawn = {name: pixels(tmp_path / f"layout.{name}.png") for name in want}
    for name, p in (("circle", want["circle"]), ("mrope", authors)):
        expected = np.asarray(render_layout(p, width=600, labels=labels, position_set=name).convert("RGB"))
        np.testing.assert_array_equal(drawn[name], expected)
    assert not np.array_equal(drawn["circle"], drawn["mrope"])  # negative control: the sets differ
    code, out, err = run(capsys, *args, "--set", "mrope")
    assert code == 0, err
    np.testing.assert_array_equal(pixels(png), drawn["mrope"])
    code, _, err = run(capsys, *args, "--set", "cirle")
    assert code == 2 and "--set 'cirle': the position sets are circle, mrope" in err
    code, _, err = run(capsys, "plot", "--model", "qwen2-vl", *FLAGS, "--png", png, "--set", "mrope")
    assert code == 2 and "the position sets are default" in err  # a model of one set has only 'default'
    spec = tmp_path / "spec.json"
    own = {"sets": {"a/b": {}, "c": {"spatial": "reset"}}, "pattern": ["a/b", "c"]}
    spec.write_text(
        json.dumps({"model": "qwen2-vl", "segments": [{"type": "text", "tokens": 2}], "layer_sets": own})
    )
    code, _, err = run(capsys, "plot", "--spec", spec, "--png", png)
    assert code == 2 and "position sets ['a/b'] cannot name a file" in err
    assert run(capsys, "plot", "--spec", spec, "--png", png, "--set", "a/b")[0] == 0  # the control
