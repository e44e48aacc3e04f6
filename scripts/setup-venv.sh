#!/usr/bin/env bash
# Create (or refresh) the project's virtual environment in .venv with every extra the tests use.
# torch is pinned first: 2.13.0 is the CPU build this machine image carries on local disk; an unpinned
# torch would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.burstd-deps
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q "torch==2.13.0"
    .venv/bin/python -m pip install -q -e ".[aws,gcp,train,postgres,plot,bound,test]"
    touch "$stamp"
fi
