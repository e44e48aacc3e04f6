"""Settings of one test bed. Every port, address range, path and name is here, so beds run side by side.

A bed's *slot* picks non-clashing defaults: slot 0 (the default bed, ``burstd``) uses 10.77.0.0/24,
slurmctld port 6817, slurmdbd 6819, slurmrestd 6820, MariaDB 6821, bridge ``br-slurm`` and namespaces ``sl-*``
(the same defaults as ``LocalPoolConfig``); slot N uses 10.(77+N).0.0/24, ports 6817+100N .. 6821+100N,
bridge ``br-<name>`` and namespaces ``<name>-*``. Any field can still be set on its own.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_NAME = "burstd"
STATE_ROOT = Path("/var/lib/burstd-testbed")
HookMode = Literal["stub", "bare", "burstd"]
# Slurm releases a bed can run: the host's packages, or a Debian chroot the bed builds (testbed/release.py)
SLURM_RELEASES: tuple[str, ...] = ("22.05", "24.11", "26.05")
HOOK_MODES: tuple[str, ...] = ("stub", "bare", "burstd")

# BedConfig.from_env reads BURSTD_BED_<FIELD> for every field (e.g. BURSTD_BED_ONPREM_CPUS=8,
# BURSTD_BED_EXTRA_CONF="Line1\nLine2"), plus these short aliases:
ENV_PREFIX = "BURSTD_BED_"
ENV_ALIASES = {
    "BURSTD_BED_CLOUD_NODES": "cloud_count",
    "BURSTD_BED_ONPREM_NODES": "onprem_count",
}


class BedConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(DEFAULT_NAME, pattern=r"^[a-z][a-z0-9-]{0,11}$")
    slot: int = Field(0, ge=0, le=170)
    subnet: str | None = None  # default from slot
    ctld_port: int | None = Field(None, ge=1024, le=65535)
    rest_port: int | None = Field(None, ge=1024, le=65535)
    dbd_port: int | None = Field(None, ge=1024, le=65535)
    db_port: int | None = Field(None, ge=1024, le=65535)  # the bed's own MariaDB, on 127.0.0.1
    slurm_release: str | None = None  # 22.05 | 24.11 | 26.05; None = the host's Slurm
    accounting: bool = True  # slurmdbd + MariaDB; False = AccountingStorageType=accounting_storage/none
    # created in slurmdbd by the bed; burstuser and burstuser2 get an association with each, root its own
    accounts: tuple[str, ...] = ("physics", "chemistry", "funded", "broke")
    qos: tuple[str, ...] = ("cloud",)
    state_dir: str | None = None  # default /var/lib/burstd-testbed/<name>
    bridge: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
    netns_prefix: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]{0,20}$")
    onprem_prefix: str = Field("onprem", pattern=r"^[a-z][a-z0-9-]{0,30}$")
    onprem_count: int = Field(2, ge=1, le=50)
    onprem_cpus: int = Field(2, ge=1, le=1024)
    onprem_memory_mb: int = Field(1000, ge=100)
    onprem_first_host: int = Field(11, ge=2)
    cloud_prefix: str = Field("cloud", pattern=r"^[a-z][a-z0-9-]{0,30}$")
    cloud_count: int = Field(4, ge=0, le=1000)
    cloud_cpus: int = Field(2, ge=1, le=1024)
    cloud_memory_mb: int = Field(1000, ge=100)
    cloud_first_host: int = Field(101, ge=2)
    # burstd's local VMs start slurmd this long after launch. slurmctld compares a node's boot time with its
    # power-up request in whole seconds; a namespace "VM" boots in milliseconds, and a boot that does not land
    # clearly after the request is ignored (the node waits out ResumeTimeout and goes DOWN). Real VMs take 30 s+.
    vm_boot_delay_s: float = Field(2.0, ge=0)
    onprem_partition: str = Field("onprem", pattern=r"^[A-Za-z0-9_-]{1,40}$")
    cloud_partition: str = Field("cloud", pattern=r"^[A-Za-z0-9_-]{1,40}$")
    hooks: HookMode = "stub"
    burstd_config: str | None = None  # for hooks=burstd; None = the bed writes <state>/burstd.toml
    python: str | None = None  # interpreter for hooks=burstd; None = the one running `up`
    suspend_time: int = Field(30, ge=-1)  # -1 disables power saving
    suspend_timeout: int = Field(15, ge=1)
    resume_timeout: int = Field(60, ge=5)
    cred_expire: int = Field(30, ge=5)
    slurmd_timeout: int = Field(30, ge=5)
    max_job_count: int = Field(100_000, ge=50_000)
    max_array_size: int = Field(100_001, ge=1002)
    rest_user: str = "slurmrest"
    extra_conf: tuple[str, ...] = ()  # extra slurm.conf lines, appended verbatim
    # cloud VMs boot from this node image (a DIR of `image build --provider local`, or "default": the bed's
    # release, built once into the image cache) in their own mount namespace; None: they share the head's files
    cloud_image: str | None = Field(None, pattern=r"^(default|/[A-Za-z0-9_./-]{1,200})$")
    # issue 24: a local S3 store and a metered link (burstd.testbed.datastore) that the cloud pool stages burst
    # jobs' declared data through, with the data Prolog/Epilog in slurm.conf
    data_store: bool = False
    data_link_bytes_s: float = Field(20e6, gt=0, allow_inf_nan=False)  # the link's rate, both ways together

    @model_validator(mode="after")
    def _fits(self) -> BedConfig:
        net = self.network
        last_onprem = self.onprem_first_host + self.onprem_count - 1
        last_cloud = self.cloud_first_host + max(self.cloud_count, 1) - 1
        if net.num_addresses - 2 < max(last_onprem, last_cloud):
            raise ValueError(f"subnet {net} is too small for the node addresses (host numbers up to "
                             f"{max(last_onprem, last_cloud)})")
        onprem = set(range(self.onprem_first_host, last_onprem + 1))
        if self.cloud_count and onprem & set(range(self.cloud_first_host, last_cloud + 1)):
            raise ValueError("on-prem and cloud node addresses overlap (onprem_first_host/cloud_first_host)")
        if self.onprem_prefix == self.cloud_prefix:
            raise ValueError("onprem_prefix and cloud_prefix must differ")
        ports = [self.ctld_port_, self.dbd_port_, self.rest_port_, self.db_port_]
        if len(set(ports)) != len(ports):
            raise ValueError("ctld_port, dbd_port, rest_port and db_port must differ")
        if self.slurm_release is not None and self.slurm_release not in SLURM_RELEASES:
            raise ValueError(f"slurm_release {self.slurm_release!r}: one of {', '.join(SLURM_RELEASES)}")
        return self

    # ------------------------------------------------------------------ derived values

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.subnet or f"10.{77 + self.slot}.0.0/24", strict=True)

    @property
    def ctld_addr(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def bridge_address(self) -> str:
        return f"{self.ctld_addr}/{self.network.prefixlen}"

    @property
    def ctld_port_(self) -> int:
        return self.ctld_port or 6817 + 100 * self.slot

    @property
    def rest_port_(self) -> int:
        return self.rest_port or 6820 + 100 * self.slot

    @property
    def dbd_port_(self) -> int:
        return self.dbd_port or 6819 + 100 * self.slot

    @property
    def db_port_(self) -> int:
        return self.db_port or 6821 + 100 * self.slot

    @property
    def bridge_(self) -> str:
        return self.bridge or ("br-slurm" if self.slot == 0 else f"br-{self.name}")

    @property
    def netns_prefix_(self) -> str:
        return self.netns_prefix or ("sl-" if self.slot == 0 else f"{self.name}-")

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir) if self.state_dir else STATE_ROOT / self.name

    @property
    def conf_server(self) -> str:
        return f"{self.ctld_addr}:{self.ctld_port_}"

    @property
    def onprem_nodes(self) -> list[str]:
        return [f"{self.onprem_prefix}{i}" for i in range(1, self.onprem_count + 1)]

    @property
    def cloud_nodes(self) -> list[str]:
        return [f"{self.cloud_prefix}{i}" for i in range(1, self.cloud_count + 1)]

    def node_address(self, node: str) -> str:
        """``10.77.0.11/24`` for onprem1, ``10.77.0.101/24`` for cloud1."""
        for prefix, first, count in ((self.onprem_prefix, self.onprem_first_host, self.onprem_count),
                                     (self.cloud_prefix, self.cloud_first_host, self.cloud_count)):
            rest = node[len(prefix):]
            if node.startswith(prefix) and rest.isdigit() and 1 <= int(rest) <= count:
                return f"{self.network.network_address + first + int(rest) - 1}/{self.network.prefixlen}"
        raise ValueError(f"{node!r} is not a node of bed {self.name}")

    def netns_of(self, node: str) -> str:
        return f"{self.netns_prefix_}{node}"

    def resolved(self) -> BedConfig:
        """The same settings with every slot-derived default written out (what bed.json stores)."""
        return self.model_copy(update={
            "subnet": str(self.network), "ctld_port": self.ctld_port_, "rest_port": self.rest_port_,
            "dbd_port": self.dbd_port_, "db_port": self.db_port_,
            "bridge": self.bridge_, "netns_prefix": self.netns_prefix_, "state_dir": str(self.state_path),
        })

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides) -> BedConfig:
        """Settings from ``BURSTD_BED_<FIELD>`` variables (and ``ENV_ALIASES``), then ``overrides``.

        A named bed without an explicit slot gets one derived from its name, so two names rarely clash.
        """
        env = os.environ if environ is None else environ
        data: dict = {}
        for var, field in ENV_ALIASES.items():
            if env.get(var):
                data[field] = env[var]
        for field in cls.model_fields:
            value = env.get(ENV_PREFIX + field.upper())
            if value:
                data[field] = tuple(value.split("\n")) if field == "extra_conf" else \
                    tuple(value.split(",")) if field in ("accounts", "qos") else value
        data.update({k: v for k, v in overrides.items() if v is not None})
        if data.get("name", DEFAULT_NAME) != DEFAULT_NAME and "slot" not in data:
            data["slot"] = _slot_from_name(data["name"])
        return cls.model_validate(data)


def _slot_from_name(name: str) -> int:
    """A stable slot 1..150 for a bed name, so named beds rarely clash without configuration."""
    import zlib

    return 1 + zlib.crc32(name.encode()) % 150
