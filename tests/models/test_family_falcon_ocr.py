"""Falcon-OCR by name (``model="falcon-ocr"``): positions through every face, and its learned rotation.

Expected values: TII's ``falcon-perception`` 1.0.0 written out in ``tests/support/falcon_perception.py``
(``data.py`` ``get_pos_thw`` :407-458 for positions; ``rope.py`` :7-104 with model.py:334-340 for the
rotation, ``freqs_cis_golden`` a persistent buffer of the weights); the released ids from mlx-vlm 0.7.10
``mlx_vlm/models/falcon_ocr/config.py``:41-51 (model_type ``falcon_ocr``, ``img_id`` 227, ``img_end_id``
230, ``image_cls_token_id`` 244, registers 245-248) and ``falcon_perception/__init__.py``:236
(``tiiuae/Falcon-OCR``). The checkpoint folders are written here: ``config.json`` with the released keys
and a ``model.safetensors`` holding random ``freqs_cis_golden``.

Negative controls: the family's formula half alone (its ``spec``) leaves the learned half unrotated; a
checkpoint with other values rotates otherwise; the counter rule gives other positions.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file
from support.falcon_perception import CLS, END, IMG, REGS, as_rows, image_block, ref_apply, tii_pos_thw

import mrope
from mrope import Image, PatchError, SpecError, Text
from mrope.integrations import transformers as mt
from mrope.models import LearnedRotary, get_family, resolve_spec
from mrope.ops import apply_mrope

NAME = "falcon-ocr"
TEXT_ID = 1000  # a plain text id: positions never read text ids


def checkpoint(folder: Path, freqs: np.ndarray | None, **config: object) -> Path:
    """A Falcon-OCR checkpoint folder: the released config keys (``get_model_args("ocr")``,
    ``__init__.py``:83-84; ids of mlx-vlm config.py:44-51) and, unless ``freqs`` is None, weights holding
    ``freqs_cis_golden`` beside another tensor."""
    folder.mkdir(parents=True, exist_ok=True)
    keys = {"model_type": "falcon_ocr", "dim": 768, "n_heads": 16, "n_kv_heads": 8, "head_dim": 64}
    keys |= {"rope_theta": 10000, "img_id": IMG, "img_end_id": END, "image_cls_token_id": CLS}
    keys |= {f"image_reg_{i + 1}_token_id": r for i, r in enumerate(REGS)} | {"spatial_patch_size": 16}
    (folder / "config.json").write_text(json.dumps(keys | config), encoding="utf-8")
    if freqs is not None:
        save_file(
            {"freqs_cis_golden": freqs, "norm.weight": np.ones(4, np.float32)},
            str(folder / "model.safetensors"),
        )
    return folder


def golden_freqs(seed: int, heads: int = 16) -> np.ndarray:
    """Random ``[heads, 16, 2]`` learned frequencies, spread over the rates a trained model has."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((heads, 16, 2)) * np.logspace(0, -3, 16)[None, :, None]).astype(np.float32)


def prompt(seed: int) -> tuple[list, list[int], list[tuple[int, int]]]:
    """Random text and images; the ids falcon-perception's tokenize_inputs writes; the grids."""
    rng = np.random.default_rng(seed)
    segments, ids, grids = [], [], []
    for _ in range(int(rng.integers(1, 3))):
        n = int(rng.integers(1, 5))
        segments.append(Text([TEXT_ID] * n))
        ids += [TEXT_ID] * n
        h, w = (int(x) for x in rng.integers(1, 7, 2))
        segments.append(Image(grid=(1, h, w)))
        ids += image_block(h, w)
        grids.append((h, w))
    segments.append(Text([TEXT_ID] * 2))
    return segments, ids + [TEXT_ID] * 2, grids


def tii_rows(ids: list[int], grids: list[tuple[int, int]]) -> np.ndarray:
    """data.py's (t, h, w) rows of one unpadded row, ``[3, T]`` float32."""
    return as_rows(*tii_pos_thw(np.array([ids]), grids))[:, 0]


# ------------------------------------------------------------------------------------------- naming


def test_its_names_resolve_to_the_released_rules() -> None:
    fam = get_family(NAME)
    assert get_family("falcon_ocr") is fam and get_family("tiiuae/falcon-ocr") is fam
    r = fam.rules
    assert (r.image_pad_id, r.vision_end_id, r.vision_start_id, r.vision_registers) == (IMG, END, CLS, 4)
    assert tuple(range(r.vision_start_id + 1, r.vision_start_id + 5)) == REGS
    assert fam.learned_rotary == LearnedRotary(kind="golden_gate", buffer="freqs_cis_golden")
    assert not fam.learned_rotary.loaded and NAME in mrope.models.names()


# ------------------------------------------------------------------------------- positions, by name


@pytest.mark.parametrize("seed", range(3))
def test_builder_and_token_ids_by_name_equal_tii(seed: int) -> None:
    segments, ids, grids = prompt(seed)
    want = tii_rows(ids, grids)
    built = mrope.build_positions(segments, model=NAME)
    assert built.input_ids.tolist() == ids and np.array_equal(built.ids, want)
    pos, _ = mrope.get_rope_index(torch.tensor([ids]), [(1, h, w) for h, w in grids], model="falcon_ocr")
    assert torch.equal(pos[:, 0], torch.from_numpy(want))
    counter = {"positions_base": "counter", "vision_registers": 0, "video_support": "sized"}
    other = mrope.build_positions(segments, model=NAME, rules=counter)  # negative control: the counter rule
    assert other.ids.shape != want.shape or not np.array_equal(other.ids, want)


def test_cli_and_service_by_name_equal_tii(capsys: pytest.CaptureFixture[str]) -> None:
    from fastapi.testclient import TestClient

    from mrope._cli import main
    from mrope.service import Settings
    from mrope.service.app import create_app

    segments, ids, grids = prompt(7)
    want = tii_rows(ids, grids)
    flags = []
    for s in segments:
        flags += (
            ["--text", str(s.num_tokens)]
            if isinstance(s, Text)
            else ["--image-grid", f"1,{s.grid[1]},{s.grid[2]}"]
        )
    assert main(["positions", "--model", NAME, *flags, "--json"]) == 0
    assert np.array_equal(np.asarray(json.loads(capsys.readouterr().out)["positions"], np.float32), want)
    wire = [
        {"type": "text", "ids": list(s.token_ids)}
        if isinstance(s, Text)
        else {"type": "image", "grid": list(s.grid)}
        for s in segments
    ]
    with TestClient(create_app(Settings())) as client:
        answer = client.post("/v1/positions", json={"model": NAME, "segments": wire})
        index = client.post(
            "/v1/rope-index",
            json={
                "model": "tiiuae/Falcon-OCR",
                "input_ids": [ids],
                "image_grid_thw": [[1, h, w] for h, w in grids],
            },
        )
        presets = client.get("/v1/presets").json()["presets"]
    assert answer.status_code == 200 and index.status_code == 200, (answer.text, index.text)
    assert np.array_equal(np.asarray(answer.json()["positions"], np.float32), want)
    assert np.array_equal(np.asarray(index.json()["position_ids"], np.float32)[:, 0], want)
    assert presets[NAME]["learned_rotary"] == {
        "buffer": "freqs_cis_golden",
        "table": "mrope.ops.golden_gate_table",
    }
    assert "learned_rotary" not in presets["qwen2-vl"]


# ---------------------------------------------------------------------------------------- rotation


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_from_pretrained_rotates_as_tii(
    tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """q, k (key heads repeated, model.py:115) rotated by the checkpoint's description equal rope.py's
    ``apply_3d_rotary_emb`` with the folder's ``freqs_cis_golden``."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    heads = 16 if backend == "torch" else 2  # the interpreter's time grows with the heads
    freqs = golden_freqs(1, heads)
    fam = mrope.from_pretrained(checkpoint(tmp_path / "ckpt", freqs, n_heads=heads))
    segments, ids, grids = (
        prompt(3)
        if backend == "torch"
        else ([Text([TEXT_ID]), Image(grid=(1, 2, 3))], [TEXT_ID, *image_block(2, 3)], [(2, 3)])
    )
    positions = mrope.build_positions(segments, model=fam).torch()
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, len(ids), heads, 64, generator=g)
    k = torch.randn(1, len(ids), heads // 2, 64, generator=g).repeat_interleave(2, dim=2)
    tpos, hw = tii_pos_thw(np.array([ids]), grids)
    want_q, want_k = ref_apply(
        q, k, torch.from_numpy(tpos), torch.from_numpy(hw), torch.from_numpy(freqs), 10000.0
    )
    got_q, got_k = apply_mrope(q[0], k[0], positions, fam, backend=backend)
    torch.testing.assert_close(got_q, want_q[0], atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(got_k, want_k[0], atol=2e-6, rtol=2e-6)
    image = torch.from_numpy(np.abs(hw[0]).sum(-1) > 0)
    # negative controls: the formula half alone leaves the learned half as it was; other learned values
    half, _ = apply_mrope(q[0], k[0], positions, fam.spec, backend=backend)
    assert torch.equal(half[..., 32:], q[0, ..., 32:]) and not torch.allclose(half[image], want_q[0, image])
    other = mrope.from_pretrained(checkpoint(tmp_path / "other", golden_freqs(2, heads)))
    assert not torch.allclose(
        apply_mrope(q[0], k[0], positions, other, backend=backend)[0][image], want_q[0, image]
    )


def test_the_description_hashes_and_compares_by_its_values(tmp_path: Path) -> None:
    one = mrope.from_pretrained(checkpoint(tmp_path / "a", golden_freqs(1)))
    same = mrope.from_pretrained(checkpoint(tmp_path / "b", golden_freqs(1)))
    other = mrope.from_pretrained(checkpoint(tmp_path / "c", golden_freqs(2)))
    assert one.learned_rotary.loaded and one.learned_rotary.source.endswith("model.safetensors")
    assert np.array_equal(one.learned_rotary.frequencies(NAME), golden_freqs(1))
    a, b = (f.replace(source="x", learned_rotary=replace(f.learned_rotary, source="")) for f in (one, same))
    assert a == b and hash(a) == hash(b)
    assert one.learned_rotary != other.learned_rotary and one != other
    assert pickle.loads(pickle.dumps(one)) == one and hash(pickle.loads(pickle.dumps(one))) == hash(one)


def test_config_ids_are_read(tmp_path: Path) -> None:
    fam = mrope.from_pretrained(
        checkpoint(tmp_path, None, img_id=500, img_end_id=501, image_cls_token_id=600)
    )
    r = fam.rules
    assert (r.image_pad_id, r.vision_end_id, r.vision_start_id) == (500, 501, 600)
    assert fam.rule_sources["image_pad_id"] == "config.json: img_id"
    # its formula half: 1-D on head_dim // 2 channels (model.py:334-335), theta from the config
    assert (fam.spec.head_dim, fam.spec.rotary_dim, fam.spec.theta, fam.spec.pairing) == (64, 32, 1e4, "gptj")
    assert fam.spec == get_family(NAME).spec
    assert get_family(NAME).rules.image_pad_id == IMG  # the registry's are the released ones


# ---------------------------------------------------------------------------------------- refusals


def _refuses(call: object, kind: type[Exception] = SpecError) -> None:
    with pytest.raises(
        kind, match=r"freqs_cis_golden[\s\S]*golden_gate_table|golden_gate_table[\s\S]*freqs_cis_golden"
    ):
        call()  # type: ignore[operator]


def test_every_rotating_face_refuses_without_the_checkpoint_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mrope._cli import main
    from mrope.testing import assert_translation_invariant, compare_schemes

    bare = mrope.from_pretrained(checkpoint(tmp_path, None))  # config only: positions yes, rotation no
    p = mrope.build_positions([Text(2), Image(grid=(1, 2, 2))], model=bare).torch()
    q = torch.randn(p.shape[1], 16, 64)
    for model in (NAME, get_family(NAME), bare):
        _refuses(lambda m=model: apply_mrope(q, q, p, get_family(m)))
        _refuses(lambda m=model: resolve_spec(m))
    _refuses(lambda: compare_schemes([NAME]))
    _refuses(lambda: assert_translation_invariant(mrope.build_positions([Text(3)], model=NAME)))
    assert main(["compare", NAME]) == 2 and "freqs_cis_golden" in capsys.readouterr().err
    net = torch.nn.Linear(1, 1)
    net.config = SimpleNamespace(model_type="falcon_ocr")  # what a model of its type would carry
    _refuses(lambda: mt.patch(net), PatchError)
    _refuses(lambda: mt.patch(net, family=bare), PatchError)
    assert not mt.is_patched(net)


def test_bad_weights_are_refused(tmp_path: Path) -> None:
    save = tmp_path / "no_buffer"
    checkpoint(save, None)
    save_file({"norm.weight": np.ones(4, np.float32)}, str(save / "model.safetensors"))
    with pytest.raises(SpecError, match="has no tensor 'freqs_cis_golden'"):
        mrope.from_pretrained(save)
    (save / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(SpecError, match="cannot read 'freqs_cis_golden'"):
        mrope.from_pretrained(save)
    with pytest.raises(SpecError, match=r"\[n, 16, 2\]"):
        mrope.from_pretrained(checkpoint(tmp_path / "shape", golden_freqs(1)[:, :8]))
    with pytest.raises(SpecError, match="finite"):
        mrope.from_pretrained(checkpoint(tmp_path / "nan", np.full((2, 16, 2), np.nan, np.float32)))
    with pytest.raises(SpecError, match="kind"):
        LearnedRotary(kind="other", buffer="x")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="bytes of values"):
        LearnedRotary(kind="golden_gate", buffer="x", values=b"\0" * 12, shape=(2, 2))


def test_a_sharded_checkpoint_is_read_from_the_shard_its_index_names(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path, None)
    save_file({"norm.weight": np.ones(4, np.float32)}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({"freqs_cis_golden": golden_freqs(3)}, str(folder / "model-00002-of-00002.safetensors"))
    index = {"weight_map": {"norm.weight": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    with pytest.raises(SpecError, match="weight_map names no file for 'freqs_cis_golden'"):
        mrope.from_pretrained(folder)
    index["weight_map"]["freqs_cis_golden"] = "model-00002-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    learned = mrope.from_pretrained(folder).learned_rotary
    assert learned.source.endswith("00002.safetensors") and np.array_equal(
        learned.frequencies(NAME), golden_freqs(3)
    )
