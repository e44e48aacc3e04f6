"""``burstctl snapshot [--from FILE ...] [--json]``: what burstd sees of the cluster, in its own model.

Live (through the configured backend), or from saved squeue/sinfo/scontrol/slurmrestd output, so support
can replay a site's captured state:

    burstctl snapshot --json
    burstctl snapshot --from squeue.json --from sinfo.json --from partitions.json --json
"""

from __future__ import annotations

import typer
from rich.table import Table

from burstd.cli.common import JsonFlag, console, fail, get_config, print_json
from burstd.cli.freetext import cell
from burstd.slurm.base import SlurmError
from burstd.slurm.parse import snapshot_as_dict


def register(app: typer.Typer) -> None:
    @app.command("snapshot")
    def snapshot(
        from_files: list[str] = typer.Option(
            None, "--from", help="Read saved Slurm output instead of asking Slurm (repeat for several files)."
        ),
        all_jobs: bool = typer.Option(False, "--all-jobs", help="Also show finished jobs present in the input."),
        as_json: bool = JsonFlag,
        config: str = typer.Option(None, "--config", "-c", help="Config file (live mode) [env: BURSTD_CONFIG]."),
    ) -> None:
        """Print the jobs, nodes and partitions burstd sees (one snapshot)."""
        try:
            if from_files:
                from burstd.slurm.replay import snapshot_from_files

                snap = snapshot_from_files(from_files, active_only=not all_jobs)
            else:
                from burstd.slurm import make_adapter

                snap = make_adapter(get_config(config).slurm).snapshot()
        except (SlurmError, ValueError) as exc:
            fail(str(exc))
        if as_json:
            print_json(snapshot_as_dict(snap))
            return
        console.print(f"Slurm {snap.slurm_version or '?'} via {snap.source}: "
                      f"{len(snap.pending)} pending, {len(snap.running)} running, {len(snap.nodes)} nodes")
        jobs = Table("job", "user", "account", "partitions", "state", "reason", "cpus", "gpus", "name")
        for j in snap.jobs:
            state = "+".join((j.state, *j.state_flags))
            jobs.add_row(j.display_id, cell(j.user), cell(j.account), ",".join(j.partitions), state, cell(j.reason),
                         str(j.cpus), str(j.gpus), cell(j.name))
        console.print(jobs)
        nodes = Table("node", "state", "partitions", "address", "features", "reason")
        for n in snap.nodes:
            nodes.add_row(n.name, "+".join((n.state, *n.flags)), ",".join(n.partitions), n.address,
                          cell(",".join(n.features)), cell(n.reason))
        console.print(nodes)
