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
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[aws,gcp,train,postgres,plot,bound,test]"
    touch "$stamp"
fi
