"""The words of ``decide()``'s explanations: gate and wait templates, and the builders that render a job's
``Explanation`` (stored compactly, rendered on read by ``ExplanationMap``)."""

from __future__ import annotations

from datetime import UTC, datetime

from burstd.domain.data import UNDECLARED_NOTICE, DataMove, format_bytes
from burstd.domain.decisions import Explanation
from burstd.domain.money import format_usd
from burstd.policy import waiting
from burstd.policy.offers import Offer
from burstd.policy.onprem_model import INF


def figures(waited: float, expected: float, dur) -> str:
    return (f"waited {dur(waited)}, expected on-prem start "
            + ("never (too big for on-prem)" if expected == INF else f"in {dur(expected)}") + ", ")


# Explanations are stored as compact records and rendered on read (``ExplanationMap``).
G_UNMANAGED = "partition {} is not one burstd manages (policy.onprem_partitions)"
G_PAUSED = "bursting is paused"
G_OPTOUT = "the job opted out (--comment={})"
G_ACCOUNT = "account {} is excluded"
G_USER = "user {} is excluded"
G_PARTITION = "partition {} is excluded"
G_QOS = "QOS {} is excluded"
G_HET = "heterogeneous jobs do not burst"
G_HELD = "the job is held"
G_PREEMPTED = "preempted {} times (max_preemptions_total {}): on-prem only"
G_REASON = "pending for {}, not for resources"
G_PRIORITY = "priority {} is below min_priority {}"
G_NOLIMIT = "no time limit, so its cloud cost has no bound"
G_DATA = "its data never leaves the site ({})"
G_RESERVATION = "it runs in reservation {} (sbatch --reservation), which holds no cloud node"


def moving(move: DataMove) -> str:
    """``moving 180 GB to aws-spot: 24 min, $16.20`` (and what the pool's cache already holds)."""
    cached = f" ({format_bytes(move.bytes_cached)} already there)" if move.bytes_cached else ""
    out = f", {format_bytes(move.bytes_out)} back" if move.bytes_out else ""
    return (f"moving {format_bytes(move.bytes_in)}{cached}{out} to {move.pool}: "
            f"{waiting.format_duration(move.stage_in_s)}, {format_usd(move.cost_micros)}")


def r_direct(jid: int) -> Explanation:
    return Explanation(jid, False, None, "submitted to a cloud partition directly; burstd leaves it alone")


def r_gate(jid: int, fmt: str, args: tuple) -> Explanation:
    return Explanation(jid, False, None, "stays on-prem: " + fmt.format(*args))


def deadline_words(note: tuple) -> str:
    """A job's declared deadline and its safety net (``burstd.policy.progress.deadline_net``), in words."""
    deadline, now, left_s, margin_s, net, unreachable = note
    dur = waiting.format_duration
    when = datetime.fromtimestamp(deadline, UTC).strftime("%Y-%m-%d %H:%M UTC")
    head = (f"deadline {when} (sbatch --deadline) in {dur(max(deadline - now, 0.0))}, {dur(left_s)} of work "
            f"left")
    if unreachable:
        return f"{head}: not even on-demand makes it now, so not spot: on-demand is its best chance"
    if net:
        return f"{head}: inside its safety net (the work left, a boot and a cycle), so not spot"
    return f"{head}: its safety net (not spot from then on) starts in {dur(deadline - now - left_s - margin_s)}"


def _with_deadline(reason: str, note: tuple | None) -> str:
    return reason if note is None else f"{reason}; {deadline_words(note)}"


def r_wait(jid: int, waited: float, expected: float, code: int, num: float, kind,
           note: tuple | None = None) -> Explanation:
    dur = waiting.format_duration
    if code == 1:
        why = f"minimum wait {dur(num)}"
    elif code == 2:
        why = f"waiting policy {kind} wants {dur(num)} on-prem first"
    elif code == 3:
        why = f"expected on-prem start is sooner than the {dur(num)} worth bursting for"
    elif code == 5:
        worth, offer, vow = kind
        mkt = "spot" if offer.market == "spot" else "on-demand"
        why = (f"its expected bill on {mkt} in pool {offer.pool} is {format_usd(int(num))}, and the on-prem wait "
               f"bursting would save is worth only {format_usd(int(worth))} (waiting.wait_value_per_hour {vow:g} "
               f"on-demand node-hours a job-hour)")
    elif code == 6:
        move, worth, bill = kind
        if bill:
            why = (f"{moving(move)}; waiting here: {waiting.format_duration(expected)}, worth {format_usd(int(worth))}"
                   f" (the whole bill with the move: {format_usd(int(bill))})")
        else:
            why = (f"{moving(move)}; waiting here: {waiting.format_duration(expected)}, so its data would arrive "
                   f"after it could start on-prem")
    else:
        head = "too big and long to finish on spot" if kind == -1 else setback_words(*kind)
        why = (f"{head}, so on-demand only, and the expected on-prem start is sooner than "
               f"{dur(num)} (waiting.escalated_wait_to_runtime_ratio x its time limit)")
    return Explanation(jid, False, None, _with_deadline(f"{figures(waited, expected, dur)}stays on-prem: {why}", note))


def setback_words(preempted: int, failed_spot_launches: int) -> str:
    """What spot cost a job so far, in words: its preemptions and its spot launches that found no capacity."""
    launches = (f"{failed_spot_launches} spot launch{'es' if failed_spot_launches != 1 else ''} for it found no "
                f"capacity")
    if not failed_spot_launches:
        return f"preempted {preempted} times"
    return launches if not preempted else f"preempted {preempted} times, {launches},"


W_FULL = "pool {} is full ({}/{} nodes)"
W_ACCT_CAP = "account {} is at its cloud node cap ({})"


def r_stay(jid: int, waited: float, expected: float, why: str | tuple[str, tuple],
           note: tuple | None = None) -> Explanation:
    if type(why) is tuple:
        why = why[0].format(*why[1])
    return Explanation(jid, False, None, _with_deadline(
        f"{figures(waited, expected, waiting.format_duration)}stays on-prem: {why}", note))


def r_burst(jid: int, waited: float, expected: float, left: int | None, account: str, period: str,
             chosen: Offer, why_mkt: tuple | None = None, move: DataMove | None = None,
             undeclared: bool = False, note: tuple | None = None) -> Explanation:
    left_s = "" if left is None else f"account {account} has {format_usd(max(left, 0))} left this {period}, "
    mkt = "" if chosen.market == "spot" else " on-demand"
    if why_mkt is not None:
        bill, worth, late, spot_setbacks, bound = why_mkt
        if late is not None:
            left_s += (f"{setback_words(*spot_setbacks)} and {waiting.format_duration(max(late, 0.0))} of work "
                       f"behind its Uniform Progress line (policy.progress_slack), so not spot again, ")
        if bill:
            worth_s = "unbounded (never on-prem)" if worth == INF else format_usd(int(worth))
            left_s += f"expected bill {format_usd(int(bill))}, the wait it saves is worth {worth_s}, "
        if bound is not None:
            left_s += (f"but it has waited over {bound:g} x its time limit (waiting.max_wait_to_limit_ratio), "
                       f"so it bursts anyway, ")
    if move is not None:
        left_s += f"{moving(move)}, "
    tail = f" (note: {UNDECLARED_NOTICE})" if undeclared else ""
    return Explanation(jid, True, chosen.pool, _with_deadline(
        f"{figures(waited, expected, waiting.format_duration)}{left_s}pool {chosen.pool} at "
        f"{format_usd(chosen.price_micros)}/node-h{mkt}: burst{tail}", note))


