"""The node side of the pool's preemption rate: the agent's file and the TaskProlog's export line."""

import os
import stat
import subprocess
import sys

import pytest

from burstd.agent.preempt_rate import task_prolog_lines, write_rate_file

ENV = "BURSTD_PREEMPT_RATE_PER_HOUR"


def test_the_file_is_replaced_whole_readable_by_job_users_and_removed_when_unknown(tmp_path):
    path = tmp_path / "run" / "preempt-rate"  # the folder is made on first use
    write_rate_file(str(path), 0.25)
    assert path.read_text() == "0.25\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    write_rate_file(str(path), 2.0)
    assert path.read_text() == "2\n" and os.listdir(path.parent) == ["preempt-rate"]  # no temp file left
    write_rate_file(str(path), None)
    assert not path.exists()
    write_rate_file(str(path), None)  # already gone: fine


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_a_rate_that_is_not_a_plain_number_is_never_written(tmp_path, bad):
    with pytest.raises(ValueError, match="preemption rate"):
        write_rate_file(str(tmp_path / "r"), bad)
    assert not (tmp_path / "r").exists()


def test_the_prolog_exports_the_rate_unless_the_job_set_its_own(tmp_path):
    path = tmp_path / "r"
    assert task_prolog_lines({}, str(path)) == []  # no file: no line, the job keeps its default
    path.write_text("0.75\n")
    assert task_prolog_lines({}, str(path)) == [f"export {ENV}=0.75"]
    assert task_prolog_lines({ENV: "3"}, str(path)) == []


@pytest.mark.parametrize("text", ["1; rm -rf /", "$(id)", "nan", "-2", "1e999", "0.5\nexport LD_PRELOAD=x"])
def test_whatever_the_file_holds_only_a_plain_number_reaches_the_export_line(tmp_path, text, capsys):
    path = tmp_path / "r"
    path.write_text(text)
    assert task_prolog_lines({}, str(path)) == []
    assert "burstd task prolog" in capsys.readouterr().err


def test_the_task_prolog_prints_the_line_slurm_reads_and_never_fails_the_task(tmp_path):
    path = tmp_path / "r"
    path.write_text("1.5")
    env = {k: v for k, v in os.environ.items() if k != ENV}
    run = subprocess.run([sys.executable, "-m", "burstd.agent.preempt_rate", "--file", str(path)],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (run.returncode, run.stdout) == (0, f"export {ENV}=1.5\n")
    path.write_text("garbage")
    run = subprocess.run([sys.executable, "-m", "burstd.agent.preempt_rate", "--file", str(path)],
                         capture_output=True, text=True, env=env, timeout=60, check=False)
    assert (run.returncode, run.stdout) == (0, "")
