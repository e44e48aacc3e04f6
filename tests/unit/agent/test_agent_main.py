"""burstd-agent end to end in one process: real metadata server, real scan, a recording scontrol."""

from __future__ import annotations

import os
import stat

from burstd.agent.main import main
from burstd.domain.preemption import parse_preemption_reason
from burstd.providers.local.metadata import Identity, MetadataServer, announce_preemption


def _fake_scontrol(bin_dir, log):
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {log}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def test_once_drains_the_node_through_scontrol_with_the_deadline(tmp_path):
    srv = MetadataServer(tmp_path / "vm", Identity("i-1", "cloud3"), "127.0.0.1", 0).start()
    try:
        _fake_scontrol(tmp_path / "bin", tmp_path / "argv")
        deadline = announce_preemption(srv.state_dir, 120)
        rc = main(
            [
                "--once",
                "--provider",
                "local",
                "--metadata-url",
                srv.url,
                "--node",
                "cloud3",
                "--slurm-bin-dir",
                str(tmp_path / "bin"),
            ]
        )
        assert rc == 0
        argv = (tmp_path / "argv").read_text().splitlines()
        assert argv[:3] == ["update", "nodename=cloud3", "state=DRAIN"]
        assert argv[3].startswith("reason=")
        assert parse_preemption_reason(argv[3].removeprefix("reason=")).deadline == deadline
    finally:
        srv.stop()


def test_no_notice_touches_nothing(tmp_path):
    srv = MetadataServer(tmp_path / "vm", Identity("i-1", "cloud3"), "127.0.0.1", 0).start()
    try:
        _fake_scontrol(tmp_path / "bin", tmp_path / "argv")
        assert (
            main(
                [
                    "--once",
                    "--provider",
                    "local",
                    "--metadata-url",
                    srv.url,
                    "--node",
                    "cloud3",
                    "--slurm-bin-dir",
                    str(tmp_path / "bin"),
                ]
            )
            == 0
        )
        assert not os.path.exists(tmp_path / "argv")
    finally:
        srv.stop()


def test_bad_signal_flag_is_a_clear_error(capsys):
    assert main(["--once", "--signal", "NOPE"]) == 2
    assert "NOPE" in capsys.readouterr().err
