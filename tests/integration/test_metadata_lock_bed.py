"""Issue 9 item 3 on the bed: a job running as an ordinary user on a cloud node cannot reach the node's
metadata endpoint (where the munge key's secret and the node identity are a call away), while root there
(the bootstrap, burstd-agent) can.

The story: burstd (local provider, agents in the VMs) bursts a plain `sbatch -p cloud` job from the bed's
user; the job tries the node's 169.254.169.254 metadata endpoint and writes down what happened; root in the
same VM then asks the same endpoint for an IMDSv2 token and gets one.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.bed import TEST_USER

pytestmark = [pytest.mark.bed, pytest.mark.slow]

PROBE = r'''#!/bin/sh
#SBATCH --time=2
python3 - <<'EOF' > "$1"
import json, socket, urllib.request, os
out = {"uid": os.getuid(), "host": socket.gethostname()}
try:
    req = urllib.request.Request("http://169.254.169.254:%s/latest/api/token", method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    out["token"] = urllib.request.urlopen(req, timeout=5).read().decode()[:8]
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
EOF
'''

ROOT_PROBE = (
    "import urllib.request\n"
    "req = urllib.request.Request('http://169.254.169.254:{port}/latest/api/token', method='PUT',"
    " headers={{'X-aws-ec2-metadata-token-ttl-seconds': '60'}})\n"
    "print(urllib.request.urlopen(req, timeout=5).read().decode())\n"
)


@pytest.fixture(scope="module")
def burst_cluster(slurm_bed):
    from burstd.config import load_config
    from tests.integration.daemon_bed import bed_daemon_config, running_daemon, world_readable_dir

    d = world_readable_dir("burstd-mdlock-")
    cfg_path = bed_daemon_config(slurm_bed, d, agent={"poll_interval_s": 1.0})
    cfg = load_config(cfg_path)
    with running_daemon(slurm_bed, cfg_path, d / "burstd.log"):
        yield slurm_bed, cfg
    shutil.rmtree(d, ignore_errors=True)


def test_a_job_cannot_reach_the_metadata_endpoint_but_root_on_the_node_can(burst_cluster):
    bed, cfg = burst_cluster
    port = cfg.pools[0].local.metadata_port if cfg.pools[0].local else 1338
    out = bed.workdir(TEST_USER) / "metadata-probe.json"
    out.unlink(missing_ok=True)
    _submit_probe(bed, port, out)
    bed.wait_for(lambda: out.exists() and out.read_text().strip(), 240, "the probe job to run on a cloud node")
    seen = json.loads(out.read_text())
    assert seen["uid"] != 0 and seen["host"].startswith(tuple(bed.cloud_nodes)), seen
    assert "token" not in seen and "error" in seen, seen  # refused: reset by the node's netfilter owner match

    netns = f"{bed.netns_prefix}{seen['host']}"
    agents = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    assert agents, f"{netns} has no processes (the VM went away too early?)"
    root = subprocess.run(["nsenter", f"--net=/run/netns/{netns}", sys.executable, "-c", ROOT_PROBE.format(port=port)],
                          capture_output=True, text=True, timeout=30)
    assert root.returncode == 0 and root.stdout.strip(), root.stderr  # root (the agent's uid) gets a token
    agent_uids = {_uid_of(pid) for pid in agents if "burstd.agent" in _cmdline(pid)}
    assert agent_uids == {0}, agent_uids


def _submit_probe(bed, port: int, out) -> int:
    script = bed.workdir(TEST_USER) / "probe.sh"
    script.write_text(PROBE % port)
    shutil.chown(script, TEST_USER, TEST_USER)
    return bed.sbatch(["-p", bed.cloud_partition, "-o", "/dev/null", "-J", "mdprobe"],
                      f"#!/bin/sh\nsh {script} {out}\n", user=TEST_USER)


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _uid_of(pid: str) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith("Uid:")))
