"""The launch skeleton every cloud shares, as ``slurm/base.py``'s ``PartitionEdits`` is for Slurm: one algorithm,
so the clouds cannot drift. A cloud subclasses ``CloudProvider`` and supplies only its API calls and its error
classification (the hooks below); ``launch`` and ``launch_gang`` are written once, here:

1. **Idempotency**: look the lease (or the gang) up first; what a crash or a lost answer left running is
   returned as is. A gang found with fewer than all its members is deleted first (never half a gang).
2. **Markets**: the request's market, then on-demand when it was spot and the pool says
   ``ondemand_fallback = true`` (one setting on the pool, for every cloud).
3. **Offerings**: every (instance type, zone) of the pool in that market, minus those excluded by the caller or
   cooling down after a capacity error (the shared ``OfferingCooldown``), asked for one group at a time (AWS:
   one EC2 Fleet over all of them; GCE: one bulkInsert per machine type, over its zones).
4. **Outcome** of each create call (an ``Attempt``): the instances made; the offerings that had no capacity
   (cooled down here, and the next group or market is tried); any other error (raised: quota, config...).
   More instances than asked are terminated (one VM per lease); fewer than a gang's all are terminated too
   (all or nothing), and the next group is tried.
5. **No capacity** anywhere: ``ProviderError(CAPACITY, code="NoCapacity")`` naming every failure, nothing left
   running.

Hooks a cloud implements: ``find_by_lease``, ``find_gang``, ``offerings``, ``create`` (one cloud call, its
errors classified into an ``Attempt``), ``terminate``; optionally ``groups`` and ``bind_gang``.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from burstd.config import CloudConfig, PoolConfig
from burstd.providers.base import ErrorKind, Instance, LaunchRequest, Offering, ProviderError
from burstd.providers.offerings import OfferingCooldown
from burstd.providers.retry import RetryPolicy, call_with_retry

T = TypeVar("T")

log = logging.getLogger("burstd.providers")


@dataclass(frozen=True, slots=True)
class Ask:
    """One create call: ``requests`` (one, or a gang's all), in ``market``, over ``offerings`` (one group)."""

    requests: tuple[LaunchRequest, ...]
    market: str
    offerings: tuple[Offering, ...]
    gang: str | None = None
    released: tuple[str, ...] = ()  # a half gang's instances deleted before this call (GCE keys requestIds on it)


@dataclass(slots=True)
class Attempt:
    """What one create call made and learned."""

    made: list[Instance] = field(default_factory=list)
    exhausted: dict[Offering, str] = field(default_factory=dict)  # offering -> capacity error code
    failures: list[str] = field(default_factory=list)  # one line per failed offering, for the final error
    error: ProviderError | None = None  # the worst error that is not capacity (raised unless something was made)


def markets(market: str, pool: PoolConfig) -> list[str]:
    """The markets to try, in order: the asked one, then on-demand for spot when the pool falls back."""
    return [market, "on-demand"] if market == "spot" and pool.ondemand_fallback else [market]


class CloudProvider(ABC):
    """Base of the cloud providers: what every cloud is built from (its pool, the ``[cloud]`` settings, the retry
    policy, the offering cooldown shared by the pools), the retried API call, and the shared launch algorithm;
    subclasses open their client and supply the hooks."""

    cloud_name: str = "cloud"  # "aws", "gcp": how messages name the cloud

    def __init__(self, pool: PoolConfig, cluster_id: str, cloud: CloudConfig | None = None,
                 cooldown: OfferingCooldown | None = None, *, sleep: Callable[[float], None] = time.sleep):
        self.name = pool.name
        self.pool = pool
        self.cluster_id = cluster_id
        self.cloud = cloud or CloudConfig()
        self.cooldown = cooldown if cooldown is not None else OfferingCooldown(self.cloud.capacity_cooldown_s)
        self.retry = RetryPolicy(self.cloud.api_attempts, self.cloud.retry_base_s, self.cloud.retry_max_s)
        self._sleep = sleep

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` (one API call), retried as the ``[cloud]`` settings say; failures classified by the cloud."""
        return call_with_retry(fn, self.classify, self.retry, f"{self.cloud_name} pool {self.name}: {what}",
                               sleep=self._sleep)

    # -- hooks -------------------------------------------------------------------------------------------------

    @abstractmethod
    def classify(self, exc: Exception) -> ProviderError:
        """The cloud's exception as a ProviderError of the right kind (retryable or not)."""

    @abstractmethod
    def find_by_lease(self, lease_id: str) -> Instance | None:
        """The live instance made for this lease, if any (the idempotency lookup)."""

    @abstractmethod
    def find_gang(self, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
        """The live instances made for this gang and one of ``requests`` (or not yet labelled with any lease)."""

    @abstractmethod
    def offerings(self, market: str) -> list[Offering]:
        """Every offering of the pool in ``market``, in preference (config) order."""

    def groups(self, choices: list[Offering]) -> list[list[Offering]]:
        """How the usable offerings are split into create calls, in order (default: one call for all)."""
        return [choices]

    @abstractmethod
    def create(self, ask: Ask) -> Attempt:
        """One create call, its errors classified; ``made`` in request order for a gang once labelled."""

    def bind_gang(self, gang: str, requests: Sequence[LaunchRequest], made: list[Instance]) -> list[Instance]:
        """``made`` (all of the gang) as one instance per request, in request order, each labelled with its node
        and lease where the cloud needs a call for that. Default: matched by the lease they already carry."""
        by_lease = {i.lease_id: i for i in made}
        return [by_lease[r.lease_id] for r in requests]

    @abstractmethod
    def terminate(self, instance_ids: list[str]) -> None:
        """Terminate these instances; gone ones are fine (idempotent)."""

    # -- the algorithm -----------------------------------------------------------------------------------------

    def launch(self, request: LaunchRequest) -> Instance:
        existing = self.find_by_lease(request.lease_id)
        if existing is not None:
            log.info("%s pool %s: lease %s already has instance %s", self.cloud_name, self.name, request.lease_id,
                     existing.instance_id)
            return existing
        made, market = self._first_fit(f"lease {request.lease_id}", (request,), None, request.exclude, ())
        inst = made[0]
        log.info("%s pool %s: lease %s -> %s (%s %s %s)", self.cloud_name, self.name, request.lease_id, inst.instance_id,
                 inst.offering.instance_type if inst.offering else "?", inst.offering.zone if inst.offering else "?",
                 market)
        return inst

    def launch_gang(self, gang: str, requests: Sequence[LaunchRequest]) -> list[Instance]:
        """Every node of ``requests`` from one create call with a floor of all of them, in one zone, or none
        (see ``burstd.providers.base.GangLauncher``)."""
        requests = tuple(requests)
        n = len(requests)
        found = self.find_gang(gang, requests)
        if len(found) >= n:
            log.info("%s pool %s: gang %s already has %d instances", self.cloud_name, self.name, gang, len(found))
            return self.bind_gang(gang, requests, found)
        released: tuple[str, ...] = ()
        if found:  # half a gang from an earlier answer: never keep it
            log.warning("%s pool %s: gang %s has %d of %d instances; all or nothing: deleting them", self.cloud_name,
                        self.name, gang, len(found), n)
            released = tuple(sorted(i.instance_id for i in found))
            self.terminate(list(released))
        exclude = frozenset().union(*(r.exclude for r in requests))
        made, _ = self._first_fit(f"gang {gang} ({n} nodes, all or nothing)", requests, gang, exclude, released)
        return self.bind_gang(gang, requests, made)

    def _first_fit(self, what: str, requests: tuple[LaunchRequest, ...], gang: str | None,
                   exclude: frozenset[Offering], released: tuple[str, ...]) -> tuple[list[Instance], str]:
        """The instances of the first create call that made all of ``requests``, and its market."""
        n = len(requests)
        failures: list[str] = []
        for market in markets(requests[0].market, self.pool):
            choices = [o for o in dict.fromkeys(self.offerings(market))
                       if o not in exclude and not self.cooldown.is_cooling(o)]
            if not choices:
                failures.append(f"{market}: every offering is cooling down or excluded")
                continue
            for group in self.groups(choices):
                attempt = self.create(Ask(requests, market, tuple(group), gang, released))
                for offering, code in attempt.exhausted.items():
                    self.cooldown.mark(offering, reason=code)
                    log.warning("%s pool %s: %s on %s/%s (%s): cooling down", self.cloud_name, self.name, code,
                                offering.instance_type, offering.zone, market)
                failures.extend(attempt.failures)
                made = attempt.made
                if len(made) > n:  # never more than one VM per lease
                    log.warning("%s pool %s: %d instances for %d nodes; terminating the extra ones", self.cloud_name,
                                self.name, len(made), n)
                    self.terminate([i.instance_id for i in made[n:]])
                    made = made[:n]
                if len(made) == n:
                    return made, market
                if made:  # the cloud honours the floor; this guards an answer below it anyway
                    ids = [i.instance_id for i in made]
                    log.warning("%s pool %s: %s got %d of %d nodes; all or nothing: terminating %s", self.cloud_name,
                                self.name, what, len(made), n, ", ".join(ids))
                    self.terminate(ids)
                    failures.append(f"{market}: {len(made)} of {n} nodes (released, all or nothing)")
                if attempt.error is not None and attempt.error.kind is not ErrorKind.CAPACITY:
                    raise attempt.error
        raise ProviderError(ErrorKind.CAPACITY, f"{self.cloud_name} pool {self.name}: no capacity for {what}: "
                            + "; ".join(failures or ["no offering"]), code="NoCapacity")
