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
from collections.abc import Iterator
from pathlib import Path

import typer

from burstd.cli.common import console, fail
from burstd.cli.demo_watch import job_summary, submit_jobs, summary_table, watch_jobs

DEMO_BED = "demo"
DEMO_SLOT = "21"


def _bed(slurm_release: str | None = None, shared_fs: bool = False, data: bool = False, storm: bool = False):
    os.environ.setdefault("BURSTD_BED_NAME", DEMO_BED)
    os.environ.setdefault("BURSTD_BED_SLOT", DEMO_SLOT)
    from burstd.testbed import Bed, BedConfig

    overrides: dict[str, object] = {k: v for k, v in {"suspend_time": 15, "suspend_timeout": 10}.items()
                                    if not os.environ.get(f"BURSTD_BED_{k.upper()}")}
    if slurm_release:
        overrides["slurm_release"] = slurm_release
    # the cloud VMs boot from the bed's node image (built once, cached) and see none of the head's files, unless
    # --shared-fs or BURSTD_BED_CLOUD_IMAGE says otherwise
    if not shared_fs and not os.environ.get("BURSTD_BED_CLOUD_IMAGE"):
        overrides["cloud_image"] = "default"
    if storm and not os.environ.get("BURSTD_BED_CRED_EXPIRE"):
        overrides["cred_expire"] = 10  # requeued jobs eligible again after 11 s instead of 31, as in the bed tests
    if storm and not os.environ.get("BURSTD_BED_CLOUD_NODES"):
        # a cloud partition larger than the four nodes the storm's jobs fill, as a real pool is: a notice then
        # powers up a spare node at once (planning.replacement_node), and the requeued job starts on a node that is
        # already up, not on the reclaimed one once Slurm has powered it down and up again
        overrides["cloud_count"] = 6
    if data:  # the bed's S3 store behind its metered link, and the data Prolog/Epilog (docs/data.md)
        overrides["data_store"] = True
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
    from burstd.testbed.daemon_process import config_with

    text = config_with(Path(bed.burstd_config).read_text(), {
        "database": {"url": f"sqlite:///{work}/burstd.db"},
        "daemon": {"state_dir": str(work / "state"), "cycle_interval_s": 2, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": min_wait_s, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 50},
    })
    path = work / "burstd.toml"
    path.write_text(text)
    return path


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
        shared_fs: bool = typer.Option(False, "--shared-fs",
                                       help="cloud VMs share the head node's files (the old bed) instead of "
                                            "booting from the node image"),
        data: bool = typer.Option(False, "--data",
                                  help="jobs read datasets from on-prem paths and write results: staged in through "
                                       "the bed's metered link and the pool's cache, outputs home verified "
                                       "(docs/data.md)"),
        storm: bool = typer.Option(False, "--storm",
                                   help="template training jobs (one on two nodes) on four of six cloud nodes; half the busy nodes reclaimed "
                                        "with a 30 s notice, then half without; exits 1 unless every job "
                                        "completes bit-identical within issue 22's bounds "
                                        "(docs/preemption-storm.md)"),
    ) -> None:
        """Bring up a Slurm bed + burstd (local provider, SQLite), overload it with sbatch, watch jobs burst."""
        if os.geteuid() != 0:
            fail("the demo needs root: it creates network namespaces and runs slurmctld/slurmd")
        from burstd.config import ConfigError, load_config
        from burstd.daemon.wiring import make_providers
        from burstd.testbed.daemon_process import DaemonProcess

        if data and (shared_fs or ha):
            fail("--data runs on VMs booted from the node image, with one daemon: not with --shared-fs or --ha", 2)
        if storm and (data or ha):
            fail("--storm runs one daemon and its own jobs: not with --data or --ha", 2)
        try:
            # the storm's jobs train from the head's files (the repository, the job environment, checkpoints)
            bed = _bed(slurm_release, shared_fs or storm, data, storm)
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
                if storm:
                    from burstd.cli.demo_storm import storm_daemon_config

                    cfg_path = storm_daemon_config(bed, work)
                if data:
                    from burstd.cli.demo_data import daemon_config

                    daemon_config(bed, work, cfg_path)
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
                    daemon.wait_first_cycle()  # its cloud gate set before the demo's first job
                    if storm:
                        from burstd.cli.demo_storm import run_storm_demo

                        console.print("[bold]3/5[/] the storm: template jobs on four cloud nodes (two spare), half "
                                      "of them reclaimed with notice, then half without...")
                        summary = run_storm_demo(bed, work, cfg_path)
                    elif data:
                        from burstd.cli.demo_data import run_data

                        console.print("[bold]3/5[/] submitting jobs that read on-prem datasets and write results...")
                        summary = run_data(bed, work, cfg_path, daemon, jobs=jobs, job_seconds=job_seconds,
                                           user=user, timeout=timeout)
                    else:
                        console.print(f"[bold]3/5[/] submitting {jobs} whole-node jobs with plain sbatch as "
                                      f"[cyan]{user}[/] "
                                      f"to partition {bed.onprem_partition} ({len(bed.onprem_nodes)} nodes)...")
                        ids = submit_jobs(bed, user, jobs=jobs, job_seconds=job_seconds)
                        phase = watch_jobs(bed, ids, cfg.api.socket, prefix, timeout=timeout)
                        console.print("[bold]4/5[/] summary")
                        summary = job_summary(bed, ids, user, prefix, cfg.api.socket,
                                              make_providers(cfg)[cfg.pools[0].name], phase)
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
        summary = run_storm(bed, work, **storm)
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
    from burstd.cli.demo_data import data_ok

    bad_data = "cache_hits" in summary and not data_ok(summary)
    bad_storm = bool(summary.get("failures"))  # demo --storm: issue 22's done rule (demo_storm.py)
    if not summary.get("finished") or summary.get("leaked_vms") or bad_ha or bad_data or bad_storm:
        raise typer.Exit(1)
