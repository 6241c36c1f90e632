"""Environments with exactly some of mrope's extras, emulated inside this one for a subprocess.

The test environment has every extra installed. An environment with only some of them (``pip install
"mrope[media]"``) holds those extras' packages, what they depend on, and numpy; everything else the other
extras would bring is absent. :func:`blocker_code` gives Python source that, run first in a fresh
interpreter, makes exactly those absent packages fail to import (``ModuleNotFoundError``), as they would
there. What is absent is read from pyproject.toml's extras and the installed packages' own metadata
(their requirements, and which import names each distribution provides).
"""

from __future__ import annotations

import functools
import importlib.metadata as md
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


def _closure(dists: set[str]) -> set[str]:
    """``dists`` and everything they require (unconditionally), as installed here."""
    done: set[str] = set()
    todo = list(dists)
    while todo:
        dist = todo.pop()
        if dist in done:
            continue
        done.add(dist)
        try:
            requires = md.requires(dist) or []
        except md.PackageNotFoundError:
            continue
        todo.extend(_dist_name(r) for r in requires if "extra ==" not in r.split(";", 1)[-1])
    return done


@functools.cache
def _imports_by_dist() -> dict[str, set[str]]:
    table: dict[str, set[str]] = {}
    for module, dists in md.packages_distributions().items():
        for dist in dists:
            table.setdefault(_dist_name(dist), set()).add(module)
    return table


def absent_imports(extras: tuple[str, ...], also: tuple[str, ...] = ()) -> set[str]:
    """Top-level import names an environment with only ``extras`` (and the core), and the distributions
    ``also``, would not have."""
    every = _closure(extra_dists(tuple(e for e in extras_table() if e)))
    present = _closure(extra_dists(extras) | {_dist_name(a) for a in also})
    by_dist = _imports_by_dist()
    have = set().union(*(by_dist.get(d, set()) for d in present))
    return set().union(*(by_dist.get(d, set()) for d in every - present)) - have - {"mrope"}


def blocker_code(extras: tuple[str, ...], also: tuple[str, ...] = ()) -> str:
    """Python source that makes every package absent from ``mrope[extras]`` (plus the distributions
    ``also``) fail to import in the interpreter that runs it."""
    absent = absent_imports(extras, also)
    return (
        "import sys\n"
        f"_ABSENT = frozenset({sorted(absent)!r})\n"
        "class _Absent:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in _ABSENT:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Absent())\n"
        "import importlib.util\n"
        "_find_spec = importlib.util.find_spec\n"
        "def _probe(name, package=None):\n"  # a probe for an optional package finds nothing, as there
        "    if name.partition('.')[0] in _ABSENT:\n"
        "        return None\n"
        "    return _find_spec(name, package)\n"
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
