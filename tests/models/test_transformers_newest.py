"""The family checks against transformers' newest release, beside the pinned one.

The dev extra pins the transformers every other test imports. This module runs the family checks (every
other module of tests/models, and tests/ops/test_ops_parity.py: each family's own get_rope_index,
processors, config classes and rotary against mrope) and a patch selection (every family's patched
prefill logits against the unpatched model's, tests/integrations/test_integration_patch.py) once more,
each in a subprocess whose ``sys.path`` starts with the folder ``MROPE_TRANSFORMERS_NEWEST`` names, a ``pip install --no-deps --target`` of the newest
release (and the ``kernels`` its pins require). scripts/test.sh installs it and sets the variable
(``NEWEST_TRANSFORMERS`` there names the release); a run without it fails, saying how to get it. The
test's id names the version found in the folder, and the test checks that the subprocess imported
transformers from there.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import transformers

ROOT = Path(__file__).resolve().parents[2]
FOLDER_VARIABLE = "MROPE_TRANSFORMERS_NEWEST"
CHECKS = {
    "family-checks": ("tests/models", "tests/ops/test_ops_parity.py"),
    "patch": ("tests/integrations/test_integration_patch.py", "-k", "test_patched_prefill_equals_unpatched"),
}
"""What runs against the newest release, one subprocess each: this folder but this module, and the rotary
parity checks; the patched == unpatched prefill logits of every family (mrope's rotation hooked into the
newest release's attention code)."""

HOW_TO = (
    f"{FOLDER_VARIABLE} must name a folder holding transformers' newest release: `bash scripts/test.sh` "
    "installs it (NEWEST_TRANSFORMERS there) and sets the variable; by hand, `pip install --no-deps "
    f"--target DIR <NEWEST_TRANSFORMERS>`, then {FOLDER_VARIABLE}=DIR"
)


def _folder() -> Path | None:
    value = os.environ.get(FOLDER_VARIABLE)
    return Path(value) if value else None


def _version_in(folder: Path | None) -> str:
    """The transformers version installed in ``folder`` (its dist-info), or ``"missing"``."""
    found = sorted(folder.glob("transformers-*.dist-info")) if folder and folder.is_dir() else []
    return found[0].name.removeprefix("transformers-").removesuffix(".dist-info") if found else "missing"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])


@pytest.mark.timeout(900)
@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("version", [_version_in(_folder())], ids=lambda v: f"transformers-{v}")
def test_checks_pass_against_the_newest_transformers(version: str, check: str) -> None:
    folder = _folder()
    assert folder is not None, f"{FOLDER_VARIABLE} is not set. {HOW_TO}"
    assert version != "missing", f"no transformers in {folder}. {HOW_TO}"
    assert _release(version) > _release(transformers.__version__), (
        f"{folder} holds transformers {version}, not newer than the pinned {transformers.__version__}"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")])),
    }
    probe = subprocess.run(
        [sys.executable, "-c", "import transformers; print(transformers.__version__, transformers.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    ran, where = probe.stdout.split()
    assert ran == version and Path(where).is_relative_to(folder), probe.stdout
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        f"--ignore={Path(__file__).relative_to(ROOT)}",
        *CHECKS[check],
    ]
    run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, (
        f"the {check} failed against transformers {ran} ({where}):\n{run.stdout[-6000:]}{run.stderr[-2000:]}"
    )
