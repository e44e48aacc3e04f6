#!/usr/bin/env python3
"""A resume storm: 500 cloud nodes asked for in one ResumeProgram call, against the cloud fakes, burstd's path
against the bare provider calls measured in the same run.

    .venv/bin/python bench/bench_launch_storm.py                            # 500 nodes, AWS and GCP, 8 workers
    .venv/bin/python bench/bench_launch_storm.py --nodes 100 --clouds aws --workers 4 --latency-ms 0

The clouds: moto in server mode behind the fault proxy (real boto3 over HTTP: ``tests/fakes/ec2_faults.py``) and
the fake Compute Engine endpoint (the real google-cloud-compute client: ``tests/fakes/gce.py``), each in a child
process of its own (so the fake's CPU is not the measured process's), fresh for every measured side.
``--latency-ms`` makes every create call (CreateFleet, bulkInsert) answer that much later, through the fakes'
own ``delay`` fault: a real cloud takes a while to answer a create call, and a fake that answers in a
millisecond would hide what running launches at once is for.

Per cloud, four sides, each the same ``--nodes`` launches on a fresh fake cloud:

* ``bare 1``: ``provider.launch`` called directly, one after another (no store, no daemon);
* ``bare W``: the same calls from a pool of ``--workers`` threads;
* ``burstd W``: the daemon's own parts in this process (``Reconciler`` run by its ``LoopService``, the real
  ``Store`` on a SQLite file, the providers as ``burstd`` wires them, ``daemon.launch_workers = W``); Slurm is a
  stand-in that shows the nodes POWERING_UP. The clock starts at the intake's ``request_resume`` (what the
  hook's API call runs: one REQUESTED lease per node, committed) and stops at the last lease's LAUNCHING and
  BOOTING event (from the store's event log);
* ``burstd 1``: the same with ``launch_workers = 1`` (one launch after another, as before the pool).

Printed: seconds per side, and the ratios burstd W / bare W and burstd 1 / bare 1 (to all LAUNCHING and to all
BOOTING), and the speed-up burstd 1 / burstd W. Every side is checked: one VM per lease, every lease BOOTING.
A warm-up launch (one extra node) precedes every side, so one-time costs (launch template, prices) are outside.
Speed is reported, never asserted. The default run takes about 8 minutes on 2 cores, mostly the fakes' own work.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from burstd.config import Config, parse_config  # noqa: E402
from burstd.domain.lease import LeaseState  # noqa: E402
from burstd.providers.base import LaunchRequest, Provider  # noqa: E402

S = LeaseState
REGION = "us-east-1"
PROJECT = "burstd-bench"
CONF_SERVER = "10.77.0.1:6817"
CREATE_CALL = {"aws": "CreateFleet", "gcp": "bulkInsert"}


# --- the fake cloud, in a child process -------------------------------------------------------------------------
def serve(cloud: str, latency_ms: float) -> None:
    """Child process: start the fake cloud, print its address as one JSON line, serve until stdin closes."""
    if cloud == "aws":
        from moto.server import ThreadedMotoServer

        from tests.fakes.ec2_faults import Ec2FaultProxy

        index_moto_tags()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        fake = Ec2FaultProxy(host, port, REGION)
        info = {"url": fake.url, "direct": f"http://{host}:{port}"}
    else:
        from tests.fakes.gce import FakeGce

        fake = FakeGce()
        info = {"url": fake.url}
    if latency_ms > 0:
        fake.delay(latency_ms / 1000, 10**9, CREATE_CALL[cloud])
    print(json.dumps(info), flush=True)
    sys.stdin.read()
    os._exit(0)  # the servers' threads would keep the process alive


def index_moto_tags() -> None:
    """moto finds one resource's tags by scanning every tag of every resource with a regex, so a tag-filtered
    DescribeInstances over N instances costs N^2 (about a second per call at 300 instances: the fake, not the
    provider, would be measured). Look them up by resource id instead: the same answer, in O(1)."""
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.models.tags import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(self) -> list[dict[str, str]]:
        if not self.id:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
        return [{"resource_id": self.id, "key": k, "value": v, "resource_type": kind}
                for k, v in self.ec2_backend.tags.get(self.id, {}).items()]

    TaggedEC2Resource.get_tags = get_tags


class FakeCloud:
    log_path: Path | None = None  # the child's stderr (moto logs every request) goes here

    def __init__(self, cloud: str, latency_ms: float):
        self.cloud = cloud
        with open(self.log_path or os.devnull, "a") as err:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", cloud, "--latency-ms", str(latency_ms)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)})
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise RuntimeError(f"the fake {cloud} did not start")
        self.info = json.loads(line)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> FakeCloud:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def fake_credentials() -> None:
    from tests.fakes.moto_server import FAKE_ACCESS_KEY, FAKE_SECRET_KEY

    os.environ.update({"AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": FAKE_SECRET_KEY,
                       "AWS_DEFAULT_REGION": REGION})


def bench_config(cloud: FakeCloud, nodes: int, workers: int, work: Path) -> Config:
    types = [{"name": n, "cpus": 2, "memory_mb": 4000} for n in (
        ("m5.large", "c5.large") if cloud.cloud == "aws" else ("n2-standard-2", "e2-standard-2"))]
    pool = {"name": cloud.cloud, "provider": cloud.cloud, "partition": "cloud", "node_prefix": "storm",
            "node_count": nodes + 1, "instance_types": types, "price_per_hour": 0.1, "ondemand_price_per_hour": 0.3}
    if cloud.cloud == "aws":
        import boto3

        ec2 = boto3.client("ec2", endpoint_url=cloud.info["direct"], region_name=REGION)
        subnets = sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])[:2]
        pool["aws"] = {"region": REGION, "subnets": [s["SubnetId"] for s in subnets], "image_id": "ami-12c6146b",
                       "endpoint_url": cloud.info["url"], "conf_server": CONF_SERVER}
    else:
        pool["gcp"] = {"project": PROJECT, "region": "us-central1", "zones": ["us-central1-a", "us-central1-b"],
                       "api_endpoint": cloud.info["url"], "anonymous_credentials": True, "conf_server": CONF_SERVER}
    return parse_config({
        "cluster": {"id": "bench"},
        "database": {"url": f"sqlite:///{work}/burstd.db"},
        "daemon": {"state_dir": str(work), "launch_workers": workers, "cycle_interval_s": 60,
                   "launch_timeout_s": 3600, "boot_timeout_s": 3600},
        "policy": {"onprem_partitions": ["batch"]},
        "budget": {"default_account_usd": 1_000_000},
        "cloud": {"api_attempts": 3, "retry_base_s": 0.05, "retry_max_s": 0.5, "api_timeout_s": 60},
        "pools": [pool],
    }, "bench")


def node_names(nodes: int) -> tuple[list[str], str]:
    """The storm's nodes and the warm-up node."""
    return [f"storm{i}" for i in range(1, nodes + 1)], f"storm{nodes + 1}"


# --- the two sides ------------------------------------------------------------------------------------------------
def bare(cloud_name: str, nodes: int, workers: int, latency_ms: float, work: Path) -> dict:
    from burstd.providers import make_provider

    with FakeCloud(cloud_name, latency_ms) as cloud:
        cfg = bench_config(cloud, nodes, workers, work)
        provider = make_provider(cfg.pools[0], cfg)
        storm, warm = node_names(nodes)
        provider.launch(LaunchRequest(uuid.uuid4().hex, warm, cfg.pools[0].name))
        requests = [LaunchRequest(uuid.uuid4().hex, node, cfg.pools[0].name) for node in storm]
        t0 = time.perf_counter()
        if workers == 1:
            made = [provider.launch(r) for r in requests]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                made = list(pool.map(provider.launch, requests))
        total = time.perf_counter() - t0
        check_one_vm_per_lease(provider, [r.lease_id for r in requests], made)
        provider.close()
    return {"total_s": total}


def daemon_side(cloud_name: str, nodes: int, workers: int, latency_ms: float, work: Path) -> dict:
    from burstd.daemon.pools import PoolHealth
    from burstd.daemon.reconcile import Reconciler
    from burstd.daemon.service import LoopService
    from burstd.daemon.wiring import make_providers
    from burstd.db.store import Store
    from tests.unit.daemon.fakes import FakeAdapter

    with FakeCloud(cloud_name, latency_ms) as cloud:
        cfg = bench_config(cloud, nodes, workers, work)
        store = Store.open(cfg.database.url)
        health = PoolHealth(store, cfg)
        providers = make_providers(cfg, cooldown=health.cooldown)
        slurm = FakeAdapter()  # Slurm's side: the nodes it powers up, nothing else
        storm, warm = node_names(nodes)
        for node in [warm, *storm]:
            slurm.set_node(node, "IDLE", "POWERED_DOWN")
        rec = Reconciler(cfg, store, slurm, providers, health=health)
        loop = LoopService(rec, cfg.daemon.cycle_interval_s)
        loop.start()
        try:
            slurm.set_node(warm, "IDLE", "POWERING_UP")
            rec.intake.request_resume([warm])
            wait_states(store, {warm}, S.BOOTING, 120)
            for node in storm:
                slurm.set_node(node, "IDLE", "POWERING_UP")
            t0 = time.time()
            rec.intake.request_resume(storm, hook_t0=t0)
            returned = time.time() - t0
            leases = wait_states(store, set(storm), S.BOOTING, 1800)
        finally:
            loop.stop()
        at = {S.LAUNCHING: [], S.BOOTING: []}
        for lease in leases:
            for e in store.events(lease.lease_id):
                if e.to_state in at and e.from_state != e.to_state:
                    at[e.to_state].append(e.at - t0)
        instances = providers[cfg.pools[0].name].list_instances()
        live = [i for i in instances if not i.is_gone and i.node_name in set(storm)]
        if len(live) != nodes or {i.lease_id for i in live} != {x.lease_id for x in leases}:
            raise AssertionError(f"{cloud_name}: {len(live)} VMs for {nodes} leases (one VM per lease expected)")
        report = rec.last_report.as_dict() if rec.last_report else {}
        for p in providers.values():
            p.close()
        store.close()
    return {"resume_call_s": returned, "launching_s": max(at[S.LAUNCHING]), "booting_s": max(at[S.BOOTING]),
            "cycle_errors": report.get("errors", [])}


def wait_states(store, nodes: set[str], state: LeaseState, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    while True:
        leases = [x for x in store.leases() if x.node_name in nodes]
        if len(leases) == len(nodes) and all(x.state == state for x in leases):
            return leases
        bad = [x for x in leases if x.state in (S.FAILED, S.REFUSED, S.TERMINATED)]
        if bad:
            raise AssertionError(f"{len(bad)} leases ended: {bad[0].node_name} {bad[0].state.value} {bad[0].reason}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(x.state == state for x in leases)} of {len(nodes)} leases {state.value}")
        time.sleep(0.25)  # the figures come from the event log, not from this poll


def check_one_vm_per_lease(provider: Provider, lease_ids: list[str], made) -> None:
    live = [i for i in provider.list_instances() if not i.is_gone and i.lease_id in set(lease_ids)]
    if len(live) != len(lease_ids) or len({i.instance_id for i in made}) != len(lease_ids):
        raise AssertionError(f"{len(live)} VMs for {len(lease_ids)} launches (one VM per lease expected)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500, help="nodes in the one resume call (default 500)")
    ap.add_argument("--workers", type=int, default=8, help="daemon.launch_workers and the bare pool's width")
    ap.add_argument("--clouds", default="aws,gcp", help="comma-separated: aws, gcp")
    ap.add_argument("--latency-ms", type=float, default=50.0,
                    help="extra time the fake cloud takes to answer each create call (default 50)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--serve", choices=("aws", "gcp"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.latency_ms)
        return
    if not 1 <= args.workers <= 64 or args.nodes < 1:
        ap.error("--workers must be 1..64 (daemon.launch_workers' bounds) and --nodes at least 1")
    clouds = [c.strip() for c in args.clouds.split(",") if c.strip()]
    if not clouds or any(c not in CREATE_CALL for c in clouds):
        ap.error("--clouds takes aws and/or gcp")
    fake_credentials()
    from burstd.daemon.logging import setup_logging

    log_dir = tempfile.TemporaryDirectory(prefix="burstd-storm-log-")
    log = open(Path(log_dir.name) / "burstd.log", "a")
    setup_logging("json", stream=log)  # every lease move and provider call is logged (both sides), as in the daemon
    logging.getLogger("apscheduler").setLevel(logging.ERROR)  # "skipped: a cycle still runs" during the storm
    FakeCloud.log_path = Path(log_dir.name) / "clouds.log"
    w = args.workers
    print(f"{args.nodes} nodes in one resume call; {w} launch workers; create calls answer "
          f"{args.latency_ms:g} ms late; {os.cpu_count()} CPUs")
    results: dict[str, dict] = {}
    t_start = time.perf_counter()
    for cloud in clouds:
        r: dict[str, dict] = {}
        with tempfile.TemporaryDirectory(prefix="burstd-storm-") as tmp:
            for side, fn, width in (("bare 1", bare, 1), (f"bare {w}", bare, w),
                                    (f"burstd {w}", daemon_side, w), ("burstd 1", daemon_side, 1)):
                work = Path(tmp) / side.replace(" ", "-")
                work.mkdir()
                r[side] = fn(cloud, args.nodes, width, args.latency_ms, work)
                print(f"  {cloud} {side:10s} " + "  ".join(
                    f"{k} {v:.2f}" for k, v in r[side].items() if isinstance(v, float)), flush=True)
        bw, b1, dw, d1 = r[f"bare {w}"], r["bare 1"], r[f"burstd {w}"], r["burstd 1"]
        r["ratios"] = {
            f"launching burstd {w} / bare {w}": dw["launching_s"] / bw["total_s"],
            f"booting burstd {w} / bare {w}": dw["booting_s"] / bw["total_s"],
            "booting burstd 1 / bare 1": d1["booting_s"] / b1["total_s"],
            f"speed-up burstd 1 / burstd {w}": d1["booting_s"] / dw["booting_s"],
            f"speed-up bare 1 / bare {w}": b1["total_s"] / bw["total_s"],
        }
        for k, v in r["ratios"].items():
            print(f"  {cloud} {k}: {v:.2f}x")
        results[cloud] = r
    print(f"total bench time {time.perf_counter() - t_start:.0f} s")
    log.close()
    log_dir.cleanup()
    if args.json:
        Path(args.json).write_text(json.dumps({"nodes": args.nodes, "workers": w, "latency_ms": args.latency_ms,
                                               "results": results}, indent=2))


if __name__ == "__main__":
    main()
