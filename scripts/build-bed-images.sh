#!/usr/bin/env bash
# Build the test bed's node images once per machine, into the image cache (/var/lib/burstd-testbed/images, a base
# keyed by the spec, the recipe and burstd's requirements, and a burstd layer keyed by burstd's source: a second
# run builds nothing, and one after an edit to burstd only the layer, in seconds; burstd/image/cache.py). Run as root after scripts/install-deps.sh
# and scripts/setup-venv.sh: the bed's cloud VMs boot from them (`burstctl testbed up --cloud-image default`, the
# demo), and the 24.11 image is the one the parity gate must refuse against the host's 22.05
# (tests/integration/test_image_vm_bed.py, test_cloud_image_bed.py). The releases build side by side (each mostly
# waits on the Debian mirror and PyPI); a first build takes minutes (debootstrap, Slurm, munge, a job
# environment; no torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
pids=()
for release in ${BURSTD_BED_IMAGE_RELEASES:-22.05 24.11}; do
    echo "build-bed-images.sh: Slurm $release"
    "$PY" -m burstd.cli.app testbed image --slurm-release "$release" &
    pids+=("$!")
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
exit $rc
