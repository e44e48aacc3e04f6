"""Operating burstd: ``burstctl status | nodes | leases | events | pause | resume | drain | terminate |
slurm-conf | explain`` (money is in ``spend_cmd.py``).

Everything except ``slurm-conf`` talks to the running daemon over its control API (the unix socket in
``api.socket``); reads are open to ``api.socket_group``, changes need ``api.admin_group``. Every read
takes ``--json`` (``common.show``); tables fit the terminal and ``--wide`` shows them whole (``tables``);
``status``, ``nodes``, ``leases`` and ``jobs`` take ``--watch SECONDS``.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
import typer
from rich.markup import escape

from burstd.cli.common import (
    ConfigOption, JsonFlag, WatchOption, WideFlag, api_call, console, fail, get_config, job_ref_arg, node_target,
    resolve_lease, show,
)
from burstd.cli.tables import Column, print_table, short_ids
from burstd.slurm.conf import HOOK_DIR

NODE_HELP = "cloud node name, or a unique prefix of its lease id or instance id"
ID_NOTE = "lease ids: unique prefixes, which every command takes"


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


def install_data_hooks(cfg, directory: str) -> list[str]:
    """The Prolog/Epilog wrappers (``burstd.slurm.data_hooks``) when some pool stages data; the paths written."""
    from burstd.slurm.data_hooks import data_hook_paths, data_hook_script, staging_pools

    if not staging_pools(cfg):
        return []
    os.makedirs(directory, exist_ok=True)
    written = []
    for kind, path in data_hook_paths(directory).items():
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(data_hook_script(cfg, kind))
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)
        written.append(path)
    return written


def _print_status(data: dict, wide: bool) -> None:
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
    _print_nodes(data["nodes"], wide)
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


def _print_nodes(rows: list[dict], wide: bool) -> None:
    cols = [Column("node"), Column("slurm state"), Column("flags", free_text=True), Column("lease")]
    print_table(console, "cloud nodes", cols,
                [[n["name"], n["state"], ",".join(n["flags"]), n["lease_state"] or "-"] for n in rows], wide=wide)


def _print_leases(rows: list[dict], wide: bool) -> None:
    # ids are never cut with an ellipsis (an admin copies them into the next command): at the terminal's width
    # they are unique prefixes, which every command takes; --wide shows them whole
    ids = {r["lease_id"]: r["lease_id"] for r in rows} if wide else short_ids([r["lease_id"] for r in rows])
    cols = [Column("lease"), Column("node"), Column("pool", drop=2), Column("state"), Column("since"),
            Column("instance", drop=1), Column("jobs", free_text=True), Column("gang", drop=0),
            Column("reason", free_text=True)]
    print_table(console, "leases", cols, [
        [ids[r["lease_id"]], r["node_name"], r["pool"], r["state"], _ago(r["state_since"]),
         r.get("instance_id") or "-", ",".join(map(str, r["job_ids"])) or "-",
         (r.get("gang") or "-")[:8],  # which leases start together: its first characters suffice
         r.get("reason") or ""] for r in rows], wide=wide, note=ID_NOTE if rows and not wide else "")


def _print_events(rows: list[dict], lease_id: str | None, wide: bool) -> None:
    ids = [str(r.get("lease_id", "")) for r in rows]
    short = dict(zip(ids, ids, strict=True)) if wide else short_ids(ids)
    cols = [Column("time"), Column("lease"), Column("from"), Column("to"), Column("reason", free_text=True)]
    print_table(console, f"events of lease {lease_id}" if lease_id else "events", cols, [
        [time.strftime("%m-%d %H:%M:%S", time.localtime(r["at"])) if r.get("at") else "-", short[lid],
         str(r.get("from_state") or ""), str(r.get("to_state") or ""), str(r.get("reason") or "")]
        for r, lid in zip(rows, ids, strict=True)], wide=wide, note=ID_NOTE if rows and not wide else "")


# ------------------------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(config: str = ConfigOption, as_json: bool = JsonFlag, wide: bool = WideFlag,
               watch: float = WatchOption) -> None:
        """Queue pressure, leases by state, cloud nodes, and what the loop did last."""
        show(lambda: api_call(config, lambda api: api.get("/v1/status")), lambda data: _print_status(data, wide),
             as_json=as_json, watch=watch)

    @app.command("nodes")
    def nodes(config: str = ConfigOption, as_json: bool = JsonFlag, wide: bool = WideFlag,
              watch: float = WatchOption) -> None:
        """burstd's cloud nodes: Slurm's state and flags, and the lease on each."""
        show(lambda: api_call(config, lambda api: api.get("/v1/status"))["nodes"],
             lambda rows: _print_nodes(rows, wide), as_json=as_json, watch=watch)

    @app.command("leases")
    def leases(
        state: str = typer.Option(None, "--state", help="comma-separated states, e.g. READY,BOOTING"),
        all_: bool = typer.Option(False, "--all", help="include TERMINATED and REFUSED"),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
        wide: bool = WideFlag,
        watch: float = WatchOption,
    ) -> None:
        """Node leases (open ones by default)."""
        show(lambda: api_call(config, lambda api: api.get("/v1/leases", state=state, all=all_ or None)),
             lambda rows: _print_leases(rows, wide), as_json=as_json, watch=watch)

    @app.command("events")
    def events(
        lease: str = typer.Option(None, "--lease", metavar="ID",
                                  help="Only this lease's events: its id, a unique prefix of it, or its instance id."),
        limit: int = typer.Option(50, "--limit", min=1, help="Newest events shown."),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
        wide: bool = WideFlag,
    ) -> None:
        """The lease event log (every transition, with time and reason)."""
        lease_id = resolve_lease(config, lease)["lease_id"] if lease else None
        show(lambda: api_call(config, lambda api: api.get("/v1/events", lease_id=lease_id, limit=limit)),
             lambda rows: _print_events(rows, lease_id, wide), as_json=as_json)

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
    def explain(job_id: str = typer.Argument(..., metavar="JOB",
                                             help="as Slurm writes it: 1234, 1234_5 (array task), 1234+0 (het)"),
                config: str = ConfigOption, as_json: bool = JsonFlag) -> None:
        """Why a job bursts, or does not."""
        ref = job_ref_arg(job_id)

        def render(data: dict) -> None:
            from burstd.cli.jobs_cmd import progress_sentence

            if data.get("progress"):
                console.print(progress_sentence(data["progress"]), highlight=False, soft_wrap=True)
            if data.get("checkpoint"):
                console.print(data["checkpoint"]["sentence"], highlight=False, soft_wrap=True)
            if data.get("sentence"):
                console.print(data["sentence"], highlight=False, soft_wrap=True)  # one line: greppable
                return
            verdict = "[green]bursts[/]" if data.get("burst") else "[yellow]stays on-prem[/]"
            console.print(f"job {ref}: {verdict}" + (f" to {data['pool']}" if data.get("pool") else "")
                          + f": {data.get('reason', '')}")

        show(lambda: api_call(config, lambda api: api.get(f"/v1/explain/{ref}")), render, as_json=as_json)

    @app.command("slurm-conf")
    def slurm_conf(
        config: str = ConfigOption,
        hook_dir: str = typer.Option(HOOK_DIR, "--hook-dir", help="where the hook scripts live"),
        suspend_time: int = typer.Option(300, "--suspend-time", help="idle seconds before a cloud node powers down"),
        install_hooks_: bool = typer.Option(False, "--install-hooks",
                                            help="also write the three hook scripts (and the data Prolog/Epilog "
                                                 "when a pool stages data) into --hook-dir"),
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
                for path in install_data_hooks(cfg, hook_dir):  # Prolog/Epilog: a pool stages data
                    typer.echo(f"# wrote {path}", err=True)
        except ValueError as exc:
            fail(str(exc), 2)
        for line in lines:
            typer.echo(line)
