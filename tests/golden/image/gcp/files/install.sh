#!/bin/bash
# burstd node image for Slurm 22.05 (Debian bookworm), provider gcp.
# Rendered by `burstctl image build` from the image spec; run as root on the image being built:
#   bash install.sh STAGE   (STAGE holds node-bootstrap.sh, burstd-agent.service and the burstd wheel)
# Holds no secret: each node fetches the munge key at boot, with its own identity (node-bootstrap.sh).
set -euo pipefail
STAGE="${1:-$(dirname "$0")}"
export DEBIAN_FRONTEND=noninteractive LANG=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
step() { echo "burstd-image: $*" >&2; }
trap 'echo "burstd-image: FAILED at line $LINENO (exit $?)" >&2' ERR

step "no service may start while the image is built"
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
chmod 0755 /usr/sbin/policy-rc.d

step "Debian packages: Slurm 22.05 (bookworm), munge, Python, the site's additions"
apt-get -q -o Acquire::Check-Valid-Until=false update
apt-get -q -o Acquire::Check-Valid-Until=false install -y --no-install-recommends slurmd slurm-client slurm-wlm-basic-plugins slurm-wlm-jwt-plugin munge libpmix2 python3 python3-venv curl ca-certificates nftables procps util-linux libopenmpi3 lmod
release="$(slurmd -V)"
case "$release" in "slurm 22.05."* | "slurm-wlm 22.05."*) ;;
    *) step "expected Slurm 22.05, the packages gave: $release"; exit 1 ;;
esac

step "the job environment: /opt/burstd/jobenv"
python3 -m venv /opt/burstd/jobenv
/opt/burstd/jobenv/bin/pip install -q --no-cache-dir numpy==1.26.4 'fsspec>=2024.2'
/opt/burstd/jobenv/bin/pip install -q --no-cache-dir --index-url https://download.pytorch.org/whl/cpu torch==2.5.1

step "burstd.train in the job environment (the sbatch templates checkpoint and resume with it)"
/opt/burstd/jobenv/bin/pip install -q --no-cache-dir --no-deps "$STAGE"/burstd-*.whl

step "burstd-agent (its own venv: it must not change the jobs' packages)"
python3 -m venv /opt/burstd/agent
wheel=$(ls "$STAGE"/burstd-*.whl) && /opt/burstd/agent/bin/pip install -q --no-cache-dir "$wheel[aws]"
ln -sf /opt/burstd/agent/bin/burstd-agent /usr/bin/burstd-agent
install -D -m 0644 "$STAGE/burstd-agent.service" /etc/systemd/system/burstd-agent.service
install -D -m 0755 "$STAGE/node-bootstrap.sh" /usr/lib/burstd/node-bootstrap.sh
# slurmd starts from node-bootstrap.sh only (after the key, and the parity gate), never at boot by itself
rm -f /etc/systemd/system/multi-user.target.wants/slurmd.service

step "the site's own steps"
ldconfig
sh -c 'echo site > /etc/site-image'

step "no cluster secret in the image: munge's package made a key; each node gets the cluster's at boot"
rm -f /etc/munge/munge.key /usr/sbin/policy-rc.d
apt-get -q -o Acquire::Check-Valid-Until=false clean
printf '%s\n' '{"provider": "gcp", "slurm_release": "22.05", "spec_digest": "edfec83bf411a185", "suite": "bookworm"}' >/etc/burstd-image
step "done: Slurm $release, job environment /opt/burstd/jobenv"
