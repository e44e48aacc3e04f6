"""Local VMs that boot from a node image, on the live bed (issue 23 items 1, 2 and 4; providers/local/vmroot.py).

The images are the bed's default ones (``burstd.testbed.cloud_image.default_spec``), from the image cache: built
once per machine (scripts/install-deps.sh), here only when missing. A VM booted from the 22.05 image joins the
bed's 22.05 slurmctld, runs a job as a test user from the image's Slurm and job environment, and does not see a
file that exists only on the head node, nor any process of the head's (the VM has a PID namespace of its own); the 24.11 image is refused by the parity gate before slurmd starts,
with the mismatch named.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from burstd.config import parse_config
from burstd.daemon.client import ApiClient
from burstd.image import cache
from burstd.providers.base import ErrorKind, LaunchRequest, ProviderError
from burstd.providers.local import netns
from burstd.providers.local.preemption import PreemptionHook, metadata_dir, preempt
from burstd.providers.local.provider import LocalProvider
from burstd.testbed import cloud_image
from burstd.testbed.host import TEST_USERS

pytestmark = pytest.mark.bed


@pytest.fixture(scope="module")
def host_bed(slurm_bed):
    if slurm_bed.config.slurm_release is not None:
        pytest.skip("the gate's on-prem reference is measured on the head: a bed of the host's Slurm (22.05)")
    return slurm_bed


def _image(release: str) -> Path:
    return cache.ensure(cloud_image.default_spec(release), release) / "rootfs"


def _provider(bed, tmp_path, release: str, agent: dict | None = None, **local) -> LocalProvider:
    gate_cfg = bed.config.model_copy(update={"cloud_image": cloud_image.DEFAULT, "state_dir": str(tmp_path)})
    cloud_image.write_gate_files(gate_cfg)  # the head's fingerprint: the on-prem side of this bed
    reference, spec = cloud_image.gate_files(tmp_path)
    cfg = parse_config({
        "cluster": {"id": f"t{uuid.uuid4().hex[:8]}"},
        "daemon": {"state_dir": str(tmp_path / "state")},
        # no daemon listens there: the agent's reports fail, its dead-man switch counts
        "api": {"socket": str(tmp_path / "no-daemon.sock")}, "agent": agent or {},
        "pools": [{
            "name": "local", "provider": "local", "partition": bed.cloud_partition,
            "node_prefix": bed.config.cloud_prefix, "node_count": bed.config.cloud_count, "price_per_hour": 0.1,
            "instance_types": [{"name": "ns.small", "cpus": 2, "memory_mb": 1000}],
            "local": {"subnet": bed.subnet, "bridge": bed.bridge, "first_host": bed.config.cloud_first_host,
                      "netns_prefix": bed.netns_prefix, "conf_server": bed.config.conf_server,
                      "image_rootfs": str(_image(release)), "vm_users": list(TEST_USERS),
                      "vm_dirs": list(cloud_image.slurmd_dirs(bed.config)),
                      "parity_reference_file": str(reference), "parity_spec_file": str(spec), **local},
        }],
    })
    hooks = [PreemptionHook(cfg, cfg.pools[0])] if agent is not None else []
    return LocalProvider.from_config(cfg, "local", hooks=hooks)


def _runs(comm: str) -> bool:
    """Whether a process named ``comm`` runs on the head (seen from the head's /proc)."""
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == comm:
                return True
        except OSError:
            continue
    return False


def _req(node: str) -> LaunchRequest:
    return LaunchRequest(lease_id=f"lease-{uuid.uuid4().hex[:8]}", node_name=node, pool="local")


def test_a_vm_from_the_matching_image_runs_a_job_that_cannot_see_the_head_nodes_files(host_bed, tmp_path):
    bed = host_bed
    provider = _provider(bed, tmp_path, "22.05")
    node = bed.cloud_nodes[2]
    head_only = bed.workdir("burstuser") / f"head-only-{uuid.uuid4().hex[:6]}.txt"
    head_only.write_text("on the head node only\n")
    head_only.chmod(0o644)
    try:
        inst = provider.launch(_req(node))
        assert inst.state == "running"
        bed.wait_for(lambda: "IDLE" in bed.node(node).get("State", ""), 60, f"{node} (from the image) to register")
        script = (f"#!/bin/sh\nhostname\npwd\ncat /etc/burstd-image\n/opt/burstd/jobenv/bin/python -c "
                  f"'import six; print(\"six\", six.__version__)'\n"
                  f"cat {head_only} || echo HEAD-FILE-MISSING\nls {bed.workdir('burstuser')} || echo WORKDIR-MISSING\n"
                  "echo PROCESSES $(ps -e -o comm= | sort -u)\n"
                  "/opt/burstd/jobenv/bin/python -m burstd.train should-requeue /scratch/no-checkpoints 2>&1 || true\n")
        job = bed.sbatch(["-p", bed.cloud_partition, "-w", node, "--chdir=/scratch", "-o", "/scratch/out-%j.txt"],
                         script, user="burstuser")
        bed.wait_for(lambda: bed.job(job).get("JobState") in ("COMPLETED", "FAILED"), 90, f"job {job} to end")
        assert bed.job(job)["JobState"] == "COMPLETED"
        vm_dir = provider.records_dir / f"{provider.netns_of(node)}.vm"
        out = (vm_dir / "scratch" / f"out-{job}.txt").read_text()  # the VM's own scratch disk
        lines = out.splitlines()
        assert lines[0] == node and lines[1] == "/scratch"
        assert '"slurm_release": "22.05"' in lines[2]  # the job ran on the image...
        assert "six 1.16.0" in out  # ...with its job environment
        assert "no complete checkpoint in /scratch/no-checkpoints" in out  # burstd.train is in it (the templates')
        assert "HEAD-FILE-MISSING" in out and "on the head node only" not in out
        assert "WORKDIR-MISSING" in out
        assert not Path(f"/scratch/out-{job}.txt").exists()  # the output stayed on the node
        # the VM's own PID namespace: the job sees the VM's processes (slurmd, its step) and none of the head's
        seen = next(line for line in lines if line.startswith("PROCESSES ")).split()[1:]
        assert {"slurmd", "slurmstepd", "munged"} <= set(seen), seen
        assert not {"slurmctld", "slurmdbd", "mariadbd", "systemd"} & set(seen), seen
        assert _runs("slurmctld")  # it does run, on the head

        provider.terminate([inst.instance_id])
        assert not netns.netns_exists(provider.netns_of(node)) and not vm_dir.exists()  # its disk went with it
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
        head_only.unlink(missing_ok=True)
        bed.reset_cloud_nodes()


def test_an_image_of_another_slurm_release_is_refused_by_the_gate_before_slurmd_starts(host_bed, tmp_path):
    bed = host_bed
    provider = _provider(bed, tmp_path, "24.11")
    node = bed.cloud_nodes[3]
    try:
        with pytest.raises(ProviderError) as caught:
            provider.launch(_req(node))
        assert caught.value.kind == ErrorKind.CONFIG and caught.value.code == "ParityRefused"
        message = str(caught.value)
        assert "slurmd 24.11." in message and "on the node, 22.05.8 on-prem" in message
        assert not netns.netns_exists(provider.netns_of(node))  # no VM left, no slurmd ever ran
        assert "POWERED_DOWN" in bed.node(node).get("State", "")  # it never registered
        assert provider.list_instances() == []
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])


def _agent_pid(netns_name: str) -> int | None:
    for pid in netns.netns_pids(netns_name):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"/usr/bin/burstd-agent" in argv and b"--config" in argv:
            return pid
    return None


def _modules(package: Path) -> dict[str, bytes]:
    return {str(p.relative_to(package)): p.read_bytes() for p in package.rglob("*.py")}


def test_the_image_a_vm_boots_holds_the_burstd_under_test_in_the_agent_and_the_job_environment():
    """An edit to burstd is a new layer of the cached image (burstd.image.cache): the VM's agent, parity gate and
    burstd.train are this tree's, never the burstd the base image was first built with."""
    import burstd

    here = _modules(Path(burstd.__file__).resolve().parent)
    root = _image("22.05")
    for venv in ("opt/burstd/agent", "opt/burstd/jobenv"):
        [package] = root.glob(f"{venv}/lib/python3*/site-packages/burstd")
        assert _modules(package) == here, venv


def test_the_vms_agent_runs_from_the_image_inside_the_vm_and_drains_its_node_on_a_notice(host_bed, tmp_path):
    bed = host_bed
    provider = _provider(bed, tmp_path, "22.05", agent={"poll_interval_s": 0.5, "deadman_s": 0})
    node = bed.cloud_nodes[1]
    ns = provider.netns_of(node)
    head_only = tmp_path / "head-only.txt"
    head_only.write_text("on the head node only\n")
    try:
        inst = provider.launch(_req(node))
        bed.wait_for(lambda: "IDLE" in bed.node(node).get("State", ""), 60, f"{node} (from the image) to register")
        pid = bed.wait_for(lambda: _agent_pid(ns), 30, "burstd-agent to run in the VM")
        # the image's agent, in the VM's PID namespace and root: the image is its /, the head's files are not there
        status = Path(f"/proc/{pid}/status").read_text()
        ns_pids = next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[1:]
        assert len(ns_pids) == 2, status
        root = Path(f"/proc/{pid}/root")
        assert '"slurm_release": "22.05"' in (root / "etc/burstd-image").read_text()
        assert head_only.exists() and not (root / str(head_only).lstrip("/")).exists()
        assert not (root / str(provider.records_dir).lstrip("/")).exists()  # nor the provider's records
        # its settings came as user data from the metadata endpoint: no path of the head's in them
        settings = (root / "etc/burstd/burstd.toml").read_text()
        assert f'node_name = "{node}"' in settings and str(tmp_path) not in settings
        assert 'daemon_url = "unix:/run/burstd-boot/daemon-0.sock"' in settings

        # a spot notice on the VM's metadata: the agent drains its node with the image's scontrol
        preempt(provider.records_dir, ns, notice_s=300, reclaim=False)
        bed.wait_for(lambda: "DRAIN" in bed.node(node).get("State", ""), 30, f"the in-VM agent to drain {node}")
        assert "preempt" in bed.node(node).get("Reason", "").lower(), bed.node(node)
        provider.terminate([inst.instance_id])
        assert not netns.netns_exists(ns) and _agent_pid(ns) is None
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
        bed.reset_cloud_nodes()


def test_an_image_vm_whose_agent_reaches_no_burstd_powers_itself_off(host_bed, tmp_path):
    """The dead-man switch of the image's agent: no daemon behind the VM's link, no job, so the guest powers off
    (``/run/burstd-boot/poweroff``) and the host side ends the VM as a hypervisor would: no process, no record,
    no disk left."""
    bed = host_bed
    provider = _provider(bed, tmp_path, "22.05", agent={"poll_interval_s": 0.5, "deadman_s": 3})
    node = bed.cloud_nodes[1]
    ns = provider.netns_of(node)
    try:
        provider.launch(_req(node))
        vm_dir = provider.records_dir / f"{ns}.vm"
        assert vm_dir.is_dir()
        # the link unlinks the namespace, then removes the disk: a look in between (a loaded machine) finds one
        bed.wait_for(lambda: not netns.netns_exists(ns) and not vm_dir.exists(), 60, "the VM to power itself off")
        assert provider.list_instances() == []
        assert "no burstd reachable" in (metadata_dir(provider.records_dir, ns) / "agent.log").read_text()
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
        bed.reset_cloud_nodes()


@pytest.mark.slow
def test_a_job_bursts_onto_an_image_vm_whose_agent_reports_a_notice_to_the_daemon_over_the_vms_link(host_bed, tmp_path):
    """The whole path with the real daemon: a job bursts, the daemon's local provider boots its VM from the image,
    the image's agent inside it sees a spot notice, drains the node and reports to the daemon through the socket
    relayed into the VM (the agent has no other way to the head)."""
    from burstd.config import load_config
    from burstd.providers.local.preemption import records_dir_of
    from tests.integration.daemon_bed import bed_daemon_config, diagnosis, running_daemon, wait_for

    bed = host_bed
    gate_cfg = bed.config.model_copy(update={"cloud_image": cloud_image.DEFAULT, "state_dir": str(tmp_path)})
    cloud_image.write_gate_files(gate_cfg)
    local = cloud_image.burstd_local_keys(gate_cfg) | {"vm_dirs": list(cloud_image.slurmd_dirs(bed.config))}
    _image("22.05")
    cfg_path = bed_daemon_config(bed, tmp_path / "burstd", **{"pools.local": local,
                                                              "agent": {"poll_interval_s": 0.5}})
    cfg = load_config(cfg_path)
    with running_daemon(bed, cfg_path, tmp_path / "burstd.log") as daemon:
        job = bed.sbatch(["-p", bed.cloud_partition, "--chdir=/scratch", "-o", "/scratch/o-%j", "-t", "10"],
                         "#!/bin/sh\nsleep 300\n", user="burstuser")
        diagnose = diagnosis(bed, [job], cfg_path, daemon)
        node = wait_for(lambda: bed.job(job).get("JobState") == "RUNNING" and bed.job(job).get("NodeList"), 240,
                        f"job {job} RUNNING on a cloud node", diagnose=diagnose)
        ns = bed.config.netns_of(node)
        pid = wait_for(lambda: _agent_pid(ns), 30, "the image's agent in the VM", diagnose=diagnose)
        assert Path(f"/proc/{pid}/root/etc/burstd-image").is_file()
        records = records_dir_of(cfg, cfg.pools[0])
        preempt(records, ns, notice_s=300, reclaim=False)
        agent_log = metadata_dir(records, ns) / "agent.log"
        wait_for(lambda: f"reported to daemon node={node} ok=True" in agent_log.read_text(), 30,
                 "the agent's report to reach the daemon", diagnose=lambda: agent_log.read_text()[-2000:])
        daemon_log = (tmp_path / "burstd.log").read_text()
        assert "preemption notice" in daemon_log and node in daemon_log
        assert "DRAIN" in bed.node(node).get("State", "")
        # the agent reported with the token the VM got at boot; root in the VM, without it, is nobody to the daemon
        # (the relay is root on the head: on the control socket it would have been an admin)
        token = Path(f"/proc/{pid}/root/run/burstd-boot/agent.token")
        assert token.stat().st_mode & 0o777 == 0o600 and token.read_text().startswith("burstd-agent.v1.")
        in_vm = ["nsenter", f"--target={pid}", "--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--",
                 "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket",
                 "/run/burstd-boot/daemon-0.sock"]
        for call in (["-X", "POST", "http://burstd/v1/pause"], ["http://burstd/v1/status"],
                     ["-X", "POST", "-H", "Content-Type: application/json", "-d", '{"hostlist": "' + node + '"}',
                      "http://burstd/v1/nodes/" + node + "/terminate"]):
            out = subprocess.run(in_vm + call, capture_output=True, text=True, timeout=30, check=False)
            assert out.stdout == "401", (call, out.stdout, out.stderr)
        with ApiClient(cfg.api.socket) as api:
            assert api.get("/v1/status")["paused"] is False
        bed.run(["scancel", str(job)])


@pytest.mark.slow
def test_the_daemon_counts_a_local_vm_the_gate_refused_as_a_parity_refusal_and_protects_the_pool(host_bed, tmp_path):
    """The daemon's pool boots its VMs from the 24.11 image against this 22.05 bed: the launch is refused by the
    gate, and the daemon treats it as a cloud agent's report: the lease fails with `parity: ...`, the metric counts
    it, the pool is protected (`/v1/status`), no VM is left."""
    import json

    import httpx

    from burstd.config import load_config
    from tests.integration.daemon_bed import (bed_daemon_config, cloud_namespaces, diagnosis, leases, running_daemon,
                                              wait_for)

    bed = host_bed
    gate_cfg = bed.config.model_copy(update={"cloud_image": cloud_image.DEFAULT, "state_dir": str(tmp_path)})
    cloud_image.write_gate_files(gate_cfg)
    local = cloud_image.burstd_local_keys(gate_cfg) | {"vm_dirs": list(cloud_image.slurmd_dirs(bed.config)),
                                                       "image_rootfs": str(_image("24.11"))}
    cfg_path = bed_daemon_config(bed, tmp_path / "burstd", **{"pools.local": local,
                                                              "cloud": {"protect_after_boot_failures": 1}})
    socket = load_config(cfg_path).api.socket
    with running_daemon(bed, cfg_path, tmp_path / "burstd.log") as daemon:
        job = bed.sbatch(["-p", bed.cloud_partition, "--chdir=/scratch", "-o", "/scratch/o-%j", "-t", "10"],
                         "#!/bin/sh\nhostname\n", user="burstuser")
        diagnose = diagnosis(bed, [job], cfg_path, daemon)
        # FAILED, then TERMINATED at once (no VM to take back), keeping the gate's reason
        failed = wait_for(lambda: next((x for x in leases(cfg_path) if x["reason"].startswith("parity: ")), None),
                          240, "a lease the gate failed", diagnose=diagnose)
        assert failed["state"] in ("FAILED", "TERMINATED"), failed
        assert "(trixie) on the node, Debian GNU/Linux 12 (bookworm) on-prem" in failed["reason"], failed
        with httpx.Client(transport=httpx.HTTPTransport(uds=socket), base_url="http://burstd") as http:
            metrics = http.get("/metrics").text
            status = http.get("/v1/status").json()
        assert 'burstd_parity_refusals_total{pool="local"} 1.0' in metrics, metrics
        pool = json.dumps(status["pool_health"]["local"])
        assert '"protected": true' in pool and "parity: " in pool, pool
        assert not cloud_namespaces(bed)
        assert bed.job(job).get("JobState") != "RUNNING"
        bed.run(["scancel", str(job)])


@pytest.mark.release_bed
def test_a_release_beds_vms_are_gated_on_its_chroots_slurm(slurm_bed, tmp_path):
    """A 24.11 (or 26.05) bed: the on-prem side is the release chroot, measured from the host; a VM from the bed's
    own release image passes the gate and runs a job, one from the 22.05 image is refused before slurmd starts."""
    import json

    bed = slurm_bed
    release = bed.config.slurm_release
    if release is None:
        pytest.skip("a release bed's test: BURSTD_BED_SLURM_RELEASE=24.11")
    gate_cfg = bed.config.model_copy(update={"cloud_image": cloud_image.DEFAULT, "state_dir": str(tmp_path)})
    cloud_image.write_gate_files(gate_cfg)
    reference = json.loads(cloud_image.gate_files(tmp_path)[0].read_text())
    assert reference["slurm.release"].startswith(release + ".") and "python.version" not in reference
    key = cloud_image.munge_key(bed.config)
    refused = _provider(bed, tmp_path, "22.05", munge_key_file=key)
    node = bed.cloud_nodes[3]
    with pytest.raises(ProviderError) as caught:
        refused.launch(_req(node))
    assert caught.value.code == "ParityRefused"
    assert f"slurmd 22.05.8 on the node, {reference['slurm.release']} on-prem" in str(caught.value)
    assert not netns.netns_exists(refused.netns_of(node))

    provider = _provider(bed, tmp_path, release, munge_key_file=key)
    node = bed.cloud_nodes[2]
    try:
        provider.launch(_req(node))
        bed.wait_for(lambda: "IDLE" in bed.node(node).get("State", ""), 60, f"{node} (from the image) to register")
        job = bed.sbatch(["-p", bed.cloud_partition, "-w", node, "--chdir=/scratch", "-o", "/scratch/out-%j.txt"],
                         "#!/bin/sh\ncat /etc/burstd-image\n", user="burstuser")
        bed.wait_for(lambda: bed.job(job).get("JobState") in ("COMPLETED", "FAILED"), 90, f"job {job} to end")
        assert bed.job(job)["JobState"] == "COMPLETED"
        out = (provider.records_dir / f"{provider.netns_of(node)}.vm" / "scratch" / f"out-{job}.txt").read_text()
        assert f'"slurm_release": "{release}"' in out
    finally:
        provider.terminate([i.instance_id for i in provider.list_instances()])
        bed.reset_cloud_nodes()
