"""``burstctl cloud``: look at and clean up the cloud side (instances tagged with this cluster).

    burstctl cloud instances [--pool P] [--json]
    burstctl cloud gc [--dry-run] [--grace SECONDS] [--pool P] [--json]
    burstctl cloud unprotect POOL          # leave protected mode after N boot failures (through the daemon)
"""

from __future__ import annotations

import time
from collections.abc import Callable

import typer
from rich.markup import escape

from burstd.cli.common import ConfigOption, JsonFlag, console, fail, get_config, print_json, sub_app
from burstd.cli.freetext import shown
from burstd.config import Config
from burstd.domain.lease import LeaseState, may_own_instance
from burstd.providers.base import ProviderError
from burstd.providers.orphans import collect_orphans

cloud_app = sub_app("Cloud instances of this cluster: list, garbage-collect orphans, protection.")


def _open_store(config: Config):
    from burstd.db.store import Store

    return Store.open(config.database.url)


def live_lease_ids_from_store(config: Config) -> set[str]:
    """Leases that may still own an instance (LIVE states and FAILED): their VMs are not orphans."""
    store = _open_store(config)
    states = [s for s in LeaseState if may_own_instance(s)]
    return {lease.lease_id for lease in store.leases(states=states)}


def _providers(config: Config, pool: str | None):
    from burstd.providers import make_provider

    pools = [p for p in config.pools if p.provider in ("aws", "gcp") and pool in (None, p.name)]
    if pool and not pools:
        fail(f"no aws/gcp pool named {pool!r} in the config")
    try:
        return [make_provider(p, config) for p in pools]
    except ProviderError as exc:
        fail(str(exc))


def run_gc(config: Config, *, dry_run: bool, grace_s: float | None, pool: str | None,
           live_ids: Callable[[Config], set[str]] = live_lease_ids_from_store) -> list[dict]:
    grace = config.daemon.orphan_grace_s if grace_s is None else grace_s
    providers = _providers(config, pool)  # config problems first, before touching the database
    live = live_ids(config)
    rows = []
    for provider in providers:
        try:
            for o in collect_orphans(provider, live, grace_s=grace, dry_run=dry_run, now=time.time()):
                rows.append({"pool": provider.name, "instance_id": o.instance.instance_id,
                             "node": o.instance.node_name, "lease_id": o.instance.lease_id,
                             "reason": o.reason, "terminated": not dry_run})
        except ProviderError as exc:
            fail(f"pool {provider.name}: {exc}")
        finally:
            provider.close()
    return rows


@cloud_app.command("gc")
def gc(
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be terminated; change nothing."),
    grace: float = typer.Option(None, "--grace", min=0, help="Seconds an untracked instance may live "
                                "[default: daemon.orphan_grace_s]."),
    pool: str = typer.Option(None, "--pool", help="Only this pool."),
    config: str = ConfigOption,
    as_json: bool = JsonFlag,
) -> None:
    """Terminate instances tagged with this cluster that no live lease owns (after the grace period)."""
    cfg = get_config(config)
    rows = run_gc(cfg, dry_run=dry_run, grace_s=grace, pool=pool)
    if as_json:
        print_json({"dry_run": dry_run, "orphans": rows})
        return
    if not rows:
        console.print("no orphan instances")
        return
    verb = "would terminate" if dry_run else "terminated"
    for r in rows:
        console.print(f"{verb} {r['pool']} {r['instance_id']} node={r['node'] or '?'}: {escape(shown(r['reason']))}",
                      highlight=False)


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
