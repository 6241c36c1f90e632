#!/usr/bin/env bash
# The project's test command (README Quick start; .ci/run runs exactly this): bring what the tests need,
# then run them. Arguments go to pytest (`bash scripts/test.sh tests/cli/test_cli.py` runs one file).
#
# 1. System packages pip cannot install: a headless Chromium and its driver for the inspection page's
#    browser test (tests/service/test_service_page.py). Installed with apt-get (sudo when not root) when missing.
# 2. The package with its dev extra. torch is pinned to the CPU build a machine may already hold, so that
#    pip does not download a CUDA build; the package itself asks for torch>=2.4.
# 3. transformers' newest release beside the pinned one, for tests/models/test_transformers_newest.py (the
#    family checks once more against it, in a subprocess): NEWEST_TRANSFORMERS with --no-deps into a folder of
#    its own (kernels: a dependency of the newest release that the pinned one does not bring), once per
#    release; MROPE_TRANSFORMERS_NEWEST names the folder (set it to use another).
# 4. pytest on two workers (pytest-xdist, one test file per worker at a time: module fixtures such as a
#    server process stay within one worker); the script exits with pytest's status (5 when it collected
#    nothing, which fails CI too).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

SYSTEM_PACKAGES=(chromium chromium-driver) # Debian / Ubuntu names

has_browser() {
  { command -v chromium || command -v chromium-browser; } >/dev/null && command -v chromedriver >/dev/null
}

cannot_install() {
  echo "scripts/test.sh: the tests need a headless Chromium and chromedriver (tests/service/test_service_page.py)," >&2
  echo "  and $1. Install the packages ${SYSTEM_PACKAGES[*]} (Debian / Ubuntu names;" >&2
  echo "  elsewhere your system's Chromium and chromedriver), then run this command again." >&2
  exit 1
}

if ! command -v python >/dev/null; then # checked first, so nothing is installed for a run that cannot start
  echo "scripts/test.sh: no python on PATH; make and activate a virtual environment first" >&2
  echo "  (python3 -m venv .venv && . .venv/bin/activate), then run this command again." >&2
  exit 1
fi

if ! has_browser; then
  command -v apt-get >/dev/null || cannot_install "this system has no apt-get"
  if [ "$(id -u)" = 0 ]; then
    as_root=()
  elif command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    cannot_install "installing them needs root (not root, and no sudo)"
  fi
  echo "scripts/test.sh: installing ${SYSTEM_PACKAGES[*]} with apt-get" >&2
  { "${as_root[@]}" apt-get update -q &&
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${SYSTEM_PACKAGES[@]}"; } ||
    cannot_install "apt-get could not install them"
  has_browser || cannot_install "apt-get installed the packages, but chromium or chromedriver is not on PATH"
fi

python -m pip install -q "torch==2.13.0" -e ".[dev]"

NEWEST_TRANSFORMERS=("transformers==5.25.0" "kernels==0.19.1")
newest="${MROPE_TRANSFORMERS_NEWEST:-${XDG_CACHE_HOME:-$HOME/.cache}/mrope/${NEWEST_TRANSFORMERS[0]/==/-}}"
installed=yes # each requirement's dist-info folder, as pip --target leaves it (no tools beyond bash)
for requirement in "${NEWEST_TRANSFORMERS[@]}"; do
  [ -d "$newest/${requirement/==/-}.dist-info" ] || installed=no
done
if [ "$installed" = no ]; then
  python -m pip install -q --no-deps --target "$newest" "${NEWEST_TRANSFORMERS[@]}"
fi
export MROPE_TRANSFORMERS_NEWEST="$newest"
python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder "$@"
