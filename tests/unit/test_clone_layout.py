"""A clone stands alone (issue 27): the tests that read captured Slurm output, traces or the fuzz seed corpus pass
in a copy of the repository with nothing beside it, and none of them skips.

The copy is what git tracks (plus files not yet committed, not ignored), in an empty folder: no ``../shared``,
no ``BURSTD_TRACES``, ``BURSTD_SPOT_TRACES`` or ``BURSTD_SHARED``, run with ``BURSTD_TEST_NO_SKIPS=1``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Every test file that reads data kept in the repository (grep FIXTURES, public_trace, PACKAGED_TRACES, SEED_DOCS)
DATA_TESTS = [
    "tests/unit/slurm/test_slurm_parse_fixtures.py",
    "tests/unit/slurm/test_slurm_pyslurm_recorded_shapes.py",
    "tests/unit/slurm/test_slurm_snapshot_cmd.py",
    "tests/unit/slurm/test_slurm_rest_backend.py",
    "tests/adversarial/test_fuzz_parsers.py",
    "tests/unit/simulate/test_traces.py",
    "tests/unit/simulate/test_spot.py",
    "tests/unit/simulate/test_simulate_cli.py",
    "tests/unit/policy/test_prices.py",
]
#: Settings that would point the copy back at material outside it
OUTSIDE = ("BURSTD_SHARED", "BURSTD_TRACES", "BURSTD_SPOT_TRACES", "PYTHONPATH")


#: What a checkout holds that a clone does not (the .gitignore's folders), for a tree that is not a git checkout
NOT_IN_A_CLONE = {".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", "build", "dist", "out"}


def repository_files() -> list[str]:
    """What a clone holds: git's tracked files and the new ones it does not ignore (a deleted one is left out);
    outside a git checkout, the tree without what .gitignore names."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, check=True).stdout.decode()
        names = [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        names = [str(p.relative_to(REPO)) for p in REPO.rglob("*")
                 if not NOT_IN_A_CLONE & set(p.relative_to(REPO).parts) and not p.name.endswith(".egg-info")]
    return sorted(f for f in names if (REPO / f).is_file() and not f.endswith(".pyc"))


@pytest.mark.slow
def test_the_data_tests_pass_in_a_copy_with_nothing_beside_it(tmp_path):
    clone = tmp_path / "burstd"  # tmp_path holds nothing else: no ../shared
    for name in repository_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, clone / name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["burstd"]
    env = {k: v for k, v in os.environ.items() if k not in OUTSIDE}
    # the copy's burstd, not an editable install of another checkout; a few fuzz examples (the fuzz suite itself
    # runs in full elsewhere: here only its seed corpus matters)
    env.update(PYTHONPATH=str(clone), BURSTD_TEST_NO_SKIPS="1", BURSTD_FUZZ_EXAMPLES="10")
    where = subprocess.run([sys.executable, "-c", "import burstd; print(burstd.__file__)"], cwd=clone, env=env,
                           capture_output=True, text=True, timeout=60)
    assert where.stdout.strip() == str(clone / "burstd" / "__init__.py"), where.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *DATA_TESTS],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) > 200, summary  # the fixture files alone give ~200 parametrized cases
    assert "skipped" not in summary and "xfail" not in summary, summary
