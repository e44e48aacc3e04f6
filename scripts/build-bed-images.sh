#!/usr/bin/env bash
# Build the test bed's node images once per machine, into the image cache (/var/lib/burstd-testbed/images, keyed
# by the spec's digest: a second run builds nothing). Run as root after scripts/install-deps.sh and
# scripts/setup-venv.sh: the bed's cloud VMs boot from them (`burstctl testbed up --cloud-image default`), and the
# 24.11 image is the one the parity gate must refuse against the host's 22.05 (tests/integration/test_*image*).
# Each takes minutes the first time (debootstrap, Slurm, munge, a job environment; no torch).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
for release in ${BURSTD_BED_IMAGE_RELEASES:-22.05 24.11}; do
    echo "build-bed-images.sh: Slurm $release"
    "$PY" -m burstd.cli.app testbed image --slurm-release "$release"
done
