#!/usr/bin/env bash
# The main job on the embedded default: a local Slurm cluster whose "cloud" is network namespaces,
# SQLite, and burstd bursting an overloaded queue. Installs everything first (as root, fresh Debian 12).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/setup-venv.sh
exec .venv/bin/burstctl demo "$@"
