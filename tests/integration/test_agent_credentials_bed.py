"""Issue 9 item 2 on the bed: a cloud node talks to the daemon over TLS with a credential of its own.

The story: burstd runs with its TCP listener on the bed's bridge (TLS, a CA the test makes); a job bursts onto
a namespace VM; the admin issues that node's agent token. From inside the VM, as root (where a compromised
node's attacker would be), the token reports a notice for its own node over https and is refused everything
else: another node's notice, pausing, budgets, reads, the schema. Once the node's lease is over the same token
is dead (401). The admin token never leaves the head node.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys

import pytest

from burstd.testbed.procs import free_port
from tests.bed import TEST_USER
from tests.fakes.tls import make_tls

pytestmark = [pytest.mark.bed, pytest.mark.slow]

PROBE = r'''
import json, sys, httpx
url, ca, token, node, other = sys.argv[1:6]
c = httpx.Client(base_url=url, verify=ca, headers={"Authorization": "Bearer " + token}, timeout=10, trust_env=False)
out = {
    "other_notice": c.post("/v1/notices", json={"node": other, "kind": "rebalance"}).status_code,
    "pause": c.post("/v1/pause").status_code,
    "budget": c.put("/v1/budgets/chem", json={"usd": 0}).status_code,
    "status": c.get("/v1/status").status_code,
    "schema": c.get("/openapi.json").status_code,
    "own_notice": c.post("/v1/notices", json={"node": node, "kind": "rebalance"}).status_code,
}
print(json.dumps(out))
'''


def test_a_node_reports_over_tls_with_its_own_token_and_can_do_nothing_else(slurm_bed, tmp_path):
    from burstd.daemon.client import ApiClient
    from tests.integration.daemon_bed import bed_daemon_config, leases, running_daemon, world_readable_dir

    bed = slurm_bed
    head = str(next(ipaddress.ip_network(bed.config.subnet).hosts()))
    d = world_readable_dir("burstd-agentcred-")
    tls = make_tls(d, ips=(head, "127.0.0.1"))
    admin_token = d / "admin.token"
    admin_token.write_text("admin-only-on-the-head\n")
    admin_token.chmod(0o600)
    url = f"https://{head}:{free_port()}"
    cfg_path = bed_daemon_config(bed, d, api={"tcp_listen": url.removeprefix("https://"),
                                              "token_file": str(admin_token), "tls_cert": str(tls.cert),
                                              "tls_key": str(tls.key)})
    try:
        with running_daemon(bed, cfg_path, d / "burstd.log"):
            job = bed.sbatch(["-p", bed.cloud_partition, "-o", "/dev/null", "-t", "5"], "#!/bin/sh\nsleep 120\n",
                             user=TEST_USER)

            def ready():
                return next((x for x in leases(cfg_path) if x["state"] == "READY"), None)

            lease = bed.wait_for(ready, 180, "a cloud node to be READY")
            node = lease["node_name"]
            other = next(n for n in bed.cloud_nodes if n != node)
            from burstd.config import load_config

            with ApiClient(load_config(cfg_path).api.socket) as api:
                token = api.post(f"/v1/nodes/{node}/agent-token")["token"]
            assert token.startswith("burstd-agent.v1.") and "admin-only" not in token

            def probe(tok: str) -> dict:
                r = subprocess.run(["nsenter", f"--net=/run/netns/{bed.netns_prefix}{node}", sys.executable, "-c",
                                    PROBE, url, str(tls.ca), tok, node, other],
                                   capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
                return json.loads(r.stdout)

            seen = probe(token)
            assert seen == {"other_notice": 403, "pause": 403, "budget": 403, "status": 403, "schema": 403,
                            "own_notice": 202}, seen

            bed.run(["scancel", str(job)], check=False)
            bed.wait_for(lambda: all(x["state"] in ("TERMINATED", "FAILED", "REFUSED") for x in leases(cfg_path)
                                     if x["lease_id"] == lease["lease_id"]), 240, "the node's lease to end")
            after = subprocess.run([sys.executable, "-c", PROBE, url, str(tls.ca), token, node, other],
                                   capture_output=True, text=True, timeout=60)
            assert json.loads(after.stdout)["own_notice"] == 401, after.stdout  # revoked with its lease
    finally:
        shutil.rmtree(d, ignore_errors=True)
