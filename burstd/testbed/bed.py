"""A real Slurm cluster on one machine: munge, slurmdbd (with its own MariaDB), slurmctld, slurmrestd, on-prem
nodes and CLOUD nodes as namespaces; Slurm 22.05 from the host, or 24.11 / 26.05 from a Debian chroot.

    bed = Bed(BedConfig(name="burstd", hooks="bare"))
    bed.up()                                   # idempotent; installs Slurm first if it is missing
    job = bed.sbatch(["-p", "cloud"], "#!/bin/sh\\nhostname\\n", user="burstuser")
    bed.wait_for(lambda: bed.job(job).get("JobState") == "COMPLETED", 120, f"job {job} to complete")
    bed.down()                                 # idempotent; stops only what the bed started

Everything a bed owns lives in its state dir (default /var/lib/burstd-testbed/<name>): slurm.conf, the JWT
key, slurmctld's state, slurmd spools, pid files, logs, hook scripts and ``bed.json`` (the resolved settings
and the pids it started). /etc/slurm is never touched. See docs/testbed.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from burstd.providers.local import netns, vmroot
from burstd.slurm.features import parse_release
from burstd.testbed import bed_data, bed_status, cloud_image, release, render
from burstd.testbed.accounting import Accounting
from burstd.testbed.config import HOOK_MODES, STATE_ROOT, BedConfig
from burstd.testbed.host import (  # noqa: F401  (re-exported: tests and tools import them from here)
    INSTALL_SCRIPT, REPO_ROOT, TEST_USERS, BedError, T, _alive, _global_lock, _pid_of, _port_free, _sh, _stop,
    _wait, ensure_installed, ensure_munge, ensure_users, missing_software, munge_ok, other_beds, parse_kv,
)

REST_VERSIONS = "openapi/v0.0.38,openapi/v0.0.37,openapi/v0.0.36"


# ------------------------------------------------------------------------------------------------ the bed


class Bed:
    """One test bed: from settings (``Bed(BedConfig(...))``) or as it was brought up (``Bed.load``)."""

    def __init__(self, config: BedConfig | None = None):
        self.config = (config or BedConfig()).resolved()
        self.paths = render.paths(self.config)
        self.chroot = render.uses_chroot(self.config)  # 24.11 / 26.05: Slurm from a Debian chroot
        self.accounting = Accounting(self.config, self.paths, self.env)

    @classmethod
    def load(cls, name: str = "burstd", state_dir: str | None = None) -> Bed:
        """The bed as it was brought up (settings from its bed.json); default settings if it never was."""
        path = Path(state_dir) if state_dir else STATE_ROOT / name
        try:
            saved = json.loads((path / "bed.json").read_text())
            return cls(BedConfig.model_validate(saved["config"]))
        except FileNotFoundError:
            return cls(BedConfig(name=name, state_dir=state_dir))

    # ------------------------------------------------------------------ properties the tests use

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def state_dir(self) -> Path:
        return self.config.state_path

    @property
    def conf_path(self) -> Path:
        return self.paths["conf"]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf_path), "PATH": render.hook_path(self.config), "LANG": "C"}

    @property
    def bin_dir(self) -> str:
        """Where this bed's Slurm commands are: /usr/bin, or the chroot wrappers (burstd's slurm.bin_dir)."""
        return str(self.paths["bin"]) if self.chroot else "/usr/bin"

    def slurm_release(self) -> tuple[int, int]:
        """The release the bed runs, from its slurmctld (``slurmctld -V``), whichever was asked for."""
        if getattr(self, "_release", None) is None:
            proc = _sh(["slurmctld", "-V"], "slurmctld -V", env=self.env)
            self._release = parse_release(proc.stdout)
            self.slurm_version = proc.stdout.split()[-1]
        return self._release

    def _start_anchor(self) -> None:
        """A process on the host for the chroot's hooks to find the host's mount namespace by (see render)."""
        pid_file = self.paths["anchor_pid"]
        if _alive(_pid_of(pid_file), "sleep"):
            return
        pid_file.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(["sleep", "infinity"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, env=self.env)
        pid_file.write_text(f"{proc.pid}\n")

    def _ensure_release(self) -> None:
        """The chroot of a 24.11 / 26.05 bed (built once per machine), its wrappers, users and munged."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o755)
        if not self.chroot or self.config.slurm_release is None:  # no chroot: the host's Slurm
            ensure_munge()
            return
        self.paths["log"].mkdir(parents=True, exist_ok=True)
        with release.build_lock(self.config.slurm_release):  # two beds share the chroot: one writer at a time
            root = release.ensure_chroot(self.config.slurm_release, self.paths["log"] / "chroot-build.log")
            release.sync_users(root, (self.config.rest_user,))
            release.sync_hosts(root)
        release.write_wrappers(root, self.state_dir, self.paths["bin"])
        release.ensure_munge(root, self.paths["bin"])

    @property
    def ctld_addr(self) -> str:
        return self.config.ctld_addr

    @property
    def ctld_port(self) -> int:
        return self.config.ctld_port_

    @property
    def rest_port(self) -> int:
        return self.config.rest_port_

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def onprem_partition(self) -> str:
        return self.config.onprem_partition

    @property
    def cloud_partition(self) -> str:
        return self.config.cloud_partition

    @property
    def onprem_nodes(self) -> list[str]:
        return self.config.onprem_nodes

    @property
    def cloud_nodes(self) -> list[str]:
        return self.config.cloud_nodes

    @property
    def subnet(self) -> str:
        return str(self.config.network)

    @property
    def bridge(self) -> str:
        return self.config.bridge_

    @property
    def netns_prefix(self) -> str:
        return self.config.netns_prefix_

    @property
    def hooks_log(self) -> Path:
        return self.paths["hooks_log"]

    @property
    def vms_dir(self) -> Path:
        return self.paths["vms"]

    @property
    def burstd_config(self) -> Path:
        return Path(self.config.burstd_config or self.paths["burstd_config"])

    @property
    def hook_mode(self) -> str:
        try:
            return json.loads(self.paths["bed_json"].read_text()).get("hooks", self.config.hooks)
        except (OSError, ValueError):
            return self.config.hooks

    # ------------------------------------------------------------------ liveness

    def ctld_pid(self) -> int | None:
        pid = _pid_of(self.paths["ctld_pid"])
        return pid if _alive(pid, "slurmctld") else None

    def rest_pid(self) -> int | None:
        pid = _pid_of(self.paths["rest_pid"])
        return pid if _alive(pid, "slurmrestd") else None

    def ping(self) -> bool:
        if not self.conf_path.exists():
            return False
        proc = _sh(["scontrol", "ping"], "ping", env=self.env, timeout=15, check=False)
        return proc.returncode == 0 and "UP" in proc.stdout

    def is_up(self) -> bool:
        return self.ctld_pid() is not None and self.ping()

    # ------------------------------------------------------------------ up

    def up(self, install: bool = True) -> Bed:
        if os.geteuid() != 0:
            raise BedError("the test bed needs root (network namespaces, slurmd)")
        ensure_installed(install)
        with _global_lock():
            ensure_users(self.config.rest_user)
        self._ensure_release()  # may build a chroot (minutes): outside the lock every bed takes
        cloud_image.ensure_image(self.config)  # the cloud VMs' image: may build it once (minutes), also outside
        with _global_lock():
            if self.ctld_pid() is not None:
                self._check_same_settings()
                self._write_hooks()
                self._save()
            else:
                self._clear_leftovers()  # first: our own leftovers (a slurmdbd) would hold our ports
                self._check_conflicts()
                self._prepare_state_dir()
                cloud_image.write_gate_files(self.config)
                netns.ensure_bridge(self.bridge, self.config.bridge_address)
                if self.chroot:
                    self._start_anchor()
                if self.config.accounting:
                    self.accounting.up()
                self._start_ctld()
            self._start_onprem_nodes()
            self._start_rest()
            if self.config.data_store:
                bed_data.store(self.config).up()
            self._save()
        _wait(self._onprem_ready, 60, f"on-prem nodes {', '.join(self.onprem_nodes)} to be idle "
              f"(see {self.paths['log']}/slurmd-*.log)", 0.3)
        _wait(self._rest_ready, 30, f"slurmrestd on {self.rest_url} (see {self.paths['rest_log']})", 0.3)
        return self

    def _check_same_settings(self) -> None:
        try:
            saved = BedConfig.model_validate(json.loads(self.paths["bed_json"].read_text())["config"])
        except (OSError, ValueError, KeyError):
            return
        ignore = {"hooks", "python", "burstd_config"}
        new = self.config.model_dump(exclude=ignore)
        old = saved.model_dump(exclude=ignore)
        diff = [f"{k}: {old[k]!r} -> {new[k]!r}" for k in new if new[k] != old.get(k)]
        if diff:
            raise BedError(f"bed {self.name!r} is already up with other settings ({'; '.join(diff)}); "
                           f"run `burstctl testbed down --name {self.name}` first")

    def _check_conflicts(self) -> None:
        cfg = self.config
        mine = {"name": cfg.name}
        for other in other_beds():
            oc = other.get("config", {})
            if oc.get("name") == mine["name"]:
                continue
            if not _alive(other.get("ctld_pid"), "slurmctld"):
                continue
            for key in ("subnet", "ctld_port", "rest_port", "dbd_port", "db_port", "bridge", "netns_prefix",
                        "state_dir"):
                if oc.get(key) == getattr(cfg, key):
                    raise BedError(f"bed {oc.get('name')!r} (up) already uses {key} = {oc.get(key)!r}; "
                                   f"give bed {cfg.name!r} another --slot or --{key.replace('_', '-')}")
        for port, host in ((cfg.ctld_port_, "0.0.0.0"), (cfg.rest_port_, "127.0.0.1"),
                           (cfg.dbd_port_, "127.0.0.1"), (cfg.db_port_, "127.0.0.1")):
            if not _port_free(port, host):
                raise BedError(f"port {port} is in use; give bed {cfg.name!r} another --slot or port")
        proc = _sh(["ip", "-j", "-4", "addr"], "list addresses")
        for link in json.loads(proc.stdout or "[]"):
            if link.get("ifname") == self.bridge:
                continue
            for a in link.get("addr_info", []):
                if a.get("local") and cfg.network.overlaps(
                        ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False)):
                    raise BedError(f"subnet {cfg.network} overlaps {a['local']}/{a['prefixlen']} on "
                                   f"{link['ifname']}; give bed {cfg.name!r} another --slot or --subnet")

    def _clear_leftovers(self) -> None:
        """A bed that was not brought down (crash, reboot of the daemons): start from a clean slate. The work dirs
        go too: the new slurmctld numbers jobs from 1 again, so a job's ``out-%j.txt`` would append to a dead one's."""
        self._teardown()
        for key in ("ctld_state", "spool", "run", "vms", "work", "burstd_dir", "db_dir", "db_run"):
            shutil.rmtree(self.paths[key], ignore_errors=True)
        log = self.paths["log"]
        if log.is_dir() and any(log.iterdir()):
            old = log.with_name("log.prev")
            shutil.rmtree(old, ignore_errors=True)
            log.rename(old)

    def _prepare_state_dir(self) -> None:
        p = self.paths
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o755)  # slurmrestd (unprivileged) reads slurm.conf
        for key in ("ctld_state", "spool", "run", "log", "hooks", "vms", "work", "burstd_dir"):
            p[key].mkdir(parents=True, exist_ok=True)
        for node in self.onprem_nodes + self.cloud_nodes:
            (p["spool"] / node).mkdir(exist_ok=True)
        for user in TEST_USERS:
            d = p["work"] / user
            d.mkdir(exist_ok=True)
            shutil.chown(d, user, user)
            os.chmod(d, 0o755)
        if not p["jwt_key"].exists():
            fd = os.open(p["jwt_key"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(secrets.token_bytes(32))
        self._atomic_write(p["conf"], render.slurm_conf(self.config, self.slurm_release()), 0o644)
        if self.chroot:
            self._atomic_write(p["cgroup_conf"], render.CGROUP_CONF_CHROOT, 0o644)
        self._atomic_write(p["burstd_config"], render.burstd_toml(self.config), 0o644)
        if self.config.data_store:  # the data Prolog/Epilog and their environment (issue 24)
            from burstd.config import load_config

            bed_data.write_files(self.config, load_config(p["burstd_config"]))
        self._write_hooks()
        p["hooks_log"].touch()

    @staticmethod
    def _atomic_write(path: Path, text: str, mode: int) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)

    def _write_hooks(self, mode: str | None = None) -> None:
        mode = mode or self.config.hooks
        if mode not in HOOK_MODES:
            raise BedError(f"unknown hook mode {mode!r}; one of {', '.join(HOOK_MODES)}")
        self.paths["hooks"].mkdir(parents=True, exist_ok=True)
        for hook in render.HOOK_NAMES:
            self._atomic_write(self.paths["hooks"] / hook, render.hook_script(self.config, hook, mode), 0o755)
        self._hook_mode = mode

    def set_hooks(self, mode: str) -> None:
        """Switch the power-saving hooks of a running bed (stub | bare | burstd); takes effect at once."""
        self._write_hooks(mode)
        self._save()

    @contextmanager
    def hooks(self, mode: str) -> Iterator[Bed]:
        """``with bed.hooks("bare"): ...`` and the previous mode comes back afterwards."""
        before = self.hook_mode
        self.set_hooks(mode)
        try:
            yield self
        finally:
            self.set_hooks(before)

    def _start_ctld(self) -> None:
        proc = _sh(["slurmctld", "-f", str(self.conf_path)], "start slurmctld", env=self.env, check=False)
        if proc.returncode != 0:
            raise BedError(f"slurmctld did not start (exit {proc.returncode}): {proc.stderr.strip()}; "
                           f"see {self.paths['log']}/slurmctld.log")
        _wait(self.ping, 30, f"slurmctld to answer (see {self.paths['log']}/slurmctld.log)", 0.3)

    def _start_onprem_nodes(self) -> None:
        for node in self.onprem_nodes:
            spec = render.vm_spec(self.config, node, boot_flag=False)
            rec = netns.read_record(self.vms_dir, spec.netns)
            alive = rec is not None and rec.alive and netns.netns_pids(spec.netns)
            if not alive:
                netns.create(spec, self.vms_dir) if rec is None else self._recreate(spec)

    def _recreate(self, spec: netns.VmSpec) -> None:
        netns.destroy(spec.netns, self.vms_dir)
        netns.create(spec, self.vms_dir)

    def _start_rest(self) -> None:
        if self.rest_pid() is not None:
            return
        env = dict(self.env, SLURM_JWT="daemon")
        with open(self.paths["rest_log"], "ab") as log:
            proc = subprocess.Popen(
                ["slurmrestd", "-a", "rest_auth/jwt", "-s", self._rest_plugins(), "-u", self.config.rest_user,
                 f"127.0.0.1:{self.rest_port}"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                cwd=str(self.state_dir),
            )
        self.paths["rest_pid"].write_text(f"{proc.pid}\n")

    def _onprem_ready(self) -> bool:
        states = self.node_states(self.onprem_partition)
        ready = ("idle", "mixed", "allocated", "completing")
        return bool(states) and all(s.rstrip("*~#%!$@^-+").lower() in ready and not s.endswith("*")
                                    for s in states.values())

    def _rest_plugins(self) -> str:
        # 22.05: the v0.0.3x plugins by name (its default set also loads dbv0.0.3x); 24.11+: openapi/slurmctld
        # (24.11's default set fails to load its slurmdbd plugin paths; the adapter needs only /slurm/)
        return REST_VERSIONS if self.slurm_release() < (23, 2) else "openapi/slurmctld"

    @property
    def rest_data_version(self) -> str:
        """The newest data version this bed's slurmrestd serves."""
        return {(22, 5): "v0.0.38", (24, 11): "v0.0.42", (26, 5): "v0.0.45"}.get(self.slurm_release(), "v0.0.38")

    def _rest_ready(self) -> bool:
        import httpx

        try:
            v = self.rest_data_version
            r = httpx.get(f"{self.rest_url}/slurm/{v}/ping" + ("" if v == "v0.0.38" else "/"), timeout=5,
                          headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": self.jwt()})
            return r.status_code == 200
        except (httpx.HTTPError, BedError):
            return False

    def _save(self) -> None:
        data = {
            "config": self.config.model_dump(mode="json"),
            "hooks": getattr(self, "_hook_mode", self.hook_mode),
            "ctld_pid": self.ctld_pid(),
            "slurm_version": self.slurm_release() and self.slurm_version,
            "rest_pid": self.rest_pid(),
            "updated_at": time.time(),
        }
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._atomic_write(self.paths["bed_json"], json.dumps(data, indent=2) + "\n", 0o644)

    def _saved(self, key: str) -> Any:
        try:
            return json.loads(self.paths["bed_json"].read_text()).get(key)
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ down

    def vm_namespaces(self) -> set[str]:
        """Every namespace of this bed: on its bridge, recorded by it, or named as its nodes are (its prefix and a
        node name: bed ``x``'s prefix ``x-`` also starts bed ``x-w1``'s and ``x-dat``'s names, never theirs)."""
        found = netns.netns_on_bridge(self.bridge) if netns.link_exists(self.bridge) else set()
        found |= {r.netns for r in netns.list_vms(self.vms_dir)}
        c = self.config
        named = re.compile(f"{re.escape(self.netns_prefix)}({re.escape(c.onprem_prefix)}|{re.escape(c.cloud_prefix)})"
                           r"[0-9]+")
        found |= {n for n in netns.list_netns() if named.fullmatch(n)}
        return found & netns.list_netns()

    def down(self, keep_logs: bool = True) -> dict[str, Any]:
        """Stop everything this bed started and remove its namespaces, veths, bridge and state."""
        if os.geteuid() != 0:
            raise BedError("the test bed needs root")
        with _global_lock():
            stopped = self._teardown()
            if self.state_dir.is_dir() and self.state_dir.resolve() != Path("/"):
                for child in self.state_dir.iterdir():
                    if keep_logs and child.name in ("log", "log.prev"):
                        continue
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child, ignore_errors=True)
                    else:
                        child.unlink(missing_ok=True)
        return stopped

    def _teardown(self) -> dict[str, Any]:
        stopped: dict[str, Any] = {"slurmrestd": False, "slurmctld": False, "namespaces": []}
        stopped["slurmrestd"] = _stop(_pid_of(self.paths["rest_pid"]), "slurmrestd")
        stopped["slurmctld"] = _stop(_pid_of(self.paths["ctld_pid"]), "slurmctld", timeout=15)
        stopped.update(self.accounting.down())
        _stop(_pid_of(self.paths["anchor_pid"]), "sleep")
        bed_data.store(self.config).down()  # nothing to stop unless data_store started it
        for ns in sorted(self.vm_namespaces()):
            netns.teardown(ns)
            stopped["namespaces"].append(ns)
        for port in netns.bridge_ports(self.bridge):  # a veth left over from a half-made VM
            netns._run(["ip", "link", "del", port], f"delete {port}", check=False)
        netns.delete_bridge(self.bridge)
        for rec in netns.list_vms(self.vms_dir):
            netns.remove_record(self.vms_dir, rec.netns)
        for vm_dir in self.vms_dir.glob("*.vm"):  # image VMs' disks (their namespaces are gone above)
            vmroot.remove(vm_dir)
        return stopped

    # ------------------------------------------------------------------ status

    def status(self) -> dict[str, Any]:
        return bed_status.report(self)

    # ------------------------------------------------------------------ helpers for tests and the demo

    def run(self, argv: Sequence[str], user: str | None = None, check: bool = True, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess:
        """Run a command with the bed's SLURM_CONF (as ``user`` through runuser when given)."""
        if user in (None, "root"):
            full = list(argv)
        elif self.chroot:
            full = release.user_argv(self.paths["bin"], user, list(argv))
        else:
            full = ["runuser", "-u", user, "--", *argv]
        proc = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=self.env,
                              input=input)
        if check and proc.returncode != 0:
            raise BedError(f"`{' '.join(full)}` failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return proc

    def workdir(self, user: str | None = None) -> Path:
        d = self.paths["work"] / (user or "root")
        if not d.is_dir():
            d.mkdir(parents=True, exist_ok=True)
            if user and user != "root":
                shutil.chown(d, user, user)
        return d

    def job_env(self):
        """This project's Python for jobs, runnable by the job user (``burstd.testbed.jobenv``)."""
        from burstd.testbed.jobenv import ensure_job_env
        return ensure_job_env(self.state_dir / "jobenv")

    def sbatch(self, opts: Sequence[str], script: str, user: str | None = None) -> int:
        """Submit ``script`` with ``sbatch --parsable opts`` from the user's work dir; returns the job id."""
        wd = self.workdir(user)
        path = wd / f"job-{time.time_ns()}.sh"
        path.write_text(script)
        os.chmod(path, 0o755)
        if user and user != "root":
            shutil.chown(path, user, user)
        proc = self.run(["sbatch", "--parsable", f"--chdir={wd}", *opts, str(path)], user=user)
        return int(proc.stdout.strip().split(";")[0])

    def jwt(self, user: str = "root", lifespan: int = 3600) -> str:
        proc = _sh(["scontrol", "token", f"username={user}", f"lifespan={lifespan}"], "get a JWT",
                   env=self.env)
        m = re.search(r"SLURM_JWT=(\S+)", proc.stdout)
        if not m:
            raise BedError(f"scontrol token printed no token: {proc.stdout.strip()}")
        return m.group(1)

    def job(self, job_id: int | str) -> dict[str, str]:
        proc = self.run(["scontrol", "show", "job", "-o", str(job_id)], check=False)
        return parse_kv(proc.stdout.splitlines()[0]) if proc.returncode == 0 and proc.stdout.strip() else {}

    def node(self, name: str) -> dict[str, str]:
        proc = self.run(["scontrol", "show", "node", "-o", name], check=False)
        return parse_kv(proc.stdout.splitlines()[0]) if proc.returncode == 0 and proc.stdout.strip() else {}

    def node_states(self, partition: str | None = None) -> dict[str, str]:
        argv = ["sinfo", "-h", "-N", "-o", "%N %T"] + (["-p", partition] if partition else [])
        proc = _sh(argv, "sinfo", env=self.env, check=False)
        return dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)

    def reset_cloud_nodes(self, timeout: float = 90) -> list[str]:
        """Bring every cloud node back to plainly powered down and schedulable, for test clean-up: a node that is
        up or on its way up or down is forced down (jobs on it are requeued) and waited for; a powered-down node
        still DOWN or DRAINED (ResumeTimeout reached, a test's drain) is resumed, since Slurm allocates neither.
        Cheap when the nodes are clean (one ``scontrol show node`` each, no wait). Returns the nodes it reset."""
        def flags(node: str) -> set[str]:
            return set(self.node(node).get("State", "").split("+"))

        def settled(f: set[str]) -> bool:
            return "POWERED_DOWN" in f and not {"POWERING_DOWN", "POWERING_UP", "POWER_DOWN"} & f

        forced = []
        for node in self.cloud_nodes:
            if not settled(flags(node)):
                self.run(["scontrol", "update", f"nodename={node}", "state=POWER_DOWN_FORCE", "reason=bed reset"],
                         check=False)
                forced.append(node)
        if forced:
            self.wait_for(lambda: all(settled(flags(n)) for n in forced), timeout,
                          f"cloud nodes {', '.join(forced)} to power down")
        resumed = []
        for node in self.cloud_nodes:
            if {"DOWN", "DRAIN", "FAIL"} & flags(node):
                # on a powered-down node RESUME only clears DOWN/DRAIN: no ResumeProgram call, no wait
                self.run(["scontrol", "update", f"nodename={node}", "state=RESUME"], check=False)
                resumed.append(node)
        return forced + [n for n in resumed if n not in forced]

    def kill_vm(self, node: str) -> bool:
        """Pull the plug on a node's namespace VM, whoever made it (a spot reclaim without notice): every
        process SIGKILLed at once, nothing saves or reports its job's end. Slurm notices after SlurmdTimeout."""
        return netns.teardown(self.config.netns_of(node), power_off=True)

    @staticmethod
    def wait_for(pred: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
        """Poll ``pred`` until it returns something truthy; AssertionError naming ``what`` on timeout."""
        try:
            return _wait(pred, timeout, what, interval)
        except BedError as exc:
            raise AssertionError(str(exc)) from None
