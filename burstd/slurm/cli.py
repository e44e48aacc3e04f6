"""The ``cli`` backend: squeue / sinfo / scontrol / scancel as argument lists (never a shell).

Cost per snapshot, whatever the queue size: one ``squeue`` call, one node listing (``sinfo --json`` on
22.05, ``scontrol show nodes --json`` from 23.02 on, where sinfo's JSON is grouped and has no addresses)
and one cheap partition listing. Jobs come from the text path by default (``SQUEUE_FORMAT2`` with ASCII
separators and a fresh random record nonce per call, see ``squeue_text``), which is several times cheaper
than 22.05's ``squeue --json`` (~130 us a job, and it ignores filters); any record that does not split
cleanly makes that one snapshot use ``squeue --json`` instead, so odd job names never cost correctness.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from burstd.config import SlurmConfig
from burstd.domain.slurm import Job, Node, Partition, Snapshot
from burstd.slurm import parse, squeue_text
from burstd.slurm.access import PartitionAccessMixin
from burstd.slurm.accounting import AccountingMixin
from burstd.slurm.health import HealthMixin
from burstd.slurm.features import Features, parse_release
from burstd.slurm.base import (PartitionEdits, HOSTLIST_RE, PARTITION_RE, REQUEUE_START_GAP_S, SlurmError,
                               check_name, check_reason)

START_AGAIN = f"starttime=now+{REQUEUE_START_GAP_S}"  # scontrol's begin time for a job burstd starts again

log = logging.getLogger(__name__)

SIGNAL_RE = re.compile(r"^(SIG)?[A-Z0-9]{1,10}$")
ADDRESS_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,255}$")
INSTANCE_RE = re.compile(r"^[A-Za-z0-9_.:/-]{1,128}$")  # i-0abc..., g5.xlarge, projects/.../n2-standard-8

# Environment variables that change what squeue/sinfo print; never inherited.
_SCRUB_PREFIXES = ("SQUEUE_", "SINFO_", "SCONTROL_", "SLURM_", "SCANCEL_")


@dataclass
class _Running:
    cmd: str
    args: list[str]
    proc: subprocess.Popen
    deadline: float
    nonce: str = ""  # the squeue text path's record nonce (see squeue_text)


#: Before 24.11, how often the pending jobs' ``sbatch -x`` lists are read again when no job is new (seconds)
EXCLUSIONS_REFRESH_S = 300.0


def _job_key(job: Job) -> int:
    return job.job_id


def parse_version(text: str) -> tuple[int, int]:
    """``slurm-wlm 22.05.8`` / ``slurm 24.11.5`` -> (22, 5)."""
    try:
        return parse_release(text)
    except ValueError:
        raise SlurmError(f"cannot read the Slurm version from {text.strip()!r}") from None


class CliAdapter(PartitionEdits, AccountingMixin, HealthMixin, PartitionAccessMixin):
    backend = "cli"

    def __init__(self, config: SlurmConfig | None = None, *, job_format: str | None = None) -> None:
        self.config = config or SlurmConfig()
        self.job_format = job_format or getattr(self.config, "job_format", "auto")
        if self.job_format not in ("auto", "text", "json"):
            raise ValueError(f"slurm.job_format must be auto, text or json, not {self.job_format!r}")
        self._version: tuple[int, int] | None = None
        self.release = ""  # e.g. "22.05.8", from `squeue --version`
        self.calls: list[list[str]] = []  # every command run (tests count them: cost must not grow with jobs)
        self.text_fallbacks = 0
        # squeue text record -> Job parsed from it last cycle: unchanged jobs are not parsed again
        self._text_cache: dict[str, Job] = {}
        # before 24.11: pending job -> its sbatch -x list ("" none), asked once a job (``_with_exclusions``)
        self._exclusions: dict[int, str] = {}
        self._exclusions_refresh_at = 0.0

    # ------------------------------------------------------------------ running commands
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB_PREFIXES)}
        if self.config.conf:
            env["SLURM_CONF"] = self.config.conf
        env["SLURM_TIME_FORMAT"] = "%s"  # Unix seconds in every text timestamp
        env["SLURM_BITSTR_LEN"] = "1000000"  # never truncate array task strings
        env["LC_ALL"] = "C"
        return env

    def _binary(self, name: str) -> str:
        return str(Path(self.config.bin_dir) / name)

    def start(self, cmd: str, args: Sequence[str], *, nonce: str = "",
              env: Mapping[str, str] | None = None) -> _Running:
        """Start one Slurm command (argument list, no shell); ``finish`` collects its output.

        With a ``nonce``, squeue gets the text format in its environment (SQUEUE_FORMAT2): unlike argv,
        another user cannot read it from /proc while the call runs.
        """
        argv = [self._binary(cmd), *args]
        self.calls.append(argv)
        full_env = self._env() | dict(env or {})
        if nonce:
            full_env["SQUEUE_FORMAT2"] = squeue_text.squeue_text_format(
                nonce, exc_nodes=self.features.has("squeue_exc_nodes"))
        try:
            proc = subprocess.Popen(argv, env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found (check slurm.bin_dir = {self.config.bin_dir!r})") from None
        except PermissionError:
            raise SlurmError(f"{argv[0]} is not executable (check slurm.bin_dir = {self.config.bin_dir!r})") from None
        return _Running(cmd, list(args), proc, time.monotonic() + self.config.command_timeout_s, nonce)

    def finish(self, running: _Running) -> str:
        proc = running.proc
        try:
            stdout, stderr = proc.communicate(timeout=max(0.0, running.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise SlurmError(
                f"{running.cmd} did not answer within {self.config.command_timeout_s:g} s (slurm.command_timeout_s)"
            ) from None
        out = parse.decode_output(stdout)
        if proc.returncode != 0:
            err = parse.decode_output(stderr).strip() or out.strip()
            raise SlurmError(f"{running.cmd} {' '.join(running.args)[:200]} failed (exit {proc.returncode}): {err}")
        return out

    def run(self, cmd: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """One command's output; ``env`` adds to (or overrides) the scrubbed environment of ``_env``."""
        return self.finish(self.start(cmd, args, env=env))

    @property
    def version(self) -> tuple[int, int]:
        if self._version is None:
            text = self.run("squeue", ["--version"])
            self._version = parse_version(text)
            m = re.search(r"\d+\.\d+(\.\d+)?", text)
            self.release = m.group(0) if m else ""
        return self._version

    @property
    def features(self) -> Features:
        """What the live release offers (``burstd.slurm.features``); read once from ``squeue --version``."""
        return Features(self.version)

    # ------------------------------------------------------------------ reading
    def use_text_jobs(self) -> bool:
        return self.job_format != "json"

    def _start_jobs_text(self) -> _Running:
        return self.start("squeue", ["-h", "-a"], nonce=squeue_text.new_nonce())

    def _with_exclusions(self, jobs: list[Job]) -> list[Job]:
        """The pending jobs' ``sbatch -x`` lists, where this squeue's text has no ExcNodes field (before 24.11):
        ``squeue -h -a -t PENDING -o %A|%x``. A job's list is set when it is submitted (an admin's ``scontrol
        update ExcNodeList`` aside), so that squeue runs only in a cycle that shows a pending job it has not
        seen, and every ``EXCLUSIONS_REFRESH_S`` for the updates: most cycles run no more commands than on 24.11."""
        if self.features.has("squeue_exc_nodes"):
            return jobs
        pending = {j.job_id for j in jobs if j.is_pending}
        now = time.monotonic()
        # each ask replaces the map with the pending jobs: between asks no job is new, so it never grows
        if pending and (pending - self._exclusions.keys() or now >= self._exclusions_refresh_at):
            excluded = squeue_text.exclusions_from_text(
                self.run("squeue", ["-h", "-a", "-t", "PENDING", "-o", squeue_text.EXCLUSIONS_FORMAT]))
            self._exclusions = {j: excluded.get(j, "") for j in pending}
            self._exclusions_refresh_at = now + EXCLUSIONS_REFRESH_S
        known = self._exclusions
        return [replace(j, excluded_nodes=known[j.job_id]) if known.get(j.job_id) else j for j in jobs]

    def _jobs_json_cmd(self) -> tuple[str, list[str]]:
        return "squeue", ["-a", "--json"]

    def _nodes_cmd(self) -> tuple[str, list[str]]:
        if self.features.has("scontrol_json"):  # sinfo --json is grouped from 23.02 on, without addresses
            return "scontrol", ["show", "nodes", "--json"]
        return "sinfo", ["--json"]

    def _partitions_cmd(self) -> tuple[str, list[str]]:
        if self.features.has("scontrol_json"):
            return "scontrol", ["show", "partitions", "--json"]
        return "scontrol", ["show", "partitions", "-o"]

    def _parse_jobs_text(self, out: str, nonce: str) -> list[Job]:
        return squeue_text.jobs_from_squeue_text(out, self._text_cache, nonce=nonce)

    def _parse_jobs_json(self, out: str) -> list[Job]:
        doc = parse.load_json(out, "squeue --json")
        return [j for j in parse.jobs_from_doc(doc) if j.is_active]  # 22.05 ignores squeue's state filter

    def _parse_nodes(self, out: str) -> list[Node]:
        cmd, args = self._nodes_cmd()
        return parse.nodes_from_doc(parse.load_json(out, " ".join([cmd, *args])))

    def _parse_partitions(self, out: str) -> list[Partition]:
        if self.features.has("scontrol_json"):
            return parse.partitions_from_doc(parse.load_json(out, "scontrol show partitions --json"))
        return parse.partitions_from_scontrol_text(out)

    def _jobs_from(self, out: str | None, nonce: str = "") -> list[Job]:
        """Text output (or None in json mode) -> jobs; a record that does not split means JSON this time."""
        if out is not None:
            try:
                return self._with_exclusions(self._parse_jobs_text(out, nonce))
            except squeue_text.TextParseError as exc:
                self._text_cache.clear()
                self.text_fallbacks += 1
                log.warning("squeue text output did not parse (%s); using squeue --json for this snapshot", exc)
        return self._parse_jobs_json(self.run(*self._jobs_json_cmd()))

    def jobs(self) -> list[Job]:
        if not self.use_text_jobs():
            return self._jobs_from(None)
        running = self._start_jobs_text()
        return self._jobs_from(self.finish(running), running.nonce)

    def jobs_of(self, job_ids: Sequence[int]) -> list[Job]:
        """The active jobs among ``job_ids``, read now (``squeue -j``): a resume hook's jobs, which no snapshot may
        hold yet (a job sent straight to a cloud partition). Without the snapshot's parse cache: the hook's thread
        runs beside the cycle's."""
        ids = ",".join(str(_job_id(j)) for j in job_ids)
        wanted = set(job_ids)
        if self.use_text_jobs():
            running = self.start("squeue", ["-h", "-a", "-j", ids], nonce=squeue_text.new_nonce())
            out = self.finish(running)
            try:
                return [j for j in squeue_text.jobs_from_squeue_text(out, None, nonce=running.nonce)
                        if j.job_id in wanted]
            except squeue_text.TextParseError as exc:
                log.warning("squeue -j text output did not parse (%s); using squeue --json", exc)
        # 22.05's squeue --json ignores filters: keep only the jobs asked for
        return [j for j in self._parse_jobs_json(self.run("squeue", ["-a", "--json", "-j", ids])) if j.job_id in wanted]

    def nodes(self) -> list[Node]:
        return self._parse_nodes(self.run(*self._nodes_cmd()))

    def partitions(self) -> list[Partition]:
        return self._parse_partitions(self.run(*self._partitions_cmd()))

    def snapshot(self) -> Snapshot:
        """One squeue, one node listing and one partition listing, run side by side; then parse."""
        taken = time.time()
        version = self.version
        started = []
        try:
            started.append(self._start_jobs_text() if self.use_text_jobs() else self.start(*self._jobs_json_cmd()))
            for cmd in (self._nodes_cmd(), self._partitions_cmd()):
                started.append(self.start(*cmd))
            outputs = [self.finish(r) for r in started]
        finally:
            for r in started:
                if r.proc.poll() is None:
                    r.proc.kill()
                    r.proc.communicate()
        jobs_out, nodes_out, parts_out = outputs
        if self.use_text_jobs():
            jobs = self._jobs_from(jobs_out, started[0].nonce)
        else:
            jobs = self._parse_jobs_json(jobs_out)
        jobs.sort(key=_job_key)
        return Snapshot(
            taken_at=taken,
            jobs=tuple(jobs),
            nodes=tuple(sorted(self._parse_nodes(nodes_out), key=lambda n: n.name)),
            partitions=tuple(self._parse_partitions(parts_out)),
            slurm_version=self.release or f"{version[0]}.{version[1]:02d}",
            source="cli",
        )

    # ------------------------------------------------------------------ job actions
    def _scontrol(self, *args: str) -> None:
        self.run("scontrol", list(args))

    def _job_partitions(self, job_id: int) -> list[str]:
        out = self.run("squeue", ["-h", "-j", str(_job_id(job_id)), "-O", "JobID:0|,Partition:0"])
        for line in out.splitlines():  # an array or het job id also lists its tasks/components
            jid, _, parts = line.strip().partition("|")
            if jid == str(job_id):
                return [p for p in parts.split(",") if p]
        raise SlurmError(f"job {job_id} is not in the queue")

    def set_partitions(self, job_id: int, partitions: list[str]) -> None:
        if not partitions:
            raise ValueError("a job needs at least one partition")
        names = [check_name("partition", p, PARTITION_RE) for p in partitions]
        self._scontrol("update", f"jobid={_job_id(job_id)}", f"partition={','.join(dict.fromkeys(names))}")

    def requeue(self, job_id: int, *, expedite: bool = False) -> None:
        """``scontrol requeue N``. ``expedite``: the job may start again at once rather than after
        ``cred_expire`` + 1 s (a preempted job). On 25.11+ a job submitted with ``--requeue=expedite``
        (flag ``EXPEDITED_REQUEUE``, with ``enable_expedited_requeue``) gets that from Slurm itself, eligible at
        once and first in the queue: burstd leaves it to Slurm. Any other job gets ``update starttime=now+2``
        (``REQUEUE_START_GAP_S``: not in the requeue's own second, whose credentials slurmd refuses)."""
        jid = str(_job_id(job_id))
        by_slurm = expedite and self.features.has("expedited_requeue") and self.expedited_by_slurm(job_id)
        self._scontrol("requeue", jid)
        if expedite and not by_slurm:
            self._wait_until_pending(job_id)
            self._scontrol("update", f"jobid={jid}", START_AGAIN)

    def _wait_until_pending(self, job_id: int, timeout_s: float = 5.0) -> None:
        """Right after ``scontrol requeue`` the job is still being requeued: an ``update starttime=now`` sent
        then is answered rc 0 and dropped, and the job waits out cred_expire (seen live on 22.05 and 24.11).
        Wait, bounded, until squeue shows it PENDING (or no longer knows it)."""
        deadline = time.monotonic() + timeout_s
        while self.job_state(job_id) not in (None, "PENDING") and time.monotonic() < deadline:
            time.sleep(0.1)

    def expedited_by_slurm(self, job_id: int) -> bool:
        """Whether the job carries Slurm's ``EXPEDITED_REQUEUE`` flag (25.11+: ``sbatch --requeue=expedite``)."""
        if not self.features.has("expedited_requeue"):
            return False
        doc = parse.load_json(self.run("scontrol", ["show", "job", str(_job_id(job_id)), "--json"]),
                              "scontrol show job --json")
        return any(j.get("job_id") == job_id and "EXPEDITED_REQUEUE" in (j.get("flags") or [])
                   for j in doc.get("jobs") or [])

    def start_now(self, job_id: int) -> None:
        self._scontrol("update", f"jobid={_job_id(job_id)}", START_AGAIN)

    def release_hold(self, job_id: int) -> None:
        self._scontrol("release", str(_job_id(job_id)))

    def batch_script(self, job_id: int) -> str:
        """The job's batch script as Slurm stored it (``scontrol write batch_script N -``: to stdout), where
        its data directives are (``burstd.domain.data_directives``). SlurmError for a job without one."""
        out = self.run("scontrol", ["write", "batch_script", str(_job_id(job_id)), "-"])
        if not out:  # an unknown job: scontrol says so on stderr but exits 0 (seen on 22.05)
            raise SlurmError(f"scontrol write batch_script {job_id}: no batch script (no such job?)")
        return out

    def job_state(self, job_id: int) -> str | None:
        try:  # -t all: ended jobs too (the snapshot's plain squeue lists only live ones)
            out = self.run("squeue", ["-h", "-t", "all", "-j", str(_job_id(job_id)), "-O", "JobID:0|,State:0"])
        except SlurmError:  # "Invalid job id specified": Slurm has forgotten it
            return None
        for line in out.splitlines():
            jid, _, state = line.strip().partition("|")
            if jid == str(job_id):
                return state.split()[0].upper() if state.strip() else None
        return None

    def signal(self, job_id: int, signal: str, *, batch: bool = False, full: bool = False) -> None:
        sig = _signal(signal)
        args = [f"--signal={sig}"]
        if batch:
            args.append("--batch")
        elif full:
            args.append("--full")
        self.run("scancel", [*args, str(_job_id(job_id))])

    # ------------------------------------------------------------------ node actions
    def _update_nodes(self, nodes: list[str], *settings: str) -> None:
        self._scontrol("update", f"nodename={_hostlist(nodes)}", *settings)

    def drain(self, nodes: list[str], reason: str) -> None:
        if not reason.strip():
            raise ValueError("draining a node needs a reason")
        self._update_nodes(nodes, "state=DRAIN", f"reason={check_reason(reason)}")

    def resume(self, nodes: list[str]) -> None:
        self._update_nodes(nodes, "state=RESUME")

    def clear_reason(self, nodes: list[str]) -> None:
        self._update_nodes(nodes, "reason=")  # an empty reason clears it (22.05 to 26.05); the state is kept

    def power_down(self, nodes: list[str], *, force: bool = False, reason: str = "") -> None:
        if reason:
            check_reason(reason)
        feats = self.features
        if feats.has("power_verb") and (not reason or feats.has("power_reason")):
            args = ["power", "down", "force" if force else "asap", _hostlist(nodes)]
            self._scontrol(*args, *([f"reason={reason}"] if reason else []))
            return
        settings = ["state=POWER_DOWN_FORCE" if force else "state=POWER_DOWN_ASAP"]
        if reason:
            settings.append(f"reason={reason}")
        self._update_nodes(nodes, *settings)

    def power_up(self, nodes: list[str]) -> None:
        if self.features.has("power_verb"):
            self._scontrol("power", "up", _hostlist(nodes))
        else:
            self._update_nodes(nodes, "state=POWER_UP")

    def set_instance(self, node: str, instance_id: str, instance_type: str) -> bool:
        """Record a cloud node's instance in Slurm (``sacctmgr show instance``, ``sacct``) where the release
        can (23.11+); returns False, doing nothing, where it cannot."""
        check_name("node", node)
        for what, value in (("instance id", instance_id), ("instance type", instance_type)):
            if not INSTANCE_RE.fullmatch(value):
                raise ValueError(f"invalid {what} {value!r}")
        if not self.features.has("instance_fields"):
            return False
        self._scontrol("update", f"nodename={node}", f"instanceid={instance_id}", f"instancetype={instance_type}")
        return True

    def set_node_address(self, node: str, address: str, hostname: str | None = None) -> None:
        check_name("node", node)
        if not ADDRESS_RE.fullmatch(address):
            raise ValueError(f"invalid node address {address!r}")
        settings = [f"nodeaddr={address}"]
        if hostname is not None:
            settings.append(f"nodehostname={check_name('hostname', hostname)}")
        self._scontrol("update", f"nodename={node}", *settings)


# ---------------------------------------------------------------------- argument checks
def _job_id(job_id: int) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"invalid job id {job_id!r}")
    return job_id


def _signal(signal: str) -> str:
    if not isinstance(signal, str) or not SIGNAL_RE.fullmatch(signal.upper()):
        raise ValueError(f"invalid signal {signal!r}")
    return signal.upper()


def _hostlist(nodes: list[str] | str) -> str:
    if isinstance(nodes, str):
        nodes = [nodes]
    if not nodes:
        raise ValueError("no nodes given")
    for n in nodes:
        if not HOSTLIST_RE.fullmatch(n) or n.startswith("-"):
            raise ValueError(f"invalid node name or hostlist {n!r}")
    return ",".join(nodes)


class HeadScontrol(PartitionAccessMixin):
    """The cloud gate (partition account lists, burstd's reservation, holds with a reason;
    ``burstd.daemon.cloud_gate``) through the head's ``scontrol``, for a backend whose own API has no call for it
    (``rest``, ``pyslurm``): the same commands and argument checks as the cli backend."""

    config: SlurmConfig
    _cli: CliAdapter | None = None  # made on first use

    def run(self, cmd: str, args: Sequence[str]) -> str:
        if self._cli is None:
            self._cli = CliAdapter(self.config)
        return self._cli.run(cmd, args)
