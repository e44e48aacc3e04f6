"""Issue 26 item 2 on the bed: training jobs report their progress from both sides, as themselves.

The story: burstd runs with its TLS listener on the bed's bridge. burstuser submits two training jobs that use
``burstd.train.progress`` (the reporter ``Preemptible`` runs on rank 0), one on the on-prem partition and one that
bursts to a cloud namespace VM; each seals its reports with real MUNGE as burstuser and posts them over https from
its node. burstd shows both (``burstctl jobs --training``): steps, step time, the side, and for the cloud run a
cost per step from its lease's price. A report burstuser seals about root's job is refused (403) and changes
nothing. The bed's VMs share the head node's munged, so its origin address is not the node's:
``api.progress_require_node = false`` here (the node check is proved in tests/unit/daemon/test_job_progress.py).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from burstd.testbed.procs import free_port
from tests.bed import TEST_USER
from tests.fakes.tls import make_tls

pytestmark = [pytest.mark.bed, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

TRAIN = r'''
import json, sys, time
sys.path.insert(0, sys.argv[1])  # this checkout's burstd
from burstd.train.progress import ProgressReporter, http_post, munge_seal
import os
r = ProgressReporter.from_env(steps_per_epoch=50)
t0, step = time.monotonic(), 0
# 8 s at least: several reports; longer while none has got through (on a loaded machine one report can take
# its whole 10 s timeout, and the reporter sends no second while one is on its way), 120 s at most
while step < 80 or (not r.sent and time.monotonic() - t0 < 120):
    step += 1
    time.sleep(0.1)
    r.step_done(step)
r.close(10)
out = {"sent": r.sent, "failed": r.failed, "error": r.last_error}
victim = sys.argv[2]
if victim != "-":  # a report about another user's job, sealed as this job's user
    cred = munge_seal(json.dumps({"job": int(victim), "step": 1, "step_time_s": 1.0}).encode())
    out["forged"] = http_post(os.environ["BURSTD_PROGRESS_URL"], f"/v1/jobs/{victim}/progress", cred,
                              os.environ["BURSTD_PROGRESS_CA"])
print(json.dumps(out))
'''


def test_training_jobs_on_prem_and_in_the_cloud_report_their_progress_as_themselves(slurm_bed, tmp_path):
    from burstd.cli.app import app
    from tests.integration.daemon_bed import (
        bed_daemon_config,
        job_states,
        running_daemon,
        wait_for,
        world_readable_dir,
    )

    bed = slurm_bed
    head = str(next(ipaddress.ip_network(bed.config.subnet).hosts()))
    d = world_readable_dir("burstd-progress-")
    tls = make_tls(d, ips=(head, "127.0.0.1"))
    (d / "admin.token").write_text("admin-only-on-the-head\n")
    (d / "admin.token").chmod(0o600)
    url = f"https://{head}:{free_port()}"
    cfg_path = bed_daemon_config(bed, d, api={"tcp_listen": url.removeprefix("https://"),
                                              "token_file": str(d / "admin.token"), "tls_cert": str(tls.cert),
                                              "tls_key": str(tls.key), "progress_require_node": False})
    env = bed.job_env()
    script = d / "train.py"
    script.write_text(TRAIN)
    script.chmod(0o644)
    exports = (f"--export=ALL,BURSTD_PROGRESS_URL={url},BURSTD_PROGRESS_CA={tls.ca},"
               "BURSTD_PROGRESS_EVERY_S=0.5")
    try:
        with running_daemon(bed, cfg_path, d / "burstd.log"):
            victim = bed.sbatch(["-p", bed.onprem_partition, "-o", "/dev/null", "-t", "5"], "#!/bin/sh\nsleep 300\n",
                                user="root")
            wait_for(lambda: job_states(bed, [victim])[victim] == "RUNNING", 120, "root's job RUNNING")
            outs = bed.workdir(TEST_USER)  # where burstuser's jobs may write
            jobs = {}
            for side, partition, target in (("onprem", bed.onprem_partition, "-"),
                                            ("cloud", bed.cloud_partition, str(victim))):
                out = outs / f"progress-{side}.out"
                jobs[side] = bed.sbatch(["-p", partition, "-o", str(out), "-t", "10", exports],
                                        f"#!/bin/sh\nexec {env.python} {script} {REPO} {target}\n", user=TEST_USER)
            wait_for(lambda: all(s in ("COMPLETED", "FAILED") for s in job_states(bed, jobs.values()).values()), 400,
                     "both training jobs to end",
                     diagnose=lambda: "\n".join(p.read_text() for p in outs.glob("progress-*.out")))
            said = {side: json.loads((outs / f"progress-{side}.out").read_text().strip().splitlines()[-1])
                    for side in jobs}
            assert said["onprem"]["sent"] >= 1 and said["cloud"]["sent"] >= 1, said
            # a report may time out on a loaded machine; burstd refuses none of a job's reports on itself
            assert not any((said[side]["error"] or "").startswith("burstd answered") for side in said), said
            assert said["cloud"]["forged"] == 403, said

            r = CliRunner().invoke(app, ["jobs", "--training", "--json", "-c", str(cfg_path)])
            assert r.exit_code == 0, r.output
            seen = {p["job_id"]: p for p in json.loads(r.output)}
            assert victim not in seen, seen  # the forged report changed nothing
            onprem, cloud = seen[jobs["onprem"]], seen[jobs["cloud"]]
            assert onprem["side"] == "onprem" and onprem["cost_per_step_micro_usd"] is None
            assert cloud["side"] == "cloud" and cloud["cost_per_step_micro_usd"] > 0
            assert cloud["user"] == onprem["user"] == TEST_USER and 2 <= cloud["step"] <= 80
            assert 0.05 <= cloud["step_time_s"] <= 2.0, cloud
            bed.run(["scancel", str(victim)], check=False)
    finally:
        shutil.rmtree(d, ignore_errors=True)
