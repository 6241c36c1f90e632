"""The model registry: lookup by name / model_type / repo id, no default model, the convention switch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import mrope
from mrope import Image, LayoutError, LayoutRules, RopeSpec, Text, Video
from mrope.media import image_grid
from mrope.models import (
    families,
    get_family,
    names,
    resolve_rules,
    resolve_spec,
    spec_from_config,
)


def test_every_family_is_consistent() -> None:
    seen: set[str] = set()
    for fam in families():
        assert fam.rules.name == fam.name
        keys = {k.lower() for k in (fam.name, *fam.model_types, *fam.aliases)}
        assert not keys & seen, f"{fam.name} shares a key with another family"
        seen |= keys
        assert isinstance(fam.spec, RopeSpec) and fam.exactness
        assert fam.rules_for("transformers5") == fam.rules.replace(**fam.transformers5)
    assert names()[:4] == ("qwen2-vl", "qwen2.5-vl", "qwen3-vl", "glm-4.1v")


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("qwen2.5-vl", "qwen2.5-vl"),
        ("QWEN2.5-VL", "qwen2.5-vl"),
        ("qwen2_5_vl", "qwen2.5-vl"),
        ("qwen2_5_vl_text", "qwen2.5-vl"),
        ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
        ("qwen/qwen2.5-vl-7b-instruct", "qwen2.5-vl"),
        ("qwen3_vl", "qwen3-vl"),
        ("glm4v", "glm-4.1v"),
        ("zai-org/GLM-4.1V-9B-Thinking", "glm-4.1v"),
    ],
)
def test_lookup_by_name_model_type_and_repo_id(key: str, name: str) -> None:
    fam = get_family(key)
    assert fam.name == name
    assert resolve_rules(key) == fam.rules and resolve_spec(key) == fam.spec
    assert get_family(fam) is fam


def test_unknown_model_lists_the_names() -> None:
    with pytest.raises(LayoutError, match="unknown model 'llava'.*qwen2-vl, qwen2.5-vl, qwen3-vl, glm-4.1v"):
        get_family("llava")
    with pytest.raises(LayoutError, match="ModelFamily"):
        get_family(3)


_NO_MODEL = [
    lambda: mrope.build_positions([Text(3)]),
    lambda: mrope.build_batch([[Text(3)]]),
    lambda: mrope.count_tokens([Text(3)]),
    lambda: mrope.numpy_rope_index(np.zeros((1, 3), dtype=np.int64)),
    lambda: mrope.get_rope_index(torch.zeros(1, 3, dtype=torch.long)),
    lambda: image_grid(100, 100),
    lambda: mrope.media.load_video(
        mrope.media.VideoInfo(num_frames=8, fps=4.0, width=64, height=64, duration=2.0)
    ),
    lambda: mrope.build_positions([Text(3)], rules={"advance": "spatial"}),
]


@pytest.mark.parametrize("call", _NO_MODEL)
def test_no_silent_model(call) -> None:
    with pytest.raises((LayoutError, mrope.TokenError), match="no default model.*qwen2-vl, qwen2.5-vl"):
        call()


def test_full_rules_need_no_model() -> None:
    p = mrope.build_positions([Text(2)], rules=LayoutRules())
    assert p.ids.tolist() == [[0, 1]] * 3


def test_convention_switch_by_hand() -> None:
    # Qwen2-VL, a bare 4-patch video of merged 1 x 1 after one text token: the official rule resumes at
    # 1 + max = 5; transformers 5.x at s + max(H', W') = 1 + 1 = 2 (hand derivation; 5.x advance:
    # transformers 5.24 models/qwen2_vl/modeling_qwen2_vl.py:989).
    segs = [Text(1), Video(grid=(4, 2, 2), wrap=False), Text(1)]
    released = mrope.build_positions(segs, model="qwen2-vl")
    t5 = mrope.build_positions(segs, model="qwen2-vl", convention="transformers5")
    assert released.ids[:, -1].tolist() == [5, 5, 5]
    assert t5.ids[:, -1].tolist() == [2, 2, 2]
    with pytest.raises(LayoutError, match="convention must be one of"):
        mrope.build_positions(segs, model="qwen2-vl", convention="transformers4")


def test_pad_position_is_a_rule_and_an_argument_overrides_it() -> None:
    samples = [[Text(1)], [Text(3)]]
    assert mrope.build_batch(samples, model="qwen2-vl").ids[0, 0].tolist() == [1, 1, 0]
    t5 = mrope.build_batch(samples, model="qwen2-vl", convention="transformers5")
    assert t5.ids[0, 0].tolist() == [0, 0, 0]
    assert mrope.build_batch(samples, model="qwen2-vl", pad_position=7).ids[0, 0].tolist() == [7, 7, 0]
    assert get_family("qwen2-vl").rules.pad_position == 1
    assert get_family("qwen2-vl").rules_for("transformers5").pad_position == 0

    ids = torch.tensor([[0, 5, 6], [5, 6, 7]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    pos, _ = mrope.get_rope_index(ids, attention_mask=mask, model="qwen2_vl")
    assert pos[:, 0, 0].tolist() == [1, 1, 1]
    pos, _ = mrope.get_rope_index(ids, attention_mask=mask, model="qwen2_vl", convention="transformers5")
    assert pos[:, 0, 0].tolist() == [0, 0, 0]
    pos, _ = mrope.get_rope_index(ids, attention_mask=mask, model="qwen2_vl", pad_position=-1)
    assert pos[:, 0, 0].tolist() == [-1, -1, -1]


def test_transformers5_applies_to_full_rules_only_with_a_model() -> None:
    with pytest.raises(LayoutError, match="needs model="):
        resolve_rules(None, LayoutRules(), "transformers5")
    assert resolve_rules("qwen2-vl", LayoutRules(crop="keep"), "transformers5").advance == "spatial"


def test_repo_id_and_model_type_work_for_images() -> None:
    img = Image(grid=(1, 4, 4))
    a = mrope.build_positions([Text(1), img], model="Qwen/Qwen2-VL-7B-Instruct")
    b = mrope.build_positions([Text(1), img], model="qwen2-vl")
    np.testing.assert_array_equal(a.ids, b.ids)


def test_docs_family_table_is_the_registrys() -> None:
    from pathlib import Path

    from mrope.models import family_table

    page = (Path(__file__).resolve().parents[2] / "docs" / "families.md").read_text()
    assert family_table() in page, (
        "docs/families.md's 'Supported families' table differs from the registry: replace it with the output of "
        "python -c 'import mrope.models as m; print(m.family_table())'"
    )


def test_families_and_checkpoints_pickle(tmp_path) -> None:
    """Ray and datasets' num_proc send the model to worker processes: a family, and a checkpoint's
    description, must survive pickling with every field, and build the same positions."""
    import pickle

    from support.checkpoints import qwen2_5_vl_config, write_checkpoint

    segs = [mrope.Text(3), mrope.Image(grid=(1, 4, 4)), mrope.Text(2)]
    for fam in mrope.models.families():
        back = pickle.loads(pickle.dumps(fam))
        assert back == fam and back.rules_for("transformers5") == fam.rules_for("transformers5")
    write_checkpoint(tmp_path, qwen2_5_vl_config())
    ckpt = mrope.from_pretrained(tmp_path)
    back = pickle.loads(pickle.dumps(ckpt))
    assert back == ckpt
    assert np.array_equal(
        mrope.build_positions(segs, model=back).ids, mrope.build_positions(segs, model=ckpt).ids
    )


_QWEN2_CONFIG = {
    "model_type": "qwen2_vl",
    "head_dim": 128,
    "rope_theta": 1e6,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
}


def test_a_released_config_reads_as_the_familys_spec() -> None:
    assert spec_from_config(_QWEN2_CONFIG) == get_family("qwen2-vl").spec


def test_value_types_import_no_registry() -> None:
    """rules, spec, scaling and segments are leaves: they import mrope._errors, rules its checks and its
    timestamp text format (leaves on mrope._errors), spec the scaling formulas and segments the media
    record it carries (itself a leaf, importing nothing of mrope's)."""
    import ast
    from pathlib import Path

    allowed = {
        "rules": {"mrope._errors", "mrope._rule_checks", "mrope._timestamp_format"},
        "rule_checks": {"mrope._errors", "mrope._timestamp_format"},
        "timestamp_format": {"mrope._errors"},
        "spec": {"mrope._errors", "mrope._scaling"},
        "scaling": {"mrope._errors"},
        "segments": {"mrope._errors", "mrope._media_record"},
        "media_record": set(),
        "route": set(),
    }
    for name, may_import in allowed.items():
        tree = ast.parse((Path(mrope.__file__).parent / f"_{name}.py").read_text())
        found = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        }
        assert {m for m in found if m and m.startswith("mrope")} <= may_import, name
