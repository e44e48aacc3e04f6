"""What each Slurm release offers a cloud burster: one table, read from the live version, never by trial.

    feats = Features.of("24.11.5")
    feats.has("power_verb")          # True: `scontrol power down force NODES`
    feats.has("cloud_reg_addrs")     # False: the option is defunct (fatal) from 24.11

The adapter and the slurm.conf generator ask ``has``; ``docs/slurm-adapter.md`` carries the same table
(a unit test checks they agree). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

Release = tuple[int, int]


@dataclass(frozen=True)
class Feature:
    key: str
    since: Release | None  # first release that has it (None: every release we support)
    until: Release | None  # first release that no longer has it (None: still there)
    what: str  # what burstd does with it, for the docs table


FEATURES: tuple[Feature, ...] = (
    Feature("scontrol_json", (23, 2), None,
            "nodes and partitions from `scontrol show ... --json` (22.05: `sinfo --json`, `scontrol -o`)"),
    Feature("squeue_exc_nodes", (24, 11), None,
            "`squeue -O ExcNodes`: a job's `sbatch -x` list in the text snapshot (older: `squeue -t PENDING "
            "-o %A|%x` after it, when a pending job is new; 22.05 prints an empty field for a name it does not "
            "know)"),
    Feature("instance_fields", (23, 11), None,
            "`scontrol update nodename=N instanceid=I instancetype=T`: Slurm records the cloud instance "
            "(`sacctmgr show instance`)"),
    Feature("power_verb", (24, 5), None,
            "`scontrol power up|down [asap|force] NODES` (older: `update state=POWER_UP|POWER_DOWN_*`)"),
    Feature("power_reason", (26, 5), None,
            "`scontrol power down ... Reason=R` (24.05-25.x: a power-down with a reason stays "
            "`update state=POWER_DOWN_* reason=R`)"),
    Feature("cloud_reg_addrs", None, (24, 11),
            "`SlurmctldParameters=cloud_reg_addrs` (always on from 24.11, where the option is fatal)"),
    Feature("requeue_on_resume_failure", (25, 5), None,
            "`SchedulerParameters=requeue_on_resume_failure`: a job whose cloud node failed to resume "
            "is requeued, not held"),
    Feature("expedited_requeue", (25, 11), None,
            "`SlurmctldParameters=enable_expedited_requeue`: a job submitted with `sbatch --requeue=expedite` "
            "(ExpeditedRequeue=Yes) that a lost cloud node killed is requeued by Slurm itself, eligible at once and "
            "first in the queue; older releases: burstd follows its requeue with `update starttime=now`"),
    Feature("ctld_http", (25, 11), None,
            "slurmctld answers HTTP on its own port: burstd's Slurm health is `GET /readyz` (servicing RPCs), "
            "`MetricsType=metrics/openmetrics` adds `/metrics/*`; older releases: `scontrol ping`"),
    Feature("resume_file_job_fields", (26, 5), None,
            "`SLURM_RESUME_FILE` jobs carry `priority` and `exclusive`: a node shared by jobs goes with the "
            "highest-priority one's gang, an exclusive multi-node job is a gang even where the pool is not "
            "all-or-nothing, and leases are recorded (so launched and budgeted) highest priority first "
            "(read from the file itself: absent fields mean Slurm's order and the first job)"),
    Feature("rest_node_actions", (23, 11), None,
            "slurmrestd v0.0.40+: `POST node/{name}` (drain, resume, power, address)"),
    Feature("rest_requeue", (26, 5), None,
            "slurmrestd v0.0.45: `GET job/{id}/requeue` (older data versions have no requeue endpoint)"),
)
BY_KEY = {f.key: f for f in FEATURES}


def parse_release(text: str) -> Release:
    """``slurm-wlm 24.11.5`` / ``26.05`` / ``22.05.8`` -> (24, 11)."""
    m = re.search(r"(\d+)\.(\d+)", text or "")
    if not m:
        raise ValueError(f"cannot read a Slurm release from {text.strip()!r}")
    return int(m.group(1)), int(m.group(2))


def format_release(release: Release) -> str:
    return f"{release[0]}.{release[1]:02d}"


@dataclass(frozen=True)
class Features:
    release: Release

    @classmethod
    def of(cls, release: str | Release) -> Features:
        return cls(parse_release(release) if isinstance(release, str) else release)

    def has(self, key: str) -> bool:
        f = BY_KEY[key]  # KeyError on a typo: the table is the only list
        return (f.since is None or self.release >= f.since) and (f.until is None or self.release < f.until)

    def present(self) -> list[str]:
        return [f.key for f in FEATURES if self.has(f.key)]
