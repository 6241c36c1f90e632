"""Every Python block of README.md runs as written.

The blocks run in one fresh Python process, in an empty working directory, each in its own namespace
(so each block must be self-contained). The block marked ``<!-- readme-test: setup -->`` runs first: it
makes the files the other blocks read (``photo.jpg``, ``clip.mp4``, ...), as a reader would. A failure
names the block by its line in README.md and the heading above it, with its traceback.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SETUP_MARK = "<!-- readme-test: setup -->"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)

RUNNER = r"""
import json, sys, traceback, warnings
warnings.simplefilter("ignore")
blocks = json.load(open(sys.argv[1]))
results = []
for block in blocks:
    try:
        exec(compile(block["code"], f"README.md:{block['line']}", "exec"), {"__name__": "__readme__"})
        results.append({"line": block["line"], "ok": True})
    except BaseException:
        results.append({"line": block["line"], "ok": False, "error": traceback.format_exc(limit=-4)})
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


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_every_python_block_runs(tmp_path: Path) -> None:
    blocks = python_blocks(README.read_text(encoding="utf-8"))
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
    results = {r["line"]: r for r in json.loads((tmp_path / "out.json").read_text())}
    failed = [
        f"README.md line {b['line']} (under '{b['heading']}'):\n{results[b['line']]['error']}"
        for b in blocks
        if b["line"] in results and not results[b["line"]]["ok"]
    ]
    not_run = [
        f"README.md line {b['line']} (under '{b['heading']}')" for b in blocks if b["line"] not in results
    ]
    assert not failed and not not_run, "README Python blocks that do not run as written:\n\n" + "\n\n".join(
        failed + [f"{x}: not run (the setup block failed)" for x in not_run]
    )
