"""Environments with exactly some of mrope's extras, emulated inside this one for a subprocess.

The test environment has every extra installed. An environment with only some of them (``pip install
"mrope[media]"``) holds those extras' packages, what they depend on, and numpy; everything else the other
extras would bring is absent. :func:`blocker_code` gives Python source that, run first in a fresh
interpreter, makes exactly those absent packages fail to import (``ModuleNotFoundError``), as they would
there. What is absent is read from pyproject.toml's extras and the installed packages' own metadata
(their requirements, and the files each distribution installed).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
INSTALL_LINE = re.compile(r"^# pip install (?P<what>.+)$")


def _dist_name(requirement: str) -> str:
    """The canonical distribution name of a requirement string (``"uvloop>=0.19; ..."`` -> ``"uvloop"``)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(1)).lower()


def _extras_of(requirement: str) -> list[str]:
    found = re.match(r"\s*[A-Za-z0-9._-]+\[([^\]]*)\]", requirement)
    return [e.strip() for e in found.group(1).split(",")] if found else []


@functools.cache
def extras_table() -> dict[str, tuple[str, ...]]:
    """pyproject.toml's extras: name -> requirement strings (``mrope[...]`` self-references kept)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    table = {name: tuple(reqs) for name, reqs in project["optional-dependencies"].items()}
    table[""] = tuple(project["dependencies"])
    return table


def extra_dists(extras: tuple[str, ...]) -> set[str]:
    """The distributions ``pip install "mrope[extras]"`` asks for by name (self-references followed)."""
    table, seen, dists = extras_table(), set(), set()
    todo = ["", *extras]
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in table[extra]:
            if _dist_name(req) == "mrope":
                todo.extend(_extras_of(req))
            else:
                dists.add(_dist_name(req))
    return dists


def _closure(requirements: set[str]) -> set[str]:
    """The distributions of ``requirements`` (``"ray[data]"`` or a bare name) and everything they require,
    with the requested extras, as installed here."""
    done: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        dist, extras = _dist_name(requirement), set(_extras_of(requirement))
        if (dist, *sorted(extras)) in done:
            continue
        done.add((dist, *sorted(extras)))
        try:
            requires = md.requires(dist) or []
        except md.PackageNotFoundError:
            continue
        for line in requires:
            marker = line.split(";", 1)[1] if ";" in line else ""
            wanted = re.findall(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
            if not wanted or extras & set(wanted):
                todo.append(line.split(";", 1)[0])
    return {entry[0] for entry in done}


@functools.cache
def _top_entries(dist: str) -> frozenset[Path]:
    """The top-level files and folders a distribution installed (``site-packages/PIL``, ...), its metadata
    and scripts left out."""
    try:
        files = md.files(dist) or []
    except md.PackageNotFoundError:
        return frozenset()
    tops = set()
    for f in files:
        if f.parts[0] in ("..", "__pycache__") or f.parts[0].endswith((".dist-info", ".egg-info", ".pth")):
            continue
        where = Path(os.path.abspath(f.locate()))
        tops.add(where.parents[len(f.parts) - 2] if len(f.parts) > 1 else where)
    return frozenset(tops)


def absent_paths(extras: tuple[str, ...], also: tuple[str, ...] = ()) -> set[Path]:
    """The installed top-level files and folders an environment with only ``extras`` (and the core), and
    the requirements ``also``, would not have: those of every other distribution the extras bring."""
    every = _closure(extra_dists(tuple(e for e in extras_table() if e)))
    present = _closure(extra_dists(extras) | set(also))
    kept = set().union(*(_top_entries(d) for d in present))
    return set().union(*(_top_entries(d) for d in every - present)) - kept


def blocker_code(extras: tuple[str, ...], also: tuple[str, ...] = ()) -> str:
    """Python source that makes every module an environment with only ``mrope[extras]`` (and ``also``)
    would lack fail to import in the interpreter that runs it, and optional-package probes
    (``importlib.util.find_spec``) find nothing for them. A module counts as absent by where it is
    installed, so a package's own vendored copy of an absent one (Ray's psutil) still loads."""
    absent = sorted(str(p) for p in absent_paths(extras, also))
    return (
        "import importlib.machinery, importlib.util, os, sys\n"
        f"_ABSENT = tuple({absent!r})\n"
        "def _is_absent(spec):\n"
        "    where = spec.origin if spec.origin not in (None, 'namespace') else next(iter(spec.submodule_search_locations or []), '')\n"
        "    return any(where == a or where.startswith(a + os.sep) for a in _ABSENT)\n"
        "class _Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        spec = importlib.machinery.PathFinder.find_spec(name, path, target)\n"
        "        if spec is not None and _is_absent(spec):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Absent())\n"
        "_find_spec = importlib.util.find_spec\n"
        "def _probe(name, package=None):\n"
        "    try:\n"
        "        return _find_spec(name, package)\n"
        "    except ModuleNotFoundError:\n"
        "        return None\n"
        "importlib.util.find_spec = _probe\n"
    )


def install_line(code: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """A block's first line ``# pip install "mrope[a,b]" other`` -> ``(("a", "b"), ("other",))``;
    ``# pip install mrope`` -> ``((), ())``; ``None`` when the block does not start with one."""
    first = code.split("\n", 1)[0]
    found = INSTALL_LINE.match(first)
    if not found:
        return None
    extras: tuple[str, ...] = ()
    also = []
    for word in found.group("what").split():
        word = word.strip("\"'")
        if _dist_name(word) == "mrope":
            extras = tuple(_extras_of(word))
        else:
            also.append(word)
    return extras, tuple(also)
