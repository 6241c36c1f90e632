"""transformers' own common model tests pass on a patched model wherever they pass on the model itself.

``ModelTesterMixin`` (``tests/test_modeling_common.py`` of the transformers sdist of the INSTALLED
version, downloaded by pip once per session: a failed download fails the tests) runs on a tiny model of
each family twice, as the model is and patched by mrope at every model's first forward
(:mod:`support.transformers_common`). Expected outcomes come from the unpatched run: every test passing
there passes patched, and where the model's own text rotary ran, mrope's rotation or ``get_rope_index``
ran too (counted). A CI run takes :data:`SELECTION`; ``MROPE_TRANSFORMERS_TESTS`` picks others
(:func:`chosen`: ``all``, or family names of :data:`support.transformers_common.FAMILIES`, docs/development.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from support import transformers_common as tc

SELECTION: dict[str, list[str]] = {
    "qwen2-vl": ["test_determinism", "test_hidden_states_output", "test_inputs_embeds", "test_training"],
    "cosmos3-edge": ["test_determinism", "test_inputs_embeds"],
    "qwen2.5-omni": ["test_determinism"],
    "qwen3-omni": ["test_determinism"],
}
"""A CI run's families and tests: the forward, its hidden states, input embeddings and one training step,
on Qwen2-VL (a 5.x family), Cosmos3-Edge and the two omni thinkers (the families whose patched reading is
lenient where mrope's is strict); about 55 s of CPU for the file, both runs and the sdist's download."""


def chosen(value: str) -> dict[str, list[str] | None]:
    """The families and tests ``MROPE_TRANSFORMERS_TESTS`` asks for: unset or empty, :data:`SELECTION`;
    ``all``, every test of the mixin on every family (about 8 min of CPU a family); a comma-separated list
    of family names (``qwen3-vl,glm-4.1v``), every test on those (``None``: every test)."""
    if not value:
        return dict(SELECTION)
    names = list(tc.FAMILIES) if value == "all" else [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in tc.FAMILIES]
    if unknown or not names:
        raise ValueError(
            f"MROPE_TRANSFORMERS_TESTS={value!r}: expected 'all' or family names of "
            f"support.transformers_common.FAMILIES separated by commas; unknown: {unknown}"
        )
    return dict.fromkeys(names)


CHOSEN = chosen(os.environ.get("MROPE_TRANSFORMERS_TESTS", ""))


@pytest.fixture(scope="session")
def sdist_module(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, str]:
    """``test_modeling_common`` from the sdist of the installed transformers, and the sdist's version."""
    root = tmp_path_factory.mktemp("transformers_sdist")
    archive = tc.download_sdist(tc.INSTALLED_VERSION, Path(root))
    return tc.common_tests(archive, Path(root))


def test_the_sdist_tests_are_the_installed_version(sdist_module: tuple[ModuleType, str]) -> None:
    module, version = sdist_module
    assert version == tc.INSTALLED_VERSION, f"sdist {version}, installed transformers {tc.INSTALLED_VERSION}"
    assert hasattr(module, "ModelTesterMixin")


@pytest.mark.parametrize("family", list(CHOSEN))
def test_every_test_passing_unpatched_passes_patched(
    family: str, sdist_module: tuple[ModuleType, str], record_property: pytest.RecordProperty
) -> None:
    module, version = sdist_module
    results = tc.run_family(module.ModelTesterMixin, family, CHOSEN[family])
    passing = [name for name, (plain, _) in results.items() if plain.status == "pass"]
    broken = {
        name: patched.detail
        for name, (plain, patched) in results.items()
        if plain.status == "pass" != patched.status
    }
    # the tests where the model's own text rotary ran: mrope's code must have run in each that forwarded a
    # model (test_model_rope_scaling_frequencies calls the rotary class alone: no model to patch)
    rotary = [name for name in passing if results[name][0].calls]
    alone = [name for name in rotary if not results[name][1].patched]
    silent = [name for name in rotary if name not in alone and not results[name][1].calls]
    record_property("transformers_sdist", version)
    record_property("passing_unpatched", len(passing))
    record_property("mrope_ran_in", len(rotary) - len(silent) - len(alone))
    record_property("rotary_without_a_model", alone)
    assert passing, (
        f"transformers {version}: no common test passes on the unpatched {family} model: {results}"
    )
    assert not broken, f"transformers {version}: pass -> fail once patched: {broken}"
    assert not silent, f"transformers {version}: the model's rotary ran but mrope's code did not: {silent}"
