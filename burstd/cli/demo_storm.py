"""``burstctl demo --storm``: issue 22's preemption storm on the bed, measured (docs/preemption-storm.md).

Template jobs (two single-node, one data-parallel on two nodes: four of the bed's six cloud nodes, the other two
spare, as a real pool has) train while burstd bursts them; half the busy nodes are reclaimed with a 30 s notice,
then half without. The summary has, per job, the preemptions, the steps redone (the most for any one preemption),
the checkpoint interval, the seconds from each notice or reclaim to the first step after the resume and whether the
final weights equal an uninterrupted run; overall ``jobs_submitted``, ``jobs_completed``, ``leaked_vms``. The
machinery is :mod:`burstd.testbed.storm`, which the storm test runs too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from rich.table import Table

from burstd.cli.common import console


def storm_daemon_config(bed, work: Path) -> Path:
    from burstd.testbed.daemon_process import config_with
    from burstd.testbed.storm import storm_daemon_settings

    path = work / "burstd.toml"
    path.write_text(config_with(Path(bed.burstd_config).read_text(), storm_daemon_settings(work)))
    return path


def storm_table(summary: dict) -> Table:
    t = Table(title="burstd demo --storm: per job")
    for col in ("job", "nodes", "ranks", "preempted (notice, none)", "steps redone (notice, none)",
                "checkpoint every", "back to training (s)", "bit-identical"):
        t.add_column(col)
    for name, j in summary.get("jobs", {}).items():
        back = ", ".join("-" if b is None else f"{b:g}" for b in j["back_to_training_s"]) or "-"
        t.add_row(name, str(j["nodes"]), str(j["ranks"]),
                  f"{j['preemptions_with_notice']}, {j['preemptions_without_notice']}",
                  f"{j['steps_redone_with_notice']}, {j['steps_redone_without_notice']}",
                  str(j["checkpoint_interval_steps"]), back, "yes" if j["bit_identical"] else "no")
    return t


def run_storm_demo(bed, work: Path, cfg_path: Path) -> dict:
    """Run the storm (the daemon is running with ``cfg_path``), print its tables, return the summary with
    ``finished`` and the done rule's verdict (``failures``)."""
    from burstd.cli.demo_watch import leaked
    from burstd.config import load_config
    from burstd.daemon.wiring import make_providers
    from burstd.testbed.storm import run_storm
    from burstd.testbed.storm_summary import storm_failures

    cfg = load_config(cfg_path)
    provider = make_providers(cfg)[cfg.pools[0].name]
    d = work / "storm"
    d.mkdir()
    bed.job_env()  # built once, before any job needs it
    try:
        summary = run_storm(bed, cfg_path, d, lambda: leaked(bed, provider),
                            say=lambda text: console.print(f"  {text}", highlight=False, soft_wrap=True)).summary
        summary["finished"] = True
    except (AssertionError, subprocess.TimeoutExpired) as exc:  # a phase never came: say which, write what is known
        console.print(f"[red]the storm did not finish:[/] {exc}", highlight=False, soft_wrap=True)
        summary = {"finished": False, "error": str(exc), "leaked_vms": leaked(bed, provider)}
    summary["failures"] = storm_failures(summary)
    console.print(storm_table(summary))
    for why in summary["failures"]:
        console.print(f"[red]not done:[/] {why}", highlight=False, soft_wrap=True)
    return summary
