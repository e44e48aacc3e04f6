"""Operating burstd: ``burstctl status | leases | events | pause | resume | drain | terminate | slurm-conf |
explain`` (money is in ``spend_cmd.py``).

Everything except ``slurm-conf`` talks to the running daemon over its control API (the unix socket in
``api.socket``); reads are open to ``api.socket_group``, changes need ``api.admin_group``. Every read
takes ``--json``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import typer
from rich.markup import escape
from rich.table import Table

from burstd.cli.common import (
    ConfigOption, JsonFlag, api_call, console, fail, get_config, node_target, print_json, resolve_lease,
)
from burstd.cli.freetext import cell
from burstd.slurm.conf import HOOK_DIR

NODE_HELP = "cloud node name, or a unique prefix of its lease id or instance id"



def _ago(ts: float | None) -> str:
    if not ts:
        return "-"
    s = time.time() - ts
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f}m ago"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


HOOK_KINDS = ("resume", "suspend", "resume-fail")


def hook_script(kind: str, python: str, config_path: str) -> str:
    """The script Slurm runs as SlurmUser: every value shell-quoted (a path may hold quotes, $ or `)."""
    if kind not in HOOK_KINDS:
        raise ValueError(f"unknown hook kind {kind!r}")
    for what, value in (("python", python), ("config path", config_path)):
        if "\0" in value or "\n" in value or "\r" in value:
            raise ValueError(f"{what} {value!r}: a line break or NUL cannot go into a hook script")
    return (
        "#!/bin/sh\n"
        f"# burstd {kind} hook: Slurm passes the hostlist as $1; this returns at once.\n"
        "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n"
        f"BURSTD_CONFIG={shlex.quote(config_path)}\n"
        "export PATH BURSTD_CONFIG\n"
        f"exec {shlex.quote(python)} -m burstd.daemon.hooks {kind} \"$@\"\n"
    )


def install_hooks(directory: str, python: str, config_path: str) -> list[str]:
    os.makedirs(directory, exist_ok=True)
    written = []
    for kind in HOOK_KINDS:
        path = os.path.join(directory, kind)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(hook_script(kind, python, config_path))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


# ------------------------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Queue pressure, leases by state, cloud nodes, and what the loop did last."""
        data = api_call(config, lambda api: api.get("/v1/status"))
        if as_json:
            print_json(data)
            return
        q = data["queue"]
        pause = data.get("pause") or {}
        paused = "[bold red]PAUSED[/]" + (f" by {escape(pause['by'])}" if pause.get("by") else "") \
            + (f": {escape(pause['reason'])}" if pause.get("reason") else "")
        console.print(f"[bold]burstd[/] cluster [cyan]{data['cluster']}[/]  decider {data['decider']}  "
                      + (paused if data["paused"] else "[green]bursting on[/]"))
        ctld = data.get("slurmctld")
        if ctld:
            where = f" ({escape(ctld['via'])}" + (f" {escape(ctld['url'])}" if ctld.get("url") else "") + ")"
            console.print(("slurmctld: [green]ready[/]" if ctld.get("ok") else
                           f"slurmctld: [bold red]NOT READY[/]: {escape(str(ctld.get('detail', '')))}") + where,
                          highlight=False, soft_wrap=True)
        ha = data.get("ha")
        if ha:
            lead = (f"leader {escape(str(ha['leader']))} (epoch {ha['epoch']}) since "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(ha['since']))} ({_ago(ha['since'])})"
                    if ha.get("leader") else "no leader yet")
            console.print(f"ha: this daemon ({escape(ha['self'])}) is [bold]{ha['role']}[/]; {lead}"
                          + (f"; [red]{escape(ha['error'])}[/]" if ha.get("error") else ""), highlight=False)
        console.print(f"queue: {q['pending_jobs']} pending ({q['burst_eligible_jobs']} burst-eligible), "
                      f"{q['running_jobs']} running; by partition: "
                      + (", ".join(f"{k}={v}" for k, v in q["pending_by_partition"].items()) or "-"))
        console.print("leases: " + (", ".join(f"{k}={v}" for k, v in sorted(data["leases_by_state"].items()))
                                    or "none open"))
        t = Table("node", "slurm state", "flags", "lease", title="cloud nodes")
        for n in data["nodes"]:
            t.add_row(n["name"], n["state"], ",".join(n["flags"]), n["lease_state"] or "-")
        console.print(t)
        for pool, h in (data.get("pool_health") or {}).items():
            if not isinstance(h, dict):
                continue
            if h.get("protected"):
                console.print(f"[bold red]pool {pool} PROTECTED[/] since {_ago(h.get('protected_since'))}: "
                              f"{h.get('protected_reason')} (burstctl cloud unprotect {pool})", highlight=False)
            if h.get("last_launch_failure"):
                console.print(f"[yellow]pool {pool}[/] {h['last_launch_failure']['text']}"
                              + ("" if h.get("launching") else " (not launching)"), highlight=False)
            for c in h.get("cooldowns") or []:
                console.print(f"  pool {pool}: offering {c['offering']} cooling down until "
                              f"{time.strftime('%H:%M:%S', time.localtime(c['until']))} ({c['reason']})", highlight=False)
        lc = data.get("last_cycle")
        if lc:
            acts = ", ".join(f"{k}={v}" for k, v in lc["actions"].items()) or "nothing to do"
            console.print(f"last cycle {_ago(lc['started_at'])} in {lc['duration_s'] * 1000:.0f} ms: {acts}"
                          + (f"; [red]{len(lc['errors'])} error(s)[/]: {lc['errors'][-1]}" if lc["errors"] else ""))

    @app.command("leases")
    def leases(
        state: str = typer.Option(None, "--state", help="comma-separated states, e.g. READY,BOOTING"),
        all_: bool = typer.Option(False, "--all", help="include TERMINATED and REFUSED"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Node leases (open ones by default)."""
        rows = api_call(config, lambda api: api.get("/v1/leases", state=state, all=all_ or None))
        if as_json:
            print_json(rows)
            return
        # Ids are never cut (an admin copies them into the next command); the free-text columns fold instead.
        t = Table(title="leases")
        t.add_column("lease", no_wrap=True, min_width=32)
        for col in ("node", "pool", "state", "since"):
            t.add_column(col, no_wrap=True)
        t.add_column("instance", overflow="fold")
        t.add_column("jobs", overflow="fold")
        t.add_column("gang", overflow="fold")  # which leases start together (its first characters suffice)
        t.add_column("reason", overflow="fold")
        for r in rows:
            t.add_row(r["lease_id"], r["node_name"], r["pool"], r["state"], _ago(r["state_since"]),
                      r.get("instance_id") or "-", ",".join(map(str, r["job_ids"])) or "-",
                      (r.get("gang") or "-")[:8], cell(r.get("reason") or ""))
        console.print(t)

    @app.command("events")
    def events(
        lease: str = typer.Option(None, "--lease", metavar="ID",
                                  help="Only this lease's events: its id, a unique prefix of it, or its instance id."),
        limit: int = typer.Option(50, "--limit", min=1, help="Newest events shown."),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """The lease event log (every transition, with time and reason)."""
        lease_id = resolve_lease(config, lease)["lease_id"] if lease else None
        rows = api_call(config, lambda api: api.get("/v1/events", lease_id=lease_id, limit=limit))
        if as_json:
            print_json(rows)
            return
        t = Table("time", title=f"events of lease {lease_id}" if lease_id else "events")
        t.add_column("lease", no_wrap=True, min_width=32)
        for col in ("from", "to"):
            t.add_column(col, no_wrap=True)
        t.add_column("reason", overflow="fold")
        for r in rows:
            at = r.get("at") or r.get("created_at") or r.get("time")
            t.add_row(time.strftime("%m-%d %H:%M:%S", time.localtime(at)) if at else "-", str(r.get("lease_id", "")),
                      str(r.get("from_state") or r.get("from") or ""),
                      str(r.get("to_state") or r.get("state") or r.get("to") or ""), cell(r.get("reason") or ""))
        console.print(t)

    @app.command("pause")
    def pause(reason: str = typer.Option("", "--reason", help="Why, for whoever runs `burstctl status` next."),
              config: str = ConfigOption) -> None:
        """Stop bursting: no new job becomes eligible, pending eligibility is revoked, launches refused."""
        api_call(config, lambda api: api.post("/v1/pause", json={"reason": reason}))
        console.print("bursting [bold red]paused[/]" + (f": {escape(reason)}" if reason else ""))

    @app.command("resume")
    def resume(config: str = ConfigOption) -> None:
        """Resume bursting after ``pause``."""
        api_call(config, lambda api: api.post("/v1/resume"))
        console.print("bursting [green]resumed[/]")

    @app.command("drain")
    def drain(node: str = typer.Argument(..., help=NODE_HELP), reason: str = typer.Option("", "--reason"),
              config: str = ConfigOption) -> None:
        """Drain a cloud node: it finishes its jobs, takes no new ones, then powers down."""
        node = node_target(config, node)
        api_call(config, lambda api: api.post(f"/v1/nodes/{node}/drain", json={"reason": reason}))
        console.print(f"{node}: drain requested")

    @app.command("terminate")
    def terminate(node: str = typer.Argument(..., help=NODE_HELP), reason: str = typer.Option("", "--reason"),
                  config: str = ConfigOption) -> None:
        """Terminate a cloud node now (its jobs are requeued)."""
        node = node_target(config, node)
        api_call(config, lambda api: api.post(f"/v1/nodes/{node}/terminate", json={"reason": reason}))
        console.print(f"{node}: termination requested")

    @app.command("explain")
    def explain(job_id: int = typer.Argument(...), config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Why a job bursts, or does not."""
        data = api_call(config, lambda api: api.get(f"/v1/explain/{job_id}"))
        if as_json:
            print_json(data)
            return
        if data.get("sentence"):
            console.print(data["sentence"], highlight=False, soft_wrap=True)  # one line: greppable
            return
        verdict = "[green]bursts[/]" if data.get("burst") else "[yellow]stays on-prem[/]"
        console.print(f"job {job_id}: {verdict}" + (f" to {data['pool']}" if data.get("pool") else "")
                      + f": {data.get('reason', '')}")

    @app.command("slurm-conf")
    def slurm_conf(
        config: str = ConfigOption,
        hook_dir: str = typer.Option(HOOK_DIR, "--hook-dir", help="where the hook scripts live"),
        suspend_time: int = typer.Option(300, "--suspend-time", help="idle seconds before a cloud node powers down"),
        install_hooks_: bool = typer.Option(False, "--install-hooks",
                                            help="also write the three hook scripts into --hook-dir"),
        slurm_release: str = typer.Option(None, "--slurm-release",
                                          help="the site's Slurm release, e.g. 24.11 (default: the live one, "
                                               "from `squeue --version` with [slurm] bin_dir/conf)"),
        accounting: bool = typer.Option(False, "--accounting",
                                        help="the site runs slurmdbd: add AccountingStorageTRES with GPUs"),
    ) -> None:
        """Print the slurm.conf lines for burstd's cloud pools (power saving, CLOUD nodes, partitions)."""
        from burstd.slurm.conf import slurm_conf_lines
        from burstd.slurm.features import parse_release

        cfg = get_config(config)
        if slurm_release is None:
            from burstd.slurm.base import SlurmError
            from burstd.slurm.cli import CliAdapter

            try:
                release = CliAdapter(cfg.slurm).version
            except SlurmError as exc:
                fail(f"cannot read the live Slurm release ({exc}); give --slurm-release, e.g. 24.11", 2)
        else:
            try:
                release = parse_release(slurm_release)
            except ValueError:
                fail(f"--slurm-release: expected MAJOR.MINOR such as 24.11, got {slurm_release!r}", 2)
        try:
            lines = slurm_conf_lines(cfg, release=release, hook_dir=hook_dir, suspend_time=suspend_time,
                                     accounting=accounting)  # checked before anything is written
            if install_hooks_:
                from burstd.config import config_path

                for path in install_hooks(hook_dir, sys.executable, str(config_path(config).resolve())):
                    typer.echo(f"# wrote {path}", err=True)
        except ValueError as exc:
            fail(str(exc), 2)
        for line in lines:
            typer.echo(line)
