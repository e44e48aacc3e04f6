"""``burstctl demo``: the whole story on one machine, with nothing but the embedded defaults.

    sudo burstctl demo                    # bring up a Slurm bed, start burstd, overload it, watch, tear down
    sudo burstctl demo --jobs 10 --json summary.json

It brings up the test bed (real slurmctld + two on-prem slurmd nodes + CLOUD nodes whose power-saving hooks are
burstd's), starts the daemon with the local provider and SQLite, submits with plain ``sbatch`` (as a normal
user) more whole-node jobs than the on-prem nodes hold, and shows them pending on-prem, bursting onto cloud nodes
(network-namespace VMs running a real slurmd), finishing, and the cloud nodes suspending after idle. Then it
prints a summary and tears everything down, its working folder included (``--keep`` leaves the bed up and the
folder, and names it). On a terminal the job table updates in place; anywhere else (CI logs, ``| tee``) it
prints one plain progress line per change instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.live import Live
from rich.table import Table

from burstd.cli.common import console, fail

DEMO_BED = "demo"
DEMO_SLOT = "21"


def _bed(slurm_release: str | None = None):
    os.environ.setdefault("BURSTD_BED_NAME", DEMO_BED)
    os.environ.setdefault("BURSTD_BED_SLOT", DEMO_SLOT)
    from burstd.testbed import Bed, BedConfig

    overrides: dict[str, object] = {k: v for k, v in {"suspend_time": 15, "suspend_timeout": 10}.items()
                                    if not os.environ.get(f"BURSTD_BED_{k.upper()}")}
    if slurm_release:
        overrides["slurm_release"] = slurm_release
    return Bed(BedConfig.from_env(None, **overrides))


@contextlib.contextmanager
def working_folder(keep: bool) -> Iterator[Path]:
    """The demo's working folder (daemon config, SQLite database, daemon log) under the temp dir: removed on
    the way out, whatever happened, unless ``keep`` (the demo then names it)."""
    work = Path(tempfile.mkdtemp(prefix="burstd-demo-"))
    try:
        yield work
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _daemon_config(bed, work: Path, min_wait_s: float) -> Path:
    from burstd.daemon.runner import config_with

    text = config_with(Path(bed.burstd_config).read_text(), {
        "database": {"url": f"sqlite:///{work}/burstd.db"},
        "daemon": {"state_dir": str(work / "state"), "cycle_interval_s": 2, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": min_wait_s, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 50},
    })
    path = work / "burstd.toml"
    path.write_text(text)
    return path


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


def summary_table(summary: dict) -> Table:
    t = Table(title="burstd demo: summary", show_header=False)
    t.add_column("what")
    t.add_column("value")
    for key, label in SUMMARY_ROWS + HA_ROWS:
        if key not in summary:
            continue
        v = summary[key]
        if isinstance(v, dict):
            v = ", ".join(f"{k} {n}" for k, n in sorted(v.items())) or "none"
        elif isinstance(v, bool):
            v = "yes" if v else "no"
        t.add_row(label, str(v))
    return t


class _Watch:
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
    """Where each job ran: the first word of its output (the script prints ``hostname``)."""
    workdir = bed.workdir(user)
    hosts = {}
    for j in ids:
        out = workdir / f"demo-{j}.out"
        hosts[j] = out.read_text().split()[0] if out.exists() and out.read_text().strip() else ""
    return hosts


def leaked(bed, provider) -> int:
    """VMs still up: listed by the provider, plus cloud namespaces it does not list."""
    from burstd.providers.local import netns

    alive = [i for i in provider.list_instances() if not i.is_gone]
    left_ns = sorted(netns.list_netns() & {f"{bed.netns_prefix}{n}" for n in bed.cloud_nodes})
    return len(alive) + len([n for n in left_ns if n not in {i.extra.get("netns") for i in alive}])


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        jobs: int = typer.Option(8, "--jobs", min=1, max=40, help="whole-node jobs to submit"),
        job_seconds: int = typer.Option(20, "--job-seconds", min=1, help="how long each job sleeps"),
        user: str = typer.Option("burstuser", "--user", help="normal user that submits the jobs"),
        min_wait: float = typer.Option(5.0, "--min-wait", help="seconds a job pends on-prem before it may burst"),
        as_json: str = typer.Option(None, "--json", help="write the summary to this file"),
        keep: bool = typer.Option(False, "--keep",
                                  help="leave the test bed up and keep the working folder (named at the end)"),
        ha: bool = typer.Option(False, "--ha", help="two daemons on a throwaway PostgreSQL; the leader is "
                                "SIGKILLed mid-storm (docs/ha.md)"),
        timeout: float = typer.Option(600, "--timeout", help="give up after this many seconds"),
        slurm_release: str = typer.Option(None, "--slurm-release",
                                          help="22.05 (the host's), 24.11 or 26.05 (a Debian chroot the bed builds)"),
    ) -> None:
        """Bring up a Slurm bed + burstd (local provider, SQLite), overload it with sbatch, watch jobs burst."""
        if os.geteuid() != 0:
            fail("the demo needs root: it creates network namespaces and runs slurmctld/slurmd")
        from burstd.config import ConfigError, load_config
        from burstd.daemon.client import ApiClient
        from burstd.daemon.runner import DaemonProcess
        from burstd.daemon.wiring import make_providers

        try:
            bed = _bed(slurm_release)
        except ValueError as exc:
            fail(f"bad test bed settings: {exc}", 2)
        console.print(f"[bold]1/5[/] bringing up the Slurm test bed [cyan]{bed.name}[/] (slurmctld, "
                      f"{len(bed.onprem_nodes)} on-prem nodes, {len(bed.cloud_nodes)} CLOUD nodes)...")
        bed.up()
        bed.reset_cloud_nodes()  # a bed kept from an earlier run may still show cloud nodes up whose VMs are gone
        with working_folder(keep) as work:
            if ha:
                ha_summary = _ha(bed, work, keep, jobs=jobs, job_seconds=job_seconds, user=user,
                                 min_wait=min_wait, timeout=timeout)
                _finish(bed, work, keep, ha_summary, as_json)
                return
            try:
                cfg_path = _daemon_config(bed, work, min_wait)
                cfg = load_config(cfg_path)
            except (ConfigError, ValueError) as exc:  # TOML that does not parse is a ValueError
                fail(f"the bed's burstd.toml ({bed.burstd_config}) does not make a daemon config: {exc}")
            prefix = cfg.pools[0].node_prefix
            daemon = DaemonProcess(cfg_path, log_path=work / "burstd.log")
            summary: dict = {}
            try:
                with bed.hooks("burstd"):
                    console.print(f"[bold]2/5[/] starting burstd (local provider, SQLite at "
                                  f"{work}/burstd.db)...")
                    daemon.start()
                    cpus = bed.config.onprem_cpus
                    console.print(f"[bold]3/5[/] submitting {jobs} whole-node jobs with plain sbatch as "
                                  f"[cyan]{user}[/] "
                                  f"to partition {bed.onprem_partition} ({len(bed.onprem_nodes)} nodes)...")
                    script = f"#!/bin/sh\nhostname\nsleep {job_seconds}\n"
                    ids = [bed.sbatch(["-p", bed.onprem_partition, "-N", "1", "-n", str(cpus), "-t", "10",
                                       "-o", "demo-%j.out"], script, user=user) for _ in range(jobs)]
                    phase = "jobs pending on-prem, waiting to burst"
                    deadline = time.monotonic() + timeout
                    api = ApiClient(cfg.api.socket)
                    with _Watch() as live:
                        while time.monotonic() < deadline:
                            infos = {j: bed.job(j) for j in ids}
                            nodes = bed.node_states(bed.cloud_partition)
                            rows = api.get("/v1/leases", all=True)
                            leases = Counter(r["state"] for r in rows)
                            done = all(i.get("JobState") == "COMPLETED" for i in infos.values())
                            open_leases = sum(v for k, v in leases.items()
                                              if k not in ("TERMINATED", "REFUSED"))
                            if any(i.get("NodeList", "").startswith(prefix) for i in infos.values()):
                                phase = "jobs bursting onto cloud nodes"
                            if done:
                                phase = "all jobs done; cloud nodes suspend after idle"
                            live.update(infos, nodes, leases, prefix, phase)
                            suspended = all(s.endswith("~") for s in nodes.values())
                            if done and rows and open_leases == 0 and suspended:
                                phase = "finished"
                                live.update(infos, nodes, leases, prefix, phase)
                                break
                            time.sleep(1)
                    api.close()
                    console.print("[bold]4/5[/] summary")
                    hosts = host_of_jobs(bed, user, ids)
                    with ApiClient(cfg.api.socket) as api:
                        rows = api.get("/v1/leases", all=True)
                    summary = {
                        "jobs_submitted": len(ids),
                        "jobs_completed": sum(1 for j in ids if bed.job(j).get("JobState") == "COMPLETED"),
                        "jobs_on_cloud": sum(1 for h in hosts.values() if h.startswith(prefix)),
                        "jobs_on_prem": sum(1 for h in hosts.values() if h and not h.startswith(prefix)),
                        "leases_by_state": dict(Counter(r["state"] for r in rows)),
                        "leaked_vms": leaked(bed, make_providers(cfg)[cfg.pools[0].name]),
                        "finished": phase == "finished",
                        "slurm_version": bed.status().get("slurm_version"),
                        "accounting": bed.accounting.dbd_pid() is not None,
                        "hosts": {str(j): h for j, h in hosts.items()},
                    }
                    console.print(summary_table(summary))
                    console.print()
            finally:
                console.print("[bold]5/5[/] tearing down" + (" (keeping the bed up)" if keep else "") + "...")
                daemon.stop()
                try:
                    from burstd.daemon.wiring import make_providers as _mp

                    for p in _mp(cfg).values():
                        left = [i.instance_id for i in p.list_instances() if not i.is_gone]
                        if left:
                            p.terminate(left)
                finally:
                    if not keep:
                        bed.down()
        _finish(bed, work, keep, summary, as_json)


def _ha(bed, work: Path, keep: bool, **storm) -> dict:
    from burstd.cli.demo_ha import run_storm
    from burstd.testbed.pg import PostgresError

    summary: dict = {}
    try:
        summary = run_storm(bed, work, watch=_Watch, **storm)
        console.print(summary_table(summary))
        console.print()
    except (PostgresError, RuntimeError) as exc:
        console.print(f"[red]demo --ha failed:[/] {exc}", highlight=False, soft_wrap=True)
    finally:
        console.print("[bold]5/5[/] tearing down" + (" (keeping the bed up)" if keep else "") + "...")
        if not keep:
            bed.down()
    return summary


def _finish(bed, work: Path, keep: bool, summary: dict, as_json: str | None) -> None:
    if keep:
        console.print(f"kept: the bed ({bed.name}; burstctl testbed down --name {bed.name}) and the working "
                      f"folder {work} (config, database, daemon log)", highlight=False, soft_wrap=True)
    if as_json:
        Path(as_json).write_text(json.dumps(summary, indent=2) + "\n")
        console.print(f"summary written to {as_json}")
    bad_ha = "failover_s" in summary and (summary["failover_s"] is None or summary["duplicate_vms"]
                                          or summary["jobs_completed"] != summary["jobs_submitted"])
    if not summary.get("finished") or summary.get("leaked_vms") or bad_ha:
        raise typer.Exit(1)
