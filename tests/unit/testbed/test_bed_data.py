"""A bed's data path (burstd/testbed/bed_data.py): the pool's [pools.data], slurm.conf's Prolog/Epilog and the
wrappers, for a shared-filesystem bed and an image bed. Pure rendering; the live run is
tests/integration/test_data_live_bed.py."""

from __future__ import annotations

import subprocess
import tomllib

from burstd.config import parse_config
from burstd.testbed import bed_data, render
from burstd.testbed.config import BedConfig


def _cfg(**kw) -> BedConfig:
    return BedConfig(**{"name": "dt", "slot": 9, "state_dir": "/var/lib/burstd-testbed/dt", **kw})


def _burstd(cfg: BedConfig):
    return parse_config(tomllib.loads(render.burstd_toml(cfg)))


def test_no_data_store_no_data_path():
    cfg = _cfg()
    assert _burstd(cfg).pools[0].data.store_bucket is None
    assert not [x for x in render.slurm_conf(cfg, (22, 5), "h").splitlines() if x.startswith(("Prolog", "Epilog"))]
    assert bed_data.files(cfg, _burstd(cfg)) == {}


def test_the_pool_stages_through_the_bed_store_behind_its_link():
    cfg = _cfg(data_store=True, data_link_bytes_s=5e6)
    data = _burstd(cfg).pools[0].data
    assert (data.store_bucket, data.store_endpoint, data.link_mbps) == ("bed-dt-data", "http://10.86.0.1:7723", 40.0)
    assert data.store_endpoint == bed_data.store(cfg).url  # the link, on the bridge: what the VMs reach


def test_a_shared_filesystem_bed_runs_the_heads_burstd_from_its_state_dir(tmp_path):
    cfg = _cfg(data_store=True, state_dir=str(tmp_path))
    conf = render.slurm_conf(cfg, (22, 5), "h").splitlines()
    assert f"Prolog={tmp_path}/hooks/burstd-prolog" in conf and f"Epilog={tmp_path}/hooks/burstd-epilog" in conf
    bed_data.write_files(cfg, _burstd(cfg))
    env = (tmp_path / "data.env").read_text()
    assert "AWS_ACCESS_KEY_ID=" in env and "PYTHONPATH=" in env
    assert (tmp_path / "data.env").stat().st_mode & 0o077 == 0  # credentials: root's own
    # on an on-prem node the wrapper does nothing; on a cloud node it asks the bed's daemon over its socket
    prolog = tmp_path / "hooks" / "burstd-prolog"
    onprem = subprocess.run([prolog], env={"SLURMD_NODENAME": "onprem1", "SLURM_JOB_ID": "3"}, check=False)
    assert onprem.returncode == 0
    assert f"-m burstd.agent.main stage-in --job \"$SLURM_JOB_ID\" --daemon-url unix:{tmp_path}/burstd/burstd.sock" \
        in prolog.read_text()


def test_an_image_bed_names_the_vms_boot_folder_and_the_images_agent():
    cfg = _cfg(data_store=True, cloud_image="/srv/img")
    conf = render.slurm_conf(cfg, (22, 5), "h").splitlines()
    assert "Prolog=/run/burstd-boot/burstd-prolog" in conf and "Epilog=/run/burstd-boot/burstd-epilog" in conf
    files = {p.relative_to(bed_data.boot_dir(cfg)).as_posix(): t for p, t in bed_data.files(cfg, _burstd(cfg)).items()}
    assert set(files) == {"burstd-prolog", "burstd-epilog", "agent.env"}
    assert "exec /usr/bin/burstd-agent stage-out" in files["burstd-epilog"]
    assert ". /run/burstd-boot/agent.env" in files["burstd-epilog"]
    assert "PYTHONPATH" not in files["agent.env"]  # the image's own burstd, never the head's


def test_an_image_beds_on_prem_nodes_get_a_no_op_copy_at_the_vms_path():
    cfg = _cfg(data_store=True, cloud_image="/srv/img")
    copies = bed_data.host_copies(cfg)
    assert sorted(map(str, copies)) == ["/run/burstd-boot/burstd-epilog", "/run/burstd-boot/burstd-prolog"]
    assert all(t.endswith("\nexit 0\n") for t in copies.values())
    assert bed_data.host_copies(_cfg(data_store=True)) == {}  # shared filesystem: the real wrapper is there
