"""The bed's stand-in for a cloud node's first boot (burstd/testbed/node_bootstrap.py), against the daemon's real
API: a booted VM's boot folder gets the node's own agent token (minted for its open lease), the CA and the data
hooks; a VM whose node holds no lease gets nothing; the hooks' log is read back."""

from __future__ import annotations

import time

from pathlib import Path

from burstd.config import LocalPoolConfig
from burstd.daemon.client import post_unix_json
from burstd.testbed.node_bootstrap import NodeBootstrap
from tests.unit.daemon.test_api_auth import POOL, serving


def _boot(cfg, node: str):
    boot = Path(cfg.daemon.state_dir) / "local" / "local" / f"{LocalPoolConfig().netns_prefix}{node}.vm" / "boot"
    boot.mkdir(parents=True)
    (boot / "dirs").write_text("/var/spool\n")  # what the VM's boot writes once its root is mounted
    return boot


def test_a_booted_vm_gets_its_nodes_token_the_ca_and_the_hooks(tmp_path):
    with serving(tmp_path, {"pools": [POOL]}) as served:
        cfg = served.config.model_copy(update={"daemon": served.config.daemon.model_copy(
            update={"state_dir": str(tmp_path / "state")})})
        post_unix_json(cfg.api.socket, "/v1/hooks/resume", {"hostlist": "cloud1", "jobs": []})
        held, stray, brought = _boot(cfg, "cloud1"), _boot(cfg, "cloud3"), _boot(cfg, "cloud2")
        (brought / "agent.token").write_text("handed in by the provider at boot\n")
        (held / "data-hooks.log").write_text("prolog job 4\n")
        ca = tmp_path / "ca.pem"
        ca.write_text("CA\n")
        boot = NodeBootstrap(cfg, {"burstd-prolog": "#!/bin/sh\n", "agent.env": "K=v\n"}, ca, poll_s=0.05)
        boot.start()
        try:
            deadline = time.monotonic() + 20
            while not {"cloud1", "cloud2"} <= boot.provisioned or not boot.errors:
                assert time.monotonic() < deadline, (boot.provisioned, boot.errors)
                time.sleep(0.05)
        finally:
            boot.close()
        token = (held / "agent.token").read_text().strip()
        assert token.startswith("burstd-agent.v1.") and token.split(".")[3] == "cloud1"
        assert (held / "agent.token").stat().st_mode & 0o777 == 0o600
        assert (held / "agent.env").stat().st_mode & 0o777 == 0o600
        assert (held / "burstd-prolog").stat().st_mode & 0o777 == 0o755 and (held / "ca.pem").read_text() == "CA\n"
        assert boot.hook_logs["cloud1"] == "prolog job 4\n"
        assert not (stray / "agent.token").exists()  # no lease: no token
        # a VM that came with its token (the local provider's image VMs) keeps it and gets the rest
        assert (brought / "agent.token").read_text() == "handed in by the provider at boot\n"
        assert (brought / "ca.pem").read_text() == "CA\n" and (brought / "burstd-prolog").exists()
        assert "cloud3" in boot.errors and "cloud1" not in boot.errors
