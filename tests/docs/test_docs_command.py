"""The README's test command (``bash scripts/test.sh``) brings what the tests need, and CI runs that same line.

The script runs for real with a ``PATH`` of stand-ins (``python``, ``apt-get``, ``sudo``, ``id``, and a
browser or none), so the no-browser paths are tested without uninstalling Chromium: each stand-in writes
its command line to a log, which says what the script did.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.extras import blocker_code

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test.sh"
COMMAND = "bash scripts/test.sh"
PYTEST = "python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder"  # the suite on two workers
LOG_LINE = 'echo "$(basename "$0") $*" >> "$STUB_LOG"\n'
PIP = "python -m pip install -q torch==2.13.0 -e .[dev]"
NEWEST = ("transformers==5.25.0", "kernels==0.19.1")  # transformers' newest release, beside the pinned one


def newest_pip(home: Path) -> str:
    """The install of :data:`NEWEST` into its own folder under ``home``'s cache (once)."""
    return f"python -m pip install -q --no-deps --target {home}/.cache/mrope/transformers-5.25.0 {' '.join(NEWEST)}"


def stub(folder: Path, name: str, body: str = "") -> None:
    path = folder / name
    path.write_text("#!/bin/bash\n" + LOG_LINE + body)
    path.chmod(0o755)


def run_script(
    tmp_path: Path,
    *,
    browser: bool,
    uid: int = 0,
    apt: bool = True,
    sudo: bool = False,
    python: bool = True,
    pytest_rc: int = 0,
    home: Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run scripts/test.sh with only stand-ins (and ``dirname``, ``env``, ``basename``) on PATH, with
    ``HOME`` at ``home`` (``tmp_path`` when not given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("dirname", "env", "basename"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    stub(bin_dir, "id", f"echo {uid}\n")
    if python:
        stub(bin_dir, "python", f'[ "$2" = pytest ] && exit {pytest_rc}\nexit 0\n')
    if browser:
        stub(bin_dir, "chromium")
        stub(bin_dir, "chromedriver")
    if apt:  # "installs" the browser: puts its two commands on PATH
        stub(
            bin_dir,
            "apt-get",
            f'[ "$1" = install ] && {shutil.which("touch")} {bin_dir}/chromium {bin_dir}/chromedriver && '
            f"{shutil.which('chmod')} +x {bin_dir}/chromium {bin_dir}/chromedriver\nexit 0\n",
        )
    if sudo:
        stub(bin_dir, "sudo", 'exec "$@"\n')
    log = tmp_path / "log"
    log.touch()
    env = {"PATH": str(bin_dir), "STUB_LOG": str(log), "HOME": str(home or tmp_path)}
    done = subprocess.run(
        [shutil.which("bash"), str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    calls = [line for line in log.read_text().splitlines() if not line.startswith("id ")]
    return done, calls


def test_readme_and_ci_run_the_same_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^```bash\n(.*?)\n```", quick_start, re.S | re.M)
    assert commands[-1] == COMMAND, "the Quick start's last command is the test command"
    ci = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln and not ln.startswith("#")]
    assert ci[-1] == COMMAND and "set -euo pipefail" in ci


def _main_job() -> tuple[tuple[str, ...], list[str]]:
    """The Quick start's first command: the extras its install names, and the mrope command's arguments."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    install, _, job = re.findall(r"^```bash\n(.*?)\n```", quick_start, re.S | re.M)[0].partition(" && ")
    extras = re.search(r'-e "\.\[([a-z,]+)\]"', install)
    assert install.startswith("python -m pip install") and extras, install
    words = shlex.split(job)
    assert words[0] == "mrope", job
    return tuple(extras.group(1).split(",")), words[1:]


def _run_main_job(blocker: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    code = blocker + f"import sys\nfrom mrope._cli import main\nsys.exit(main({args!r}))\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


def test_the_main_job_runs_with_exactly_the_extra_its_install_names() -> None:
    """The first Quick start command installs what the main job needs: with only that extra the job prints
    its table; with the core alone (the control) it names the extra instead."""
    extras, args = _main_job()
    done = _run_main_job(blocker_code(extras), args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "delta -1928" in done.stdout and "decode token i (i >= 1992)" in done.stdout
    bare = _run_main_job(blocker_code(()), args)
    assert bare.returncode != 0 and 'pip install "mrope[cli]"' in bare.stderr


def test_with_a_browser_it_installs_and_tests(tmp_path: Path) -> None:
    done, calls = run_script(tmp_path, browser=True)
    assert done.returncode == 0, done.stderr
    assert calls == [PIP, newest_pip(tmp_path), PYTEST]


def test_the_newest_transformers_is_installed_once(tmp_path: Path) -> None:
    """With both dist-info folders in place (as pip --target leaves them) nothing is installed again;
    with one missing (the control) the folder is installed again."""
    folder = tmp_path / ".cache" / "mrope" / "transformers-5.25.0"
    (folder / "transformers-5.25.0.dist-info").mkdir(parents=True)
    done, calls = run_script(tmp_path / "one", browser=True, home=tmp_path)
    assert done.returncode == 0 and calls == [PIP, newest_pip(tmp_path), PYTEST], done.stderr
    (folder / "kernels-0.19.1.dist-info").mkdir()
    done, calls = run_script(tmp_path / "two", browser=True, home=tmp_path)
    assert done.returncode == 0 and calls == [PIP, PYTEST], done.stderr


def test_it_exits_with_pytests_status(tmp_path: Path) -> None:
    done, calls = run_script(tmp_path, browser=True, pytest_rc=5)
    assert done.returncode == 5 and calls[-1] == PYTEST


@pytest.mark.parametrize("uid, sudo", [(0, False), (1000, True)])
def test_without_a_browser_it_installs_one(tmp_path: Path, uid: int, sudo: bool) -> None:
    done, calls = run_script(tmp_path, browser=False, uid=uid, sudo=sudo)
    assert done.returncode == 0, done.stderr
    install = "apt-get install -y -q chromium chromium-driver"
    as_root = (
        ["sudo apt-get update -q", "apt-get update -q", f"sudo env DEBIAN_FRONTEND=noninteractive {install}"]
        if sudo
        else ["apt-get update -q"]
    )
    assert calls == [*as_root, install, PIP, newest_pip(tmp_path), PYTEST]


@pytest.mark.parametrize(
    "uid, apt, why", [(1000, True, "not root, and no sudo"), (0, False, "this system has no apt-get")]
)
def test_when_it_cannot_install_it_names_the_packages(tmp_path: Path, uid: int, apt: bool, why: str) -> None:
    done, calls = run_script(tmp_path, browser=False, uid=uid, apt=apt)
    assert done.returncode == 1
    assert "chromium chromium-driver" in done.stderr and why in done.stderr
    assert calls == [], "nothing is installed and no test runs"


def test_without_python_it_stops_before_installing_anything(tmp_path: Path) -> None:
    done, calls = run_script(tmp_path, browser=False, python=False)
    assert done.returncode == 1 and "no python on PATH" in done.stderr and "venv" in done.stderr
    assert calls == []
