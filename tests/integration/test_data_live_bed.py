"""Issue 24 on the live bed, end to end: a job declares an input dataset that exists only on the head and an
output; the daemon bursts it to a VM booted from the node image (its own root filesystem: it cannot see the
head's files), staging the input near the pool through the metered link; the node's Prolog (the image's own
burstd-agent, run from the wrapper `burstctl slurm-conf` generates) pulls it to the declared path as the job's
user; the job reads it and writes its output; the Epilog publishes the output and the daemon brings it home to
its on-prem path, verified. A second job reading the same dataset is a cache hit: nothing crosses the link.

Real parts only: Slurm (a bed of its own, slot + 93, image VMs, the bed's S3 store and metered link), the burstd
daemon process with its TLS listener on the bridge, SQLite. The test plays the node's bootstrap, the one step a
site's cloud-init does: it puts the node's agent token (minted by the daemon for the node's lease), the CA and the
Prolog/Epilog into the VM's /run/burstd-boot before slurmd starts (the pool's boot_delay_s).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from burstd.config import load_config
from burstd.data.manifest import build_manifest
from burstd.testbed import Bed, BedConfig, bed_data
from burstd.testbed.node_bootstrap import NodeBootstrap
from burstd.testbed.procs import free_port
from tests.bed import TEST_USER
from tests.fakes.tls import make_tls
from tests.integration.daemon_bed import (
    Gate,
    all_jobs,
    bed_daemon_config,
    diagnosis,
    running_daemon,
    wait_for,
    world_readable_dir,
)

pytestmark = [pytest.mark.bed, pytest.mark.slow]


@pytest.fixture(scope="module")  # both tests of this file share it (scripts/test.sh hands a file to one worker)
def data_bed(slurm_bed):
    if slurm_bed.config.slurm_release is not None:
        pytest.skip("image VMs are gated against the head's Slurm: a bed of the host's Slurm (22.05)")
    cfg = BedConfig.from_env({}, name=f"{slurm_bed.name[:7]}-dat", slot=slurm_bed.config.slot + 93, cloud_count=2,
                             onprem_count=1, suspend_time=10, suspend_timeout=10, cred_expire=10,
                             cloud_image="default", data_store=True, data_link_bytes_s=4e6, vm_boot_delay_s=8)
    bed = Bed(cfg).up()
    try:
        yield bed
    finally:
        bed.down()


def _dataset(where: Path) -> Path:
    src = where / f"dataset-{time.time_ns()}"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(os.urandom(3 * 2**20))
    (src / "sub" / "b.txt").write_text("read on the cloud node\n")
    for p in (src, src / "sub"):
        p.chmod(0o755)
    shutil.chown(src, TEST_USER, TEST_USER)
    return src


def _script(src: Path, out: Path) -> str:
    return (f"#!/bin/sh\n#SBATCH -t 5\n#BURSTD stage-in {src}\n#BURSTD stage-out {out}\nset -e\n"
            f"mkdir -p {out}\ncd {src}\nsha256sum a.bin sub/b.txt >{out}/sums.txt\nhostname >{out}/host.txt\n")


def _ended(bed, job: int) -> bool:
    info = bed.job(job)
    reason = info.get("Reason", "").replace(" ", "_")
    assert "launch_failed" not in reason, f"job {job}: {reason} (a prolog failure)"
    return info.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED")


def _log_events(log: Path, msg: str) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == msg:
            out.append(rec)
    return out


def test_a_burst_job_reads_its_staged_input_on_an_image_vm_and_its_output_comes_home(data_bed, tmp_path,
                                                                                      monkeypatch):
    bed = data_bed
    for k, v in bed_data.STORE_CREDENTIALS.items():  # the daemon's own credentials for the bed's store
        monkeypatch.setenv(k, v)
    head = bed.config.ctld_addr  # the bridge: the VMs reach the daemon's TLS listener there
    d = world_readable_dir("burstd-datalive-")
    tls = make_tls(d, ips=(head, "127.0.0.1"))
    admin = d / "admin.token"
    admin.write_text("admin-only-on-the-head\n")
    admin.chmod(0o600)
    url = f"https://{head}:{free_port(head)}"
    boot = bed_data.BOOT_DIR
    cfg_path = bed_daemon_config(
        bed, d, api={"tcp_listen": url.removeprefix("https://"), "token_file": str(admin),
                     "tls_cert": str(tls.cert), "tls_key": str(tls.key)},
        agent={"daemon_url": url, "daemon_token_file": f"{boot}/agent.token", "daemon_ca_file": f"{boot}/ca.pem"},
        **{"pools.local": {"vm_agent": False}})
    node_files = {p.name: text for p, text in bed_data.files(bed.config, load_config(cfg_path)).items()}
    assert set(node_files) == {"burstd-prolog", "burstd-epilog", "agent.env"}
    assert f"--daemon-url {url}" in node_files["burstd-prolog"]
    work = bed.workdir(TEST_USER)
    src = _dataset(work)
    outs = [work / f"result-{time.time_ns()}-{n}" for n in (1, 2)]
    bootstrap = NodeBootstrap(load_config(cfg_path), node_files, tls.ca)
    log = tmp_path / "burstd.log"
    gate = Gate(bed, TEST_USER)
    try:
        with running_daemon(bed, cfg_path, log) as daemon:
            bootstrap.start()
            onprem = ["-p", bed.onprem_partition, "-N", "1", "-t", "10", "--chdir=/tmp"]
            fill = bed.sbatch([*onprem, "-n", str(bed.config.onprem_cpus), "-o", "/dev/null"], gate.script(),
                              user=TEST_USER)
            wait_for(all_jobs(bed, [fill], "RUNNING"), 60, "the on-prem node full")
            jobs = []
            for out in outs:  # one after the other: the second finds the dataset near the pool
                job = bed.sbatch([*onprem, "-n", "1", "-o", "/tmp/o-%j.txt"], _script(src, out), user=TEST_USER)
                jobs.append(job)
                diagnose = diagnosis(bed, [fill, *jobs], cfg_path, daemon,
                                     extra=lambda: f"bootstrap: {sorted(bootstrap.provisioned)} {bootstrap.errors} "
                                                   f"data hooks: {bootstrap.hook_logs}")
                wait_for(lambda j=job: _ended(bed, j), 300, f"job {job} to run on the cloud and end",
                         diagnose=diagnose)
                assert bed.job(job)["JobState"] == "COMPLETED", diagnose()
                assert bed.job(job)["NodeList"].startswith(bed.config.cloud_prefix), bed.job(job)
                wait_for(lambda j=job: [e for e in _log_events(log, "job's outputs home, verified")
                                        if e.get("job_id") == j], 120, f"job {job}'s output home", diagnose=diagnose)
            gate.open()
    finally:
        gate.remove()
        bootstrap.close()
        shutil.rmtree(d, ignore_errors=True)
    assert not bootstrap.errors, bootstrap.errors
    want = build_manifest(src)
    for job, out in zip(jobs, outs, strict=True):
        sums = dict(reversed(line.split("  ", 1)) for line in (out / "sums.txt").read_text().splitlines())
        # the job read, on the VM, exactly the bytes that are on the head
        assert sums == {f.path: f.sha256 for f in want.files}, sums
        assert (out / "host.txt").read_text().strip().startswith(bed.config.cloud_prefix)
        assert out.stat().st_uid == (work.stat().st_uid)  # home as the job's user, never root's
    staged = {e["job_id"]: e for e in _log_events(log, "job's inputs staged near its pool")}
    assert staged[jobs[0]]["bytes_moved"] == want.total_bytes and staged[jobs[0]]["cache_hits"] == 0, staged
    assert staged[jobs[1]]["bytes_moved"] == 0 and staged[jobs[1]]["cache_hits"] == 1, staged  # the cache served it
    home = _log_events(log, "job's outputs home, verified")
    assert sorted(e["job_id"] for e in home) == sorted(jobs), home


def test_demo_data_stages_caches_and_brings_every_output_home(data_bed, bed_user, tmp_path):
    """`burstctl demo --data` on this bed (its settings passed as the bed's environment): every job completes,
    every output is verified, the shared dataset is a cache hit, transfer is booked, the never-leave job stays
    home, no VM is left; the demo's exit status says the same."""
    c = data_bed.config
    env = {**os.environ, "COLUMNS": "100", "BURSTD_BED_NAME": c.name, "BURSTD_BED_DATA_STORE": "1",
           "BURSTD_BED_CLOUD_IMAGE": "default",
           **{f"BURSTD_BED_{k.upper()}": str(getattr(c, k)) for k in (
               "slot", "cloud_count", "onprem_count", "suspend_time", "suspend_timeout", "cred_expire",
               "vm_boot_delay_s", "data_link_bytes_s")}}
    summary = tmp_path / "summary.json"
    r = subprocess.run([sys.executable, "-m", "burstd.cli.app", "demo", "--data", "--jobs", "4", "--job-seconds",
                        "20", "--user", bed_user, "--keep", "--json", str(summary), "--timeout", "300"],
                       capture_output=True, text=True, env=env, timeout=600)
    kept = re.search(r"working folder (/\S+)", r.stdout)
    try:
        assert summary.exists(), r.stdout + r.stderr
        data = json.loads(summary.read_text())
        assert (data["jobs_submitted"], data["jobs_completed"], data["outputs_verified"]) == (4, 4, 4), data
        assert data["cache_hits"] >= 1 and data["jobs_on_cloud"] >= 2, data
        assert data["bytes_staged_in"] > 0 and data["bytes_staged_out"] > 0 and data["transfer_usd"] > 0, data
        assert data["jobs_kept_home_for_data"] == 1 and data["leaked_vms"] == 0 and data["finished"], data
        assert r.returncode == 0, r.stdout + r.stderr
        assert "cache hits" in r.stdout and "outputs home, checksums right" in r.stdout
    finally:
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)
