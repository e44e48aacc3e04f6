"""``burstctl demo`` cleans up after itself: its working folder (``burstd-demo-*`` under the temp dir:
config, database, daemon log) is removed at the end, also when the demo stops early; ``--keep`` leaves it
(issue 14)."""

from __future__ import annotations

import os
import tempfile

import pytest
from typer.testing import CliRunner

from burstd.cli import demo_cmd
from burstd.cli.app import app


@pytest.fixture
def temp_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_working_folder_is_removed_unless_kept(temp_dir):
    with demo_cmd.working_folder(keep=False) as work:
        (work / "burstd.db").write_text("x")
        assert work.parent == temp_dir and work.name.startswith("burstd-demo-")
    assert not work.exists()
    with pytest.raises(RuntimeError), demo_cmd.working_folder(keep=False) as work:
        (work / "burstd.log").write_text("x")
        raise RuntimeError("the demo failed half way")
    assert not work.exists()
    with demo_cmd.working_folder(keep=True) as kept:
        (kept / "burstd.db").write_text("x")
    assert (kept / "burstd.db").read_text() == "x"


class BrokenBed:
    """A bed whose burstd.toml is not TOML: the demo stops right after creating its working folder."""

    name = "fake"
    onprem_nodes = ("onprem1", "onprem2")
    cloud_nodes = ("cloud1",)

    def __init__(self, config):
        self.burstd_config = str(config)
        self.downs = 0

    def up(self):
        pass

    def reset_cloud_nodes(self):
        pass

    def down(self):
        self.downs += 1


def test_the_demo_removes_its_working_folder_when_it_stops_early(temp_dir, monkeypatch):
    config = temp_dir / "bed-burstd.toml"
    config.write_text("[pools\n")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(demo_cmd, "_bed", lambda release=None, shared_fs=False, data=False, storm=False: BrokenBed(config))
    r = CliRunner().invoke(app, ["demo"])
    assert r.exit_code == 1, r.output
    assert "does not make a daemon config" in r.output and str(config) in r.output
    assert not list(temp_dir.glob("burstd-demo-*"))
