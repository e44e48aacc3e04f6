"""``burstctl cloud``: look at and clean up the cloud side (instances tagged with this cluster).

    burstctl cloud instances [--pool P] [--json]
    burstctl cloud gc [--dry-run] [--grace SECONDS] [--pool P] [--json]   # through the daemon (queued, fenced)
    burstctl cloud unprotect POOL          # leave protected mode after N boot failures (through the daemon)
"""

from __future__ import annotations

import typer
from rich.markup import escape

from burstd.cli.common import ConfigOption, JsonFlag, console, fail, get_config, print_json, sub_app
from burstd.cli.freetext import shown
from burstd.config import Config
from burstd.providers.base import ProviderError

cloud_app = sub_app("Cloud instances of this cluster: list, garbage-collect orphans, protection.")


def _providers(config: Config, pool: str | None):
    from burstd.providers import make_provider

    pools = [p for p in config.pools if p.provider in ("aws", "gcp") and pool in (None, p.name)]
    if pool and not pools:
        fail(f"no aws/gcp pool named {pool!r} in the config")
    try:
        return [make_provider(p, config) for p in pools]
    except ProviderError as exc:
        fail(str(exc))


def request_gc(config: Config, *, dry_run: bool, grace_s: float | None, pool: str | None) -> dict:
    """Ask the daemon (``POST /v1/cloud/gc``): it judges orphans by its own rule, and only its leader terminates
    them, each kill recorded under the HA fence; ``burstctl`` never opens the database or the clouds for this."""
    from burstd.daemon.client import ApiClient, ApiError

    if pool is not None and pool not in {p.name for p in config.pools}:
        fail(f"no pool named {pool!r} in the config")
    try:
        with ApiClient.from_config(config) as api:
            return api.post("/v1/cloud/gc", {"dry_run": dry_run, "grace_s": grace_s, "pool": pool})
    except ApiError as exc:  # 3: the daemon is not answering; 1: it refused (unknown pool, not listed yet)
        fail(str(exc), 3 if exc.status is None else 1)


@cloud_app.command("gc")
def gc(
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be terminated; change nothing."),
    grace: float = typer.Option(None, "--grace", min=0, help="Seconds an untracked instance may live "
                                "[default: daemon.orphan_grace_s]."),
    pool: str = typer.Option(None, "--pool", help="Only this pool."),
    config: str = ConfigOption,
    as_json: bool = JsonFlag,
) -> None:
    """Terminate instances tagged with this cluster that no open lease owns (after the grace period).

    The daemon does it: the leader's next cycle terminates them, each kill recorded first, so a VM of a gang still
    being launched is never taken for an orphan. --dry-run lists them as the daemon's last cycle saw the clouds."""
    cfg = get_config(config)
    answer = request_gc(cfg, dry_run=dry_run, grace_s=grace, pool=pool)
    rows = answer.get("orphans", [])
    if as_json:
        print_json(answer)
        return
    verb = "would terminate" if dry_run else "terminating"
    for r in rows:
        console.print(f"{verb} {r['pool']} {r['instance_id']} node={r['node'] or '?'}: {escape(shown(r['reason']))}",
                      highlight=False)
    if dry_run:
        if not rows:
            console.print("no orphan instances")
    else:
        console.print(f"orphan sweep queued (grace {answer.get('grace_s', 0):.0f}s): the leading daemon terminates "
                      "what it finds in its next cycle, each kill recorded before the cloud call (and logged)", highlight=False)


@cloud_app.command("instances")
def instances(pool: str = typer.Option(None, "--pool", help="Only this pool."), config: str = ConfigOption,
              as_json: bool = JsonFlag) -> None:
    """Every instance tagged with this cluster, as the cloud sees it."""
    cfg = get_config(config)
    rows = []
    for provider in _providers(cfg, pool):
        try:
            for i in provider.list_instances():
                rows.append({"pool": provider.name, "instance_id": i.instance_id, "node": i.node_name,
                             "lease_id": i.lease_id, "state": i.state, "preempted": i.preempted,
                             "offering": f"{i.offering.instance_type}/{i.offering.zone}/{i.offering.market}"
                             if i.offering else "", "launched_at": i.launched_at})
        except ProviderError as exc:
            fail(f"pool {provider.name}: {exc}")
        finally:
            provider.close()
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table("pool", title="cloud instances")
    table.add_column("instance", no_wrap=True)  # ids are never cut: an admin copies them into the next command
    table.add_column("node")
    table.add_column("lease", no_wrap=True)
    table.add_column("state")
    table.add_column("offering", overflow="fold")
    for r in rows:
        table.add_row(r["pool"], r["instance_id"], r["node"], r["lease_id"],
                      r["state"] + (" (preempted)" if r["preempted"] else ""), r["offering"])
    console.print(table)


@cloud_app.command("unprotect")
def unprotect(pool: str = typer.Argument(..., help="Pool to take out of protected mode."),
              config: str = ConfigOption) -> None:
    """Clear a pool's protected mode (entered after repeated boot failures) so it launches again."""
    from burstd.daemon.client import ApiClient, ApiError

    cfg = get_config(config)
    try:
        with ApiClient.from_config(cfg) as api:
            answer = api.post(f"/v1/pools/{pool}/unprotect")
    except ApiError as exc:  # 3: the daemon is not answering; 1: it refused (not protected, unknown pool)
        fail(str(exc), 3 if exc.status is None else 1)
    console.print(f"pool {pool} leaves protected mode (was: {answer.get('was', '')})", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(cloud_app, name="cloud")
