"""The leader's fencing values: which daemon leads, under which epoch, and the refusal a deposed one gets.

The store writes and checks them (burstd/db/leadership.py); the daemon acts on them; both import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from burstd.domain.store_errors import StoreError


@dataclass(frozen=True, slots=True)
class Fence:
    """The fencing token a leader writes its cloud intents under: its holder id and the epoch it won."""

    holder: str
    epoch: int


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    holder: str
    epoch: int
    since: float  # when this holder won this epoch
    renewed_at: float
    expires_at: float  # another daemon may take over after this
    now: float  # the clock the claim was judged by (the database's on PostgreSQL)

    @property
    def fence(self) -> Fence:
        return Fence(self.holder, self.epoch)


class Fenced(StoreError):
    """A deposed leader tried to record a cloud intent: another daemon holds a newer epoch. Nothing was written;
    the caller must stop acting (it is a standby now)."""

    def __init__(self, fence: Fence, current: LeaderRecord | None):
        self.fence, self.current = fence, current
        now = (f"epoch {current.epoch} is held by {current.holder}" if current is not None
               else "no daemon holds the lead")
        super().__init__(f"deposed: {fence.holder} led epoch {fence.epoch}, but {now}; "
                         "this daemon no longer launches or terminates anything")
