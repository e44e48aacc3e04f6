#!/usr/bin/env bash
# The test command: installs everything on a fresh Debian 12 machine (as root), then runs the whole suite
# (unit, integration on a real Slurm bed, PostgreSQL, moto, torchrun). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
images_pid=
if [ "${BURSTD_TEST_INSTALL:-1}" != 0 ]; then  # 0: the parts are already installed (a rerun, a measurement)
    bash scripts/install-deps.sh
    bash scripts/setup-venv.sh
    # The bed's node images (22.05, and the 24.11 one the parity gate must refuse), built once per machine into
    # the image cache: in the background, since a build mostly waits on the Debian mirror; a test that needs an
    # image before its build is done waits on the cache's lock for that same build (burstd/image/cache.py).
    mkdir -p /var/lib/burstd-testbed
    bash scripts/build-bed-images.sh > /var/lib/burstd-testbed/build-bed-images.log 2>&1 &
    images_pid=$!
fi
# Every Python process the suite starts (about 1,500: daemons and their restarts, hooks, agents, burstctl,
# torchrun ranks) loads burstd from cached bytecode, and each pytest worker its assertion-rewritten test modules
# from pytest's cache. A caller's PYTHONDONTWRITEBYTECODE (this machine sets it) made each process compile them
# again: about 0.5 CPU-s a daemon start and 10 s a worker's collection (docs/testbed.md, round four).
unset PYTHONDONTWRITEBYTECODE
.venv/bin/python -m compileall -q -j 0 burstd tests bench > /dev/null
# pytest rewrites each test module's asserts and caches the result beside it (tests/**/__pycache__/*-pytest-*.pyc).
# On a fresh clone the workers below start together, and each would rewrite all 250 files itself: 10 CPU-s a worker.
# Two collections over half the files each write the cache first: 22 CPU-s, 13 s on two cores
# (docs/testbed.md, round twelve). What they print is ignored: the run itself reports any collection error.
if [ "$#" -eq 0 ]; then
    mapfile -t test_files < <(find tests -name 'test_*.py' -not -path '*/__pycache__/*' | sort)
    half_a=() half_b=()
    for i in "${!test_files[@]}"; do
        if (( i % 2 )); then half_a+=("${test_files[$i]}"); else half_b+=("${test_files[$i]}"); fi
    done
    .venv/bin/python -m pytest -q --collect-only -p no:cacheprovider "${half_a[@]}" > /dev/null 2>&1 &
    .venv/bin/python -m pytest -q --collect-only -p no:cacheprovider "${half_b[@]}" > /dev/null 2>&1 || true
    wait $! || true
fi
set +e
# The suite mostly waits on Slurm's timers, boots and daemon cycles (docs/testbed.md, "The suite's time"), so it
# runs more pytest-xdist workers than cores, a whole test file to a worker, each worker with a Slurm bed of its
# own (tests/bed.py: worker K on slot BURSTD_BED_SLOT + K). BURSTD_TEST_WORKERS=0: serial.
# --no-loadscope-reorder: xdist otherwise hands out the files with the most tests first, so a long file of few
# tests (the crash storm: one test, 15 minutes under load) starts last and one worker finishes alone on it;
# without the reorder they go out in the order tests/conftest.py collects them: the ranked live files longest
# first, then the rest in collection order (`longest_first`, LONGEST_FIRST).
# The release subsets below keep xdist's order: five files, and the adapter's power-up test expects a node reason
# that a 24.11 bed under load had extended ("Not responding") when that file ran last.
XDIST=(--dist loadfile --no-loadscope-reorder)
# Everything was installed above, so a skipped test means an install step went wrong: fail on it (tests/conftest.py).
export BURSTD_TEST_NO_SKIPS="${BURSTD_TEST_NO_SKIPS:-1}"
WORKERS="${BURSTD_TEST_WORKERS:-6}"
SLOT="${BURSTD_BED_SLOT:-0}"
NAME="${BURSTD_BED_NAME:-burstd}"
# The core live subset again on the Slurm that sites run today, 24.11 and 26.05 (BURSTD_TEST_RELEASES; empty:
# none): burst loop, gang launch, spot reclaim and requeue, budgets against slurmdbd (refusal, sacct
# reconciliation) and the adapter on every job shape, each on a bed whose Slurm runs from a Debian chroot.
# The chroots are built on first use (debootstrap, about a minute each) and kept under
# /var/lib/burstd-testbed/chroots for every later bed and run. On a whole-suite run (no pytest arguments), or
# when BURSTD_TEST_RELEASES is set (`BURSTD_TEST_RELEASES=24.11 bash scripts/test.sh tests/unit/slurm`).
# Each release runs beside the main run (not after it), on beds of its own: the slots after the main workers'
# (the main run's tests add +71 and +93 to their worker's slot for extra beds; the subset's tests add nothing).
# The adapter runs on every release; the four stories are dealt out across the releases run, in turn (issue 20:
# each story once more on a current Slurm, not once per release; all of them run on 22.05 in the main run), so
# with 24.11 and 26.05: budgets and spot reclaim on 24.11, gang launch and the burst loop on 26.05. A single
# release (BURSTD_TEST_RELEASES=24.11) gets all four.
RELEASE_ADAPTER=tests/integration/test_slurm_adapter.py
RELEASE_STORIES=(tests/integration/test_budget_bed.py tests/integration/test_gang_launch.py
                 tests/integration/test_spot_reclaim_requeue.py tests/integration/test_burst_loop.py)
RELEASE_WORKERS="${BURSTD_TEST_RELEASE_WORKERS:-2}"
LOGS="$(mktemp -d /tmp/burstd-test.XXXXXX)"
release_pids=()
release_names=()
trap '[ "${#release_pids[@]}" -eq 0 ] || kill "${release_pids[@]}" 2>/dev/null' INT TERM
if [ "$#" -eq 0 ] || [ -n "${BURSTD_TEST_RELEASES+set}" ]; then
    next=$((SLOT + (WORKERS > 0 ? WORKERS : 1)))
    releases=(${BURSTD_TEST_RELEASES-24.11 26.05})
    for r in "${!releases[@]}"; do
        release="${releases[$r]}"
        subset=("$RELEASE_ADAPTER")
        for s in "${!RELEASE_STORIES[@]}"; do
            if [ $((s % ${#releases[@]})) -eq "$r" ]; then subset+=("${RELEASE_STORIES[$s]}"); fi
        done
        echo "scripts/test.sh: the core live subset on Slurm $release, beside the main run: ${subset[*]#tests/integration/} (log: $LOGS/$release.log)"
        # the bed name's first 8 characters differ per release: tests/bed.py names worker K's bed <name[:8]>-wK
        BURSTD_BED_SLURM_RELEASE="$release" BURSTD_BED_NAME="r${release/./}-${NAME:0:6}" BURSTD_BED_SLOT="$next" \
            .venv/bin/python -m pytest -n "$RELEASE_WORKERS" --dist loadfile "${subset[@]}" \
            >"$LOGS/$release.log" 2>&1 &
        release_pids+=($!)
        release_names+=("$release")
        next=$((next + (RELEASE_WORKERS > 0 ? RELEASE_WORKERS : 1)))
    done
fi
# --durations: every run (CI included) prints its slowest tests, the first thing to read when the suite grows
.venv/bin/python -m pytest -n "$WORKERS" "${XDIST[@]}" --durations=40 "$@"
rc=$?
for i in "${!release_pids[@]}"; do
    wait "${release_pids[$i]}"
    release_rc=$?
    echo "scripts/test.sh: the core live subset on Slurm ${release_names[$i]} (exit $release_rc):"
    cat "$LOGS/${release_names[$i]}.log"
    # pytest exits 5 when a selection collected no test; a failure of the selection, not success
    [ "$release_rc" -eq 0 ] || rc=1
done
if [ -n "$images_pid" ] && ! wait "$images_pid"; then
    echo "scripts/test.sh: building the bed's images failed; see /var/lib/burstd-testbed/build-bed-images.log" >&2
    rc=1
fi
set -e
exit $rc
