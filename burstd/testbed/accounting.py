"""A bed's accounting: its own MariaDB (Debian's, data and socket under the state dir, TCP on 127.0.0.1 at
the bed's ``db_port``), slurmdbd (from the host or the bed's chroot), and the cluster, accounts, users,
associations and QOS the bed creates with ``sacctmgr``.

Order on ``up``: MariaDB, slurmdbd, the cluster and its associations, then slurmctld (which registers with
slurmdbd on start). On ``down``: slurmctld first, then slurmdbd, then MariaDB.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from burstd.providers.local import netns
from burstd.testbed.config import BedConfig
from burstd.testbed.host import TEST_USERS, BedError, _alive, _pid_of, _sh, _stop, _wait

DB_USER_HOST = "'slurm'@'127.0.0.1'"


class Accounting:
    """MariaDB + slurmdbd of one bed. ``env`` runs Slurm commands (the bed's SLURM_CONF and PATH)."""

    def __init__(self, config: BedConfig, paths: dict[str, Path], env: dict[str, str]):
        self.config = config
        self.paths = paths
        self.env = env
        self.db_pid_file = paths["db_run"] / "mariadbd.pid"
        self.db_socket = paths["db_run"] / "mariadbd.sock"

    # ------------------------------------------------------------------ MariaDB
    def db_pid(self) -> int | None:
        pid = _pid_of(self.db_pid_file)
        return pid if _alive(pid, "mariadbd") else None

    def _sql(self, statement: str) -> subprocess.CompletedProcess:
        # root over the socket: unix_socket authentication, no password anywhere
        return _sh(["mariadb", "--no-defaults", f"--socket={self.db_socket}", "-u", "root", "-e", statement],
                   "MariaDB", check=False, timeout=20)

    def start_db(self) -> str:
        """Start the bed's MariaDB (initialising its data dir the first time); returns slurmdbd's password."""
        data, run = self.paths["db_dir"], self.paths["db_run"]
        if not (data / "mysql").is_dir():
            shutil.rmtree(data, ignore_errors=True)
            data.mkdir(parents=True)
            shutil.chown(data, "mysql", "mysql")
            _sh(["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=mysql",
                 "--auth-root-authentication-method=socket", "--skip-test-db"], "initialise MariaDB", timeout=180)
        run.mkdir(parents=True, exist_ok=True)
        shutil.chown(run, "mysql", "mysql")
        if self.db_pid() is None:
            log = open(self.paths["log"] / "mariadb.log", "ab")
            subprocess.Popen(
                ["mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self.db_socket}",
                 f"--pid-file={self.db_pid_file}", f"--port={self.config.db_port_}", "--bind-address=127.0.0.1",
                 "--user=mysql", "--skip-name-resolve", "--innodb-buffer-pool-size=64M",
                 "--innodb-log-file-size=16M", "--max-connections=100"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                env={"PATH": netns.SANE_PATH, "LANG": "C"})
            log.close()
        _wait(lambda: self._sql("SELECT 1").returncode == 0, 60,
              f"MariaDB on {self.db_socket} (see {self.paths['log']}/mariadb.log)", 0.3)
        password = secrets.token_hex(16)
        proc = self._sql(f"CREATE USER IF NOT EXISTS {DB_USER_HOST}; "
                         f"ALTER USER {DB_USER_HOST} IDENTIFIED BY '{password}'; "
                         f"GRANT ALL ON slurm_acct_db.* TO {DB_USER_HOST};")
        if proc.returncode != 0:
            raise BedError(f"MariaDB: cannot create slurmdbd's user: {proc.stderr.strip()}")
        return password

    # ------------------------------------------------------------------ slurmdbd
    def dbd_pid(self) -> int | None:
        pid = _pid_of(self.paths["dbd_pid"])
        return pid if _alive(pid, "slurmdbd") else None

    def start_dbd(self) -> None:
        if self.dbd_pid() is None:
            proc = _sh(["slurmdbd"], "start slurmdbd", env=self.env, check=False, timeout=60)
            if proc.returncode != 0:
                raise BedError(f"slurmdbd did not start (exit {proc.returncode}): {proc.stderr.strip()}; "
                               f"see {self.paths['log']}/slurmdbd.log")
        _wait(self._dbd_answers, 60, f"slurmdbd on 127.0.0.1:{self.config.dbd_port_} "
              f"(see {self.paths['log']}/slurmdbd.log)", 0.5)

    def _dbd_answers(self) -> bool:
        return _sh(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"], "sacctmgr", env=self.env,
                   check=False, timeout=20).returncode == 0

    def sacctmgr(self, *args: str) -> str:
        proc = _sh(["sacctmgr", "-i", "-n", "-P", *args], f"sacctmgr {' '.join(args[:3])}", env=self.env,
                   check=False, timeout=30)
        if proc.returncode != 0 and "Nothing new added" not in proc.stdout + proc.stderr \
                and "already exists" not in proc.stdout + proc.stderr:
            raise BedError(f"sacctmgr {' '.join(args)}: {(proc.stderr or proc.stdout).strip()}")
        return proc.stdout

    def create_associations(self) -> None:
        """The cluster, the bed's accounts and QOS, and an association for each test user with each account."""
        cfg = self.config
        if cfg.name not in self.sacctmgr("show", "cluster", "format=cluster").split():
            self.sacctmgr("add", "cluster", cfg.name)
        existing_qos = set(self.sacctmgr("show", "qos", "format=name").split())
        for qos in cfg.qos:
            if qos not in existing_qos:
                self.sacctmgr("add", "qos", qos)
        existing = set(self.sacctmgr("show", "account", "format=account").split())
        missing = [a for a in cfg.accounts if a not in existing]
        if missing:
            self.sacctmgr("add", "account", ",".join(missing), f"cluster={cfg.name}",
                          "description=burstd test bed", "organization=burstd")
        qos = ",".join(("normal", *cfg.qos))
        have = set(self.sacctmgr("show", "assoc", f"cluster={cfg.name}", "format=user,account").split())
        for user in TEST_USERS:
            accounts = [a for a in cfg.accounts if f"{user}|{a}" not in have]
            if accounts:
                self.sacctmgr("add", "user", user, f"account={','.join(accounts)}",
                              f"defaultaccount={cfg.accounts[0]}", f"cluster={cfg.name}", f"qos={qos}")

    # ------------------------------------------------------------------ up / down
    def up(self) -> None:
        password = self.start_db()
        self._write_dbd_conf(password)
        if self.dbd_pid() is not None:  # a restarted bed: slurmdbd must read the new password
            _stop(self.dbd_pid(), "slurmdbd")
        self.start_dbd()
        self.create_associations()

    def _write_dbd_conf(self, password: str) -> None:
        from burstd.testbed import render

        path = self.paths["dbd_conf"]
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(render.slurmdbd_conf(self.config, password))
        os.replace(tmp, path)

    def down(self) -> dict[str, bool]:
        return {"slurmdbd": _stop(_pid_of(self.paths["dbd_pid"]), "slurmdbd", timeout=15),
                "mariadbd": _stop(_pid_of(self.db_pid_file), "mariadbd", timeout=30)}
