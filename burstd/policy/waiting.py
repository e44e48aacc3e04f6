"""Waiting policies: how long a pending job waits on-prem before it may burst.

Pure functions of the job's size and the expected on-prem wait; ``PolicyConfig.waiting`` holds the knobs.

- ``none``: burst at once.
- ``constant``: wait ``min_wait_s`` (Starburst's "constant-wait" baseline).
- ``compute``: wait ``wait_per_node_hour_s`` x node-hours asked for, capped at ``max_wait_s`` (the
  "compute-wait" of Starburst, ATC '24: big jobs wait longer, since they are likelier to be worth keeping
  on-prem; "Good Things Come to Those Who Wait", SoCC '21, makes the same point for deadlines).
- ``burstd`` (default): compute-wait, told by the queue's expected remaining wait (Slurm's backfill
  estimate, else burstd's model of it). After ``burstd_min_wait_s`` (and any partition/QOS floor): a job
  whose expected remaining wait is under ``min_expected_wait_s`` (or ``wait_to_runtime_ratio`` x its time
  limit) stays; one whose expected remaining wait is at least ``burstd_wait_per_node_hour_s`` x its
  node-hours bursts at once; any other bursts after the compute-wait (``wait_per_node_hour_s`` x
  node-hours, capped at ``max_wait_s``).

Each function returns a ``WaitVerdict`` with the figures, so the explanation can say why.
"""

from __future__ import annotations

from dataclasses import dataclass

from burstd.config import WaitingPolicy

INFINITY = float("inf")


@dataclass(frozen=True, slots=True)
class WaitVerdict:
    ready: bool  # the waiting policy lets the job burst now
    required_wait_s: float  # how long the job must have waited (size-based part)
    kind: str = ""  # policy kind, for the sentence
    sooner_than_s: float | None = None  # set when the expected on-prem start is too soon to burst

    @property
    def why(self) -> str:
        """Short phrase for the explanation when not ready ("" when ready); built only when asked."""
        if self.ready:
            return ""
        if self.sooner_than_s is not None:
            return f"expected on-prem start is sooner than the {_dur(self.sooner_than_s)} worth bursting for"
        if self.kind == "floor":
            return f"minimum wait {_dur(self.required_wait_s)}"
        return f"waiting policy {self.kind} wants {_dur(self.required_wait_s)} on-prem first"


def required_wait_s(w: WaitingPolicy, node_hours: float, floor_s: float = 0.0) -> float:
    """The size-based wait of ``w.kind`` for a job of ``node_hours``, never below ``floor_s``."""
    if w.kind == "none":
        base = 0.0
    elif w.kind == "constant":
        base = w.min_wait_s
    else:  # compute, burstd
        base = min(w.max_wait_s, max(w.min_wait_s, w.wait_per_node_hour_s * node_hours))
    return max(base, floor_s)


def verdict(
    w: WaitingPolicy,
    *,
    waited_s: float,
    expected_wait_s: float,
    node_hours: float,
    time_limit_s: float,
    floor_s: float = 0.0,
    keep: bool = False,
) -> WaitVerdict:
    """May a job that has ``waited_s`` and expects ``expected_wait_s`` more on-prem burst now?

    ``keep`` is True for a job that is already burst-eligible: its thresholds shrink by ``keep_fraction``
    so that small changes in the estimate do not flip it back and forth between cycles.
    """
    first_s, first_r, soon_s, burst_s, need_s, need, kind = thresholds(w, node_hours, time_limit_s, floor_s, keep)
    if waited_s < first_s:  # quote the whole wait it will need, so the target does not move once first_s passes
        return WaitVerdict(False, first_r if expected_wait_s >= burst_s else max(first_r, need), kind)
    if expected_wait_s < soon_s:
        return WaitVerdict(False, need, kind, soon_s)
    if expected_wait_s >= burst_s:
        return WaitVerdict(True, need, kind)
    return WaitVerdict(waited_s >= need_s, need, kind)


def thresholds(
    w: WaitingPolicy, node_hours: float, time_limit_s: float, floor_s: float = 0.0, keep: bool = False
) -> tuple[float, float, float, float, float, float, str]:
    """The figures ``verdict`` compares against, for callers that decide many jobs of one shape
    (``decide()`` caches them per shape): ``(first_s, first_report_s, soon_s, burst_s, need_s, need, kind)``.

    A job is not ready while ``waited < first_s`` (it is told it needs ``first_report_s``), nor while
    ``expected < soon_s``; it is ready when ``expected >= burst_s``, else when ``waited >= need_s``.
    The ``*_s`` thresholds are already scaled by ``keep_fraction`` when ``keep``.
    """
    need = required_wait_s(w, node_hours, floor_s)
    scale = w.keep_fraction if keep else 1.0
    if w.kind != "burstd":
        # plain size-based wait: one threshold (expressed so that the burstd steps never fire)
        return need * scale, need, -INFINITY, INFINITY, need * scale, need, w.kind
    # burstd: compute-wait, told by the queue. (1) A job whose on-prem start is near (expected remaining
    # wait below min_expected_wait_s) stays, however long it has waited: bursting it buys little wait for
    # a whole job's cost. (2) A job predicted to wait long for its size (expected remaining wait of at
    # least burstd_wait_per_node_hour_s x node-hours) bursts without first sitting out the compute-wait:
    # compute-wait would burst it anyway, only later. (3) Otherwise, compute-wait.
    first = max(w.burstd_min_wait_s, floor_s)
    soon = max(w.min_expected_wait_s, w.wait_to_runtime_ratio * time_limit_s) * scale
    if w.wait_value_per_hour > 0:  # (3) is then the value-of-waiting rule, which decide() applies per offer
        return first * scale, first, soon, -INFINITY, need * scale, need, "burstd"
    return first * scale, first, soon, w.burstd_wait_per_node_hour_s * node_hours * scale, need * scale, need, "burstd"


def _dur(seconds: float) -> str:
    if seconds == INFINITY:
        return "forever"
    s = int(seconds)
    if s < 90:
        return f"{s} s"
    if s < 90 * 60:
        return f"{round(s / 60)} min"
    if s < 48 * 3600:
        h = s / 3600
        return f"{h:.1f} h".replace(".0 h", " h")
    return f"{s / 86400:.1f} d".replace(".0 d", " d")


format_duration = _dur
