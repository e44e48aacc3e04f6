"""burstctl image build / fingerprint / check, end to end through the CLI (the local rootfs build apart: it needs
root and the Debian mirror)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from burstd.cli.app import app

runner = CliRunner()


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "image.toml"
    path.write_text(f"""
[image]
slurm_release = "22.05"
python_packages = ["numpy==1.26.4"]
[parity]
job_python = "{sys.executable}"
allow = ["python.package.*"]
""")
    return path


@pytest.fixture
def wheel(tmp_path):
    path = tmp_path / "burstd-0.1.0-py3-none-any.whl"
    path.write_bytes(b"PK")
    return path


def test_build_aws_writes_the_packer_template_and_the_staged_files(tmp_path, spec_file, wheel):
    out = tmp_path / "aws"
    result = runner.invoke(app, ["image", "build", "--provider", "aws", "--out", str(out), "--spec", str(spec_file),
                                 "--agent-wheel", str(wheel)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "image.pkr.json").read_text())["source"]["amazon-ebs"]
    assert sorted(p.name for p in (out / "files").iterdir()) == [
        "burstd-0.1.0-py3-none-any.whl", "burstd-agent.service", "install.sh", "node-bootstrap.sh"]
    assert "numpy==1.26.4" in (out / "files" / "install.sh").read_text()


def test_build_refuses_what_no_cloud_image_carries_and_writes_nothing(tmp_path, spec_file, wheel):
    out = tmp_path / "gcp"
    result = runner.invoke(app, ["image", "build", "--provider", "gcp", "--slurm-release", "26.05", "--out", str(out),
                                 "--spec", str(spec_file), "--agent-wheel", str(wheel)])
    assert result.exit_code == 2
    assert "Debian sid" in result.output and "--provider local" in result.output
    assert not out.exists()


def test_build_with_a_bad_spec_names_the_file_and_key(tmp_path, wheel):
    bad = tmp_path / "bad.toml"
    bad.write_text('[image]\napt_packages = ["curl && reboot"]\n')
    result = runner.invoke(app, ["image", "build", "--provider", "aws", "--slurm-release", "22.05",
                                 "--out", str(tmp_path / "o"), "--spec", str(bad), "--agent-wheel", str(wheel)])
    assert result.exit_code == 2
    assert f"{bad}: image.apt_packages[0]:" in result.output


def test_fingerprint_prints_this_hosts_facts(spec_file):
    result = runner.invoke(app, ["image", "fingerprint", "--spec", str(spec_file)])
    assert result.exit_code == 0, result.output
    facts = json.loads(result.stdout)
    assert facts["slurm.release"].startswith("22.05.")
    assert facts["python.version"] == "%d.%d.%d" % sys.version_info[:3]


def test_check_names_each_difference_and_exits_1(tmp_path, spec_file):
    ref = {"slurm.release": "22.05.8", "munge.version": "0.5.15", "python.package.numpy": "1.26.4"}
    (tmp_path / "ref.json").write_text(json.dumps(ref))
    node = {"slurm.release": "24.11.5", "python.package.numpy": "2.0.0"}
    (tmp_path / "node.json").write_text(json.dumps(node))
    args = ["image", "check", "--reference", str(tmp_path / "ref.json"), "--facts", str(tmp_path / "node.json"),
            "--spec", str(spec_file)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    # numpy is allowed by the spec's parity.allow
    assert result.stdout.splitlines() == ["slurmd 24.11.5 on the node, 22.05.8 on-prem",
                                          "munge missing on the node, 0.5.15 on-prem"]
    as_json = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert [d["key"] for d in as_json] == ["slurm.release", "munge.version"]
    (tmp_path / "node.json").write_text(json.dumps(ref))
    assert runner.invoke(app, args).exit_code == 0


def test_check_measures_this_machine_against_a_reference_from_another_release(tmp_path, spec_file):
    facts = json.loads(runner.invoke(app, ["image", "fingerprint", "--spec", str(spec_file)]).stdout)
    here = facts["slurm.release"]
    (tmp_path / "ref.json").write_text(json.dumps(dict(facts, **{"slurm.release": "24.11.5"})))
    result = runner.invoke(app, ["image", "check", "--reference", str(tmp_path / "ref.json"),
                                 "--spec", str(spec_file)])
    assert result.exit_code == 1
    assert result.stdout.strip() == f"slurmd {here} on the node, 24.11.5 on-prem"


def test_check_refuses_a_reference_that_is_not_a_fingerprint(tmp_path, spec_file):
    (tmp_path / "ref.json").write_text('{"slurm.release": 22.05}')
    result = runner.invoke(app, ["image", "check", "--reference", str(tmp_path / "ref.json"),
                                 "--facts", str(tmp_path / "ref.json"), "--spec", str(spec_file)])
    assert result.exit_code == 2 and "not a fingerprint" in result.output


def test_the_spec_comes_from_the_site_config_and_its_errors_name_that_file(tmp_path, wheel):
    site = tmp_path / "burstd.toml"
    site.write_text('[image]\nslurm_release = "24.11"\napt_packages = ["lmod"]\n')
    out = tmp_path / "gcp"
    result = runner.invoke(app, ["image", "build", "--provider", "gcp", "--out", str(out), "--config", str(site),
                                 "--agent-wheel", str(wheel)])
    assert result.exit_code == 0, result.output
    install = (out / "files" / "install.sh").read_text()
    assert "Slurm 24.11 (Debian trixie)" in install and " lmod" in install
    site.write_text('[image]\nslurm_release = "9.9"\n')
    result = runner.invoke(app, ["image", "build", "--provider", "gcp", "--out", str(out), "--config", str(site),
                                 "--agent-wheel", str(wheel)])
    assert result.exit_code == 2 and f"{site}: image.slurm_release:" in result.output
