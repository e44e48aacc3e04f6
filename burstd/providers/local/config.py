"""A local pool's own settings, ``[pools.local]`` (VMs that are network namespaces on this host): the provider's
part of the config, beside the provider. The pool (``burstd.config.LocalPool``) holds it; the provider
(``provider.py``) reads it."""

from __future__ import annotations

import ipaddress
from typing import Annotated

from pydantic import Field, field_validator

from burstd.config_types import Seconds, _Section


class LocalPoolConfig(_Section):
    subnet: str = "10.77.0.0/24"
    # an existing Linux bridge (IFNAMSIZ: 15 characters); never the loopback
    bridge: str = Field(default="br-slurm", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
    first_host: int = Field(default=101, ge=2, le=254)
    netns_prefix: str = "sl-"
    boot_delay_s: Seconds = 0.0
    conf_server: str | None = None  # "10.77.0.1:6817"; None = from the test bed
    # random spot reclaims per VM-hour, for chaos testing
    preempt_rate_per_hour: Annotated[float, Field(ge=0, le=360_000, allow_inf_nan=False)] = 0.0
    notice_s: Seconds = 120.0  # preemption notice lead time
    metadata_port: int = Field(default=1338, ge=1, le=65535)
    vm_agent: bool = True  # each VM runs its metadata endpoint and burstd-agent (preemption notices)
    capacity: int | None = Field(default=None, ge=0, le=100_000)  # live VMs at most; None = max_nodes, else node_count
    slurmd_path: str = "/usr/sbin/slurmd"
    records_dir: str | None = None  # VM records; None = <daemon.state_dir>/local/<pool name>
    # boot each VM from a node image (`burstctl image build --provider local --out DIR`: DIR/rootfs) in its own
    # mount namespace, seeing none of the head's files (providers/local/vmroot.py); None: share the head's
    image_rootfs: str | None = None
    munge_key_file: str = "/etc/munge/munge.key"  # the cluster key an image VM gets at each boot
    vm_users: list[str] = []  # job users whose passwd/group lines an image VM gets (a site's directory service)
    vm_dirs: list[str] = []  # folders slurm.conf names for slurmd (spool, log, pid), made in an image VM
    parity_reference_file: str | None = None  # the on-prem fingerprint an image VM is gated on before slurmd
    parity_spec_file: str | None = None  # TOML with [parity] (allow, job_python) for that gate

    @field_validator("subnet")
    @classmethod
    def _ipv4_network(cls, value: str) -> str:
        try:
            ipaddress.IPv4Network(value, strict=False)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IPv4 network (e.g. 10.77.0.0/24): {exc}") from None
        return value

    @field_validator("bridge")
    @classmethod
    def _not_loopback(cls, value: str) -> str:
        if value == "lo":
            raise ValueError("'lo' is the loopback, not a bridge: name the bed's bridge (e.g. br-slurm)")
        return value
