"""The validation table (``mrope.testing._validate`` / ``mrope check``) on tiny models of every family, and
on tiny models broken on purpose (each break fails its own row).

Expected values come from outside the code under test: the tiny models are transformers 5.24's own
classes (their rotary and ``apply_rotary_pos_emb`` are what is checked), and each break is written out
here as a monkeypatch of the model's rotary, its modeling module's ``apply_rotary_pos_emb`` or its
``get_rope_index``.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import torch
from support import tiny_vlm as tv

from mrope._cli import main
from mrope._errors import PatchError
from mrope.models import get_family, names
from mrope.testing import ROW_NAMES, ValidationError, tiny_model, validate

KNOWN_FAILURES: dict[str, set[str]] = {"hunyuan-ocr": {"relativity"}}
"""Rows that fail on a family's tiny model because of the installed transformers itself: 5.24's HunyuanOCR
rotary pairs channels driven by different position axes (models/hunyuan_vl/modeling_hunyuan_vl.py
``apply_rotary_pos_emb``), so on image tokens its q.k scores are not a function of position differences
(what patch() reports as NotARotationError)."""


NO_ROPE_INDEX: dict[str, str] = {
    "minicpm-v-4.6": "transformers 5.24's MiniCPMV4_6Model has no get_rope_index (modeling_minicpmv4_6.py:734-741 "
    "passes position_ids=None to its Qwen3.5 text model, which writes arange on every axis); the table binds "
    "to get_rope_index, so it refuses the model (checked below); its positions are checked against that text "
    "model in tests/models/test_family_minicpmv4_6.py",
    "qwen3-asr": "transformers 5.24's Qwen3ASRModel has no get_rope_index (modeling_qwen3_asr.py:535-575 passes "
    "no position ids to its Qwen3 text model, which counts arange); the table binds to get_rope_index, so it "
    "refuses the model (checked below); its positions are checked against that model in "
    "tests/models/test_family_qwen3_asr.py",
    "exaone-4.5": "transformers 5.24's Exaone4_5_Model has no get_rope_index (modeling_exaone4_5.py:779-783 "
    "gives its exaone4 text model arange positions, 1-D); the table binds to get_rope_index, so it refuses the "
    "model (checked below); its positions are checked against that model in tests/models/test_family_exaone45.py",
    "minimax-m3-vl": "transformers 5.24's MiniMaxM3VLModel has no get_rope_index (modeling_minimax_m3_vl.py:1459-1466 "
    "passes no position ids to its text model, which counts arange, :757-760); the table binds to "
    "get_rope_index, so it refuses the model (checked below); its positions are checked against that model in "
    "tests/models/test_family_minimax_m3_vl.py",
}
"""Families the validation table cannot run on, and why."""

NOT_IN_TRANSFORMERS: dict[str, str] = {
    "falcon-ocr": "not in transformers 5.24 (TII's falcon-perception code): no tiny model to build (refused, "
    "checked below), and half its rotation is a checkpoint tensor, which patch and validate refuse "
    "(tests/models/test_family_falcon_ocr.py)",
}
"""Families without a transformers model, and why."""


ROTATION_ROWS = ["relativity", "pairing", "length_boundaries", "short_context", "crop", "tiles", "frames"]
"""The rows that run the model's rotary alone (and the coordinates): cheap on every family."""

FORWARD_FAMILIES = ("qwen3-vl", "glm-4.1v", "ernie-4.5-vl", "qwen2.5-omni", "glm-image")
"""Families the rows through the whole model (prefill = decode, padding, the sweep) run on here, one per
kind of text model: interleaved sections with timestamps, adjacent pairing, (h, w)-alternating
sections, an omni thinker, an image generator (its decode row does not apply). qwen2-vl and qwen2.5-vl run them in the tests below; tests/integrations runs the
same checks on every family's patched model."""


@pytest.mark.parametrize("name", [n for n in names() if n not in {**NO_ROPE_INDEX, **NOT_IN_TRANSFORMERS}])
def test_every_family_passes_the_rows_it_supports_and_names_the_rest(name: str) -> None:
    forward = name in FORWARD_FAMILIES
    report = validate(tv.model(name), quick=True, rows=None if forward else ROTATION_ROWS)
    expected = list(ROW_NAMES) if forward else ROTATION_ROWS
    assert [r.name for r in report.rows] == expected
    failed = {r.name for r in report.rows if r.status == "fail"}
    assert failed == KNOWN_FAILURES.get(name, set()), report.table()
    assert report.passed == (not failed) and report.exit_code == int(bool(failed))
    for row in report.rows:
        assert row.reason  # every row says what it checked, or why it did not run
    # the rows every transformers M-RoPE model has run everywhere
    for must in ("pairing", "length_boundaries", *(["padding", "position_sweep"] if forward else [])):
        assert report.row(must).status == "pass", report.table()
    # a tiny model's config names no length scaling: nothing to regress against
    assert report.row("short_context").status == "not-applicable"
    if get_family(name).rules.temporal != "seconds":  # t counts patches: resampling changes it by design
        assert report.row("frames").status == "not-applicable"


@pytest.mark.parametrize("name", list(NO_ROPE_INDEX))
def test_families_without_get_rope_index_are_refused(name: str) -> None:
    with pytest.raises(ValidationError, match="get_rope_index"):
        validate(tv.model(name), quick=True, rows=ROTATION_ROWS)


@pytest.mark.parametrize("name", list(NOT_IN_TRANSFORMERS))
def test_families_outside_transformers_have_no_tiny_model(name: str) -> None:
    with pytest.raises(PatchError, match="no config class"):
        tiny_model(name)


def test_frames_and_crop_run_where_the_rules_have_them() -> None:
    """Qwen2.5-VL's time is in seconds (transformers 5.24 modeling_qwen2_5_vl get_rope_index:
    ``second_per_grid_t * tokens_per_second``): 1 fps and 2 fps samples of the same seconds align."""
    report = validate(tv.model("qwen2.5-vl"), quick=True, rows=["crop", "tiles", "frames"])
    assert [r.status for r in report.rows] == ["pass", "pass", "pass"], report.table()


# ------------------------------------------------------------------------------------------ broken models


def _swapped_pairing(original):  # noqa: ANN001, ANN202
    """apply_rotary_pos_emb rotating adjacent channels (2i, 2i+1) where the model's released rotary
    rotates split halves (i, i + d/2): still a rotation, by the same angles, of the wrong pairs."""

    def apply(q, k, cos, sin, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        d = q.shape[-1]
        order = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
        back = torch.argsort(order)
        q2, k2 = original(q[..., order], k[..., order], cos, sin, *args, **kwargs)
        return q2[..., back], k2[..., back]

    return apply


def test_swapped_pairing_fails_the_pairing_row_only(monkeypatch: pytest.MonkeyPatch) -> None:
    net = tv.model("qwen2-vl")
    modeling = sys.modules[type(net.model.language_model.rotary_emb).__module__]
    monkeypatch.setattr(modeling, "apply_rotary_pos_emb", _swapped_pairing(modeling.apply_rotary_pos_emb))
    report = validate(net, quick=True, rows=["relativity", "prefill_decode", "padding", "pairing"])
    status = {r.name: r.status for r in report.rows}
    assert status == {"relativity": "pass", "prefill_decode": "pass", "padding": "pass", "pairing": "fail"}
    assert report.row("pairing").measured["max_abs_error"] > 0.1 and report.exit_code == 1


def test_padding_positions_that_drift_fail_the_padding_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """get_rope_index whose text positions follow the physical index of the padded row (each text token
    moved by the pads before it) while its vision positions stay the row's own: the seed's "padding
    drift". (A shift of a whole row alike would be invisible to RoPE.)"""
    net = tv.model("qwen2-vl")
    owner = net.model
    original = type(owner).get_rope_index

    def drifting(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        positions, deltas = original(self, *args, **kwargs)
        mask, kinds = kwargs.get("attention_mask"), kwargs.get("mm_token_type_ids")
        if mask is not None and kinds is not None:
            pads_before = (1 - mask).cumsum(-1).to(positions.dtype)  # [B, L]
            positions = positions + (pads_before * (kinds == 0))[None]
        return positions, deltas

    monkeypatch.setattr(type(owner), "get_rope_index", drifting)
    report = validate(net, quick=True, rows=["prefill_decode", "padding", "pairing"])
    status = {r.name: r.status for r in report.rows}
    assert status == {"prefill_decode": "pass", "padding": "fail", "pairing": "pass"}, report.table()
    assert report.row("padding").measured["right_vs_left"] > 1e-3


def test_a_length_scaling_jump_at_l0_fails_the_boundary_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotary that switches position interpolation on at L0 (positions p >= L0 rotate by p / 2): a jump
    of L0 / 2 positions at L0, invisible below it."""
    net = tv.model("qwen2-vl")
    rotary = net.model.language_model.rotary_emb
    l0 = net.config.text_config.max_position_embeddings
    inner = type(rotary).forward

    def jumping(self, x, position_ids, *args):  # noqa: ANN001, ANN002, ANN202
        moved = torch.where(position_ids >= l0, position_ids // 2, position_ids)
        return inner(self, x, moved, *args)

    monkeypatch.setattr(type(rotary), "forward", jumping)
    report = validate(net, quick=True, rows=["pairing", "length_boundaries"])
    boundary = report.row("length_boundaries")
    assert report.row("pairing").status == "pass" and boundary.status == "fail", report.table()
    assert boundary.measured["error"]["L0-1"] <= boundary.measured["tolerance"]["L0-1"]
    assert boundary.measured["error"]["L0"] > 0.1 and "L0 = " in boundary.reason


def test_relativity_fails_for_a_rotation_that_is_not_relative(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotary that rotates by p + p**2 / 4096 (not a shift-invariant rotation) fails relativity."""
    net = tv.model("qwen2-vl")
    rotary = net.model.language_model.rotary_emb
    inner = type(rotary).forward

    def curved(self, x, position_ids, *args):  # noqa: ANN001, ANN002, ANN202
        return inner(self, x, position_ids + position_ids**2 // 4096, *args)

    monkeypatch.setattr(type(rotary), "forward", curved)
    assert validate(net, quick=True, rows=["relativity"]).row("relativity").status == "fail"


# ------------------------------------------------------------------------------------------ command line


def test_check_on_a_tiny_family_full_run_table_json_plot(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    out, plot = tmp_path / "report.json", tmp_path / "sweep.png"
    code = main(["check", "--family", "qwen2.5-vl", "--json", str(out), "--plot", str(plot)])
    captured = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert code == 0 and doc["passed"] and doc["quick"] is False and doc["family"] == "qwen2.5-vl"
    assert "relativity" in captured.out and "PASS" in captured.out.splitlines()[-1]
    sweep = next(r for r in doc["rows"] if r["name"] == "position_sweep")
    assert (
        sweep["measured"]["depths"] == [0.0, 0.25, 0.5, 0.75, 1.0] and len(sweep["measured"]["scores"]) == 5
    )
    padding = next(r for r in doc["rows"] if r["name"] == "padding")
    assert (
        padding["measured"]["right_vs_alone"] <= padding["measured"]["tolerance"]
    )  # the full run's extra check
    # the chart: each score drawn where its depth and value put it
    from PIL import Image as PILImage

    from mrope.testing._report import CHART_SIZE, POINT_COLOUR, chart_point

    scores = sweep["measured"]["scores"]
    with PILImage.open(plot) as drawn:
        assert drawn.size == CHART_SIZE
        for depth, score in zip(sweep["measured"]["depths"], scores, strict=True):
            x, y = chart_point(depth, score, min(scores), max(scores))
            assert drawn.getpixel((x, y)) == POINT_COLOUR
        drawn_points = int((np.asarray(drawn) == POINT_COLOUR).all(axis=-1).sum())
        assert 0 < drawn_points < 0.05 * CHART_SIZE[0] * CHART_SIZE[1]  # a line and markers, not a fill


def test_check_exit_codes_for_bad_input(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    assert main(["check"]) == 2
    assert main(["check", str(tmp_path)]) == 2 and "no checkpoint folder" in capsys.readouterr().err
    assert main(["check", "--family", "qwen2-vl", "--rows", "nope"]) == 2
    assert "unknown rows ['nope']" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ a checkpoint folder

L0 = 64


def _word_tokenizer(folder) -> None:  # noqa: ANN001
    """A word-level tokenizer (the ``tokenizers`` library) over the sweep's words, ids from 1000."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from mrope.testing._rows import sweep

    words = sorted(set(" ".join([sweep.FILLER, sweep.EVIDENCE, sweep.QUESTION, sweep.ANSWER]).split()))
    vocab = {"[UNK]": 999, **{w: 1000 + i for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)


def test_sweep_and_short_context_on_a_local_checkpoint_folder(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # noqa: ANN001
    """A dynamic-NTK checkpoint (L0 = 64, factor 2) saved with save_pretrained and a tokenizer, checked
    offline: dynamic NTK leaves every frequency alone inside L0 (transformers 5.24 modeling_rope_utils
    ``dynamic_rope_update`` grows them only past ``max_position_embeddings``), so the short-context row
    compares and passes; the boundaries include L1 - 1 = 127."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "ckpt"
    net = tiny_model(
        "qwen2-vl",
        text={"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": L0},
    )
    net.save_pretrained(folder)
    _word_tokenizer(folder)
    rows = ["length_boundaries", "position_sweep", "short_context"]
    report = validate(folder, quick=True, rows=rows)
    assert report.model == str(folder) and [r.status for r in report.rows] == ["pass"] * 3, report.table()
    boundary, sweep, short = (report.row(r).measured for r in rows)
    assert (boundary["L0"], boundary["L1"]) == (L0, 2 * L0) and set(boundary["error"]) == {
        "L0-1",
        "L0",
        "L0+1",
        "L1-1",
    }
    assert sweep["evidence"] == "pass-key text" and sweep["context_tokens"] <= L0 - 1
    assert short["scaling"] == "dynamic" and short["max_abs_difference"] <= short["tolerance"]
    assert main(["check", str(folder), "--quick", "--rows", ",".join(rows), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["passed"]


def test_short_context_fails_when_the_scaling_acts_inside_l0(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    """Negative control: a dynamic-NTK rotary that keeps the table grown for 2 * L0 (transformers' own
    dynamic formula) on every call, inside L0 too, changes the outputs there."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    net = tiny_model(
        "qwen2-vl",
        text={"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}, "max_position_embeddings": L0},
    )
    rotary = net.model.language_model.rotary_emb
    grown, _ = ROPE_INIT_FUNCTIONS["dynamic"](rotary.config, None, seq_len=2 * L0)
    rotary.inv_freq = grown  # the cached length stays L0: neither grown further nor reset
    assert validate(net, quick=True, rows=["short_context"]).row("short_context").status == "fail"
