"""transformers' own common model tests (``ModelTesterMixin``) on tiny M-RoPE models, unpatched and patched.

The transformers sdist on PyPI ships ``tests/test_modeling_common.py`` (the ``ModelTesterMixin`` every
family's test file mixes in) but neither the family test files nor the ``tests/exporters`` and
``tests/generation`` folders it imports its other mixins from. :func:`common_tests` downloads the sdist
of the installed transformers version with pip, extracts that one file into a package of its own and
gives it the two missing modules as empty mixins (so the export and generate tests, which live in those
folders, do not run here). :func:`run_family` runs the mixin's tests on a family's tiny model
(:func:`mrope.testing.tiny_model`'s config, inputs built by :mod:`support.tiny_vlm`; image-only families
with rows of their own, :data:`ROWS`), once as the model is and once with
:func:`mrope.integrations.transformers.patch` (and the family's :data:`PATCH_OPTIONS`) applied to every
model a test builds (at its first forward), counting what ran: the model's own text rotary (unpatched)
and mrope's rotation and ``get_rope_index`` (patched).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import subprocess
import sys
import tarfile
import unittest
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import transformers

from mrope import Image, Text
from mrope.integrations.transformers import _patching, model_rules
from mrope.integrations.transformers import patch as mrope_patch
from mrope.integrations.transformers import unpatch as mrope_unpatch
from mrope.integrations.transformers._discovery import family_of, position_owners, text_rotaries
from mrope.integrations.transformers._rotation import Rotation
from mrope.testing import tiny_config
from support import tiny_vlm as tv

PACKAGE = "transformers_sdist_tests"
"""The package the sdist's test file is imported as (its relative imports need one)."""

_EMPTY_MIXINS = {
    "exporters/test_export.py": "ExportTesterMixin",
    "generation/test_utils.py": "GenerationTesterMixin",
}
"""The modules ``test_modeling_common.py`` imports that the sdist leaves out, and the mixin each gives."""


def download_sdist(version: str, into: Path) -> Path:
    """The transformers ``version`` sdist, downloaded by pip into ``into`` (a failure raises)."""
    command = [sys.executable, "-m", "pip", "download", f"transformers=={version}"]
    command += ["--no-binary", ":all:", "--no-deps", "--disable-pip-version-check", "-d", str(into)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    archives = sorted(into.glob(f"transformers-{version}.tar.gz"))
    if done.returncode or not archives:
        raise RuntimeError(
            f"pip download of the transformers {version} sdist failed:\n{done.stdout}\n{done.stderr}"
        )
    return archives[0]


def common_tests(archive: Path, root: Path) -> tuple[ModuleType, str]:
    """``tests/test_modeling_common.py`` of ``archive`` imported as ``PACKAGE.test_modeling_common``, and
    the version the archive's top folder names (``transformers-<version>``)."""
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        source = tar.extractfile(f"{top}/tests/test_modeling_common.py")
        assert source is not None
        text = source.read().decode()
    package = root / PACKAGE
    for folder in (package, package / "exporters", package / "generation"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "test_modeling_common.py").write_text(text)
    for path, mixin in _EMPTY_MIXINS.items():
        (package / path).write_text(f"class {mixin}:\n    pass\n")
    sys.path.insert(0, str(root))
    return importlib.import_module(f"{PACKAGE}.test_modeling_common"), top.removeprefix("transformers-")


MAX_POSITION_EMBEDDINGS = 512
"""The testers' ``max_position_embeddings`` (transformers' ``Qwen2VLVisionText2TextModelTester``,
tests/models/qwen2_vl/test_modeling_qwen2_vl.py, has 512)."""


class FamilyTester:
    """The ``model_tester`` of a family's test case: its tiny config and a two-row batch with an image and a
    video, or images only (:data:`ROWS`), with pixels where :data:`support.tiny_vlm.NO_PIXELS` allows,
    built by mrope's own builder.

    The text config's ``max_position_embeddings`` is :data:`MAX_POSITION_EMBEDDINGS`, as transformers' own
    family testers set it: ``test_model_rope_scaling_from_config`` runs a forward of 1.5 times that many
    tokens, which at a released config's 131,072 is a 196,608-token attention (hours of CPU)."""

    batch_size = 2
    is_training = True

    def __init__(self, parent: unittest.TestCase, family: str) -> None:
        self.parent = parent
        self.family = family
        self.config = tiny_config(family)
        for key, value in tv.CONFIG_IDS.get(family, {}).items():  # as support.tiny_vlm.model sets them
            setattr(self.config, key, value)
        text = self.config.get_text_config()
        text.max_position_embeddings = MAX_POSITION_EMBEDDINGS
        self.text_config = text
        self.vision_config = self.config.vision_config
        self.num_hidden_layers = text.num_hidden_layers
        self.num_attention_heads = text.num_attention_heads
        self.hidden_size = text.hidden_size
        self.vocab_size = text.vocab_size
        self.inputs = _inputs(family)
        self.seq_length = self.inputs["input_ids"].shape[1]

    def get_config(self) -> Any:
        return copy.deepcopy(self.config)

    def prepare_config_and_inputs_for_common(self) -> tuple[Any, dict[str, torch.Tensor]]:
        return self.get_config(), {k: v.clone() for k, v in self.inputs.items()}


def _image_rows(family: str) -> list[list[Any]]:
    """Two image-only rows: :func:`support.tiny_vlm.segments` with a second image for the video, and its
    first three segments (text, image, text)."""
    row = tv.segments(model_rules(tv.model(family)), video=False)
    return [row, row[:3]]


def _glm_image_rows(family: str) -> list[list[Any]]:
    """Image-to-image and text-to-image: a source image and a target grid to generate, and a target alone
    (5.24 ``get_image_grids_for_generation``, modeling_glm_image.py:1305-1319, takes every grid of a row
    but its last as a source)."""
    m = model_rules(tv.model(family)).merge_size
    target = Image((1, 2 * m, 2 * m), generate=True)
    draw = [Text(tv.tokenize("draw")), Image((1, 2 * m, 3 * m)), Text(tv.tokenize("as")), target]
    return [draw, [Text(tv.tokenize("a cat")), target]]


def _prompt_rows(family: str) -> list[list[Any]]:
    """The tiny prompt and its first three segments (text, image, text)."""
    return [tv.prompt(family), tv.prompt(family)[:3]]


ROWS: dict[str, Callable[[str], list[list[Any]]]] = {
    "glm-image": _glm_image_rows,
    "hunyuan-ocr": _image_rows,
}
"""The families whose tester rows are not :func:`_prompt_rows` (their prompts hold images only)."""

PATCH_OPTIONS: dict[str, dict[str, str]] = {"hunyuan-ocr": {"convention": "released"}}
"""``patch`` options per family: HunyuanOCR's own rotary is not a rotation, so ``patch`` takes it only
under the released convention (docs/transformers.md)."""

FAMILIES: tuple[str, ...] = (*tv.FAMILIES, *ROWS)
"""The families the tester runs on."""


@functools.cache
def _inputs(family: str) -> dict[str, torch.Tensor]:
    kw = tv.inputs(family, ROWS.get(family, _prompt_rows)(family))
    if "images_per_sample" in kw:  # GLM-Image: pixels for the source images only (see _glm_image_rows)
        sources = tv.model(family).model.get_image_grids_for_generation(
            kw["images_per_sample"], kw["image_grid_thw"]
        )
        kw["pixel_values"] = tv.pixels(tv.model(family), sources, 1)
    return tv.forward_kwargs(kw, own_positions=True)


def model_classes(family: str) -> tuple[type, ...]:
    """The family's base model class and its ``...ForConditionalGeneration``."""
    net = tv.model(family)
    return type(net.model), type(net)


def test_case(mixin: type, family: str) -> type[unittest.TestCase]:
    """A ``ModelTesterMixin`` test case of ``family``, as a family's own test file declares one."""

    def set_up(self: unittest.TestCase) -> None:
        self.model_tester = FamilyTester(self, family)  # type: ignore[attr-defined]

    name = "".join(part.capitalize() for part in family.replace(".", "_").replace("-", "_").split("_"))
    attrs = {"all_model_classes": model_classes(family), "setUp": set_up, "__module__": __name__}
    return type(f"{name}CommonTest", (mixin, unittest.TestCase), attrs)


@dataclass
class Outcome:
    """What one test did: ``"pass"``, ``"fail"`` or ``"skip"`` (with the failure's last line), how
    often the counted code ran and how many models mrope patched (0 in the unpatched run)."""

    status: str
    detail: str = ""
    calls: int = 0
    patched: int = 0


@dataclass
class Counter:
    calls: int = 0
    models: list[weakref.ref] = field(default_factory=list)


@contextlib.contextmanager
def _counting(owner: Any, name: str, counter: Counter) -> Iterator[None]:
    """``owner.name`` (a function attribute) counts its calls into ``counter`` for the block."""
    inner = owner.__dict__[name]

    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        counter.calls += 1
        return inner(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield
    finally:
        setattr(owner, name, inner)


@contextlib.contextmanager
def model_rotary_counted(family: str, counter: Counter) -> Iterator[None]:
    """The family's text rotary class counts its forwards (the model's own M-RoPE cos / sin)."""
    owner, _ = position_owners(tv.model(family))
    classes = {type(r) for r in text_rotaries(owner)}
    with contextlib.ExitStack() as stack:
        for cls in classes:
            stack.enter_context(_counting(cls, "forward", counter))
        yield


@contextlib.contextmanager
def patched_at_first_forward(classes: tuple[type, ...], counter: Counter) -> Iterator[None]:
    """Every model of ``classes`` is patched by mrope at its first forward (a model a test builds, saves
    and reloads, resizes...); a model inside one already patched is left to it. mrope's rotation and
    ``get_rope_index`` count their calls; the models are unpatched after the block."""

    def lazily(forward: Any) -> Any:
        @functools.wraps(forward)
        def forward_patched(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            if not self.__dict__.get("_mrope_common_seen"):
                for module in self.modules():
                    module.__dict__["_mrope_common_seen"] = True
                mrope_patch(self, **PATCH_OPTIONS.get(family_of(self.config).name, {}))
                counter.models.append(weakref.ref(self))
            return forward(self, *args, **kwargs)

        return forward_patched

    saved = {cls: cls.__dict__["forward"] for cls in classes}
    try:
        for cls, forward in saved.items():
            cls.forward = lazily(forward)
        with _counting(Rotation, "apply", counter), _counting(_patching, "get_rope_index", counter):
            yield
    finally:
        for cls, forward in saved.items():
            cls.forward = forward
        for ref in counter.models:
            model = ref()
            if model is not None and _patching.is_patched(model):
                mrope_unpatch(model)


def run_one(case: type[unittest.TestCase], name: str, counting: Any) -> Outcome:
    """Run test ``name`` of ``case`` under ``counting(counter)``; its outcome and count."""
    counter = Counter()
    result = unittest.TestResult()
    torch.manual_seed(0)
    with counting(counter):
        case(name).run(result)
    if result.skipped:
        return Outcome("skip", result.skipped[0][1])
    problems = result.failures + result.errors
    if problems:
        last = problems[0][1].strip().splitlines()[-1]
        return Outcome("fail", last[:300], counter.calls, len(counter.models))
    return Outcome("pass", calls=counter.calls, patched=len(counter.models))


def test_names(case: type[unittest.TestCase]) -> list[str]:
    """Every test method of ``case`` (``parameterized`` expansions included), in name order."""
    return sorted(n for n in dir(case) if n.startswith("test_") and callable(getattr(case, n)))


def run_family(mixin: type, family: str, names: list[str] | None) -> dict[str, tuple[Outcome, Outcome]]:
    """``names`` (``None``: all) of the mixin's tests on ``family``: ``{test: (unpatched, patched)}``."""
    case = test_case(mixin, family)
    classes = model_classes(family)
    chosen = test_names(case) if names is None else names
    out: dict[str, tuple[Outcome, Outcome]] = {}
    for name in chosen:
        plain = run_one(case, name, lambda c: model_rotary_counted(family, c))
        patched = run_one(case, name, lambda c: patched_at_first_forward(classes, c))
        out[name] = (plain, patched)
    return out


INSTALLED_VERSION = transformers.__version__
"""The version of transformers installed here: the sdist the tests come from must be the same."""
