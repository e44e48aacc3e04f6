#!/usr/bin/env bash
# The test command: installs everything on a fresh Debian 12 machine (as root), then runs the whole suite
# (unit, integration on a real Slurm bed, PostgreSQL, moto, torchrun). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
set +e
# Two workers (pytest-xdist), a whole test file to a worker: the bed tests mostly wait on Slurm, so the second
# worker (with a Slurm bed of its own, see tests/bed.py) halves the wall time. BURSTD_TEST_WORKERS=0: serial.
# Everything was installed above, so a skipped test means an install step went wrong: fail on it (tests/conftest.py).
export BURSTD_TEST_NO_SKIPS="${BURSTD_TEST_NO_SKIPS:-1}"
.venv/bin/python -m pytest -n "${BURSTD_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
set -e
# pytest exits 5 when a selection collected no test; treat that as a failure of the selection, not success.
exit $rc
