"""``burstctl preempt NODE [--notice SECONDS]``: a spot interruption on a local-provider VM, on command.

    burstctl preempt cloud2 --notice 30
    node cloud2 (netns sl-cloud2): preemption notice given, reclaimed at 2026-11-22T00:31:07Z (in 30 s)
    burstctl preempt cloud2 --notice 0
    node cloud2 (netns sl-cloud2): powered off without notice at 2026-11-22T00:30:37Z

The VM's metadata endpoint starts answering ``spot/instance-action`` at once (the node's burstd-agent
then drains the node and signals its jobs), and the VM is destroyed at the deadline, as a cloud would.
Only the local provider can do this; clouds preempt on their own schedule.
"""

from __future__ import annotations

import re
import time

import typer

from burstd.cli.common import ConfigOption, JsonFlag, console, fail, get_config, node_target, print_json
from burstd.config import Config, PoolConfig
from burstd.domain.preemption import iso
from burstd.slurm.base import check_name


def local_vm(cfg: Config, node: str) -> tuple[PoolConfig, str, str]:
    """(pool, records dir, netns) of a local-provider node; exits with a clear message otherwise."""
    from burstd.providers.local.preemption import records_dir_of

    try:
        check_name("node name", node)
    except ValueError as exc:
        fail(str(exc))
    pool = cfg.pool_of_node(node)
    if pool is None:
        fail(f"node {node!r} belongs to no configured pool")
    if pool.provider != "local":
        fail(
            f"node {node} is in pool {pool.name} (provider {pool.provider}): only local VMs can be preempted "
            "on command"
        )
    local = pool.local
    prefix = local.netns_prefix if local else "sl-"
    return pool, str(records_dir_of(cfg, pool)), f"{prefix}{node}"


def register(app: typer.Typer) -> None:
    @app.command("preempt")
    def preempt_cmd(
        node: str = typer.Argument(..., help="Slurm node name of a running local-provider VM, or a unique prefix "
                                             "of its lease id or instance id (asks the daemon)"),
        notice: float = typer.Option(
            None, "--notice", min=0, help="Seconds of warning [default: the pool's local.notice_s, 120 unless set]"
        ),
        config: str = ConfigOption,
        as_json: bool = JsonFlag,
    ) -> None:
        """Announce a spot interruption on a local VM through its metadata endpoint; reclaim it at the deadline."""
        from burstd.providers.local.preemption import preempt, vm_alive

        cfg = get_config(config)
        if cfg.pool_of_node(node) is None and re.fullmatch(r"[0-9a-f]{3,}|i-[0-9a-f]+", node):
            node = node_target(config, node)  # a lease or instance id prefix: the daemon knows its node
        pool, records, netns = local_vm(cfg, node)
        if not vm_alive(records, netns):
            fail(f"node {node} has no running VM (netns {netns} not found)")
        notice_s = notice if notice is not None else (pool.local.notice_s if pool.local else 120.0)
        deadline = preempt(records, netns, notice_s)
        if as_json:
            print_json(
                {
                    "node": node,
                    "netns": netns,
                    "notice_s": notice_s,
                    "deadline": iso(deadline),
                    "deadline_unix": deadline,
                }
            )
            return
        console.print(preempt_message(node, netns, notice_s, deadline, time.time()), highlight=False)


def preempt_message(node: str, netns: str, notice_s: float, deadline: float, now: float) -> str:
    """What ``burstctl preempt`` did, in words: ``--notice 0`` gives no notice at all (the VM is already off)."""
    if notice_s <= 0:
        return f"node {node} (netns {netns}): powered off without notice at {iso(deadline)}"
    return (f"node {node} (netns {netns}): preemption notice given, reclaimed at {iso(deadline)} "
            f"(in {max(0, deadline - now):.0f} s)")
