"""Install by job: the wheel's requirements per extra, the core alone in a fresh virtual environment, and
the ImportError that names the extra a part needs.

The expected requirements are written out here (not read from pyproject.toml), so a change to what an
extra installs is a visible diff of this file.
"""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from support.extras import ROOT, blocker_code

EXPECTED = {
    "": {"numpy"},
    "torch": {"torch"},
    "triton": {"mrope[torch]", "triton"},
    "media": {"pillow", "av", "fsspec"},
    "urls": {"mrope[media]", "aiohttp", "s3fs", "gcsfs"},
    "pipeline": {"mrope[media]", "pydantic", "pyarrow", "tqdm", "tokenizers", "jinja2"},
    "cli": {"mrope[pipeline]"},
    "service": {
        "mrope[media]",
        "pydantic",
        "tokenizers",
        "jinja2",
        "fastapi",
        "anyio",
        "uvicorn",
        "python-multipart",
        "orjson",
        "prometheus-client",
        "fastapi-offline",
        "httptools",
        "uvloop",
    },
    "all": {"mrope[cli,media,pipeline,service,torch,triton,urls]"},
}
"""extra -> the requirements it names (name and extras, no versions); ``""`` is the core."""
HEAVY = {"torch", "triton", "av", "pillow", "fastapi", "uvicorn", "pydantic", "pyarrow"}

PARTS = {
    "mrope.media": "media",
    "mrope.ops": "torch",
    "mrope.testing": "torch",
    "mrope.integrations.transformers": "torch",
    "mrope.packing._collator": "torch",
    "mrope._pruning": "torch",
    "mrope._plot": "media",
    "mrope.schema": "pipeline",
    "mrope.pipeline": "pipeline",
    "mrope._cli": "cli",
    "mrope.service": "service",
}
"""Each optional part -> the extra its ImportError names."""


def _requirement_key(line: str) -> tuple[str, str]:
    """A Requires-Dist value -> (extra it belongs to, ``name[extras]`` without versions or markers)."""
    requirement, _, marker = line.partition(";")
    extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
    found = re.match(r"\s*([A-Za-z0-9._-]+)\s*(\[[^\]]*\])?", requirement)
    assert found, line
    name = re.sub(r"[-_.]+", "-", found.group(1)).lower()
    extras = found.group(2) or ""
    if extras:
        extras = "[" + ",".join(sorted(e.strip() for e in extras[1:-1].split(","))) + "]"
    return (extra.group(1) if extra else ""), name + extras


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built from a copy (a build writes build/ and egg-info next to the
    sources)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("mrope", "service"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("mrope-*.whl")
    return found


def test_the_wheel_requires_numpy_alone_and_each_extra_its_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(zf.read(name))
    by_extra: dict[str, set[str]] = {}
    for line in metadata.get_all("Requires-Dist") or []:
        extra, key = _requirement_key(line)
        by_extra.setdefault(extra, set()).add(key)
    declared = set(metadata.get_all("Provides-Extra") or [])
    assert declared == set(EXPECTED) - {""} | {"dev"}, declared
    for extra, want in EXPECTED.items():
        assert by_extra.get(extra) == want, extra
    assert not {key.split("[")[0] for key in by_extra[""]} & HEAVY


def _run(code: str, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT.parent)


_IMPORT_EACH = """
import importlib, json
out = {}
for part in PARTS:
    try:
        importlib.import_module(part)
        out[part] = None
    except ImportError as exc:
        out[part] = str(exc)
print(json.dumps(out))
"""


def _import_each(blocker: str, python: str = sys.executable) -> dict[str, str | None]:
    import json

    done = _run(blocker + f"PARTS = {list(PARTS)!r}\n" + _IMPORT_EACH, python)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_without_its_extra_each_part_names_the_extra_to_install() -> None:
    got = _import_each(blocker_code(()))
    for part, extra in PARTS.items():
        assert got[part] is not None, f"{part} imported in an environment without {extra!r}"
        assert f'pip install "mrope[{extra}]"' in got[part], (part, got[part])


def test_with_its_extra_each_part_imports() -> None:
    """The check above can fail: with the extras installed the same parts import (and with one extra,
    only its parts)."""
    everything = _import_each(blocker_code(("all",), also=("transformers",)))
    assert everything == dict.fromkeys(PARTS), everything
    media_only = _import_each(blocker_code(("media",)))
    assert media_only["mrope.media"] is None and media_only["mrope._plot"] is None
    assert media_only["mrope.service"] is not None and media_only["mrope.ops"] is not None


_CORE_JOB = """
import sys
import numpy as np
import mrope
from mrope import Image, Text, Video
p = mrope.build_positions([Text(3), Image(grid=(1, 4, 4)), Text(2), Video(grid=(2, 4, 4), fps=2.0)], model="qwen2.5-vl")
pos, deltas = mrope.get_rope_index(
    p.input_ids[None], p.image_grid_thw, p.video_grid_thw, model="qwen2.5-vl",
    second_per_grid_ts=p.second_per_grid_ts,
)
assert isinstance(pos, np.ndarray) and np.array_equal(pos[:, 0], p.ids) and deltas.tolist() == [[p.delta]]
packed = mrope.pack([[Text(5)], [Text(3), Image(grid=(1, 4, 4))]], model="qwen2-vl", max_length=64)
assert packed.rows[0].position_ids.shape[1] == 5 + 3 + 4 + 2
turn = mrope.continue_positions(mrope.conversation_state(p), [Text(4)], model="qwen2.5-vl")
assert turn.positions.ids[0].tolist() == list(range(p.ids.max() + 1, p.ids.max() + 5))
try:
    import mrope.service
except ImportError as exc:
    assert 'pip install "mrope[service]"' in str(exc), exc
else:
    raise AssertionError("mrope.service imported without its extra")
heavy = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "PIL", "av", "pydantic", "fastapi"))
assert not heavy, heavy
print("core ok")
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_core_alone_in_a_fresh_virtual_environment(wheel: Path, tmp_path: Path) -> None:
    """``pip install mrope`` (the wheel, no extras) in a new venv: numpy and nothing heavy, and the core
    jobs run; the ``mrope`` command says which extra it needs."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    listed = _run(
        "import importlib.metadata as md; print(sorted(d.metadata['Name'].lower() for d in md.distributions()))",
        python,
    )
    installed = set(eval(listed.stdout))  # noqa: S307 - our own printed list
    assert installed - {"pip", "setuptools", "wheel"} == {"mrope", "numpy"}, installed
    done = _run(textwrap.dedent(_CORE_JOB), python)
    assert done.returncode == 0 and done.stdout.strip().endswith("core ok"), done.stderr[-3000:]
    command = subprocess.run(
        [str(venv / "bin" / "mrope"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert command.returncode == 1 and 'pip install "mrope[cli]"' in command.stderr, command.stderr[-2000:]
    assert command.stderr.count("\n") == 1 and "Traceback" not in command.stderr  # one line, no traceback
