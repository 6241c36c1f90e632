"""Every Python block of README.md and of the documentation pages (docs/*.md) runs as written.

The blocks run in one fresh Python process, in an empty working directory, each in its own namespace
(so each block must be self-contained). The README's block marked ``<!-- readme-test: setup -->`` runs
first: it makes the files the other blocks read (``photo.jpg``, ``clip.mp4``, ...), as a reader would
(docs/index.md shows the same block, included from the README). Then the README's blocks run, then each
page's, in order. A failure names the block by its file and line and the heading above it, with its
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
        blocks.append(
            {"code": m.group(1), "line": line, "heading": headings[-1] if headings else "", "setup": setup}
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


def test_docs_stand_alone() -> None:
    """The pages cite no notes a user does not have."""
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert "shared notes" not in text and "SPEC.md" not in text and "FAMILIES.md" not in text, path.name


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_python_block_runs(tmp_path: Path) -> None:
    blocks = document_blocks()
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "runner.py").write_text(RUNNER)
    work = tmp_path / "work"
    work.mkdir()
    offline = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    env = {**os.environ, **offline, "HF_DATASETS_CACHE": str(tmp_path / "hf"), "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [
            sys.executable,
            str(tmp_path / "runner.py"),
            str(tmp_path / "blocks.json"),
            str(tmp_path / "out.json"),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=380,
    )
    assert done.returncode == 0, f"the README runner crashed:\n{done.stderr[-3000:]}"
    results = {r["where"]: r for r in json.loads((tmp_path / "out.json").read_text())}
    failed = [
        f"{b['where']} (under '{b['heading']}'):\n{results[b['where']]['error']}"
        for b in blocks
        if b["where"] in results and not results[b["where"]]["ok"]
    ]
    not_run = [f"{b['where']} (under '{b['heading']}')" for b in blocks if b["where"] not in results]
    assert not failed and not not_run, "Python blocks that do not run as written:\n\n" + "\n\n".join(
        failed + [f"{x}: not run (the setup block failed)" for x in not_run]
    )
