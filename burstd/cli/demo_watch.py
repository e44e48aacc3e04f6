"""What ``burstctl demo`` and ``burstctl demo --ha`` share: submitting the whole-node jobs, watching them until the
storm is over (a live table on a terminal, plain progress lines elsewhere), and the summary of what happened.

    ids = submit_jobs(bed, user, jobs=8, job_seconds=20)
    phase = watch_jobs(bed, ids, socket, prefix, timeout=600, look=None)   # "finished" when all went well
    summary = job_summary(bed, ids, user, prefix, socket, provider)

``look`` lets the HA demo act on each look at the leases (kill the leader mid-storm) without a loop of its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from rich.live import Live
from rich.table import Table

from burstd.cli.common import console
from burstd.domain.lease import FINAL_STATES

PENDING_PHASE = "jobs pending on-prem, waiting to burst"
_FINAL = frozenset(s.value for s in FINAL_STATES)

#: ``look(api, rows) -> (rows, phase)``: may look again (returns fresher rows) or act; a phase it returns is
#: shown and the loop looks again at once.
Look = Callable[[object, list[dict]], tuple[list[dict], str | None]]


def _view(jobs: dict[int, dict], nodes: dict[str, str], leases: Counter, cloud_prefix: str, phase: str) -> Table:
    t = Table(title=f"burstd demo: {phase}", expand=False)
    t.add_column("job")
    t.add_column("state")
    t.add_column("where")
    for jid, info in sorted(jobs.items()):
        where = info.get("NodeList", "") or info.get("Partition", "")
        tag = "[magenta]cloud[/]" if where.startswith(cloud_prefix) else ("on-prem" if where and
                                                                          not where.startswith("(") else "")
        style = {"COMPLETED": "green", "RUNNING": "cyan", "PENDING": "yellow", "CONFIGURING": "blue"}.get(
            info.get("JobState", ""), "white")
        t.add_row(str(jid), f"[{style}]{info.get('JobState', '?')}[/]", f"{where} {tag}".strip())
    t.add_section()
    t.add_row("nodes", " ".join(f"{n}={s}" for n, s in sorted(nodes.items())), "")
    t.add_row("leases", " ".join(f"{k}={v}" for k, v in sorted(leases.items())) or "none", "")
    return t


def _progress(jobs: dict[int, dict], nodes: dict[str, str], leases: Counter, phase: str) -> str:
    """One plain line (no terminal needed): the phase, job states, cloud node states and leases."""
    states = Counter(i.get("JobState", "?") for i in jobs.values())
    return (f"{phase}: jobs " + " ".join(f"{k}={v}" for k, v in sorted(states.items()))
            + "; cloud nodes " + (" ".join(f"{n}={s}" for n, s in sorted(nodes.items())) or "-")
            + "; leases " + (" ".join(f"{k}={v}" for k, v in sorted(leases.items())) or "none"))


SUMMARY_ROWS = (("jobs_submitted", "jobs submitted"), ("jobs_completed", "jobs completed"),
                ("jobs_on_cloud", "ran on cloud nodes"), ("jobs_on_prem", "ran on-prem"),
                ("leases_by_state", "leases by state"), ("leaked_vms", "VMs left behind"),
                ("finished", "finished cleanly"), ("slurm_version", "Slurm"), ("accounting", "slurmdbd"))
HA_ROWS = (("leader_killed", "leader SIGKILLed mid-storm"), ("failover_s", "standby led after (s)"),
           ("failover_bound_s", "failover bound (s)"), ("duplicate_vms", "duplicate VMs"))


DATA_ROWS = (("bytes_staged_in", "bytes staged in (crossed the link)"),
             ("bytes_staged_out", "bytes staged out (outputs home)"), ("cache_hits", "cache hits"),
             ("transfer_usd", "transfer booked (USD)"), ("outputs_verified", "outputs home, checksums right"),
             ("jobs_kept_home_for_data", "jobs kept home for their data"),
             ("node_bootstrap_errors", "node bootstrap errors"))


def summary_table(summary: dict) -> Table:
    t = Table(title="burstd demo: summary", show_header=False)
    t.add_column("what")
    t.add_column("value")
    for key, label in SUMMARY_ROWS + HA_ROWS + DATA_ROWS:
        if key not in summary:
            continue
        v = summary[key]
        if isinstance(v, dict):
            v = ", ".join(f"{k} {n}" for k, n in sorted(v.items())) or "none"
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        t.add_row(label, str(v))
    return t


class Watch:
    """The live table on a terminal; plain progress lines (printed when something changes) anywhere else."""

    def __init__(self):
        self.live = Live(console=console, refresh_per_second=2) if console.is_terminal else None
        self.last = ""

    def __enter__(self):
        if self.live is not None:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)

    def update(self, jobs, nodes, leases, prefix, phase) -> None:
        if self.live is not None:
            self.live.update(_view(jobs, nodes, leases, prefix, phase))
            return
        line = _progress(jobs, nodes, leases, phase)
        if line != self.last:
            console.print(f"  {line}", highlight=False, soft_wrap=True)
            self.last = line


def host_of_jobs(bed, user: str, ids: list[int]) -> dict[int, str]:
    """Where each job ran: Slurm's NodeList of the job ("" when it never ran). The output files cannot say: a
    burst job's stays on its cloud node."""
    hosts = {}
    for j in ids:
        nodes = bed.job(j).get("NodeList", "")
        hosts[j] = "" if nodes in ("", "(null)") else nodes
    return hosts


def leaked(bed, provider) -> int:
    """VMs still up: listed by the provider, plus cloud namespaces it does not list."""
    from burstd.providers.local import netns

    alive = [i for i in provider.list_instances() if not i.is_gone]
    left_ns = sorted(netns.list_netns() & {f"{bed.netns_prefix}{n}" for n in bed.cloud_nodes})
    return len(alive) + len([n for n in left_ns if n not in {i.extra.get("netns") for i in alive}])




def submit_jobs(bed, user: str, *, jobs: int, job_seconds: int) -> list[int]:
    """``jobs`` whole-node jobs with plain sbatch, as ``user``, to the on-prem partition (more than it holds)."""
    script = f"#!/bin/sh\nhostname\nsleep {job_seconds}\n"
    cpus = bed.config.onprem_cpus
    # a cloud VM booted from the node image has none of the head's folders: the job works in /tmp, which every
    # node has (its output stays on the node that ran it; where it ran is Slurm's NodeList, host_of_jobs)
    return [bed.sbatch(["-p", bed.onprem_partition, "-N", "1", "-n", str(cpus), "-t", "10", "--chdir=/tmp",
                        "-o", "/tmp/burstd-demo-%j.out"], script, user=user) for _ in range(jobs)]


def watch_jobs(bed, ids: list[int], socket: str, prefix: str, *, timeout: float, look: Look | None = None) -> str:
    """Look once a second until every job completed, no lease is open and every cloud node is suspended again
    (returns "finished"), or ``timeout`` passes (returns the phase it was in)."""
    from burstd.daemon.client import ApiClient

    phase = PENDING_PHASE
    deadline = time.monotonic() + timeout
    with ApiClient(socket) as api, Watch() as live:
        while time.monotonic() < deadline:
            infos = {j: bed.job(j) for j in ids}
            nodes = bed.node_states(bed.cloud_partition)
            rows = api.get("/v1/leases", all=True)
            if look is not None:
                rows, said = look(api, rows)
                if said:
                    phase = said
                    continue
            leases = Counter(r["state"] for r in rows)
            done = all(i.get("JobState") == "COMPLETED" for i in infos.values())
            if phase == PENDING_PHASE and any(i.get("NodeList", "").startswith(prefix) for i in infos.values()):
                phase = "jobs bursting onto cloud nodes"
            if done:
                phase = "all jobs done; cloud nodes suspend after idle"
            live.update(infos, nodes, leases, prefix, phase)
            open_leases = sum(v for k, v in leases.items() if k not in _FINAL)
            if done and rows and open_leases == 0 and all(s.endswith("~") for s in nodes.values()):
                phase = "finished"
                live.update(infos, nodes, leases, prefix, phase)
                break
            time.sleep(1)
    return phase


def job_summary(bed, ids: list[int], user: str, prefix: str, socket: str, provider, phase: str) -> dict:
    """The fields both demos report (``--json``): jobs, where they ran, leases, VMs left behind, the Slurm."""
    from burstd.daemon.client import ApiClient

    hosts = host_of_jobs(bed, user, ids)
    with ApiClient(socket) as api:
        rows = api.get("/v1/leases", all=True)
    infos = {j: bed.job(j) for j in ids}
    return {
        "jobs_submitted": len(ids),
        "jobs_completed": sum(1 for i in infos.values() if i.get("JobState") == "COMPLETED"),
        # the others, as Slurm last saw them: what an admin (or a failed CI run) needs to look further
        "jobs_not_completed": {str(j): " ".join(filter(None, (i.get("JobState", "gone"), i.get("Reason", ""),
                                                              f"restarts={i.get('Restarts', '?')}")))
                               for j, i in infos.items() if i.get("JobState") != "COMPLETED"},
        "jobs_on_cloud": sum(1 for h in hosts.values() if h.startswith(prefix)),
        "jobs_on_prem": sum(1 for h in hosts.values() if h and not h.startswith(prefix)),
        "leases_by_state": dict(Counter(r["state"] for r in rows)),
        "leaked_vms": leaked(bed, provider),
        "finished": phase == "finished",
        "slurm_version": bed.status().get("slurm_version"),
        "accounting": bed.accounting.dbd_pid() is not None,
        "hosts": {str(j): h for j, h in hosts.items()},
    }
