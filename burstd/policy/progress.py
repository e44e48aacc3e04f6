"""Progress-aware escalation and the value of waiting: the two rules behind burstd's market and wait choice. Pure.

Uniform Progress ("Can't Be Late", NSDI '24): a job with a deadline ``D`` and ``L`` seconds of work should have
done ``L x (t - t0) / (D - t0)`` by time ``t``. burstd gives every job the deadline ``submit + progress_slack x
time limit`` (so the line runs from its submission, at ``1 / progress_slack`` of a second of work per second).
A job that a spot preemption sent back to the queue may burst to spot again while it is on or ahead of that
line, give or take the boot and restart a spot retry costs; once it falls further behind, it may only go
on-demand (or wait on-prem, if that is the cheaper way to finish: the value-of-wait rule decides).
A spot launch that found no capacity counts like a preemption (``setbacks``): without it, a job that never got
spot would wait for it past its line and miss the deadline (the Can't-Be-Late run, docs/policy.md). A job
neither preempted nor refused spot capacity has lost nothing to spot yet and is not escalated.

A job that declares a deadline (``sbatch --deadline``, ``Job.deadline``) has its line end there instead, and
gets the paper's safety net: once the time left to the deadline is at most its work left (time limit less the
work done) plus a boot and one cycle, only on-demand, started now, still makes it; so from then on it may
not go to spot, whatever its setbacks (``deadline_net``). Past ``out_of_reach`` not even that makes it;
on-demand is still its best chance.

Value of waiting: a job bursts when the on-prem wait it saves is worth more than its expected cloud bill.
The worth of an hour of a job's wait is ``wait_value_per_hour`` node-hours at the on-demand price of the site's
cheapest node of the job's kind (CPU or GPU; the same for every job of a kind, as mean JCT counts each job
once), so the rule adapts to the site's prices: an on-demand-only site waits longer before it pays than a spot
site, and compute-wait (wait proportional to node-hours at one fixed price) is the special case of a
constant price with no risk. The rule weighs only the job's own wait, so ``decide()`` bounds it: a job that has
waited ``waiting.max_wait_to_limit_ratio`` x its time limit bursts whatever the rule says (a whole-machine job
kept home stalls the queue behind it, which the rule does not see).
"""

from __future__ import annotations

from collections.abc import Iterable


def behind_s(now: float, submit: float, limit_s: float, done_s: float, slack: float) -> float:
    """Seconds of work the job is behind the uniform line (negative: ahead)."""
    if slack <= 0 or limit_s <= 0:
        return 0.0
    elapsed = now - submit
    required = elapsed / slack
    if required > limit_s:
        required = limit_s
    return required - done_s


def line_slack(submit: float, limit_s: float, slack: float, deadline: float | None) -> float:
    """The slack of a job's uniform line: ``(deadline - submit) / limit`` for a job that declared a deadline
    (its line ends there), else ``policy.progress_slack``. A deadline at or before the submission leaves a
    line that wants all the work at once."""
    if deadline is None or limit_s <= 0:
        return slack
    return max(deadline - submit, 1.0) / limit_s


def work_left_s(limit_s: float, done_s: float) -> float:
    return limit_s - done_s if limit_s > done_s else 0.0


def deadline_net(now: float, deadline: float | None, limit_s: float, done_s: float, boot_s: float,
                 cycle_s: float) -> bool:
    """Uniform Progress's safety net: the time left to the deadline is at most the work left plus a boot and
    one cycle (the next decision comes a cycle later: the last one that can still start it in time)."""
    return deadline is not None and deadline - now <= work_left_s(limit_s, done_s) + boot_s + cycle_s


def out_of_reach(now: float, deadline: float | None, limit_s: float, done_s: float, boot_s: float) -> bool:
    """Not even on-demand, booted now, finishes the work left by the deadline."""
    return deadline is not None and deadline - now < work_left_s(limit_s, done_s) + boot_s


def setbacks(restarts: int, failed_spot_launches: int) -> int:
    """What spot has cost a job so far, for ``off_spot``: its preemptions (Slurm's restart count) plus the spot
    launches for it that found no capacity. The daemon and the replays (``burstd.simulate``) both count so."""
    return restarts + failed_spot_launches


def off_spot(now: float, submit: float, limit_s: float, done_s: float, slack: float, boot_s: float,
             restarts: int, deadline: float | None = None, cycle_s: float = 0.0) -> bool:
    """A job spot set back (``restarts``: ``setbacks``) that is behind the uniform line by more than one boot
    plus one restart leaves spot; so does a job with a ``deadline`` inside its safety net (``deadline_net``),
    set back or not."""
    if deadline is not None and deadline_net(now, deadline, limit_s, done_s, boot_s, cycle_s):
        return True
    return restarts > 0 and behind_s(now, submit, limit_s, done_s,
                                     line_slack(submit, limit_s, slack, deadline)) > 2 * boot_s


def worth_micros(value_per_hour: float, ref_price_micros: int, saved_s: float) -> float:
    """What ``saved_s`` of a job's on-prem wait is worth, in micro-dollars."""
    if saved_s <= 0:
        return 0.0
    return value_per_hour * ref_price_micros * saved_s / 3600.0


def kept_work_s(run_lengths_s: Iterable[float], checkpoint_interval_s: float) -> float:
    """Seconds of work a requeued job keeps from its earlier cloud runs, as burstd believes it: each run (from
    its node's ready to its preemption) keeps its whole checkpoint intervals (``policy.checkpoint_interval_s``,
    the interval the spot cost model assumes). The daemon computes it from its ended leases and the replay
    from the runs it simulated, so both tell ``decide()`` the same thing (a replayed job that does not
    checkpoint really keeps nothing; burstd cannot know that, in the replay or live)."""
    if checkpoint_interval_s <= 0:
        return 0.0
    return sum((max(0.0, r) // checkpoint_interval_s) * checkpoint_interval_s for r in run_lengths_s)
