"""The golden suite (``mrope golden``) against each family's own transformers code, and ``conform``.

Expected values come from outside the suite builder: each family's own transformers 5.24
``get_rope_index`` (the tiny random-weight model's method) run here on the suite's own inputs (the whole
unpruned prompt for a pruned case, then its kept columns; the whole conversation for a continued case,
then its tail); decode positions from the rule written out here (token ``i`` after ``n`` valid tokens is
``n + i + delta``); cos / sin from the family's own transformers rotary module. Released-convention cases
of families whose transformers 5.24 code follows another convention are checked against the released rule
written out here (every segment starts at ``1 + max`` of all positions before it) applied to the
transformers layout of each segment.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv
from support.hf_reference import MiniCPMRopeIndex, own_get_rope_index
from transformers.models.minicpmv4_7.configuration_minicpmv4_7 import MiniCPMV4_7Config

from mrope._conform import conform
from mrope._golden import VERSION, read_suite, write_suite
from mrope.models import get_family, names


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, dict]]:
    out = tmp_path_factory.mktemp("golden")
    write_suite(out)
    manifest, cases = read_suite(out)
    return out, manifest, cases


def _kwargs(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    kw = {
        "input_ids": torch.tensor([inputs["input_ids"]]),
        "attention_mask": torch.tensor([inputs["attention_mask"]]),
        "mm_token_type_ids": torch.tensor([inputs["mm_token_type_ids"]]),
    }
    for key in ("image_grid_thw", "video_grid_thw"):
        if inputs[key]:
            kw[key] = torch.tensor(inputs[key], dtype=torch.int64)
    if "second_per_grid_ts" in inputs:
        kw["second_per_grid_ts"] = torch.tensor(inputs["second_per_grid_ts"], dtype=torch.float32)
    return kw


MINICPM_CONFIG_KEYS = {
    "image_start_id": "vision_start_id",
    "image_end_id": "vision_end_id",
    "slice_start_id": "slice_start_id",
    "slice_end_id": "slice_end_id",
    "newline_id": "newline_id",
    "image_token_id": "image_pad_id",
    "video_token_id": "video_pad_id",
}
"""MiniCPMV4_7Config's marker keys (configuration_minicpmv4_7.py) and the suite's names for them."""


def _minicpm_get_rope_index(inputs: dict[str, Any]) -> tuple[np.ndarray, int]:
    """MiniCPM-V 4.7's own get_rope_index (modeling_minicpmv4_7.py:952) under a config holding the marker
    ids the case records (``inputs.token_ids``), as another runtime would read them; its crops' patch
    grids ``(h, w)`` are the case's grids without ``t``."""
    ids = inputs["token_ids"]
    shim = MiniCPMRopeIndex(
        MiniCPMV4_7Config(**{key: ids[name] for key, name in MINICPM_CONFIG_KEYS.items()})
    )
    sizes = {}
    for key, arg in (("image_grid_thw", "target_sizes"), ("video_grid_thw", "target_sizes_videos")):
        if inputs[key]:
            sizes[arg] = torch.tensor(inputs[key], dtype=torch.int64)[:, 1:]
    pos, delta = shim.get_rope_index(
        torch.tensor([inputs["input_ids"]]),
        torch.tensor([inputs["mm_token_type_ids"]]),
        attention_mask=torch.tensor([inputs["attention_mask"]]),
        **sizes,
    )
    return pos[:, 0].numpy(), int(delta.reshape(-1)[0])


def _transformers(case: dict[str, Any]) -> tuple[np.ndarray, int | float, int]:
    """The family's own get_rope_index on the case's inputs, cut to the tokens the case expects; the
    delta and the valid tokens before decode. A pruned prompt keeps its kept tokens' positions and
    decodes after its kept tokens: its delta is ``max + 1 - kept``."""
    inputs = case["inputs"]
    if case["family"] == "minicpm-v-4.7":
        pos, delta = _minicpm_get_rope_index(inputs)
    else:
        pos, delta = own_get_rope_index(tv.model(case["family"]), _kwargs(inputs))
    valid = sum(inputs["attention_mask"])
    if "keep" in inputs:
        pos = pos[:, np.asarray(inputs["keep"], dtype=bool)]
        valid = pos.shape[1]
        delta = type(delta)(pos.max()) + 1 - valid
    return pos[:, inputs.get("offset", 0) :], delta, valid


def _decode_rule(axes: int, valid: int, delta: int | float) -> np.ndarray:
    """Decode token ``i`` after ``valid`` tokens: ``valid + i + delta`` on every axis (float32 sums for a
    fractional delta, as the model adds them)."""
    steps = np.arange(valid, valid + 3)
    if isinstance(delta, float):
        return np.broadcast_to(steps.astype(np.float32) + np.float32(delta), (axes, 3))
    return np.broadcast_to(steps + delta, (axes, 3))


def _released(pos: np.ndarray, types: np.ndarray) -> np.ndarray:
    """The released rule on a layout: each run of one token type keeps its shape, re-anchored to start at
    ``1 + max`` of all positions before it (``0`` for the first)."""
    out = np.empty_like(pos)
    cursor, start = 0, 0
    cuts = np.flatnonzero(np.diff(types)) + 1
    for stop in [*cuts.tolist(), pos.shape[1]]:
        run = pos[:, start:stop]
        out[:, start:stop] = cursor + (run - run.min(axis=1, keepdims=True))
        cursor, start = int(out[:, :stop].max()) + 1, stop
    return out


def _checked_against_transformers(case: dict[str, Any]) -> bool:
    return case["family"] in tv.FAMILIES and (
        case["convention"] == "transformers5" or not get_family(case["family"]).transformers5
    )


def test_every_registry_family_and_convention_is_in_the_suite(suite: tuple) -> None:
    _, manifest, cases = suite
    assert manifest["version"] == VERSION and manifest["num_cases"] == len(cases)
    assert set(manifest["families"]) == set(names())
    held = {(c["family"], c["convention"]) for c in cases.values()}
    held |= {(c["family"], c["convention"]) for c in manifest["not_applicable"]}
    want = {(n, conv) for n in names() for conv in manifest["families"][n]["conventions"]}
    assert held == want
    for case in cases.values():  # every vision token carries one of the family's placeholder ids
        ids = manifest["families"][case["family"]]["token_ids"]
        types = np.asarray(case["inputs"]["mm_token_type_ids"])
        placeholders = np.isin(case["inputs"]["input_ids"], [ids["image_pad_id"], ids["video_pad_id"]])
        assert np.array_equal(types != 0, placeholders), case["case"]
    kinds = {c["kind"] for c in cases.values()}
    assert kinds == {"basic", "padding", "pruned", "continued", "long-video", "fractional-time"}


@pytest.mark.parametrize("family", tv.FAMILIES)
def test_cases_equal_the_familys_own_transformers_code(suite: tuple, family: str) -> None:
    _, _, cases = suite
    mine = [c for c in cases.values() if c["family"] == family and _checked_against_transformers(c)]
    assert len(mine) >= 4
    for case in mine:
        want, delta, valid = _transformers(case)
        expected = case["expected"]
        got = np.asarray(expected["positions"])
        np.testing.assert_array_equal(got, want, err_msg=case["case"])
        assert expected["delta"] == delta, case["case"]
        rule = _decode_rule(got.shape[0], valid, delta)
        np.testing.assert_array_equal(np.asarray(expected["decode"]), rule, err_msg=case["case"])


def test_minicpm_cases_record_the_marker_ids_their_canvas_reads(suite: tuple) -> None:
    """MiniCPM-V 4.7 gets every kind, each case records the ids it reads (the manifest lists the same),
    its basic prompt carries slice markers and a newline, and they matter: its own get_rope_index told other slice
    ids (a runtime that ignores the recorded ones) parts from the expected positions."""
    _, manifest, cases = suite
    mine = {c["kind"]: c for c in cases.values() if c["family"] == "minicpm-v-4.7"}
    assert set(mine) == {"basic", "padding", "pruned", "continued", "long-video", "fractional-time"}
    for case in mine.values():
        assert case["inputs"]["token_ids"] == manifest["families"]["minicpm-v-4.7"]["token_ids"]
    basic = mine["basic"]["inputs"]
    ids = basic["token_ids"]
    assert {ids["slice_start_id"], ids["slice_end_id"], ids["newline_id"]} <= set(basic["input_ids"])
    got, _ = _minicpm_get_rope_index(basic)
    np.testing.assert_array_equal(np.asarray(mine["basic"]["expected"]["positions"]), got)
    other = {**basic, "token_ids": {**ids, "slice_start_id": 1, "slice_end_id": 2}}
    assert not np.array_equal(_minicpm_get_rope_index(other)[0], got)


@pytest.mark.parametrize("family", [n for n in tv.FAMILIES if get_family(n).transformers5])
def test_released_cases_follow_the_released_rule(suite: tuple, family: str) -> None:
    """Released cases where the conventions differ: the transformers layout of each segment re-anchored by
    the released rule (then the kept columns of a pruned case, the tail of a continued one), the released
    pad value at pad slots, decode after the valid (kept) tokens. Seconds-timed video at 2 fps groups time
    alike under both conventions; at 50 fps it does not (the next test)."""
    _, _, cases = suite
    released = get_family(family).rules
    checked = 0
    for case in cases.values():
        if case["family"] != family or case["convention"] != "released":
            continue
        if released.temporal == "seconds" and case["kind"] == "fractional-time":
            continue
        inputs = case["inputs"]
        valid = np.asarray(inputs["attention_mask"], dtype=bool)
        pos, _ = own_get_rope_index(tv.model(family), _kwargs(inputs))
        types = np.asarray(inputs["mm_token_type_ids"])
        want = _released(pos[:, valid], types[valid])
        if "keep" in inputs:
            want = want[:, np.asarray(inputs["keep"], dtype=bool)]
        n = want.shape[1]
        want = want[:, inputs.get("offset", 0) :]
        got = np.asarray(case["expected"]["positions"])
        if not valid.all():
            assert (got[:, ~valid] == released.pad_position).all(), case["case"]
            got = got[:, valid]
        np.testing.assert_array_equal(got, want, err_msg=case["case"])
        delta = int(want.max()) + 1 - n
        assert case["expected"]["delta"] == delta, case["case"]
        np.testing.assert_array_equal(case["expected"]["decode"], _decode_rule(got.shape[0], n, delta))
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize("family", ["qwen2-vl", "qwen3-vl"])
def test_cos_sin_rows_equal_the_familys_rotary_module(suite: tuple, family: str, tmp_path: Path) -> None:
    """cos / sin rows against the family's own transformers rotary module, built with the released
    spec (head_dim 128, its theta and mrope_section): chunked (Qwen2-VL) and interleaved (Qwen3-VL)."""
    _, _, cases = suite
    case = cases[f"{family}/transformers5/basic"]
    rotary = next(m for m in tv.model(family).modules() if hasattr(m, "mrope_section"))
    spec = get_family(family).spec
    config = copy.deepcopy(rotary.config)
    config.hidden_size = spec.head_dim * config.num_attention_heads
    config.head_dim = spec.head_dim
    config.rope_parameters = {
        **config.rope_parameters,
        "rope_theta": spec.theta,
        "mrope_section": list(spec.mrope_section),
    }
    released = type(rotary)(config=config)
    rope = case["expected"]["rope"]
    pos = torch.tensor(case["expected"]["positions"])[:, rope["rows"]][:, None, :]
    cos, sin = released(torch.zeros(1, dtype=torch.float32), pos)
    assert cos.shape[-1] == spec.rotary_dim == len(rope["cos"][0])
    np.testing.assert_allclose(np.asarray(rope["cos"]), cos[0].numpy(), atol=2e-6)
    np.testing.assert_allclose(np.asarray(rope["sin"]), sin[0].numpy(), atol=2e-6)
    # negative control: the rows of the next positions differ
    later, _ = released(torch.zeros(1, dtype=torch.float32), pos + 1)
    assert not np.allclose(np.asarray(rope["cos"]), later[0].numpy(), atol=1e-3)
    # conform takes the rotary module's rows as a runtime's, and finds one channel moved by 1e-3
    line = {k: case["expected"][k] for k in ("positions", "delta", "decode")}
    line |= {"case": case["case"], "cos": cos[0].tolist(), "sin": sin[0].tolist()}
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps(line) + "\n")
    assert conform(suite[0], results).ok(partial=True)
    line["sin"][1][5] += 1e-3
    results.write_text(json.dumps(line) + "\n")
    (failed,) = conform(suite[0], results).failed
    assert failed.divergence.startswith(f"sin: token {rope['rows'][1]} channel 5: expected ")


def test_released_fractional_time_multiplies_first_in_float32(suite: tuple) -> None:
    """Qwen2.5-VL's released time of temporal patch ``i``: ``trunc(i * second_per_grid * tokens_per_second)``
    on float32 tensors, multiplied first, ``tokens_per_second = 2`` (transformers 4.x
    models/qwen2_5_vl/modeling_qwen2_5_vl.py ``get_rope_index``: ``expanded_range * second_per_grid_t *
    tokens_per_second`` then ``.long()``), here at 0.02 s per grid (50 fps, 26 patches)."""
    case = suite[2]["qwen2.5-vl/released/fractional-time"]
    inputs, got = case["inputs"], np.asarray(case["expected"]["positions"])
    video = np.asarray(inputs["mm_token_type_ids"]) == 2
    spg = np.float32(inputs["second_per_grid_ts"][0])
    i = np.arange(inputs["video_grid_thw"][0][0], dtype=np.float32)
    tau = np.trunc((i * spg).astype(np.float32) * np.float32(2)).astype(np.int64)
    t = got[0, video]
    assert len(t) == len(i) and np.array_equal(t - t[0], tau)
    transformers5 = np.asarray(suite[2]["qwen2.5-vl/transformers5/fractional-time"]["expected"]["positions"])
    assert not np.array_equal(transformers5, got)  # the conventions differ here, as the suite says


def _answers(cases: dict[str, dict]) -> list[dict[str, Any]]:
    return [
        {
            "case": n,
            "positions": c["expected"]["positions"],
            "delta": c["expected"]["delta"],
            "decode": c["expected"]["decode"],
        }
        for n, c in cases.items()
    ]


def test_conform_passes_mrope_and_finds_a_planted_off_by_one(suite: tuple, tmp_path: Path) -> None:
    out, _, cases = suite
    answers = _answers(cases)
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(a) + "\n" for a in answers))
    report = conform(out, good)
    assert report.ok() and len(report.results) == len(cases)
    # negative control: the first decode position repeats the prefill's last (the seed's off-by-one)
    planted = [dict(a) for a in answers]
    first = next(i for i, a in enumerate(planted) if a["case"] == "qwen2.5-vl/released/basic")
    planted[first]["decode"] = [[v - 1 for v in row] for row in planted[first]["decode"]]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(a) + "\n" for a in planted))
    report = conform(out, bad)
    assert not report.ok() and [r.case for r in report.failed] == ["qwen2.5-vl/released/basic"]
    assert report.failed[0].divergence.startswith("decode: token 0 axis t: expected ")
