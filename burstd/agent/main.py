"""``burstd-agent``: watch the cloud's metadata service and act on a spot preemption notice.

    burstd-agent --config /etc/burstd/burstd.toml                 # the [agent] section
    burstd-agent --provider local --metadata-url http://169.254.169.254:1338 --node cloud1 \\
                 --daemon-url unix:/run/burstd/burstd.sock          # flags override the file

Runs until SIGTERM/SIGINT. ``--once`` polls a single time (for scripts and tests). ``--parity-gate`` checks the
node against the on-prem reference once and exits (``burstd.agent.gate``; node-bootstrap.sh runs it before slurmd).
``--enroll`` proves an AWS or GCP node's identity to the daemon once and keeps the agent token it answers
(``burstd.agent.enroll``; node-bootstrap.sh runs it before the gate). ``burstd-agent stage-in`` / ``stage-out``
move a burst job's data (``burstd.data.cli``; docs/data.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable

from burstd.agent.actions import NoticeHandler
from burstd.agent.preempt_rate import keep_fresh
from burstd.agent.report import report_notice
from burstd.agent.watchers import WatchError, make_watcher
from burstd.config import AgentConfig, Config, ConfigError, SlurmConfig, load_config
from burstd.domain.preemption import Notice

log = logging.getLogger("burstd.agent")


def _slurm_drain(cfg: SlurmConfig) -> Callable[[list[str], str], None]:
    """The Slurm adapter's ``drain`` (node names and reason checked there)."""
    from burstd.slurm import make_adapter

    return make_adapter(cfg).drain


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="burstd-agent", description="Act on the cloud's spot preemption notices."
    )
    ap.add_argument(
        "--config", "-c", help="burstd config file (its [agent] and [slurm] sections); default: none"
    )
    ap.add_argument("--provider", choices=["aws", "gcp", "local"])
    ap.add_argument("--metadata-url")
    ap.add_argument("--node", help="Slurm node name (default: the short hostname)")
    ap.add_argument("--poll-interval", type=float, dest="poll_interval_s")
    ap.add_argument("--signal", help="signal for the training processes (default USR1)")
    ap.add_argument("--lead-time", type=float, dest="lead_time_s")
    ap.add_argument("--daemon-url")
    ap.add_argument("--standby-daemon-url", action="append", dest="standby_daemon_urls",
                    help="the other head's burstd (repeatable); the dead-man switch tries it after --daemon-url")
    ap.add_argument("--deadman", type=float, dest="deadman_s",
                    help="power off after this many seconds without any burstd while no job runs (0 = never)")
    ap.add_argument("--poweroff-arg", action="append", dest="poweroff_command",
                    help="one word of the power-off command (repeat for each; use --poweroff-arg=-x for a dash)")
    ap.add_argument("--slurm-bin-dir", help="where scontrol lives")
    ap.add_argument("--slurm-conf", help="slurm.conf for scontrol (default: [slurm] conf, else $SLURM_CONF)")
    ap.add_argument("--preempt-rate-file", help="keep the pool's preemption rate here for the TaskProlog")
    ap.add_argument("--once", action="store_true", help="poll once and exit")
    ap.add_argument("--parity-gate", action="store_true",
                    help="before slurmd starts: compare this node with the on-prem reference the daemon keeps, "
                         "report a difference, exit (0: matches or no reference; 1: differs; 2, 3: not checked)")
    ap.add_argument("--enroll", action="store_true",
                    help="AWS/GCP, before the parity gate: prove this instance's identity to the daemon and keep "
                         "the agent token it answers in daemon_token_file (0: in place; 1: refused; 2, 3: not done)")
    ap.add_argument("--log-level", default="INFO")
    return ap


def build_config(args: argparse.Namespace) -> tuple[AgentConfig, SlurmConfig]:
    base = load_config(args.config) if args.config else Config()
    overrides = {
        k: v
        for k, v in {
            "provider": args.provider,
            "metadata_url": args.metadata_url,
            "node_name": args.node,
            "poll_interval_s": args.poll_interval_s,
            "signal": args.signal,
            "lead_time_s": args.lead_time_s,
            "daemon_url": args.daemon_url,
            "standby_daemon_urls": args.standby_daemon_urls,
            "deadman_s": args.deadman_s,
            "poweroff_command": args.poweroff_command,
            "preempt_rate_file": args.preempt_rate_file,
        }.items()
        if v is not None
    }
    agent = AgentConfig.model_validate({**base.agent.model_dump(), **overrides})
    slurm_over: dict[str, str] = {}
    if args.slurm_bin_dir:
        slurm_over["bin_dir"] = args.slurm_bin_dir
    # the Slurm adapter scrubs SLURM_* from the environment of its commands, so name the file explicitly
    conf = args.slurm_conf or base.slurm.conf or os.environ.get("SLURM_CONF")
    if conf:
        slurm_over["conf"] = conf
    slurm = SlurmConfig.model_validate({**base.slurm.model_dump(), **slurm_over})
    return agent, slurm


def run(
    agent: AgentConfig, slurm: SlurmConfig, *, once: bool = False, stop: threading.Event | None = None
) -> int:
    stop = stop or threading.Event()
    node = agent.node_name or socket.gethostname().split(".")[0]
    watcher = make_watcher(agent)

    def report(n: Notice) -> bool:
        return report_notice(agent.daemon_url, node, n, token_file=agent.daemon_token_file,
                             ca_file=agent.daemon_ca_file)

    handler = NoticeHandler(
        node,
        drain=_slurm_drain(slurm),
        report=report if agent.daemon_url else None,
        signum=signal.Signals["SIG" + agent.signal],
        lead_time_s=agent.lead_time_s,
        on_rebalance=agent.on_rebalance,
    )
    deadman = None
    urls = [u for u in (agent.daemon_url, *agent.standby_daemon_urls) if u]
    if agent.deadman_s > 0 and urls:  # without a burstd to reach there is nothing to miss
        from burstd.agent.deadman import DeadManSwitch, node_runs_a_job, probe_daemons, probe_every, run_command

        deadman = DeadManSwitch(node, timeout_s=agent.deadman_s,
                                probe=probe_daemons(urls, node, agent.daemon_token_file, agent.daemon_ca_file),
                                busy=node_runs_a_job, power_off=run_command(agent.poweroff_command),
                                probe_every_s=probe_every(agent.deadman_s))
    log.info(
        "watching node=%s provider=%s url=%s every=%ss",
        node,
        agent.provider,
        watcher.base_url,
        agent.poll_interval_s,
    )
    if agent.daemon_url and agent.preempt_rate_file and not once:
        # its own thread: a slow daemon must never delay the next metadata poll (a notice within a second)
        threading.Thread(target=keep_fresh, name="preempt-rate", daemon=True,
                         args=(stop, agent.daemon_url, node, agent.preempt_rate_file),
                         kwargs={"token_file": agent.daemon_token_file, "ca_file": agent.daemon_ca_file}).start()
    try:
        while not stop.is_set():
            started = time.monotonic()
            pause = agent.poll_interval_s
            try:
                handler.handle(watcher.poll())
                pause = watcher.next_poll_in(agent.poll_interval_s)
            except WatchError as exc:
                log.error("%s", exc)
            if deadman is not None:
                deadman.check()
            if once:
                break
            # polls start every interval (the requests' own time counts), so a notice waits at most one interval
            stop.wait(max(0.0, pause - (time.monotonic() - started)))
    finally:
        watcher.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["stage-in"], ["stage-out"]) and any(a.startswith("--daemon-url") for a in argv):
        from burstd.agent.stage_job import main as stage_job_main  # prolog/epilog: the job's data, asked of the daemon

        return stage_job_main(argv[1:], command=argv[0])
    if argv and argv[0] in ("stage-in", "stage-out"):  # a job's data, from a prolog/epilog (burstd.data.cli)
        from burstd.data.cli import main as data_main

        return data_main(argv, prog="burstd-agent")
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s burstd-agent %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll request is noise
    try:
        agent, slurm = build_config(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except ValueError as exc:  # pydantic ValidationError of a flag
        print(f"burstd-agent: invalid option: {exc}", file=sys.stderr)
        return 2
    if args.enroll:
        from burstd.agent.enroll import enroll

        return enroll(agent, agent.node_name)
    if args.parity_gate:
        from burstd.agent.gate import run_gate

        return run_gate(agent, agent.node_name or socket.gethostname().split(".")[0])
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    return run(agent, slurm, once=args.once, stop=stop)


if __name__ == "__main__":
    raise SystemExit(main())
