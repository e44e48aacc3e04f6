"""burstd's configuration: one TOML file parsed into typed, validated models.

    cfg = load_config("/etc/burstd/burstd.toml")

Every problem is reported with the file, the key path and what is wrong, all at once::

    /etc/burstd/burstd.toml: pools[0].price_per_hour: Input should be greater than or equal to 0
    /etc/burstd/burstd.toml: slurm.backend: Input should be 'cli', 'rest' or 'pyslurm'

Unknown keys are errors (a typo must never silently fall back to a default).
"""

from __future__ import annotations

import os
import re
import signal as _signal
import tomllib
import warnings
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, Discriminator, Field, Tag, ValidationError, field_validator, model_validator

from burstd.image.spec import ImageSpec, ParityConfig

# each provider's own section lives beside the provider (a new cloud touches its folder and POOL_KINDS below)
from burstd.providers.aws.config import AwsPoolConfig as AwsPoolConfig
from burstd.providers.gcp.config import GcpPoolConfig as GcpPoolConfig
from burstd.providers.local.config import LocalPoolConfig as LocalPoolConfig

# the sections' field types and the policy sections live beside this file; names other modules import from
# here are re-exported (``as``) so ``from burstd.config import WaitingPolicy`` keeps working
from burstd.config_data import DataConfig as DataConfig
from burstd.config_data import PoolDataConfig as PoolDataConfig
from burstd.config_policy import BudgetConfig, PolicyConfig
from burstd.config_policy import WaitingPolicy as WaitingPolicy
from burstd.config_types import (
    _DB_SCHEMES, CONFIG_ENV, DEFAULT_CONFIG_PATH, Name, NodePrefix, Port, PosSeconds, Price, Seconds, SlurmWord,
    _Section, check_address, check_host_port,
)
from burstd.config_types import _NAME as _NAME
from burstd.config_types import YEAR_S as YEAR_S

class ClusterConfig(_Section):
    id: Name = "burstd"  # tags every cloud resource (burstd:cluster); must be unique per site


class SlurmConfig(_Section):
    backend: Literal["cli", "rest", "pyslurm"] = "cli"
    bin_dir: str = "/usr/bin"  # where squeue/sinfo/scontrol live
    conf: str | None = None  # SLURM_CONF for the commands; None = Slurm's default
    rest_url: str = "http://127.0.0.1:6820"  # or unix:/run/slurmrestd/slurmrestd.sock
    rest_version: str | None = None  # e.g. "v0.0.38"; None = newest the server offers
    rest_user: str = "root"
    rest_token_file: str | None = None  # file holding a JWT; None = run `scontrol token`
    command_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 30.0
    # cli backend: how squeue lists jobs. "auto"/"text": squeue -O text (fast; falls back to JSON for a
    # snapshot whose text does not split cleanly); "json": always squeue --json.
    job_format: Literal["auto", "text", "json"] = "auto"


class DatabaseConfig(_Section):
    url: str = "sqlite:////var/lib/burstd/burstd.db"

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        scheme = value.partition("://")[0]
        if "://" not in value or scheme not in _DB_SCHEMES:
            raise ValueError(f"unknown database URL scheme {scheme!r}: use sqlite:////path/to/burstd.db or "
                             "postgresql+psycopg://user@host/db")
        return value


def agent_socket_of(socket_path: str) -> str:
    """The nodes' socket of the daemon whose control socket is ``socket_path``: ``<dir>/<name>.agents.sock``
    beside it (a standby's beside its own, so a pair on one host never shares one). On it a connection's peer
    counts for nothing: a node's agent token is the only credential (burstd.api.server)."""
    folder, name = os.path.split(socket_path)
    return os.path.join(folder, f"{name.removesuffix('.sock')}.agents.sock")


class ApiConfig(_Section):
    socket: str = "/run/burstd/burstd.sock"
    socket_group: str = "root"  # members may read
    admin_group: str = "root"  # members may change things
    hook_users: list[str] = ["root", "slurm"]  # may call the hook and notice endpoints (SlurmUser, agent)
    tcp_listen: str | None = None  # "127.0.0.1:8787"; off by default
    token_file: str | None = None  # admin bearer token for the TCP listener (never on a cloud node)
    tls_cert: str | None = None  # PEM certificate (chain) the TCP listener serves; required with tcp_listen
    tls_key: str | None = None  # its private key (PEM), readable by the daemon only
    max_body_bytes: int = Field(default=4 << 20, ge=1024, le=64 << 20)  # larger request bodies: 413
    # open connections a listener (the unix socket; the TCP one) takes in all, and from one peer (a uid; an
    # address); more are closed at accept. Root keeps a reserve above the total (burstd.daemon.conn_guard).
    max_connections: int = Field(default=256, ge=8, le=16384)
    max_connections_per_peer: int = Field(default=32, ge=1, le=16384)
    header_timeout_s: Annotated[float, Field(ge=1, le=300, allow_inf_nan=False)] = 10.0  # silent: closed
    # munged's socket for checking the MUNGE credentials jobs sign their progress reports with (None: munge's
    # default, /run/munge/munge.socket.2)
    munge_socket: str | None = None
    # a progress report must be made on one of the job's nodes (munged's origin address is the node's name,
    # hostname or address in Slurm); false where it is not (the local provider's VMs share the head node's munged):
    # the uid must still own the job
    progress_require_node: bool = True
    # the URL cloud nodes reach this daemon at ("https://head.example.org:8787", their agent.daemon_url): a GCP
    # node's identity token must name it as its audience to enrol (POST /v1/enroll); None = no GCP enrolment
    node_url: str | None = None

    @field_validator("node_url")
    @classmethod
    def _https_url(cls, value: str | None) -> str | None:
        if value is not None and not (value.startswith("https://") and len(value) <= 512):
            raise ValueError(f"{value[:80]!r}: an https:// URL (the one the nodes use), up to 512 characters")
        return value

    @field_validator("tcp_listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        return None if value is None else check_host_port(value)

    @model_validator(mode="after")
    def _tcp_needs_token(self) -> ApiConfig:
        if self.max_connections_per_peer > self.max_connections:
            raise ValueError("max_connections_per_peer is above max_connections")
        if self.tcp_listen and not self.token_file:
            raise ValueError("tcp_listen needs token_file (the TCP listener always requires a bearer token)")
        if self.tcp_listen and not (self.tls_cert and self.tls_key):
            raise ValueError("tcp_listen needs tls_cert and tls_key (the TCP listener only speaks TLS)")
        return self


class DaemonConfig(_Section):
    cycle_interval_s: Annotated[float, Field(ge=0.1, le=3600, allow_inf_nan=False)] = 15.0
    state_dir: str = "/var/lib/burstd"
    launch_timeout_s: Annotated[float, Field(ge=1, le=86400, allow_inf_nan=False)] = 300.0  # then failed
    boot_timeout_s: Annotated[float, Field(ge=1, le=86400, allow_inf_nan=False)] = 600.0  # BOOTING longer: failed
    orphan_grace_s: Annotated[float, Field(ge=0, le=86400, allow_inf_nan=False)] = 120.0  # then an untracked VM goes
    metrics_port: Port | None = None
    metrics_address: str = "127.0.0.1"
    log_format: Literal["json", "text"] = "json"
    # the hooks give up on the daemon after this long; Slurm's slurmscriptd waits on them meanwhile
    hook_timeout_s: Annotated[float, Field(gt=0, le=30, allow_inf_nan=False)] = 2.0
    # provider launch calls a cycle runs at once (a resume storm); 1 = one after another
    launch_workers: int = Field(default=8, ge=1, le=64)

    @field_validator("metrics_address")
    @classmethod
    def _address(cls, value: str) -> str:
        return check_address(value)


class CloudConfig(_Section):
    """Behaviour shared by the cloud providers (AWS, GCP): failover, retries, protection."""

    capacity_cooldown_s: Seconds = 600.0  # an offering with a capacity error is skipped this long
    protect_after_boot_failures: int = Field(default=3, ge=1, le=1000)  # consecutive boot failures: pool protected
    api_attempts: int = Field(default=5, ge=1, le=100)  # tries per cloud call on throttling / transient errors
    retry_base_s: Seconds = 0.5  # first backoff; doubles each try, full jitter
    retry_max_s: Seconds = 20.0  # backoff ceiling
    api_timeout_s: PosSeconds = 60.0  # per HTTP call
    operation_timeout_s: PosSeconds = 300.0  # waiting on a GCE operation
    terminate_batch: int = Field(default=500, ge=1, le=1000)  # instances per terminate call
    # a Spot Instance Advisor snapshot (spot-advisor-data.json): per-offering interruption priors for spot quotes
    # (burstd.daemon.prices); None = no prior (interruption rate 0)
    spot_advisor_file: str | None = None


class InstanceType(_Section):
    name: str
    cpus: int = Field(ge=1, le=100_000)
    memory_mb: int = Field(ge=1, le=64 << 20)  # MiB: up to 64 TiB
    gpus: int = Field(default=0, ge=0, le=1024)
    gpu_type: SlurmWord | None = None
    price_per_hour: Price | None = None  # overrides the pool's price for this type
    weight: int = Field(default=1, ge=1, le=1_000_000)


class PoolConfig(_Section):
    name: Name
    provider: Literal["local", "aws", "gcp"]
    partition: Name  # the Slurm partition of this pool's CLOUD nodes
    node_prefix: NodePrefix
    node_count: int = Field(ge=1, le=100_000)
    instance_types: list[InstanceType] = Field(min_length=1)
    market: Literal["spot", "on-demand"] = "spot"
    price_per_hour: Price  # per node-hour, at the pool's market
    ondemand_price_per_hour: Price | None = None
    max_nodes: int | None = Field(default=None, ge=0, le=1_000_000)
    features: list[SlurmWord] = []
    accounts: list[str] | None = None  # None = every account may use this pool
    # A multi-node job's nodes are launched as one gang: every node or none (EC2 Fleet MinTargetCapacity,
    # GCE bulkInsert minCount), in one zone. False = each node on its own, wherever capacity is.
    all_or_nothing: bool = True
    # spot exhausted in every offering -> the same offerings on-demand (AWS on-demand, GCE STANDARD), for every
    # cloud (burstd.providers.cloud); was [pools.aws] / [pools.gcp] ondemand_fallback, still read with a warning
    ondemand_fallback: bool = False
    aws: AwsPoolConfig | None = None
    gcp: GcpPoolConfig | None = None
    local: LocalPoolConfig | None = None
    data: PoolDataConfig = PoolDataConfig()  # link and data prices (burstd.config_data)

    @model_validator(mode="before")
    @classmethod
    def _moved_ondemand_fallback(cls, data: object) -> object:
        """``[pools.aws]`` / ``[pools.gcp]`` ``ondemand_fallback`` moved onto the pool: still accepted, with a
        warning naming the new key; set in both places to different values is an error."""
        if not isinstance(data, dict):
            return data
        for cloud in ("aws", "gcp"):
            section = data.get(cloud)
            if not (isinstance(section, dict) and "ondemand_fallback" in section):
                continue
            section = dict(section)
            old = section.pop("ondemand_fallback")
            if "ondemand_fallback" in data and data["ondemand_fallback"] != old:
                raise ValueError(f"{cloud}.ondemand_fallback is deprecated and disagrees with ondemand_fallback: "
                                 f"set only the pool's ondemand_fallback")
            data = {**data, cloud: section, "ondemand_fallback": old}
            warnings.warn(f"pool {data.get('name', '?')}: [pools.{cloud}] ondemand_fallback is deprecated; "
                          "write ondemand_fallback in the pool itself ([[pools]] ondemand_fallback = ...)",
                          FutureWarning, stacklevel=2)
        return data

    @model_validator(mode="before")
    @classmethod
    def _provider_section(cls, data: object) -> object:
        # before the fields: a missing [pools.aws] is said as what it is, not as a missing field
        if not isinstance(data, dict):
            return data
        provider = data.get("provider")
        present = {p for p in ("aws", "gcp") if data.get(p) is not None}
        if provider in ("aws", "gcp") and provider not in present:
            raise ValueError(f"provider = {provider!r} needs a [pools.{provider}] section")
        if provider in POOL_KINDS and present - {provider}:
            raise ValueError(f"section [pools.{(present - {provider}).pop()}] does not match provider")
        return data

    @property
    def node_names(self) -> list[str]:
        return [f"{self.node_prefix}{i}" for i in range(1, self.node_count + 1)]

    def has_node(self, node: str) -> bool:
        """Is ``node`` one of this pool's Slurm nodes (prefix + index in 1..node_count)?"""
        rest = node[len(self.node_prefix):]
        return node.startswith(self.node_prefix) and rest.isdigit() and 1 <= int(rest) <= self.node_count

    @property
    def cpus(self) -> int:
        return min(t.cpus for t in self.instance_types)

    @property
    def memory_mb(self) -> int:
        return min(t.memory_mb for t in self.instance_types)

    @property
    def gpus(self) -> int:
        return min(t.gpus for t in self.instance_types)



class AwsPool(PoolConfig):
    """A pool on EC2 (``burstd.providers.aws``): its ``[pools.aws]`` is required."""

    provider: Literal["aws"]
    aws: AwsPoolConfig


class GcpPool(PoolConfig):
    """A pool on Compute Engine (``burstd.providers.gcp``): its ``[pools.gcp]`` is required."""

    provider: Literal["gcp"]
    gcp: GcpPoolConfig


class LocalPool(PoolConfig):
    """A pool of network-namespace VMs on this host (``burstd.providers.local``); ``[pools.local]`` optional."""

    provider: Literal["local"]


# ``provider`` picks the pool's class; a new cloud adds its class here and its section in its own folder
POOL_KINDS: dict[str, type[PoolConfig]] = {"aws": AwsPool, "gcp": GcpPool, "local": LocalPool}


def _pool_tag(data: object) -> str:
    provider = data.get("provider") if isinstance(data, dict) else getattr(data, "provider", None)
    return f"provider={provider}" if provider in POOL_KINDS else "provider=?"


# The tags ("provider=aws") are dropped from an error's key path (``validate_model``); an unknown or missing
# provider is validated as the plain PoolConfig, whose Literal names the providers there are.
Pool = Annotated[
    Annotated[AwsPool, Tag("provider=aws")] | Annotated[GcpPool, Tag("provider=gcp")]
    | Annotated[LocalPool, Tag("provider=local")] | Annotated[PoolConfig, Tag("provider=?")],
    Discriminator(_pool_tag),
]


class AgentConfig(_Section):
    provider: Literal["aws", "gcp", "local"] = "aws"
    metadata_url: str | None = None  # None = the provider's well-known address
    # IMDS has no long poll: the notice is seen at most this late (issue 22: within a second). Bounded so that a
    # typo can neither hammer the metadata service nor miss most of a 2-minute notice.
    poll_interval_s: float = Field(default=1.0, ge=0.1, le=10.0, allow_inf_nan=False)
    signal: str = "USR1"
    lead_time_s: Seconds = 0.0  # signal this long after the notice (0 = at once)
    daemon_url: str | None = None  # "unix:/run/burstd/burstd.sock" or "https://head:8787"; None = don't report
    daemon_token_file: str | None = None  # this node's own agent credential (0600), for an https daemon_url
    daemon_ca_file: str | None = None  # CA that signed the daemon's TLS certificate; None = the system's
    node_name: str | None = None  # the Slurm node name; None = the short hostname
    http_timeout_s: PosSeconds = 2.0  # per metadata request
    http_retries: int = Field(default=3, ge=0, le=20)  # per poll, on connection errors and 5xx
    token_ttl_s: int = Field(default=21600, ge=1, le=21600)  # IMDSv2 session token lifetime
    gcp_notice_s: Seconds = 30.0  # GCP announces preemption this long before it acts
    # long-poll length of instance/preempted?wait_for_change=true (GCP answers at once on a change; this only
    # bounds how long the agent is away from its other duties, the dead-man switch and a stop)
    gcp_wait_s: float = Field(default=60.0, ge=1.0, le=3600.0, allow_inf_nan=False)
    on_rebalance: Literal["drain", "report", "ignore"] = "drain"  # AWS rebalance recommendation
    # dead-man switch (burstd.agent.deadman): no burstd reachable for this long and no job -> power off; 0 = off
    deadman_s: float = Field(default=900.0, ge=0, le=86400, allow_inf_nan=False)
    standby_daemon_urls: list[str] = []  # the other head's burstd (active/standby): tried after daemon_url
    poweroff_command: list[str] = Field(default=["systemctl", "poweroff"], min_length=1)  # the VM's own shutdown
    # where the agent keeps the pool's observed preemption rate for the TaskProlog (burstd.agent.preempt_rate),
    # e.g. "/run/burstd/preempt-rate" on a cloud VM; None = don't ask (local VMs share the head's filesystem)
    preempt_rate_file: str | None = None

    @field_validator("daemon_url", "standby_daemon_urls")
    @classmethod
    def _private_transport(cls, value: str | list[str] | None) -> str | list[str] | None:
        # the node's agent token goes with every report: never in clear over the network
        for url in [value] if isinstance(value, str) else value or []:
            if not (url.startswith("unix:/") or url.startswith("https://")):
                raise ValueError(f"{url!r}: TLS required; use https://HOST:PORT (the daemon's tcp_listen) or "
                                 "unix:/path/to/burstd.sock")
        return value

    @field_validator("signal")
    @classmethod
    def _known_signal(cls, value: str) -> str:
        name = value.upper().removeprefix("SIG")
        if not hasattr(_signal, f"SIG{name}") or name in ("KILL", "STOP"):
            raise ValueError(f"unknown or uncatchable signal {value!r} (e.g. USR1, TERM)")
        return name


class HaConfig(_Section):
    """Active/standby daemons on one PostgreSQL (docs/ha.md). Failover takes at most ``lease_s`` plus one
    ``renew_interval_s`` after the leader stops renewing."""

    enabled: bool = False
    lease_s: float = Field(default=15.0, ge=2.0, le=120.0, allow_inf_nan=False)  # the lead lapses after this
    renew_interval_s: float = Field(default=3.0, gt=0, le=40.0, allow_inf_nan=False)  # claim/renew this often
    node_id: str | None = Field(default=None, pattern=_NAME, max_length=64)  # None = the short hostname

    @model_validator(mode="after")
    def _renew_within_lease(self) -> HaConfig:
        if self.renew_interval_s * 2 > self.lease_s:
            raise ValueError(f"renew_interval_s ({self.renew_interval_s:g}) must be at most half of lease_s "
                             f"({self.lease_s:g}), or a healthy leader could lose the lead between two renewals")
        return self


class Config(_Section):
    cluster: ClusterConfig = ClusterConfig()
    slurm: SlurmConfig = SlurmConfig()
    database: DatabaseConfig = DatabaseConfig()
    api: ApiConfig = ApiConfig()
    daemon: DaemonConfig = DaemonConfig()
    pools: list[Pool] = []
    policy: PolicyConfig = PolicyConfig()
    budget: BudgetConfig = BudgetConfig()
    agent: AgentConfig = AgentConfig()
    cloud: CloudConfig = CloudConfig()
    ha: HaConfig = HaConfig()
    image: ImageSpec = ImageSpec()  # the node image recipe (burstd.image, `burstctl image build`)
    data: DataConfig = DataConfig()  # data that never leaves the site (burstd.config_data)
    parity: ParityConfig = ParityConfig()  # the parity gate: on-prem reference, allowed differences, checks

    @model_validator(mode="after")
    def _ha_needs_postgres(self) -> Config:
        if self.ha.enabled and not self.database.url.startswith(("postgresql", "postgres")):
            raise ValueError("ha.enabled: high availability needs a PostgreSQL database.url shared by both "
                             f"daemons; {self.database.url.split(':', 1)[0]} is single-host (see docs/ha.md)")
        return self

    @model_validator(mode="after")
    def _unique(self) -> Config:
        for what, values in (
            ("name", [p.name for p in self.pools]),
            ("node_prefix", [p.node_prefix for p in self.pools]),
        ):
            dup = {v for v in values if values.count(v) > 1}
            if dup:
                raise ValueError(f"pools: {what} must be unique, repeated: {', '.join(sorted(dup))}")
        seen: dict[str, str] = {}
        for p in self.pools:  # prefixes "gpu" and "gpu1" both name gpu12: one node in two pools
            for n in p.node_names:
                other = seen.setdefault(n, p.name)
                if other != p.name:
                    raise ValueError(f"pools: node {n} is in pool {other!r} and in pool {p.name!r} "
                                     "(node_prefix + node_count overlap)")
        known = {p.name for p in self.pools}
        for part, pools in self.policy.burst_to.items():
            unknown = [p for p in pools if p not in known]
            if unknown:
                raise ValueError(f"policy.burst_to.{part}: unknown pool(s) {', '.join(unknown)}")
        return self

    def pool(self, name: str) -> PoolConfig:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"no pool named {name!r}; configured: {', '.join(p.name for p in self.pools) or 'none'}")

    def pool_of_node(self, node: str) -> PoolConfig | None:
        """The pool a Slurm node name belongs to (prefix + index in 1..node_count)."""
        return next((p for p in self.pools if p.has_node(node)), None)


M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """The config file is unreadable or invalid. ``problems`` holds one line per problem."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__("\n".join(f"{path}: {p}" for p in problems))


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def config_path(explicit: str | os.PathLike | None = None) -> Path:
    """The config file to read: the flag, else $BURSTD_CONFIG, else /etc/burstd/burstd.toml."""
    return Path(explicit or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG_PATH)


def validate_model(model: type[M], data: dict, path: str) -> M:
    """``model`` from ``data``; every problem as ``path: key.path: reason`` in one ConfigError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"]
                        if not (isinstance(p, str) and re.fullmatch(r"function-\w+.*|provider=\w+|provider=\?", p)))
            msg = err["msg"].removeprefix("Value error, ")
            # Model-level checks already start with the key they are about.
            problems.append(f"{_loc(loc)}: {msg}" if loc else msg)
        raise ConfigError(path, problems) from None


def parse_config(data: dict, path: str = "<config>") -> Config:
    return validate_model(Config, data, path)


def read_toml(p: Path) -> dict:
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(str(p), [f"cannot read: {exc.strerror}"]) from None
    try:
        return tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(str(p), [f"not valid TOML: {exc}"]) from None
    except RecursionError:  # tomllib recurses per nesting level
        raise ConfigError(str(p), ["not valid TOML: nested too deeply"]) from None


def load_config(path: str | os.PathLike | None = None) -> Config:
    p = config_path(path)
    return parse_config(read_toml(p), str(p))
