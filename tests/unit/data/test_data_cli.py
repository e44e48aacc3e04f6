"""The staging commands' bad input: exit 2 with a message naming what is wrong, before any transfer."""

from __future__ import annotations

import pytest

from burstd.agent.main import main as agent_main
from burstd.data.cli import main


@pytest.fixture(autouse=True)
def no_store(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIABURSTDFAKE000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_stage_in_of_a_dataset_that_is_not_a_digest_exits_2_through_burstd_agent(tmp_path, capsys):
    rc = agent_main(["stage-in", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--dataset", "../x",
                     "--dest", str(tmp_path)])
    assert rc == 2 and "burstd-agent stage-in: dataset '../x': not a sha256 digest" in capsys.readouterr().err


def test_stage_out_with_a_label_that_could_leave_its_key_exits_2(tmp_path, capsys):
    rc = agent_main(["stage-out", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--job", "42",
                     "--label", "../../etc", "--src", str(tmp_path)])
    assert rc == 2 and "output label '../../etc'" in capsys.readouterr().err


def test_push_of_a_missing_path_and_a_new_cache_index_without_a_size_exit_2(tmp_path, capsys):
    assert main(["push", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--src", str(tmp_path / "nope")]) == 2
    assert "no such file or directory to stage" in capsys.readouterr().err
    (tmp_path / "d").mkdir()
    assert main(["push", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--src", str(tmp_path / "d"),
                 "--cache-index",
                 str(tmp_path / "idx.json")]) == 2
    assert "--cache-bytes" in capsys.readouterr().err


def test_an_unreachable_store_is_exit_1_run_again(tmp_path, capsys):
    rc = main(["stage-in", "--bucket", "b", "--endpoint-url", "http://127.0.0.1:9", "--dataset", "a" * 64,
               "--dest", str(tmp_path)])
    assert rc == 1 and "run it again to resume" in capsys.readouterr().err
