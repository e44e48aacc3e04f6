"""``burstctl doctor``: a preflight of what a new site gets wrong, each with how to fix it; exit 1 on any failure.

    burstctl doctor            # the config, slurm.conf as slurmctld runs it, munge, the database and its schema,
                               # the daemon and its metrics endpoint, cloud credentials
    burstctl doctor --json
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from burstd.cli.common import ConfigOption, JsonFlag, WideFlag, console, print_json
from burstd.cli.tables import Column, print_table
from burstd.report.preflight import (
    Finding, config_findings, credential_findings, database_finding, failed, metrics_finding, munge_finding,
    parse_show_config, run_command, slurm_findings,
)

if TYPE_CHECKING:
    from burstd.config import Config


def _config(path: str | None) -> tuple[Config | None, list[Finding]]:
    from burstd.config import ConfigError, load_config
    from burstd.config_host import host_problems

    try:
        cfg = load_config(path)
    except ConfigError as exc:
        return None, [Finding("config", "fail", p, f"fix {exc.path} (burstctl config check)") for p in exc.problems]
    problems = host_problems(cfg)
    return cfg, [Finding("config", "fail", p, "burstctl config check names the key") for p in problems] or [
        Finding("config", "ok", "the model and this host's checks pass")]


def _daemon(cfg: Config) -> Finding:
    from burstd.daemon.client import ApiClient, ApiError

    try:
        with ApiClient.from_config(cfg) as api:
            st = api.get("/v1/status")
    except ApiError as exc:
        return Finding("daemon", "warn", f"not reachable on {cfg.api.socket}: {exc}",
                       "systemctl start burstd (docs/admin-guide.md)")
    return Finding("daemon", "ok", f"answers on {cfg.api.socket} (cluster {st.get('cluster')})")


def collect(path: str | None) -> list[Finding]:
    from burstd.db.engine import schema_revisions  # Alembic and SQLAlchemy load only when the doctor runs

    cfg, found = _config(path)
    if cfg is None:
        return found
    scontrol = os.path.join(cfg.slurm.bin_dir, "scontrol")
    # the slurm.conf burstd's config names (as the daemon's adapter runs Slurm), not whatever SLURM_CONF says here
    rc, text = run_command([scontrol, "show", "config"],
                           env={"SLURM_CONF": cfg.slurm.conf} if cfg.slurm.conf else None)
    if rc != 0:
        found.append(Finding("slurmctld", "fail", text.strip().splitlines()[-1] if text.strip() else f"exit {rc}",
                             "is slurmctld running, and slurm.bin_dir right?"))
    else:
        found += slurm_findings(parse_show_config(text), cfg)
    found.append(munge_finding())
    found.append(database_finding(cfg.database.url, schema_revisions))
    daemon = _daemon(cfg)
    found += [daemon, metrics_finding(cfg, daemon_up=daemon.level == "ok")]
    found += credential_findings(cfg)
    found += config_findings(cfg)
    return found


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(config: str = ConfigOption, as_json: bool = JsonFlag, wide: bool = WideFlag) -> None:
        """Preflight: slurm.conf and hooks, association enforcement, munge, groups and paths, the database and its
        schema, the daemon, the metrics endpoint, cloud credentials. Says how to fix each problem; exits 1 on any
        failure."""
        found = collect(config)
        if as_json:
            print_json([f.as_dict() for f in found])
        else:
            marks = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
            print_table(console, "burstctl doctor",
                        [Column("check"), Column("level"), Column("what was seen", free_text=True),
                         Column("how to fix", free_text=True)],
                        [[f.check, marks[f.level], f.detail, f.fix] for f in found], wide=wide)
        if failed(found):
            raise typer.Exit(1)
