"""Every Python block of README.md and of the documentation pages (docs/*.md) runs as written, with only
the extras it says it needs.

Each block starts with the install line a reader runs first (``# pip install "mrope[media]"``,
``# pip install mrope`` for the core, other packages after it). The blocks run in an empty working
directory, each in its own namespace (so each block must be self-contained), in one fresh Python process
per install line, where every package that line would not install fails to import
(:mod:`support.extras`). The README's block marked ``<!-- readme-test: setup -->`` runs first: it makes
the files the other blocks read (``photo.jpg``, ``clip.mp4``, ...), as a reader would (docs/index.md shows
the same block, included from the README). Then the blocks of each install line run, README first, in
document order. A failure names the block by its file and line and the heading above it, with its
traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.extras import blocker_code, install_line

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SETUP_MARK = "<!-- readme-test: setup -->"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

RUNNER = r"""
import json, sys, traceback, warnings
warnings.simplefilter("ignore")
blocks = json.load(open(sys.argv[1]))
results = []
for block in blocks:
    try:
        exec(compile(block["code"], block["where"], "exec"), {"__name__": "__readme__"})
        results.append({"where": block["where"], "ok": True})
    except BaseException:
        results.append({"where": block["where"], "ok": False, "error": traceback.format_exc(limit=-4)})
        if block["setup"]:
            break
json.dump(results, open(sys.argv[2], "w"))
"""


def python_blocks(text: str) -> list[dict[str, object]]:
    """Every ```python block: its code, first code line, heading above it and whether it is the setup."""
    blocks = []
    for m in BLOCK.finditer(text):
        before = text[: m.start()]
        line = before.count("\n") + 2
        headings = re.findall(r"^#+ (.+)$", before, re.M)
        setup = before.rstrip().endswith(SETUP_MARK)
        needs = install_line(m.group(1))
        blocks.append(
            {
                "code": m.group(1),
                "line": line,
                "heading": headings[-1] if headings else "",
                "setup": setup,
                "extras": list(needs[0]) if needs else None,
                "also": list(needs[1]) if needs else None,
            }
        )
    return sorted(blocks, key=lambda b: not b["setup"])  # the setup first, then in README order


def document_blocks() -> list[dict[str, object]]:
    """The blocks of README.md (its setup first) and then of every page in docs/, each named ``file:line``."""
    blocks = []
    for path in [README, *DOCS]:
        name = path.relative_to(ROOT).as_posix()
        for block in python_blocks(path.read_text(encoding="utf-8")):
            blocks.append({**block, "where": f"{name}:{block['line']}"})
    return blocks


def test_the_parser_finds_every_block() -> None:
    text = README.read_text(encoding="utf-8")
    blocks = python_blocks(text)
    assert len(blocks) == text.count("```python\n") >= 8
    assert sum(b["setup"] for b in blocks) == 1 and blocks[0]["setup"]


def test_readme_stands_alone() -> None:
    """No pointer to notes a user does not have; the documents it links exist."""
    text = README.read_text(encoding="utf-8")
    assert "shared notes" not in text and "SPEC.md" not in text and "FAMILIES.md" not in text
    for link in re.findall(r"\]\(([^)#:]+)\)", text):
        assert (ROOT / link).exists(), f"README links to {link}, which is not in the repository"


def test_the_parser_finds_every_block_of_the_docs() -> None:
    """Each page's blocks are found; the README holds the only setup block; none was lost in the move.

    Before the reference moved from README.md to docs/, the README had 16 blocks; it now has one per face
    (8 with the setup), and the pages hold the other 15."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        blocks = python_blocks(text)
        assert len(blocks) == text.count("```python\n"), path.name
        assert not any(b["setup"] for b in blocks), f"{path.name}: the setup block lives in README.md"
    blocks = document_blocks()
    assert blocks[0]["setup"] and blocks[0]["where"].startswith("README.md:")
    assert len(blocks) >= 16 + 7


def test_every_block_says_what_to_install() -> None:
    """A block's first line is the pip install line of what it needs, naming extras that exist."""
    from support.extras import extras_table

    for block in document_blocks():
        assert block["extras"] is not None, f"{block['where']} does not start with '# pip install ...'"
        unknown = set(block["extras"]) - set(extras_table())
        assert not unknown, f"{block['where']} names unknown extras {sorted(unknown)}"


def test_the_install_line_is_enforced(tmp_path: Path) -> None:
    """The emulated environment is real enough to fail: a core-only block that imports torch fails."""
    blocks = [{"code": "# pip install mrope\nimport torch\n", "where": "x:1", "setup": False}]
    results = _run_blocks(blocks, blocker_code(()), tmp_path, tmp_path)
    assert not results[0]["ok"] and "No module named 'torch'" in results[0]["error"]


def test_docs_stand_alone() -> None:
    """The pages cite no notes a user does not have."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert "shared notes" not in text and "SPEC.md" not in text and "FAMILIES.md" not in text, path.name


def _run_blocks(blocks: list[dict[str, object]], blocker: str, tmp_path: Path, work: Path) -> list[dict]:
    """Run ``blocks`` in order in one fresh interpreter (``blocker`` first), in ``work``; their results."""
    name = f"run{len(list(tmp_path.glob('run*.json')))}"
    (tmp_path / f"{name}.json").write_text(json.dumps(blocks))
    (tmp_path / f"{name}.py").write_text(blocker + RUNNER)
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env = {**os.environ, **offline, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / f"{name}.py"),
            str(tmp_path / f"{name}.json"),
            str(tmp_path / "out.json"),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert done.returncode == 0, f"the block runner crashed:\n{done.stderr[-3000:]}"
    return json.loads((tmp_path / "out.json").read_text())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_every_python_block_runs(tmp_path: Path) -> None:
    blocks = document_blocks()
    work = tmp_path / "work"
    work.mkdir()
    runs: dict[tuple, list[dict[str, object]]] = {}  # install line -> its blocks, the setup's first
    for block in blocks:
        key = ("setup",) if block["setup"] else (tuple(block["extras"]), tuple(block["also"]))
        runs.setdefault(key, []).append(block)
    results: dict[str, dict] = {}
    for key, group in runs.items():
        extras, also = (tuple(group[0]["extras"]), tuple(group[0]["also"]))
        for result in _run_blocks(group, blocker_code(extras, also), tmp_path, work):
            results[result["where"]] = result
        if key == ("setup",) and not all(results[b["where"]]["ok"] for b in group):
            break
    failed = [
        f"{b['where']} (under '{b['heading']}'):\n{results[b['where']]['error']}"
        for b in blocks
        if b["where"] in results and not results[b["where"]]["ok"]
    ]
    not_run = [f"{b['where']} (under '{b['heading']}')" for b in blocks if b["where"] not in results]
    assert not failed and not not_run, "Python blocks that do not run as written:\n\n" + "\n\n".join(
        failed + [f"{x}: not run (the setup block failed)" for x in not_run]
    )
