"""``burstd``: the daemon entry point (parse, wire, run).

    burstd --config /etc/burstd/burstd.toml --foreground

Under systemd (``Type=notify``) it sends ``READY=1`` once the control socket is listening and the first
cycle ran, ``WATCHDOG=1`` after every cycle (and from a heartbeat while cycles are healthy), and
``STOPPING=1`` on SIGTERM. Without ``--foreground`` it detaches (double fork) and logs to
``<state_dir>/burstd.log``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time

from burstd import start_up
from burstd.config import ConfigError, config_path
from burstd.config_host import load_checked_config
from burstd.daemon.logging import ev, get_logger, setup_logging

log = get_logger("main")


def _notifier():
    try:
        import sdnotify

        return sdnotify.SystemdNotifier()
    except Exception:  # noqa: BLE001
        return None


def _detach(log_path: str) -> None:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)


def main(argv: list[str] | None = None) -> int:
    # The start imports and wires everything (the cloud SDKs, FastAPI, SQLAlchemy): without the collector's passes
    # over it, a fifth less CPU (burstd.start_up); back on before the first cycle, or on any way out.
    with start_up.paused():
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(prog="burstd", description="burst a Slurm queue onto cloud VMs")
    ap.add_argument("--config", "-c", default=None, help="config file [env BURSTD_CONFIG; /etc/burstd/burstd.toml]")
    ap.add_argument("--foreground", "-f", action="store_true", help="stay attached (systemd, tests)")
    ap.add_argument("--once", action="store_true", help="run one reconcile cycle and exit")
    args = ap.parse_args(argv)
    try:
        config = load_checked_config(args.config)  # the same validation as `burstctl config check`
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    os.makedirs(config.daemon.state_dir, exist_ok=True)
    if not args.foreground and not args.once:
        _detach(os.path.join(config.daemon.state_dir, "burstd.log"))
    setup_logging(config.daemon.log_format)

    from burstd.api.app import create_app
    from burstd.api.server import ApiServer
    from burstd.daemon.metrics import Metrics
    from burstd.daemon.pools import PoolHealth
    from burstd.daemon.reconcile import Reconciler
    from burstd.daemon.service import LoopService
    from burstd.daemon.wiring import make_providers, make_slurm_adapter, open_store

    started = time.time()
    store = open_store(config)
    adapter = make_slurm_adapter(config)
    health = PoolHealth(store, config)  # one capacity cooldown for every cloud pool, restored from the store
    providers = make_providers(config, cooldown=health.cooldown)
    metrics = Metrics()
    from burstd.daemon.steady_clock import SteadyClock

    elector = None
    if config.ha.enabled:  # active/standby on one PostgreSQL (docs/ha.md); the loop's wake is wired below
        from burstd.daemon.leadership import Elector, holder_id

        elector = Elector(store, holder_id(config.ha.node_id), lease_s=config.ha.lease_s)
        elector.tick()
    try:  # one clock for every timestamp and timeout, immune to wall-clock steps (issue 9 item 10)
        rec = Reconciler(config, store, adapter, providers, metrics=metrics, health=health, leadership=elector,
                         clock=SteadyClock())
    except ValueError as exc:  # e.g. cloud.spot_advisor_file unreadable: say which key, no traceback
        print(f"{config_path(args.config)}: {exc}", file=sys.stderr)
        return 2
    if args.once:
        report = rec.cycle()
        print(report.as_dict())
        return 0

    notifier = _notifier()
    last_cycle = [time.monotonic()]

    def on_cycle() -> None:
        last_cycle[0] = time.monotonic()
        if notifier:
            notifier.notify("WATCHDOG=1")

    loop = LoopService(rec, config.daemon.cycle_interval_s, on_cycle=on_cycle)
    stop = threading.Event()
    if elector is not None:
        elector.on_elected = loop.wake  # a new leader acts at once, not at its next interval
        elector.run(stop, config.ha.renew_interval_s)
    server = ApiServer(create_app(rec, config, started_at=started), config)
    server.start()
    if not server.wait_started():
        log.error("control API did not start", extra=ev(socket=config.api.socket))
        return 1
    if config.daemon.metrics_port:
        metrics.serve(config.daemon.metrics_port, config.daemon.metrics_address)
    start_up.done()
    loop.start()

    def on_signal(signum, _frame) -> None:
        log.info("stopping", extra=ev(signal=signal.Signals(signum).name))
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("burstd started", extra=ev(socket=config.api.socket, pools=[p.name for p in config.pools],
                                        decider=rec.decider_name, pid=os.getpid(),
                                        ha=None if elector is None else elector.holder,
                                        interval_s=config.daemon.cycle_interval_s))
    from burstd.daemon.associations import accounting_warnings

    for warning in accounting_warnings(adapter):  # loud: budgets are only as good as the accounts Slurm vouches for
        log.error("accounts not vouched for by Slurm", extra=ev(detail=warning))
    if notifier:
        notifier.notify(f"READY=1\nSTATUS=reconciling {len(config.pools)} pool(s)\nMAINPID={os.getpid()}")
    # heartbeat: ping the watchdog while cycles keep happening; a stuck loop stops the pings
    stale_after = max(3 * config.daemon.cycle_interval_s, 30.0)
    while not stop.wait(5.0):
        if notifier and time.monotonic() - last_cycle[0] < stale_after:
            notifier.notify("WATCHDOG=1")
    if notifier:
        notifier.notify("STOPPING=1")
    loop.stop()
    if elector is not None:
        elector.resign()  # after the last cycle: the standby takes over at its next claim
    server.stop()
    for p in providers.values():
        try:
            p.close()
        except Exception:  # noqa: BLE001
            pass
    log.info("burstd stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
