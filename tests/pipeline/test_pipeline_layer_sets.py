"""``layer_sets`` on a pipeline job: each row (and each packed row) carries every position set of the
job's model, for a model whose layers rotate by different sets (docs/data.md, docs/packing.md).

Expected values: each set equals :func:`mrope.build_position_sets` of the record's segments, and for
``circle-rope-age`` the authors' code as tests/models/test_scheme_circle.py writes it out
(lose4578/CircleRoPE at 063fb2c, ``get_rope_index`` with and without ``use_m_index``,
``code/modular_qwen2_5_vl_circle_rope.py:310-329``; imported from there, not copied). A packed row's
set is the text row (0 .. n - 1 per sample) over the samples' ids of that set side by side, written out
here with numpy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mrope
from mrope._errors import JobError
from mrope.models import get_family
from mrope.pipeline import Preprocessor, pack_batch, process_record

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from test_scheme_circle import _prompt, _reference, assert_close_positions, segment_json  # noqa: E402

pytestmark = pytest.mark.timeout(60)

AGE = Preprocessor(model="circle-rope-age", layer_sets=True, labels=True)


def record(seed: int, **extra) -> dict:
    return {"id": f"r{seed}", "segments": [segment_json(s) for s in _prompt(seed)], **extra}


def test_rows_carry_every_set_equal_to_the_library_and_the_authors_code() -> None:
    """A batch of random prompts: each row's position_sets [2, 3, T] (float64: a float32 set with an int64
    one) hold the circle set and the M-RoPE set in order, equal to build_position_sets and the authors'
    indices; positions is the first set; names, deltas and the pattern (strategy 4) beside them."""
    table = AGE.batch([record(seed) for seed in range(6)])
    assert table.schema.field("position_sets").type.value_type.value_type.value_type == "double"
    for seed, row in enumerate(table.to_pylist()):
        assert row["error"] == ""
        want = mrope.build_position_sets(_prompt(seed), model="circle-rope-age")
        got = np.asarray(row["position_sets"])
        assert row["set_names"] == ["circle", "mrope"] and row["layer_pattern"] == ["circle", "mrope"]
        for k, p in enumerate(want.values()):
            np.testing.assert_array_equal(got[k], p.ids.astype(np.float64))
        assert row["set_deltas"] == [float(p.delta) for p in want.values()]
        np.testing.assert_array_equal(np.asarray(row["positions"], np.float32), want["circle"].ids)
        circle, _ = _reference(want["circle"])
        m, m_delta = _reference(want["circle"], use_m_index=True)
        assert_close_positions(got[0].astype(np.float32), circle)
        np.testing.assert_array_equal(got[1], m.numpy())
        assert row["set_deltas"][1] == m_delta
        assert not np.allclose(got[0], got[1], atol=1e-3)  # negative control: the sets differ
    one = Preprocessor(model="circle-rope-age", labels=True).batch([record(0)])
    assert "position_sets" not in one.column_names  # the control: no sets asked, none written
    assert one.column("labels").to_pylist() == table.column("labels").to_pylist()[:1]


def test_a_jobs_own_sets_on_any_model() -> None:
    """``{"sets", "pattern"}`` on qwen2-vl: int64 sets (both integer), equal to build_position_sets of
    the family with those sets; process_record (datasets.map) gives the same columns."""
    own = {"sets": {"offset": {}, "reset": {"spatial": "reset"}}, "pattern": ["offset", "reset", "nope"]}
    family = get_family("qwen2-vl").replace(layer_sets=mrope.LayerSets(own["sets"], tuple(own["pattern"])))
    pre = Preprocessor(model="qwen2-vl", layer_sets=own)
    table = pre.batch([record(2)])
    assert table.schema.field("position_sets").type.value_type.value_type.value_type == "int64"
    want = mrope.build_position_sets(_prompt(2), model=family)
    row = table.to_pylist()[0]
    np.testing.assert_array_equal(np.asarray(row["position_sets"]), np.stack([p.ids for p in want.values()]))
    assert row["layer_pattern"] == ["offset", "reset", "nope"]
    plain = process_record(record(2), model="qwen2-vl", layer_sets=own)
    np.testing.assert_array_equal(plain["position_sets"], np.asarray(row["position_sets"]))
    assert not np.array_equal(plain["position_sets"][0], plain["position_sets"][1])  # negative control


def test_packed_rows_carry_every_set() -> None:
    """pack_batch with layer_sets: each packed row's position_sets [2, 1 + 3, L] is, for each set, the
    text row over the samples' ids of that set in row order (written out here), position_ids the first
    set's; the M-RoPE set's samples equal the authors' index; a failed record is an error row."""
    records = [record(seed) for seed in range(5)] + [
        {"id": "bad", "segments": [{"type": "image", "grid": [1, 3, 3]}]}
    ]
    table = pack_batch(records, max_length=120, model="circle-rope-age", layer_sets=True, labels=True)
    rows = table.to_pylist()
    assert rows[-1]["ids"] == ["bad"] and rows[-1]["position_sets"] == [] and rows[-1]["error"]
    seen = []
    for row in rows[:-1]:
        got = np.asarray(row["position_sets"])
        want = [mrope.build_position_sets(_prompt(i), model="circle-rope-age") for i in row["samples"]]
        for k, name in enumerate(["circle", "mrope"]):
            text = np.concatenate([np.arange(w[name].num_tokens) for w in want])
            body = np.concatenate([w[name].ids.astype(np.float64) for w in want], axis=1)
            np.testing.assert_array_equal(got[k], np.concatenate([text[None], body]))
        np.testing.assert_array_equal(np.asarray(row["position_ids"], np.float32), got[0].astype(np.float32))
        starts = np.asarray(row["cu_seqlens"])
        for j, w in enumerate(want):
            m, _ = _reference(w["circle"], use_m_index=True)
            np.testing.assert_array_equal(got[1, 1:, starts[j] : starts[j + 1]], m.numpy())
        assert not np.allclose(got[0], got[1], atol=1e-3)  # negative control
        seen += row["samples"]
    assert sorted(seen) == list(range(5))


@pytest.mark.parametrize(
    ("job", "rec", "says"),
    [
        ({"model": "qwen2-vl"}, {"layer_sets": True}, "this job's rows hold one set"),
        (
            {"model": "circle-rope-age", "layer_sets": True},
            {"layer_sets": {"sets": {"a": {}}, "pattern": ["a"]}},
            "differ from the job's",
        ),
        (
            {
                "model": "qwen2-vl",
                "layer_sets": {"sets": {"m": {}, "u": {"merge_size": 1}}, "pattern": ["m", "u"]},
            },
            {},
            "one row holds sets of one token count",
        ),
    ],
)
def test_a_record_the_columns_cannot_hold_is_an_error_row(job, rec, says) -> None:
    pre = Preprocessor(**job)
    row = pre.record(record(1, **rec))
    assert says in row["error"] and row["error_code"] == "invalid_request", row["error"]
    text = {"id": "t", "segments": [{"type": "text", "tokens": 4}]}
    assert pre.record(text)["error"] == ""  # the control: a record the job's columns hold


def test_max_tokens_counts_every_set() -> None:
    """max_tokens bounds the sets' tokens together: a record of T tokens under 2 sets is 2T, refused at
    max_tokens = 2T - 1 and served at 2T (the control); one set of T is served at T."""
    n = mrope.build_positions(_prompt(3), model="circle-rope-age").num_tokens
    over = Preprocessor(model="circle-rope-age", layer_sets=True, max_tokens=2 * n - 1).record(record(3))
    assert over["error_code"] == "too_many_tokens" and f"make {2 * n:,} tokens together" in over["error"]
    assert (
        Preprocessor(model="circle-rope-age", layer_sets=True, max_tokens=2 * n).record(record(3))["error"]
        == ""
    )
    assert Preprocessor(model="circle-rope-age", max_tokens=n).record(record(3))["error"] == ""


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"layer_sets": True}, "layer_sets needs the job's model"),
        ({"model": "qwen2-vl", "layer_sets": {"sets": {"a": {}}}}, "'sets' and 'pattern' together"),
        ({"model": "qwen2-vl", "layer_sets": "circle"}, "layer_sets is true or an object"),
        ({"model": "qwen2-vl", "layer_sets": True, "program": True}, "one position program a row"),
    ],
)
def test_a_bad_job_is_refused_when_made(options, says) -> None:
    with pytest.raises(JobError, match=None) as info:
        Preprocessor(**options)
    assert says in str(info.value)
    Preprocessor(**{**options, "model": "qwen2-vl", "layer_sets": True, "program": False})  # the control


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
def test_packed_sets_cut_for_context_parallelism(layout) -> None:
    """packed_table with cp (what mrope batch --cp-size writes): each rank's position_sets hold its tokens
    of every set: read back through token_index, the real tokens (not padding) of all ranks are the
    uncut row's sets, and the first set is each rank's position_ids."""
    from mrope.packing._table import packed_table

    items = [AGE.checked_sets(record(seed)) for seed in range(3)]
    sets = {"sets_dtype": np.dtype(np.float64), "pattern": ("circle", "mrope"), "fractional": True}
    whole = packed_table(items, max_length=200, **sets)
    cut = packed_table(items, max_length=200, cp=(2, layout), **sets)
    assert whole.num_rows == 1 and cut.num_rows == 2
    full = np.asarray(whole.column("position_sets")[0].as_py())
    lengths = np.diff(whole.column("cu_seqlens")[0].as_py())
    for rank in cut.to_pylist():
        got = np.asarray(rank["position_sets"])
        np.testing.assert_array_equal(np.asarray(rank["position_ids"], np.float32), got[0].astype(np.float32))
        padded = np.asarray(rank["cu_seqlens_padded"])
        seg = np.searchsorted(padded, rank["token_index"], side="right") - 1
        offset = np.asarray(rank["token_index"]) - padded[seg]
        real = (seg < len(lengths)) & (offset < np.append(lengths, 0)[np.minimum(seg, len(lengths))])
        at = np.append(np.cumsum(lengths) - lengths, 0)[seg[real]] + offset[real]
        np.testing.assert_array_equal(got[:, :, real], full[:, :, at])
        assert real.any() and not np.array_equal(got[0], got[1])  # negative control: the sets differ


def test_exaone_rows_carry_the_rope_set_and_the_nope_layers() -> None:
    """exaone-4.5 (rope / nope): one set, 'rope', equal to build_positions of the family, and the layer
    pattern of Exaone4Config's defaults written out by hand (32 layers, sliding_window_pattern 4: layer i
    is global, without rotary, when (i + 1) % 4 == 0; configuration_exaone4.py:102-108,
    modeling_exaone4.py:234)."""
    segs = [mrope.Text(3), mrope.Image(grid=(1, 4, 6)), mrope.Text(2)]
    rec = {"id": "x", "segments": [segment_json(s) for s in segs]}
    row = Preprocessor(model="exaone-4.5", layer_sets=True).record(rec)
    assert row["error"] == "" and row["set_names"] == ["rope"]
    assert row["layer_pattern"] == ["nope" if (i + 1) % 4 == 0 else "rope" for i in range(32)]
    want = mrope.build_positions(segs, model="exaone-4.5").ids
    np.testing.assert_array_equal(row["position_sets"], want[None])
    assert row["layer_pattern"].count("nope") == 8  # negative control: not every layer rotates
