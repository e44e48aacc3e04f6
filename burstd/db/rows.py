"""Table handles and row -> domain object conversions shared by the Store's record modules."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table

from burstd.db.models import metadata
from burstd.domain.lease import Lease, LeaseEvent, LeaseState

_lease: Table = metadata.tables["lease"]
_event: Table = metadata.tables["lease_event"]
_budget: Table = metadata.tables["budget"]
_spend: Table = metadata.tables["spend_interval"]
_data_spend: Table = metadata.tables["data_spend"]
_data_staging: Table = metadata.tables["data_staging"]
_job_progress: Table = metadata.tables["job_progress"]
_setting: Table = metadata.tables["setting"]
_cooldown: Table = metadata.tables["cooldown"]
_alloc: Table = metadata.tables["lease_allocation"]
_intent: Table = metadata.tables["intent"]
_pool_health: Table = metadata.tables["pool_health"]
_pause: Table = metadata.tables["pause"]
_job_market: Table = metadata.tables["job_market"]
_leader: Table = metadata.tables["leader"]
_orphan_termination: Table = metadata.tables["orphan_termination"]



def _row_to_lease(r: Any) -> Lease:
    return Lease(
        lease_id=r.id,
        pool=r.pool,
        node_name=r.node_name,
        state=LeaseState(r.state),
        market=r.market,
        instance_id=r.instance_id,
        price_per_hour_micros=int(r.price_per_hour_micros),
        created_at=r.created_at,
        launched_at=r.launched_at,
        ready_at=r.ready_at,
        ended_at=r.ended_at,
        state_since=r.state_since,
        job_ids=tuple(int(j) for j in (r.job_ids or ())),
        account=r.account,
        reason=r.reason,
        offering=r.offering,
        attempt=int(r.attempt),
        accrued_until=r.accrued_until,
        gang=getattr(r, "gang", None),
    )


def _row_to_event(r: Any) -> LeaseEvent:
    return LeaseEvent(
        lease_id=r.lease_id,
        at=r.at,
        from_state=LeaseState(r.from_state) if r.from_state else None,
        to_state=LeaseState(r.to_state),
        reason=r.reason,
        extra=dict(r.extra or {}),
        event_id=int(r.id),
    )


