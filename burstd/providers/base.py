"""The provider interface: what the daemon may ask of a cloud, and nothing more.

Contract (the daemon's invariants depend on it):

* ``launch`` is idempotent on ``LaunchRequest.lease_id``: calling it again with the same lease id (after
  a crash, a timeout, a retry) returns the instance already created and never creates a second one.
  The lease id also goes onto the instance as the tag/label ``burstd:lease``.
* ``list_instances`` returns every instance tagged with this cluster's id, whatever its lease, so the
  daemon can find orphans (invariant 2). One call per cycle.
* ``terminate`` is idempotent: terminating a gone instance is not an error.
* Errors are ``ProviderError`` subclasses whose ``kind`` tells the daemon what to do with them.
* ``launch_gang`` (optional, see ``GangLauncher``) launches several nodes all or nothing, in one zone; it is
  idempotent on the gang id. ``launch_all_or_nothing`` gives every provider that behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
import logging
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from burstd.domain.offering import Offering as Offering  # a value type (domain): named here for the providers

log = logging.getLogger("burstd.providers")


class ErrorKind(StrEnum):
    CAPACITY = "capacity"  # no capacity for this offering now: cool it down, try the next one
    THROTTLED = "throttled"  # API rate limit: retry with jittered backoff
    QUOTA = "quota"  # account quota reached: stop launching in this pool, tell the admin
    CONFIG = "config"  # auth, permissions, bad template: fail loudly, never retry
    TRANSIENT = "transient"  # network blip, 5xx: retry


class ProviderError(Exception):
    def __init__(self, kind: ErrorKind, message: str, *, code: str = "", offering: Offering | None = None):
        self.kind = kind
        self.code = code
        self.offering = offering
        super().__init__(f"{kind}: {code + ': ' if code else ''}{message}")


class ParityRefusedError(ProviderError):
    """The node's parity gate refused the image during the launch, before slurmd started (the local provider's VMs
    boot within the call; a cloud node's agent reports the same later, ``POST /v1/parity``). A boot failure of the
    pool, never retried: the same image would be refused again. ``differences``: the gate's messages."""

    def __init__(self, message: str, differences: tuple[str, ...] | list[str]):
        super().__init__(ErrorKind.CONFIG, message, code="ParityRefused")
        self.differences = tuple(differences)


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    lease_id: str  # idempotency token and tag
    node_name: str  # the Slurm node name the VM must join as
    pool: str
    market: str = "spot"
    exclude: frozenset[Offering] = frozenset()  # offerings cooled down after capacity errors
    # the node's agent token (burstd.daemon.agent_auth), for a provider that delivers it at boot: set only where
    # the provider says ``wants_agent_token = True``; never in a repr, a log line or a tag
    agent_token: str = field(default="", repr=False, compare=False)


@dataclass(frozen=True, slots=True)
class Instance:
    instance_id: str
    lease_id: str  # from the tag; "" when the instance carries none
    node_name: str
    pool: str
    state: str  # "pending" | "running" | "stopping" | "terminated" | "preempted"
    launched_at: float  # Unix seconds, the provider's own launch time (spend starts here)
    offering: Offering | None = None
    address: str = ""
    price_per_hour_micros: int | None = None
    preempted: bool = False  # reclaimed by the provider (spot), seen server-side
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def is_gone(self) -> bool:
        return self.state in ("terminated", "preempted")


@runtime_checkable
class Provider(Protocol):
    name: str  # the pool name

    def launch(self, request: LaunchRequest) -> Instance: ...

    def terminate(self, instance_ids: list[str]) -> None: ...

    def list_instances(self) -> list[Instance]: ...

    def prices(self) -> dict[Offering, int]:
        """Current price per node-hour, micro-dollars, per offering."""
        ...

    def close(self) -> None: ...

    # Optional: ``wants_agent_token = True`` on a provider that delivers the node's agent token at boot (the local
    # provider's image VMs); the daemon then mints one per launch into ``LaunchRequest.agent_token``.


@runtime_checkable
class GangLauncher(Protocol):
    def launch_gang(self, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
        """One instance per request, in request order, or ``ProviderError`` with nothing left running.

        One cloud call asks for all of them with a floor of all of them (EC2 Fleet ``MinTargetCapacity``,
        GCE bulkInsert ``minCount``), in a single zone. Idempotent on ``gang``: a repeat (after a crash or
        a lost answer) returns the instances already made and labels them with their node and lease.
        """
        ...


def launch_all_or_nothing(provider: Provider, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
    """Every node of a gang or none: the provider's own gang launch when it has one, else one launch per
    node, terminating those already made as soon as one fails (so a half gang never runs up a bill)."""
    if isinstance(provider, GangLauncher):  # even for one member left: its VM may carry only the gang's labels
        return provider.launch_gang(gang, requests)
    made: list[Instance] = []
    try:
        for request in requests:
            made.append(provider.launch(request))
    except ProviderError:
        if made:
            log.warning("gang %s: %d of %d nodes launched before a failure; terminating them",
                        gang, len(made), len(requests))
            provider.terminate([i.instance_id for i in made])
        raise
    return made
