"""The bed's stand-in for a cloud node's first boot, for the data path of an image bed (``bed_data``): what a
site's cloud-init puts on a node before slurmd starts, here into each VM's ``/run/burstd-boot``.

    boot = NodeBootstrap(daemon_config, files, ca_file)
    boot.start()   # a thread, while the daemon runs
    ...; boot.close()

For each VM the daemon's local provider boots (``<state_dir>/local/<pool>/<netns>.vm``), once its boot folder is
there: the daemon's CA, the data Prolog/Epilog and their environment, and the node's own agent token where the VM
did not bring one (the local provider hands it in at boot; otherwise minted by the daemon for the node's open
lease, ``POST /v1/nodes/NODE/agent-token`` over the control socket: a token only the daemon can make, good for
that node and lease only). The pool's ``boot_delay_s`` is the
time it has before slurmd starts (and with it the first job's Prolog). The wrappers' log is read back as it grows,
so it outlives the VM.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from burstd.config import LocalPoolConfig
from burstd.providers.local.vmroot import AGENT_TOKEN as TOKEN
from burstd.testbed.bed_data import HOOK_LOG

CA = "ca.pem"


class NodeBootstrap(threading.Thread):
    def __init__(self, config, files: dict[str, str], ca_file: str | os.PathLike, poll_s: float = 0.2):
        super().__init__(daemon=True, name="bed-node-bootstrap")
        pool = config.pools[0]
        self.socket = config.api.socket
        self.vms = Path(config.daemon.state_dir) / "local" / pool.name
        self.prefix = (pool.local or LocalPoolConfig()).netns_prefix
        self.files, self.ca, self.poll_s = files, Path(ca_file), poll_s
        self.provisioned: set[str] = set()
        self.errors: dict[str, str] = {}  # node -> why it is not provisioned yet (retried every poll)
        self.hook_logs: dict[str, str] = {}  # node -> the VM's data hooks' log, as last read
        self._closing = threading.Event()

    def close(self) -> None:
        self._closing.set()
        self.join(timeout=10)

    def run(self) -> None:
        while not self._closing.wait(self.poll_s):
            for boot in self.vms.glob("*.vm/boot"):
                node = boot.parent.name.removesuffix(".vm").removeprefix(self.prefix)
                log = boot / HOOK_LOG
                if log.exists():
                    self.hook_logs[node] = log.read_text(errors="replace")[-20_000:]
                if (boot / "dirs").exists() and not (boot / CA).exists():  # booted, not yet provisioned
                    try:
                        self.provision(boot, node)
                        self.errors.pop(node, None)
                    except Exception as exc:  # noqa: BLE001 - kept for the caller to report
                        self.errors[node] = repr(exc)

    def provision(self, boot: Path, node: str) -> None:
        from burstd.daemon.client import ApiClient

        if not (boot / TOKEN).exists():  # the VM came without one (a provider that does not hand it in)
            with ApiClient(self.socket) as api:
                _write(boot / TOKEN, api.post(f"/v1/nodes/{node}/agent-token")["token"] + "\n", 0o600)
        for name, text in self.files.items():
            _write(boot / name, text, 0o600 if name.endswith(".env") else 0o755)
        _write(boot / CA, self.ca.read_text(), 0o644)  # last: its presence says the node is provisioned
        self.provisioned.add(node)


def _write(path: Path, text: str, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)
