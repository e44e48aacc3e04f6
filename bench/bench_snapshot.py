#!/usr/bin/env python3
"""Snapshot benchmark: the cli adapter's snapshot vs the bare ``squeue`` that yields the same fields.

    sudo python bench/bench_snapshot.py                      # own test bed, 2,000 then 20,000 jobs
    sudo python bench/bench_snapshot.py --sizes 2000,5000 --repeat 3
    sudo python bench/bench_snapshot.py --bed controller     # munged + slurmctld only, no node daemons
    sudo python bench/bench_snapshot.py --slurm-conf /etc/slurm/slurm.conf   # an existing cluster (adds jobs!)

By default it brings up its own project test bed (burstd.testbed, bed name ``snapbench``, slot 43, its
MaxJobCount is 100,000) and takes it down afterwards. ``--bed controller`` instead starts only munged (own
socket) and slurmctld (own ports, MaxJobCount=50000) under a temp dir, with nodes defined but no slurmd:
every benchmark job is submitted held (``sbatch -H``) and never runs, so the snapshot cost is the same. Jobs are submitted by several sbatch processes in parallel; 1 in 100 has a
name and comment with shell metacharacters and a newline. At each queue size, interleaved, median of
``--repeat`` runs:

* bare squeue   : ``squeue -h -a -O <adapter's fields>`` run as a subprocess, output read, nothing parsed
* adapter warm  : ``CliAdapter.snapshot()`` in steady state (squeue + sinfo + partitions + parse; records
                  unchanged since the last cycle reuse their Job)
* adapter cold  : the same on a fresh adapter (every record parsed)
* squeue --json and the adapter forced onto JSON (``job_format="json"``), for the text-vs-JSON choice

Prints the ratios to bare squeue (same run) and how each grows from the first size to the last.
Speed is reported, never asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstd.config import SlurmConfig  # noqa: E402
from burstd.slurm import squeue_text  # noqa: E402
from burstd.slurm.cli import CliAdapter  # noqa: E402

SLURM_CONF = """\
ClusterName=bench
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={port}
SlurmdPort={dport}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={work}/munge/munge.sock
CryptoType=crypto/munge
StateSaveLocation={work}/state
SlurmdSpoolDir={work}/spool/%n
SlurmctldPidFile={work}/slurmctld.pid
SlurmctldLogFile={work}/slurmctld.log
SlurmdPidFile={work}/slurmd-%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MaxJobCount=50000
MinJobAge=300
PrivateData=cloud
ResumeProgram=/bin/true
SuspendProgram=/bin/true
SuspendTime=600
NodeName=bn[1-2] NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
NodeName=bc[1-8] CPUs=2 RealMemory=1000 State=CLOUD Feature=cloud
PartitionName=onprem Nodes=bn[1-2] Default=YES MaxTime=INFINITE State=UP
PartitionName=cloud Nodes=bc[1-8] MaxTime=INFINITE State=UP
"""


class ControllerBed:
    """munged + slurmctld only, in a temp dir, on their own socket and ports; stops only what it started."""

    def __init__(self, port: int) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="burstd-bench-"))
        self.port = port
        self.conf = self.work / "slurm.conf"
        self.pids: list[tuple[str, Path]] = []

    def start(self) -> None:
        for d in ("munge", "state", "spool"):
            (self.work / d).mkdir()
        munge = self.work / "munge"
        shutil.copy("/etc/munge/munge.key", munge / "munge.key")
        shutil.chown(munge, "munge")
        shutil.chown(munge / "munge.key", "munge")
        os.chmod(munge, 0o700)
        os.chmod(self.work, 0o755)
        subprocess.run(
            ["runuser", "-u", "munge", "--", "/usr/sbin/munged", f"--socket={munge}/munge.sock",
             f"--key-file={munge}/munge.key", f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
             f"--seed-file={munge}/seed", "-f"], check=True,
        )
        self.pids.append(("munged", munge / "munged.pid"))
        self.conf.write_text(SLURM_CONF.format(host=socket.gethostname().split(".")[0], port=self.port,
                                               dport=self.port + 1, work=self.work))
        subprocess.run(["/usr/sbin/slurmctld", "-i"], env=self.env(), check=True)
        self.pids.append(("slurmctld", self.work / "slurmctld.pid"))
        for _ in range(100):
            if subprocess.run(["scontrol", "ping"], env=self.env(), capture_output=True).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"slurmctld did not answer; see {self.work}/slurmctld.log")

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def stop(self) -> None:
        for name, pidfile in reversed(self.pids):
            try:
                pid = int(pidfile.read_text().strip())
                os.kill(pid, signal.SIGTERM)
                for _ in range(50):
                    os.kill(pid, 0)
                    time.sleep(0.1)
            except (OSError, ValueError):
                pass
        shutil.rmtree(self.work, ignore_errors=True)


class TestBed:
    """The project's own test bed (burstd.testbed): slurmctld, on-prem slurmds in namespaces, slurmrestd."""

    def __init__(self) -> None:
        from burstd.testbed import Bed, BedConfig

        name = os.environ.get("BURSTD_BED_NAME", "snapbench")
        slot = int(os.environ.get("BURSTD_BED_SLOT", "43"))
        # BURSTD_BED_SLURM_RELEASE=24.11 (or 26.05) runs the bench on that release's chroot bed
        self.bed = Bed(BedConfig.from_env(name=name, slot=slot, max_job_count=100000))
        self.conf = self.bed.conf_path
        self.bin_dir = self.bed.bin_dir

    def start(self) -> None:
        self.bed.up()

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": self.bed.env["PATH"]}

    def stop(self) -> None:
        subprocess.run(["scancel", "--state=PENDING"], env=self.env(), capture_output=True)
        self.bed.down()


def submit_held(env: dict[str, str], first: int, count: int, workers: int) -> float:
    def one(i: int) -> None:
        name, comment = f"bench-{i}", f"bench job {i}"
        if i % 100 == 0:
            name, comment = f'odd$(touch /tmp/pwned); echo "x"\n|{i}', "c$(id)\n;"
        argv = ["sbatch", "-H", "-J", name, f"--comment={comment}", "-o", "/dev/null", "-p",
                "onprem,cloud" if i % 7 == 0 else "onprem", "-t", str(10 + i % 50), "--wrap", "true"]
        for attempt in range(20):
            r = subprocess.run(argv, env=env, capture_output=True, text=True)
            if r.returncode == 0:
                return
            time.sleep(0.2 * (attempt + 1))  # controller busy: back off
        raise RuntimeError(f"sbatch failed: {r.stderr.strip()}")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, range(first, first + count)))
    return time.perf_counter() - t0


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(conf: str, repeat: int, bin_dir: str = "/usr/bin") -> dict[str, float]:
    cfg = SlurmConfig(conf=conf, bin_dir=bin_dir, command_timeout_s=120)
    warm = CliAdapter(cfg)
    warm.snapshot()  # fill the record cache: steady state
    probe = CliAdapter(cfg)
    env = probe._env()
    text_argv = [probe._binary("squeue"), "-h", "-a", "-O", squeue_text.squeue_text_format(squeue_text.new_nonce())]
    json_argv = [probe._binary("squeue"), "-a", "--json"]

    def bare(argv):
        return lambda: subprocess.run(argv, env=env, capture_output=True, check=True)

    def cold():
        a = CliAdapter(cfg)
        a._version = warm.version  # the one-off `squeue --version` is not part of a cycle
        t0 = time.perf_counter()
        a.snapshot()
        return time.perf_counter() - t0

    jsonad = CliAdapter(cfg, job_format="json")
    jsonad.version
    samples: dict[str, list[float]] = {k: [] for k in ("bare", "warm", "cold", "bare_json", "adapter_json")}
    njobs = len(warm.snapshot().jobs)
    for _ in range(repeat):  # interleaved, so machine noise hits every variant alike
        samples["bare"].append(timed(bare(text_argv)))
        samples["warm"].append(timed(warm.snapshot))
        samples["cold"].append(cold())
        samples["bare_json"].append(timed(bare(json_argv)))
        samples["adapter_json"].append(timed(jsonad.snapshot))
    out = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    out["jobs"] = njobs
    out["fallbacks"] = warm.text_fallbacks
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="2000,20000", help="queue sizes to measure, ascending (default 2000,20000)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant and size (median reported)")
    ap.add_argument("--slurm-conf", help="use this cluster instead of starting a bed")
    ap.add_argument("--bed", choices=("testbed", "controller"), default="testbed",
                    help="which bed to start when no --slurm-conf (default: the project's test bed)")
    ap.add_argument("--port", type=int, default=27817, help="slurmctld port of the bench's own bed")
    ap.add_argument("--workers", type=int, default=6, help="parallel sbatch processes")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if sizes != sorted(sizes):
        ap.error("--sizes must be ascending")

    bed = None
    bin_dir = "/usr/bin"
    if args.slurm_conf:
        conf = args.slurm_conf
        env = {**os.environ, "SLURM_CONF": conf}
    else:
        if os.geteuid() != 0:
            ap.error("starting a bed needs root (or pass --slurm-conf)")
        bed = TestBed() if args.bed == "testbed" else ControllerBed(args.port)
        bed.start()
        conf, env = str(bed.conf), bed.env()
        bin_dir = getattr(bed, "bin_dir", bin_dir)
    version = subprocess.run(["squeue", "--version"], env=env, capture_output=True, text=True).stdout.strip()
    print(f"# {version}, {os.cpu_count()} CPUs, conf {conf}")
    rows = []
    try:
        base = len(CliAdapter(SlurmConfig(conf=conf, bin_dir=bin_dir)).jobs())
        have = 0
        for size in sizes:
            need = size - have - base
            if need > 0:
                took = submit_held(env, have, need, args.workers)
                print(f"# submitted {need} held jobs in {took:.1f} s ({need / took:.0f}/s)", flush=True)
                have += need
            row = measure(conf, args.repeat, bin_dir)
            rows.append(row)
            print(f"# measured at {row['jobs']} jobs", flush=True)
    finally:
        if bed:
            bed.stop()

    print()
    print(f"{'jobs':>7} {'bare squeue -O':>15} {'adapter warm':>13} {'ratio':>6} {'adapter cold':>13} {'ratio':>6}"
          f" {'bare --json':>12} {'adapter json':>13} {'ratio':>6} {'json/text':>10}")
    for r in rows:
        print(f"{r['jobs']:>7} {r['bare']:>12.1f} ms {r['warm']:>10.1f} ms {r['warm'] / r['bare']:>6.2f}"
              f" {r['cold']:>10.1f} ms {r['cold'] / r['bare']:>6.2f} {r['bare_json']:>9.1f} ms"
              f" {r['adapter_json']:>10.1f} ms {r['adapter_json'] / r['bare_json']:>6.2f}"
              f" {r['adapter_json'] / r['warm']:>10.2f}")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        jobs_x = b["jobs"] / a["jobs"]
        print(f"\ngrowth {a['jobs']} -> {b['jobs']} jobs (x{jobs_x:.1f}):", ", ".join(
            f"{k} x{b[k] / a[k]:.1f}" for k in ("bare", "warm", "cold", "bare_json", "adapter_json")))
        for k in ("bare", "warm", "cold", "adapter_json"):
            per_job = (b[k] - a[k]) / (b["jobs"] - a["jobs"]) * 1000
            print(f"  {k:>12}: {per_job:.1f} us per added job")
    if any(r["fallbacks"] for r in rows):
        print("note: the text path fell back to JSON in some snapshot (a record did not split)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
