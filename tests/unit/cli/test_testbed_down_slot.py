"""`burstctl testbed down --slot N`: accepted like `up`'s; a bed brought up in another slot is refused, never
torn down by mistake."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.testbed.config import BedConfig


def test_down_with_another_slot_than_the_bed_was_brought_up_with_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("BURSTD_BED_SLOT", raising=False)
    cfg = BedConfig(name="zzslot", slot=7, state_dir=str(tmp_path))
    (tmp_path / "bed.json").write_text(json.dumps({"config": cfg.model_dump(mode="json")}))
    r = CliRunner().invoke(app, ["testbed", "down", "--name", "zzslot", "--state-dir", str(tmp_path), "--slot", "3"])
    assert r.exit_code == 2 and "up in slot 7, not slot 3" in r.output
    monkeypatch.setenv("BURSTD_BED_SLOT", "3")  # the environment says the same as the flag would
    r = CliRunner().invoke(app, ["testbed", "down", "--name", "zzslot", "--state-dir", str(tmp_path)])
    assert r.exit_code == 2 and "not slot 3" in r.output
