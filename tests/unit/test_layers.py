"""Layers point one way (issue 20 seam 4): value types sit in ``domain``, crash points in the leaf ``burstd.faults``,
and the adapters (db, slurm, providers) never reach up into the policy, the report or the daemon.

Read from the source with ``ast`` (every import counts: top-level, inside a function, under TYPE_CHECKING), so a
wrong-way import fails here with its file and line, before anyone builds on it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BURSTD = REPO / "burstd"

# What sits above everything below: nothing of these may be imported by a lower layer.
TOP = {"cli", "daemon", "api", "agent", "testbed", "simulate", "train"}

# part of burstd -> the parts it must never import (a part: the first name under burstd, a module or a package)
FORBIDDEN: dict[str, set[str]] = {
    "policy": TOP | {"db", "slurm", "report", "providers"},  # prices speak of domain.offering.Offering
    "db": TOP | {"policy", "providers", "slurm", "report"},
    "slurm": TOP | {"db", "policy", "providers", "report"},
    "providers": TOP | {"db", "policy", "slurm", "report"},
    "report": TOP | {"db", "providers"},
    "config": TOP | {"db", "policy", "providers", "slurm", "report"},
    "config_policy": TOP | {"db", "policy", "providers", "slurm", "report"},
    "config_types": TOP | {"db", "policy", "providers", "slurm", "report"},
    # the daemon runs the cycle: the tools around it (burstctl, the bed and its daemon-process harness, the
    # simulator, the node agent, the training library) sit beside it, never under it
    "daemon": {"cli", "testbed", "simulate", "agent", "train"},
    # the node image is built from the providers' artefacts; the bed builds on the image (its chroots start from
    # image/debian.py), never the other way round
    "image": TOP,
}
# parts that import nothing of burstd but themselves: the pure values, the crash points and the start's collector pause
LEAVES = {"domain", "faults", "start_up"}

# The old locations kept as one-line re-exports while parallel work lands; the merge removes them.
REEXPORTS = {"daemon/faults.py", "slurm/hostlist.py", "policy/ledger.py", "db/errors.py", "daemon/runner.py"}

# Each provider's own config section lives beside it (``providers/<cloud>/config.py``) and joins the config through
# the pool union: the config may import those modules and nothing else of the providers; they import only the
# config's field types, so reading a config never loads a cloud SDK.
PROVIDER_CONFIG = re.compile(r"burstd\.providers\.\w+\.config")
# the same for the node image's part of the config ([image], [parity]): the rest of image/ builds on the providers
IMAGE_SPEC = "burstd.image.spec"
CONFIG_PARTS = {"config_types", "domain"}  # never burstd.config itself: it imports them

# In the daemon only the composition root opens the database; the cycle knows the store through daemon/ports.py
# and the values in domain.
DAEMON_DB = {"daemon/wiring.py"}

# The control API (burstd/api) is the daemon's edge: it imports the daemon, never the other way round, except in the
# daemon's composition root, which starts it.
API_STARTERS = {"daemon/main.py"}


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, node.module)] if node.module != "burstd" else \
                [(node.lineno, f"burstd.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return [(line, m) for line, m in out if m.startswith("burstd.")]


def _part(module: str) -> str:
    return module.split(".")[1]


def violations(root: Path = BURSTD) -> list[str]:
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel in REEXPORTS:
            continue
        part = rel.split("/")[0].removesuffix(".py")
        dotted = "burstd." + rel.removesuffix(".py").replace("/", ".")
        config_section = PROVIDER_CONFIG.fullmatch(dotted) or dotted == IMAGE_SPEC
        for line, module in _imports(path):
            target = _part(module)
            if config_section and target not in CONFIG_PARTS:
                found.append(f"burstd/{rel}:{line}: a config section imports {module}; it may import "
                             "only burstd.config_types and burstd.domain (the config loads it)")
                continue
            if target == part:
                continue
            if part == "config" and PROVIDER_CONFIG.fullmatch(module):
                continue
            if part in LEAVES:
                found.append(f"burstd/{rel}:{line}: {part} is a leaf, yet imports {module}")
            elif target in FORBIDDEN.get(part, set()):
                found.append(f"burstd/{rel}:{line}: {part} must not import {module}")
            elif part == "daemon" and target == "api" and rel not in API_STARTERS:
                found.append(f"burstd/{rel}:{line}: the daemon imports {module}; the API sits at the edge, "
                             "started only by the composition root (daemon/main.py)")
            elif part == "daemon" and target == "db" and rel not in DAEMON_DB:
                found.append(f"burstd/{rel}:{line}: the daemon's cycle imports {module}; "
                             "its values are in burstd.domain, the store is reached through daemon/ports.py")
    return found


def test_every_import_points_down_the_layers():
    assert violations() == []


def test_the_value_types_the_ports_speak_in_live_in_domain():
    from burstd.daemon import ports
    from burstd.domain import daemon_state, leadership, sacct

    for value in (leadership.Fence, leadership.LeaderRecord, daemon_state.PauseState,
                  daemon_state.PoolHealthRecord, daemon_state.StoredIntent, daemon_state.Cooldown, sacct.SacctJob):
        assert value.__module__.startswith("burstd.domain."), value
    assert ports.Fence is leadership.Fence and ports.PauseState is daemon_state.PauseState


@pytest.mark.parametrize(("rel", "source", "expected"), [
    ("db/x.py", "from burstd.policy.ledger import accrue\n", ":2: db must not import burstd.policy.ledger"),
    ("slurm/x.py", "def f():\n    from burstd.report import sacct_reconcile\n", ":3: slurm must not import burstd.report"),
    ("providers/aws/x.py", "import burstd.daemon.faults\n", ":2: providers must not import burstd.daemon.faults"),
    ("domain/x.py", "from burstd import slurm\n", ":2: domain is a leaf, yet imports burstd.slurm"),
    ("faults.py", "from burstd.domain import ids\n", ":2: faults is a leaf, yet imports burstd.domain"),
    ("daemon/executor.py", "from burstd.db.leadership import Fence\n", ":2: the daemon's cycle imports burstd.db"),
    ("daemon/control.py", "from burstd.api.auth import Principal\n", ":2: the daemon imports burstd.api.auth"),
    ("daemon/wiring.py", "def f():\n    from burstd.api.app import create_app\n", ":3: the daemon imports burstd.api"),
    ("daemon/reconcile.py", "from burstd.testbed.daemon_process import DaemonProcess\n",
     ":2: daemon must not import burstd.testbed.daemon_process"),
    ("db/x.py", "from burstd.api.models import HookCall\n", ":2: db must not import burstd.api.models"),
    ("image/rootfs.py", "def f():\n    from burstd.testbed.release import debootstrap\n",
     ":3: image must not import burstd.testbed.release"),
    ("policy/prices.py", "from burstd.providers.base import Offering\n",
     ":2: policy must not import burstd.providers.base"),
    ("config.py", "from burstd.providers.aws.provider import AwsProvider\n",
     ":2: config must not import burstd.providers.aws.provider"),
    ("providers/aws/config.py", "from burstd.providers.base import Offering\n",
     ":2: a config section imports burstd.providers.base"),
    ("image/spec.py", "from burstd.providers.bootstrap import script_body\n",
     ":2: a config section imports burstd.providers.bootstrap"),
])
def test_a_wrong_way_import_is_named_with_its_file_and_line(tmp_path, rel, source, expected):
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("import os\n" + source)
    [found] = violations(tmp_path)
    assert found.startswith(f"burstd/{rel}{expected}")


def test_imports_that_point_down_pass(tmp_path):
    for rel, source in [("daemon/wiring.py", "from burstd.db.store import Store\n"),
                        ("db/x.py", "from burstd.domain.ledger import accrue\n"),
                        ("report/x.py", "from burstd.slurm.conf import HOOK_DIR\n"),
                        ("providers/x.py", "from burstd.faults import crash_point\n"),
                        ("daemon/main.py", "from burstd.api.app import create_app\n"),
                        ("api/app.py", "from burstd.daemon.control import DaemonControl\n"),
                        ("api/routers/hooks.py", "from burstd.db.engine import lock_wait\n"),
                        ("config.py", "from burstd.providers.gcp.config import GcpPoolConfig\n"),
                        ("providers/gcp/config.py", "from burstd.config_types import _Section\n")]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    assert violations(tmp_path) == []


def test_reading_a_config_loads_no_cloud_sdk():
    code = ("import sys, burstd.config; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'google')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"
