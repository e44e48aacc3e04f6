"""``burstctl demo --data``: issue 24's story on the honest local cloud (cloud VMs booted from the node image see
none of the head's files). Jobs read a dataset from an on-prem path and write results; several share one dataset;
one declares ``#BURSTD data-never-leaves``. burstd stages each burst job's input near the pool through the bed's
metered link (a dataset already there is a cache hit), the node's Prolog pulls it as the job's user, the Epilog
publishes the output and the daemon brings it home, verified; transfer is booked at demo prices.

The summary adds to ``jobs_submitted``, ``jobs_completed``, ``leaked_vms``: ``bytes_staged_in`` (what crossed
the link to the pool), ``bytes_staged_out`` (outputs home), ``cache_hits``, ``transfer_usd`` (booked),
``outputs_verified`` (jobs whose output is on-prem and whose checksums of what they read equal the head's
dataset) and ``jobs_kept_home_for_data`` (never-leave jobs that ran on-prem).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

from burstd.cli.common import console
from burstd.cli.demo_watch import host_of_jobs, leaked, summary_table, watch_jobs

DATASETS = 2
DATASET_BYTES = 4 * 2**20
DEMO_PRICE_PER_GB = 0.09  # the demo's transfer price each way (a cloud's typical egress)


def make_datasets(work: Path, user: str, n: int = DATASETS) -> list[Path]:
    out = []
    for i in range(n):
        src = work / f"demo-dataset-{i}"
        shutil.rmtree(src, ignore_errors=True)
        (src / "meta").mkdir(parents=True)
        (src / "train.bin").write_bytes(os.urandom(DATASET_BYTES))
        (src / "meta" / "labels.txt").write_text("".join(f"{k},{k % 10}\n" for k in range(1000)))
        for p in (src, src / "meta"):
            p.chmod(0o755)
        shutil.chown(src, user, user)
        out.append(src)
    return out


def data_script(src: Path, out: Path, seconds: int, home_only: bool = False) -> str:
    never = "#BURSTD data-never-leaves\n" if home_only else ""
    return (f"#!/bin/sh\n#SBATCH -t 10\n{never}#BURSTD stage-in {src}\n#BURSTD stage-out {out}\nset -e\n"
            f"mkdir -p {out}\ncd {src}\nsha256sum train.bin meta/labels.txt >{out}/sums.txt\n"
            f"hostname >{out}/host.txt\nsleep {seconds}\n")


def _sums_match(src: Path, out: Path) -> bool:
    from burstd.data.manifest import build_manifest

    try:
        lines = (out / "sums.txt").read_text().splitlines()
    except OSError:
        return False
    got = {path: digest for digest, path in (line.split("  ", 1) for line in lines if "  " in line)}
    return got == {f.path: f.sha256 for f in build_manifest(src).files}


def _events(log: Path, name: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == name:
            out.append(rec)
    return out


def daemon_config(bed, work: Path, base: Path) -> tuple[Path, object]:
    """The demo's daemon config plus a TLS listener on the bridge (the VMs' Prolog asks there) and demo prices."""
    from burstd.daemon.runner import config_with
    from burstd.testbed.bed_data import BOOT_DIR, STORE_CREDENTIALS
    from burstd.testbed.bed_tls import make_bed_tls

    os.environ.update(STORE_CREDENTIALS)  # the daemon (started from here) signs its requests to the bed's store

    head = bed.config.ctld_addr
    tls = make_bed_tls(work / "tls", (head, "127.0.0.1"))
    admin = work / "admin.token"
    admin.write_text(os.urandom(16).hex() + "\n")
    admin.chmod(0o600)
    with socket.socket() as s:
        s.bind((head, 0))
        port = s.getsockname()[1]
    url = f"https://{head}:{port}"
    text = config_with(base.read_text(), {
        "api": {"tcp_listen": f"{head}:{port}", "token_file": str(admin), "tls_cert": str(tls.cert),
                "tls_key": str(tls.key)},
        "agent": {"daemon_url": url, "daemon_token_file": f"{BOOT_DIR}/agent.token",
                  "daemon_ca_file": f"{BOOT_DIR}/ca.pem"},
        "pools.local": {"vm_agent": False},
        "pools.data": {"transfer_in_per_gb": DEMO_PRICE_PER_GB, "transfer_out_per_gb": DEMO_PRICE_PER_GB},
    })
    base.write_text(text)
    return base, tls


def run_data(bed, work: Path, cfg_path: Path, daemon, *, jobs: int, job_seconds: int, user: str,
             timeout: float) -> dict:
    """Submit the data jobs, watch them, and sum up (the daemon is running with ``cfg_path``)."""
    from burstd.config import load_config
    from burstd.daemon.wiring import make_providers
    from burstd.db.store import Store
    from burstd.testbed import bed_data
    from burstd.testbed.node_bootstrap import NodeBootstrap

    cfg = load_config(cfg_path)
    prefix = cfg.pools[0].node_prefix
    # the daemon brings outputs home as the job's user, who writes the progress record under its state dir
    Path(cfg.daemon.state_dir).parent.chmod(0o755)
    files = {p.name: text for p, text in bed_data.files(bed.config, cfg).items()}
    boot = NodeBootstrap(cfg, files, work / "tls" / "ca.pem")
    boot.start()
    try:
        home = bed.workdir(user)
        datasets = make_datasets(home, user)
        runs = []
        cpus = bed.config.onprem_cpus
        opts = ["-p", bed.onprem_partition, "-N", "1", "-n", str(cpus), "-t", "10", "--chdir=/tmp",
                "-o", "/tmp/burstd-demo-%j.out"]
        for n in range(jobs):
            never = n == jobs - 1 and jobs > 1  # the last one's data never leaves the site
            src, out = datasets[1 if never else 0], home / f"demo-result-{time.time_ns()}-{n}"  # the rest share
            job = bed.sbatch(opts, data_script(src, out, job_seconds, home_only=never), user=user)
            runs.append((job, src, out, never))
        ids = [r[0] for r in runs]
        console.print(f"submitted {len(ids)} jobs: all but one read {datasets[0]}; the last reads {datasets[1]}, "
                      "which never leaves the site", highlight=False, soft_wrap=True)
        phase = watch_jobs(bed, ids, cfg.api.socket, prefix, timeout=timeout)
        log = Path(daemon.log_path)
        hosts = host_of_jobs(bed, user, ids)
        on_cloud = sum(h.startswith(prefix) for h in hosts.values())  # the others wrote on-prem directly
        deadline = time.monotonic() + 60  # the outputs come home as their jobs leave the queue
        while time.monotonic() < deadline and len(_events(log, "job's outputs home, verified")) < on_cloud:
            time.sleep(1)
        staged = _events(log, "job's inputs staged near its pool")
        with Store.open(cfg.database.url, migrate_to_head=False) as ledger:
            spend = ledger.data_spend()
        summary = {
            "jobs_submitted": len(ids),
            "jobs_completed": sum(bed.job(j).get("JobState") == "COMPLETED" for j in ids),
            "jobs_on_cloud": on_cloud,
            "bytes_staged_in": sum(int(e.get("bytes_moved", 0)) for e in staged),
            "bytes_staged_out": sum(d.n_bytes for d in spend if d.kind == "transfer_out"),
            "cache_hits": sum(int(e.get("cache_hits", 0)) for e in staged),
            "transfer_usd": round(sum(d.cost_micros for d in spend if d.kind.startswith("transfer")) / 1e6, 6),
            "outputs_verified": sum(_sums_match(src, out) for _, src, out, _ in runs),
            "jobs_kept_home_for_data": sum(bool(never and hosts.get(j) and not hosts[j].startswith(prefix))
                                           for j, _, _, never in runs),
            "leaked_vms": leaked(bed, make_providers(cfg)[cfg.pools[0].name]),
            "finished": phase == "finished",
            "node_bootstrap_errors": dict(boot.errors),
        }
        for _, _, out, _ in runs:
            shutil.rmtree(out, ignore_errors=True)
        for src in datasets:
            shutil.rmtree(src, ignore_errors=True)
        console.print(summary_table(summary))
        return summary
    finally:
        boot.close()


def data_ok(summary: dict) -> bool:
    """Done as issue 24 says: all complete, all outputs verified, a cache hit, transfer booked, nothing leaked."""
    return (summary.get("jobs_completed") == summary.get("jobs_submitted") == summary.get("outputs_verified")
            and summary.get("cache_hits", 0) >= 1 and summary.get("transfer_usd", 0) > 0
            and not summary.get("leaked_vms"))
