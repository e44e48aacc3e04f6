#!/usr/bin/env bash
# Install every system package burstd's tests, bed and demo need, on Debian 12, as root. Idempotent: a second
# run installs nothing and changes nothing.
#   Slurm 22.05 (slurmctld, slurmd, slurmdbd, client, slurmrestd, JWT auth plugin, libslurm), munge, MariaDB
#   (each bed's slurmdbd stores into a MariaDB of its own), debootstrap (the 24.11 / 26.05 beds run Slurm from
#   Debian trixie / sid chroots the bed builds on first use), PMIx (silences a slurmd error),
#   iproute2/util-linux (network namespaces, nsenter, unshare), nftables (a VM's metadata endpoint closed to
#   non-root users), psmisc/procps, PostgreSQL 15, python3 + venv for scripts/setup-venv.sh; Prometheus
#   (promtool checks monitoring/'s rules; a real server scrapes the daemon in the metrics test); systemd
#   (systemd-analyze verifies the units); plus the users the test bed uses.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "install-deps.sh: must run as root (apt-get, useradd)" >&2
    exit 1
fi

PACKAGES=(
    slurmctld slurmd slurmdbd slurm-client slurmrestd libslurm-dev slurm-wlm-basic-plugins slurm-wlm-jwt-plugin
    munge libpmix2
    mariadb-server mariadb-client debootstrap
    iproute2 util-linux psmisc procps
    nftables
    postgresql
    prometheus systemd
    python3 python3-venv python3-dev
    ca-certificates curl
)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q '^install ok installed$'; then
        missing+=("$pkg")
    fi
done

if [ "${#missing[@]}" -gt 0 ]; then
    # Without systemd, package scripts try to start services (munge, slurmctld, postgresql): forbid that
    # while installing. Only a guard we created ourselves is removed afterwards.
    guard_created=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        guard_created=1
    fi
    trap '[ "$guard_created" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
    export DEBIAN_FRONTEND=noninteractive
    echo "install-deps.sh: installing ${missing[*]}"
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# munge's postinst normally creates the key; make sure it exists with the right owner and mode.
if [ ! -s /etc/munge/munge.key ]; then
    mungekey -c -k /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key

# slurmrestd refuses to run as root: it runs as this unprivileged user.
if ! getent passwd slurmrest >/dev/null; then
    useradd --system --no-create-home --shell /usr/sbin/nologin slurmrest
fi
# A normal user that submits jobs in the tests, and a second uid for permission tests.
for user in burstuser burstuser2; do
    if ! getent passwd "$user" >/dev/null; then
        useradd --create-home --shell /bin/bash "$user"
    fi
done

echo "install-deps.sh: ok"
