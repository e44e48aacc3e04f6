"""How fast does a Slurm resume become a cloud launch, and what does burstd cost a job on the way to RUNNING?

    sudo .venv/bin/python bench/bench_resume.py            # brings up its own test bed (BURSTD_BED_* to change)
    sudo .venv/bin/python bench/bench_resume.py --calls 100 --rounds 3

A. ResumeProgram -> provider launch call, over ``--calls`` calls: the bed's own resume hook script (what
   slurmctld runs) is spawned for one cloud node; the daemon logs the instant it calls ``provider.launch`` for
   that node's lease (``"provider launch call"``). Latency = that instant - the hook's spawn. Also: how long the
   hook process itself ran (Slurm waits for it). Real daemon, real SQLite, real local provider (the VM's slurmd
   is held back by ``boot_delay_s`` and the suspend hook ends each VM before it would register).
B. sbatch -> RUNNING on a cloud node, burstd hooks vs the bed's ``bare`` hooks (a shell script that makes the
   namespace itself), interleaved in the same run, four jobs a round. Printed as the ratio of the medians.
   Both include Slurm's 30 s periodic tick for batch jobs on a freshly resumed node (TESTBED.md gotcha 7): every
   round is submitted at the same phase of that tick (read from slurmctld's log), so the tick costs both modes
   the same; the time to the node's registration (slurmd up) is printed too, without any tick in it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from burstd.testbed.daemon_process import DaemonProcess, config_with  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))
    return s[k]


class LogTail:
    def __init__(self, path: Path):
        self.path = path
        self.pos = 0

    def events(self):
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self.pos)
            data = fh.read()
        cut = data.rfind(b"\n") + 1
        self.pos += cut
        out = []
        for line in data[:cut].splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


def daemon_config(bed, work: Path, boot_delay_s: float) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    text = config_with(Path(bed.burstd_config).read_text(), {
        "database": {"url": f"sqlite:///{work}/burstd.db"},
        "daemon": {"state_dir": str(work / "state"), "cycle_interval_s": 5, "log_format": "json"},
        "policy.waiting": {"kind": "constant", "min_wait_s": 0, "min_expected_wait_s": 0},
        "budget": {"default_account_usd": 1000},
        "pools.local": {"boot_delay_s": boot_delay_s},
    })
    path = work / "burstd.toml"
    path.write_text(text)
    return path


def wait(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what}")


def bench_resume_to_launch(bed, work: Path, calls: int) -> dict:
    from burstd.db.store import Store

    cfg = daemon_config(bed, work / "a", boot_delay_s=60)
    log = work / "a" / "burstd.log"
    tail = LogTail(log)
    d = DaemonProcess(cfg, log_path=log)
    lat, since_hook, hook_wall = [], [], []
    hooks = bed.paths["hooks"]
    with bed.hooks("burstd"):
        d.start()
        store = Store.open(f"sqlite:///{work}/a/burstd.db")
        try:
            for i in range(calls):
                node = bed.cloud_nodes[i % len(bed.cloud_nodes)]
                t_spawn = time.time()
                p = subprocess.run([str(hooks / "resume"), node], capture_output=True, text=True, timeout=30)
                hook_wall.append(time.time() - t_spawn)
                if p.returncode != 0:
                    raise RuntimeError(f"resume hook failed: {p.stderr}")

                def launched():
                    for e in tail.events():
                        if e.get("event") == "provider launch call" and e.get("node") == node:
                            return e
                    return None

                e = wait(launched, 30, f"launch call for {node}")
                lat.append(e["ts"] - t_spawn)
                if e.get("since_hook_s") is not None:
                    since_hook.append(e["since_hook_s"])
                lease_id = e["lease_id"]
                wait(lambda: store.lease(lease_id).state.value in ("BOOTING", "FAILED", "TERMINATED"), 30, "BOOTING")
                subprocess.run([str(hooks / "suspend"), node], capture_output=True, timeout=30)
                wait(lambda: store.lease(lease_id).state.value == "TERMINATED", 60, f"{node} terminated")
        finally:
            d.stop()
            store.close()
    return {"calls": calls, "launch_call_ms": lat, "since_hook_ms": since_hook, "hook_wall_ms": hook_wall}


def last_tick(bed) -> float | None:
    """When slurmctld last ran its 30 s ``job_time_limit`` pass (from its log), as Unix time."""
    import datetime as dt
    import re

    log = bed.paths["log"] / "slurmctld.log"
    last = None
    for line in log.read_text(errors="replace").splitlines():
        if "job_time_limit: Configuration for JobId" in line:
            m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\]", line)
            if m:
                last = dt.datetime.fromisoformat(m.group(1)).timestamp()
    return last


def wait_tick_phase(bed, phase_s: float) -> None:
    """Sleep until ``phase_s`` seconds after one of slurmctld's 30 s ticks, so that every round (either hook mode)
    meets the tick at the same point: the tick is Slurm's, not the hooks', and would otherwise swamp the figure."""
    tick = last_tick(bed)
    if tick is None:
        return
    delay = (phase_s - (time.time() - tick)) % 30.0
    time.sleep(delay)


def bench_sbatch_to_running(bed, work: Path, rounds: int, user: str, phase_s: float = 8.0) -> dict:
    cfg = daemon_config(bed, work / "b", boot_delay_s=0)
    d = DaemonProcess(cfg, log_path=work / "b" / "burstd.log")
    times: dict[str, list[float]] = {"burstd": [], "bare": []}
    registered_times: dict[str, list[float]] = {"burstd": [], "bare": []}

    def clean_down():
        states = {n: set(bed.node(n).get("State", "").split("+")) for n in bed.cloud_nodes}
        stuck = [n for n, s in states.items() if "DOWN" in s and "POWERED_DOWN" in s and "POWERING_DOWN" not in s]
        if stuck:  # a node Slurm gave up on (ResumeTimeout): make it usable again, as an admin would
            bed.run(["scontrol", "update", f"nodename={','.join(stuck)}", "state=RESUME"], check=False)
        return all(s - {"NOT_RESPONDING"} == {"IDLE", "CLOUD", "POWERED_DOWN"} for s in states.values())

    # a warm-up job (not timed) so that slurmctld's log shows where its 30 s tick falls
    wait(clean_down, 120, "cloud nodes powered down", interval=0.5)
    with bed.hooks("bare"):
        warm = bed.sbatch(["-p", bed.cloud_partition, "-n", "2", "-t", "5"], "#!/bin/sh\ntrue\n", user=user)
        wait(lambda: not bed.run(["squeue", "-h", "-j", str(warm)], check=False).stdout.strip(), 120, "warm-up job")
    for r in range(rounds):
        for mode in (("burstd", "bare") if r % 2 == 0 else ("bare", "burstd")):
            wait(clean_down, 120, "cloud nodes powered down", interval=0.5)
            with bed.hooks(mode):
                if mode == "burstd":
                    d.start()
                try:
                    wait_tick_phase(bed, phase_s)
                    submitted = {}
                    for _ in bed.cloud_nodes:
                        t = time.time()
                        jid = bed.sbatch(["-p", bed.cloud_partition, "-n", "2", "-t", "5"],
                                         "#!/bin/sh\nhostname\n", user=user)
                        submitted[jid] = t
                    started: dict[int, float] = {}
                    registered: dict[int, float] = {}
                    deadline = time.monotonic() + 180
                    while len(started) < len(submitted) and time.monotonic() < deadline:
                        out = bed.run(["squeue", "-h", "-o", "%i %T %N", "-j", ",".join(map(str, submitted))],
                                      check=False).stdout
                        nodes = dict(line.split(None, 1) for line in bed.run(
                            ["sinfo", "-h", "-N", "-p", bed.cloud_partition, "-o", "%N %T"],
                            check=False).stdout.splitlines() if " " in line)
                        now = time.time()
                        for line in out.splitlines():
                            jid, state, *where = line.split()
                            node_state = nodes.get(where[0], "") if where else ""
                            if (int(jid) not in registered and node_state and not node_state.endswith(("#", "~"))
                                    and "down" not in node_state):
                                registered[int(jid)] = now
                            if int(jid) not in started and state in ("RUNNING", "COMPLETING"):
                                started[int(jid)] = now
                                registered.setdefault(int(jid), now)
                        done = {int(j) for j in submitted} - {int(x.split()[0]) for x in out.splitlines()}
                        for j in done:  # finished between two polls: it ran; its start is at most now
                            started.setdefault(j, now)
                        time.sleep(0.1)
                    times[mode] += [started[j] - submitted[j] for j in started]
                    registered_times[mode] += [registered[j] - submitted[j] for j in registered]
                    wait(lambda: not bed.run(["squeue", "-h", "-j", ",".join(map(str, submitted))],
                                             check=False).stdout.strip(), 120, "jobs done")
                    wait(clean_down, 120, "cloud nodes powered down after the round", interval=0.5)
                finally:
                    d.stop()
    return {"running": times, "registered": registered_times}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2, help="sbatch rounds per hook mode (4 jobs each)")
    ap.add_argument("--user", default="burstuser")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    os.environ.setdefault("BURSTD_BED_NAME", "bench")
    os.environ.setdefault("BURSTD_BED_SLOT", "14")
    from burstd.testbed import Bed, BedConfig

    overrides = {k: v for k, v in {"suspend_time": 10, "suspend_timeout": 10}.items()
                 if not os.environ.get(f"BURSTD_BED_{k.upper()}")}
    bed = Bed(BedConfig.from_env(**overrides))
    bed.up()
    work = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    try:
        a = bench_resume_to_launch(bed, work, args.calls)
        b = bench_sbatch_to_running(bed, work, args.rounds, args.user)
    finally:
        if not os.environ.get("BURSTD_BED_KEEP"):  # keeping the bed keeps its working folder too, to look into
            bed.down()
            shutil.rmtree(work, ignore_errors=True)
    ms = lambda xs: [x * 1000 for x in xs]  # noqa: E731
    lc, sh, hw = ms(a["launch_call_ms"]), ms(a["since_hook_ms"]), ms(a["hook_wall_ms"])
    print(f"A. ResumeProgram spawn -> provider.launch call, {len(lc)} calls: "
          f"p50 {pct(lc, 50):.1f} ms, p99 {pct(lc, 99):.1f} ms, max {max(lc):.1f} ms  (target p99 < 200 ms)")
    print(f"   from the hook's first Python line: p50 {pct(sh, 50):.1f} ms, p99 {pct(sh, 99):.1f} ms")
    print(f"   hook process wall time (what slurmscriptd waits): p50 {pct(hw, 50):.1f} ms, p99 {pct(hw, 99):.1f} ms")
    run, reg = b["running"], b["registered"]
    gb, gr = statistics.median(reg["burstd"]), statistics.median(reg["bare"])
    print(f"B. sbatch -> the job's cloud node registered (slurmd up; {len(reg['burstd'])} jobs each): burstd median "
          f"{gb:.2f} s, bare hook median {gr:.2f} s: ratio {gb / gr:.2f}x")
    mb, mr = statistics.median(run["burstd"]), statistics.median(run["bare"])
    print(f"   sbatch -> RUNNING ({len(run['burstd'])} jobs each): burstd median {mb:.1f} s "
          f"(min {min(run['burstd']):.1f}, max {max(run['burstd']):.1f}); bare hook median {mr:.1f} s "
          f"(min {min(run['bare']):.1f}, max {max(run['bare']):.1f})")
    print(f"   ratio burstd / bare (medians): {mb / mr:.2f}x  (target <= 1.1x; both carry Slurm's 30 s batch tick)")
    if args.json:
        Path(args.json).write_text(json.dumps({"A": {"launch_call_ms": lc, "since_hook_ms": sh, "hook_wall_ms": hw},
                                               "B": b, "ratio_running": mb / mr,
                                               "ratio_registered": gb / gr}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
