#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv with every extra the tests use.
# torch is pinned first: 2.13.0 is the CPU build this machine image carries on local disk; an unpinned
# torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's own python3 (PGO and LTO, a static interpreter) unless PYTHON names another. A python3 that comes first
# on root's PATH is often a pyenv build without those (CI's machine has one): every process of the suite ran on
# it, and the suite's CPU is 90% Python; Debian's runs the unit tests on 14% less CPU (docs/testbed.md, round
# nine). A venv already there is kept, whichever interpreter made it.
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null; then
    PY=/usr/bin/python3
else
    PY=${PYTHON:-python3}
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.burstd-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    # --no-compile, then one compileall on every core: pip byte-compiles each package it installs on one core,
    # about half of this step's wall time (torch alone: 31 s, 9 s without). The bytecode must be there before
    # the first import: the bed's job user runs torch from this venv and cannot write its __pycache__.
    .venv/bin/python -m pip install -q --no-compile "torch==2.13.0"
    .venv/bin/python -m pip install -q --no-compile -e ".[aws,gcp,train,postgres,plot,bound,test]"
    # some packages ship sources meant for other Pythons, which do not compile (pip skips them the same way)
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" \
        > /dev/null || true
    touch "$stamp"
fi
