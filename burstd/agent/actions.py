"""What the node agent does with a notice: drain, signal the training processes, report. Idempotent.

    handler = NoticeHandler("cloud1", drain=slurm.drain, report=daemon_report, signum=signal.SIGUSR1)
    handler.handle(watcher.poll())      # call every poll; repeating a notice repeats nothing

For an interruption notice, before its deadline:

1. drain the node in Slurm with a reason that carries the deadline (``burstd-preempt: terminate at ...``),
   so nothing new lands on it and the daemon learns of it server-side (retried each poll until it works);
2. report the notice to the daemon (best effort: logged, never blocks the rest);
3. once ``lead_time_s`` has passed since the notice was first seen, deliver the signal to the training
   processes of every job on the node (``find_targets``); processes that appear later (a worker still
   starting) get it on a later poll; no process ever gets it twice.

After the deadline it does nothing more. A rebalance recommendation drains (``on_rebalance="drain"``) or is
only reported.

Which jobs: only those that asked for the signal, by the marker ``BURSTD_PREEMPTIBLE=1`` in the environment of
one of their processes (the sbatch templates export it; a job that uses ``burstd.train`` on its own exports it
too). Any other job (a plain ``sleep``, a script that does not handle SIGUSR1, which the signal would kill) is
left running: burstd requeues it when the VM goes, from the jobs Slurm shows running on the node.

Which processes: those of this node (on the local bed every namespace VM shares one PID namespace, so
the scan keeps only processes in the agent's own network namespace) that belong to a Slurm job
(``SLURM_JOB_ID`` in their environment), never slurmd or slurmstepd. Per job, the torch workers
(``LOCAL_RANK`` set; torchrun's own agent does not have it and would die of SIGUSR1) that are not
children of another worker (DataLoader workers); a job without any: its leaf processes (the program a
batch script runs, not the shell that waits for it).
"""

from __future__ import annotations

import logging
import os
import signal as _signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from burstd.domain.preemption import Notice, iso, preemption_reason

log = logging.getLogger("burstd.agent")

# slurmd/slurmstepd are Slurm's; pt_elastic is torchrun's agent (it names itself so): it would die of SIGUSR1
# unless told --signals-to-handle, and it is never the process that checkpoints.
NEVER_SIGNAL = frozenset({"slurmd", "slurmstepd", "burstd-agent", "pt_elastic", "torchrun"})


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    comm: str
    job_id: str | None  # SLURM_JOB_ID from its environment
    local_rank: str | None  # LOCAL_RANK (set by torchrun for its workers)
    start_ticks: int = 0  # /proc/PID/stat field 22: tells a reused PID from the original
    # BURSTD_PREEMPTIBLE=1 in its environment: its job asked for the signal. ``_read_proc`` always sets it from
    # /proc; a Proc made by hand (tests, callers that filtered already) is taken as asking.
    preemptible: bool = True

#: The environment variable by which a job asks burstd-agent for the preemption signal.
PREEMPTIBLE_MARKER = "BURSTD_PREEMPTIBLE"


def _read_proc(proc: Path) -> Proc | None:
    try:
        stat = (proc / "stat").read_text()
        environ = (proc / "environ").read_bytes()
    except (OSError, ValueError):
        return None
    lpar, rpar = stat.find("("), stat.rfind(")")
    comm = stat[lpar + 1 : rpar]
    rest = stat[rpar + 2 :].split()
    env: dict[str, str] = {}
    for item in environ.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep and k in (b"SLURM_JOB_ID", b"SLURM_JOBID", b"LOCAL_RANK", PREEMPTIBLE_MARKER.encode()):
            env[k.decode()] = v.decode(errors="replace")
    return Proc(
        pid=int(proc.name),
        ppid=int(rest[1]),
        comm=comm,
        job_id=env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"),
        local_rank=env.get("LOCAL_RANK"),
        start_ticks=int(rest[19]),
        preemptible=env.get(PREEMPTIBLE_MARKER, "") not in ("", "0"),
    )


def scan_processes(proc_root: str = "/proc", *, same_netns: bool = True) -> list[Proc]:
    """Every process visible in ``proc_root`` (in this network namespace when ``same_netns``)."""
    root = Path(proc_root)
    me = os.getpid()
    try:
        my_ns = os.readlink(root / "self" / "ns" / "net") if same_netns else None
    except OSError:
        my_ns = None
    out = []
    for entry in root.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        if my_ns is not None:
            try:
                if os.readlink(entry / "ns" / "net") != my_ns:
                    continue
            except OSError:
                continue
        p = _read_proc(entry)
        if p is not None:
            out.append(p)
    return out


def select_targets(
    procs: Iterable[Proc], torch_jobs: set[str] | frozenset[str] = frozenset()
) -> dict[str, list[Proc]]:
    """Job id -> the processes to signal (pure; see the module docstring for the rule).

    ``torch_jobs``: jobs already seen with torch workers; they never fall back to leaf processes (once the
    workers have exited, the leaves are torchrun's agent and the batch shell, which must not be signalled).
    """
    jobs: dict[str, dict[int, Proc]] = {}
    parents: set[int] = (
        set()
    )  # of every job process, signalled or not: a shell waiting on torchrun is no leaf
    for p in procs:
        if p.job_id:
            parents.add(p.ppid)
            if p.comm not in NEVER_SIGNAL:
                jobs.setdefault(p.job_id, {})[p.pid] = p
    out: dict[str, list[Proc]] = {}
    for job, members in jobs.items():
        if not any(p.preemptible for p in members.values()):
            continue  # it never asked: the signal would kill it; burstd requeues it when the VM goes
        workers = [
            p
            for p in members.values()
            if p.local_rank is not None and not (p.ppid in members and members[p.ppid].local_rank is not None)
        ]
        if workers:
            out[job] = sorted(workers, key=lambda p: p.pid)
            continue
        if job in torch_jobs:
            continue
        out[job] = sorted((p for p in members.values() if p.pid not in parents), key=lambda p: p.pid)
    return out


def find_targets(
    proc_root: str = "/proc", torch_jobs: set[str] | frozenset[str] = frozenset()
) -> dict[str, list[Proc]]:
    return select_targets(scan_processes(proc_root), torch_jobs)


@dataclass
class _Handled:
    first_seen: float
    drained: bool = False
    reported: bool = False
    signalled: set[tuple[int, int]] = field(default_factory=set)  # (pid, start_ticks)
    expired: bool = False


class NoticeHandler:
    """Turns the notices of each poll into actions, once each. Not thread-safe (one agent loop)."""

    def __init__(
        self,
        node: str,
        *,
        drain: Callable[[list[str], str], None],
        report: Callable[[Notice], bool] | None = None,
        signum: int = _signal.SIGUSR1,
        lead_time_s: float = 0.0,
        on_rebalance: str = "drain",
        targets: Callable[..., dict[str, list[Proc]]] = find_targets,
        kill: Callable[[int, int], None] = os.kill,
        clock: Callable[[], float] = time.time,
    ):
        self.node = node
        self.drain = drain
        self.report = report
        self.signum = signum
        self.lead_time_s = lead_time_s
        self.on_rebalance = on_rebalance
        self.targets = targets
        self.kill = kill
        self.clock = clock
        self._handled: dict[tuple, _Handled] = {}
        self._torch_jobs: set[str] = set()  # jobs seen with torch workers: never signal their leaves
        self.signalled_jobs: dict[str, list[int]] = {}  # for tests and the report: job -> pids signalled

    def handle(self, notices: list[Notice]) -> None:
        for n in notices:
            if n.kind == "interruption":
                self._interruption(n)
            elif self.on_rebalance != "ignore" and not any(k[0] == "interruption" for k in self._handled):
                self._rebalance(n)

    def _state(self, n: Notice) -> _Handled:
        st = self._handled.get(n.key)
        if st is None:
            st = self._handled[n.key] = _Handled(first_seen=self.clock())
            log.warning(
                "notice node=%s kind=%s action=%s deadline=%s source=%s",
                self.node,
                n.kind,
                n.action,
                iso(n.deadline),
                n.source,
            )
        return st

    def _drain(self, n: Notice, st: _Handled) -> None:
        if st.drained:
            return
        reason = preemption_reason(n)
        try:
            self.drain([self.node], reason)
            st.drained = True
            log.info("drained node=%s reason=%r", self.node, reason)
        except Exception as exc:  # noqa: BLE001 - retried next poll; signalling must not wait for Slurm
            log.error("drain failed node=%s error=%s (retrying next poll)", self.node, exc)

    def _report(self, n: Notice, st: _Handled) -> None:
        if st.reported or self.report is None:
            return
        st.reported = True  # best effort: one try per notice, the daemon also sees the drain reason
        try:
            ok = self.report(n)
            log.info("reported to daemon node=%s ok=%s", self.node, ok)
        except Exception as exc:  # noqa: BLE001 - logged; one failure must not stop the loop
            log.error("report to daemon failed node=%s error=%s", self.node, exc)

    def _interruption(self, n: Notice) -> None:
        st = self._state(n)
        now = self.clock()
        if now >= n.deadline:
            if not st.expired:
                st.expired = True
                log.warning(
                    "deadline passed node=%s deadline=%s: nothing more to do", self.node, iso(n.deadline)
                )
            return
        self._drain(n, st)
        if now >= st.first_seen + self.lead_time_s:
            self._signal(st)
        self._report(n, st)

    def _signal(self, st: _Handled) -> None:
        try:
            targets = self.targets(torch_jobs=frozenset(self._torch_jobs))
        except Exception as exc:  # noqa: BLE001 - logged; one failure must not stop the loop
            log.error("process scan failed node=%s error=%s", self.node, exc)
            return
        for job, procs in targets.items():
            if any(p.local_rank is not None for p in procs):
                self._torch_jobs.add(job)
            for p in procs:
                key = (p.pid, p.start_ticks)
                if key in st.signalled:
                    continue
                st.signalled.add(key)
                try:
                    self.kill(p.pid, self.signum)
                except ProcessLookupError:
                    continue
                except PermissionError as exc:
                    log.error("cannot signal pid=%s job=%s: %s", p.pid, job, exc)
                    continue
                self.signalled_jobs.setdefault(job, []).append(p.pid)
                log.info(
                    "signalled node=%s job=%s pid=%s comm=%s local_rank=%s signal=%s",
                    self.node,
                    job,
                    p.pid,
                    p.comm,
                    p.local_rank,
                    _signal.Signals(self.signum).name,
                )

    def _rebalance(self, n: Notice) -> None:
        st = self._state(n)
        if self.on_rebalance == "drain":
            self._drain(n, st)
        self._report(n, st)
