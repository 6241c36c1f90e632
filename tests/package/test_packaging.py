"""What a wheel of this checkout installs: only mrope-named packages (service/ goes in as mrope.service).

setuptools computes the modules its ``build_py`` step would put into the wheel, from pyproject.toml, without
building anything (no network, no files written).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

setuptools = pytest.importorskip("setuptools")
from setuptools.config.pyprojecttoml import apply_configuration  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def build_py():
    """The build_py step of a wheel build, configured from pyproject.toml (paths relative to the root)."""
    with warnings.catch_warnings():  # setuptools' own deprecation notes about the metadata
        warnings.simplefilter("ignore")
        dist = apply_configuration(
            setuptools.Distribution({"script_name": "setup.py"}), ROOT / "pyproject.toml"
        )
    cmd = dist.get_command_obj("build_py")
    cmd.ensure_finalized()
    return cmd


@pytest.fixture(scope="module")
def wheel(build_py) -> tuple[dict[str, Path], dict[str, set[str]]]:
    """What build_py puts into the wheel: dotted module name -> its source file, and package -> data files."""
    here = os.getcwd()
    os.chdir(ROOT)  # build_py finds files relative to the working directory, as a build runs
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # static/ is package data, not a package: setuptools says so
            found = build_py.find_all_modules()
            data = {package: set(files) for package, _, _, files in build_py.data_files}
    finally:
        os.chdir(here)
    modules = {
        (package if module == "__init__" else f"{package}.{module}"): (ROOT / filename).resolve()
        for package, module, filename in found
    }
    return modules, data


@pytest.fixture(scope="module")
def installed(wheel) -> dict[str, Path]:
    return wheel[0]


def test_every_installed_top_level_name_is_mrope(installed) -> None:
    tops = {name.split(".")[0] for name in installed}
    assert tops == {"mrope"}, tops


def test_service_is_installed_as_mrope_service(wheel) -> None:
    modules, data = wheel
    assert modules["mrope.service"] == (ROOT / "service" / "__init__.py").resolve()
    assert modules["mrope.service.app"] == (ROOT / "service" / "app.py").resolve()
    assert {"static/inspect.html", "static/inspect.js", "static/inspect.css"} <= data["mrope.service"]


def test_every_source_file_is_installed(installed) -> None:
    """A subpackage left out of pyproject.toml's package list would be missing from the wheel."""
    sources = {p.resolve() for base in ("mrope", "service") for p in (ROOT / base).rglob("*.py")}
    assert sorted(map(str, sources - set(installed.values()))) == []
