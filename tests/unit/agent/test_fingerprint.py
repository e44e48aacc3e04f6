"""The parity gate's probes, run for real: this host (Debian 12, Slurm 22.05 from scripts/install-deps.sh) must
fingerprint as such; absent programs leave their facts out instead of failing; fake nvidia-smi and site checks
are real executables on disk."""

from __future__ import annotations

import sys
from pathlib import Path

from burstd.agent import fingerprint as fp
from burstd.image.spec import ParityCheck


def _program(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_this_host_fingerprints_as_slurm_22_05_on_debian_12():
    facts = fp.fingerprint(job_python=sys.executable)
    assert facts["slurm.release"].startswith("22.05.")
    assert facts["munge.version"].startswith("0.5.")
    assert "bookworm" in facts["os.release"]
    assert facts["python.version"] == "%d.%d.%d" % sys.version_info[:3]
    assert facts["python.package.pydantic"].startswith("2.")  # burstd's own environment
    assert "python.package.pip" not in facts  # the installer's version is no job's business
    assert facts["slurm.plugin.auth_munge"] == fp.PRESENT
    assert list(facts) == sorted(facts)


def test_missing_programs_and_files_leave_their_facts_out(tmp_path):
    missing = str(tmp_path / "nope")
    assert fp.slurm_facts(slurmd=missing, plugin_dirs=[str(tmp_path / "none*")]) == {}
    assert fp.munge_facts(munged=missing) == {}
    assert fp.os_facts(tmp_path / "os-release") == {}
    assert fp.python_facts(missing) == {}
    assert fp.gpu_facts(nvidia_smi=missing) == {}
    assert fp.check_facts([ParityCheck(name="lustre", argv=[missing, "--version"])]) == {}


def test_a_python_that_prints_garbage_gives_no_python_facts(tmp_path):
    assert fp.python_facts(_program(tmp_path, "python", "echo not-json")) == {}


def test_slurm_facts_read_release_plugins_and_autodetected_gres(tmp_path):
    plugins = tmp_path / "lib" / "slurm-wlm"
    plugins.mkdir(parents=True)
    (plugins / "auth_munge.so").write_text("")
    (plugins / "gres_gpu.so").write_text("")
    slurmd = _program(tmp_path, "slurmd", 'case "$1" in -V) echo "slurm 24.11.5";; '
                                          '-C) echo "NodeName=n1 CPUs=8 Gres=gpu:a100:4 RealMemory=1000";; esac')
    assert fp.slurm_facts(slurmd=slurmd, plugin_dirs=[str(tmp_path / "lib" / "slurm-*")]) == {
        "slurm.release": "24.11.5", "slurm.plugin.auth_munge": "present", "slurm.plugin.gres_gpu": "present",
        "slurm.gres": "gpu:a100:4"}


def test_gpu_facts_name_the_driver_and_each_model_once(tmp_path):
    smi = _program(tmp_path, "nvidia-smi", 'echo "550.54.15, NVIDIA H100 80GB HBM3"; '
                                           'echo "550.54.15, NVIDIA H100 80GB HBM3"')
    assert fp.gpu_facts(nvidia_smi=smi) == {"cuda.driver": "550.54.15", "gpu.model": "NVIDIA H100 80GB HBM3"}


def test_site_checks_record_the_first_line_or_the_exit_status(tmp_path):
    ok = _program(tmp_path, "lfs", 'echo "lfs 2.15.4"; echo second line')
    bad = _program(tmp_path, "broken", "exit 3")
    slow = _program(tmp_path, "slow", "sleep 5")
    facts = fp.check_facts([ParityCheck(name="lustre", argv=[ok, "--version"]),
                            ParityCheck(name="broken", argv=[bad]),
                            ParityCheck(name="slow", argv=[slow], timeout_s=0.2)])
    assert facts == {"check.lustre": "lfs 2.15.4", "check.broken": "exit 3"}  # a hung check is left out


def test_python_facts_normalise_names_and_set_torch_apart(tmp_path):
    python = _program(tmp_path, "python", """echo '{"version": "3.12.1", "packages": """
                                          """{"Torch": "2.5.1+cpu", "Zope_Interface": "6.0", "pip": "24.0"}}'""")
    assert fp.python_facts(python) == {"python.version": "3.12.1", "torch.version": "2.5.1+cpu",
                                       "python.package.zope-interface": "6.0"}


def test_declared_features_are_one_sorted_fact():
    facts = fp.fingerprint(job_python="/nonexistent", features=["gpu", "cloud", "gpu"])
    assert facts["slurm.features"] == "cloud,gpu"
