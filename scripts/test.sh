#!/usr/bin/env bash
# The test command: installs everything on a fresh Debian 12 machine (as root), then runs the whole suite
# (unit, integration on a real Slurm bed, PostgreSQL, moto, torchrun). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
# The bed's node images (22.05, and the 24.11 one the parity gate must refuse), built once per machine into the
# image cache: in the background, since a build mostly waits on the Debian mirror; a test that needs an image
# before its build is done waits on the cache's lock for that same build (burstd/image/cache.py).
mkdir -p /var/lib/burstd-testbed
bash scripts/build-bed-images.sh > /var/lib/burstd-testbed/build-bed-images.log 2>&1 &
images_pid=$!
set +e
# Two workers (pytest-xdist), a whole test file to a worker: the bed tests mostly wait on Slurm, so the second
# worker (with a Slurm bed of its own, see tests/bed.py) halves the wall time. BURSTD_TEST_WORKERS=0: serial.
# Everything was installed above, so a skipped test means an install step went wrong: fail on it (tests/conftest.py).
export BURSTD_TEST_NO_SKIPS="${BURSTD_TEST_NO_SKIPS:-1}"
.venv/bin/python -m pytest -n "${BURSTD_TEST_WORKERS:-2}" --dist loadfile "$@"
rc=$?
# The core live subset again on the Slurm that sites run today, 24.11 and 26.05 (BURSTD_TEST_RELEASES; empty:
# none): burst loop, gang launch, spot reclaim and requeue, budgets against slurmdbd (refusal, sacct
# reconciliation) and the adapter on every job shape, each on a bed whose Slurm runs from a Debian chroot.
# The chroots are built on first use (debootstrap, about a minute each) and kept under
# /var/lib/burstd-testbed/chroots for every later bed and run. About 8 minutes a release with two workers on
# the 2-core lab machine. Only on a whole-suite run (no pytest arguments).
RELEASE_SUBSET=(tests/integration/test_burst_loop.py tests/integration/test_gang_launch.py
                tests/integration/test_spot_reclaim_requeue.py tests/integration/test_budget_bed.py
                tests/integration/test_slurm_adapter.py)
if [ "$#" -eq 0 ]; then
    for release in ${BURSTD_TEST_RELEASES-24.11 26.05}; do
        echo "scripts/test.sh: the core live subset on Slurm $release"
        BURSTD_BED_SLURM_RELEASE="$release" .venv/bin/python -m pytest -n "${BURSTD_TEST_WORKERS:-2}" \
            --dist loadfile "${RELEASE_SUBSET[@]}" || rc=1
    done
fi
if ! wait "$images_pid"; then
    echo "scripts/test.sh: building the bed's images failed; see /var/lib/burstd-testbed/build-bed-images.log" >&2
    rc=1
fi
set -e
# pytest exits 5 when a selection collected no test; treat that as a failure of the selection, not success.
exit $rc
