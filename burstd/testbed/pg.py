"""A throwaway PostgreSQL server from Debian's binaries (``postgresql-15``), for ``burstctl demo --ha``.

    with ThrowawayPostgres() as pg:       # initdb + pg_ctl start in a temporary folder
        url = pg.url()                    # postgresql+psycopg2://postgres@/postgres?host=<folder>/sock&port=5439
    # stopped (-m immediate) and its folder removed

It listens only on a unix socket inside its own folder (no TCP port), with trust authentication, and runs as
the ``postgres`` user when we are root (initdb refuses root). ``BURSTD_PG_BIN`` names another install.
The tests' ``postgres_server`` fixture (``tests/pg.py``) is this class too; ``crash()`` and ``restart()`` make a
database outage (the server stopped at once, its data kept, then started again).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

DEFAULT_BIN = "/usr/lib/postgresql/15/bin"
PORT = 5439  # names the socket file inside our own folder only


class PostgresError(RuntimeError):
    pass


def _server_user() -> str | None:
    """``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresError("running as root but there is no 'postgres' user to run the server as "
                            "(apt-get install postgresql-15 creates it)") from None
    return "postgres"


class ThrowawayPostgres:
    def __init__(self, bin_dir: str | os.PathLike | None = None):
        self.bin = Path(bin_dir or os.environ.get("BURSTD_PG_BIN") or DEFAULT_BIN)
        self.user = _server_user()
        self.root: Path | None = None
        self.started = False
        self.port = PORT
        self._opts = ""

    @property
    def socket_dir(self) -> Path:
        assert self.root is not None, "not started"
        return self.root / "sock"

    def _run(self, argv: list[str]) -> subprocess.CompletedProcess:
        kw: dict = {}
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [],
                  "env": {"PATH": "/usr/bin:/bin", "HOME": pw.pw_dir, "LANG": "C"}}
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)

    def start(self) -> ThrowawayPostgres:
        initdb, pg_ctl = self.bin / "initdb", self.bin / "pg_ctl"
        if not (initdb.exists() and pg_ctl.exists()):
            raise PostgresError(f"PostgreSQL not installed: {initdb} missing (apt-get install postgresql-15, "
                                "or set BURSTD_PG_BIN)")
        self.root = Path(tempfile.mkdtemp(prefix="burstd-pg-"))
        os.chmod(self.root, 0o755)  # the daemons (root) and the server (postgres) both reach the socket
        self.socket_dir.mkdir()
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            for p in (self.root, self.socket_dir):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        data = self.root / "data"
        r = self._run([str(initdb), "-D", str(data), "-U", self.db_user, "--auth=trust", "-E", "UTF8",
                       "--no-sync", "--locale=C"])
        if r.returncode != 0:
            self.close()
            raise PostgresError(f"initdb failed: {r.stderr.strip()[-500:]}")
        self._opts = (f"-c listen_addresses='' -c unix_socket_directories={self.socket_dir} -p {PORT} "
                      "-c fsync=off -c max_connections=100")
        try:
            self.restart()
        except PostgresError:
            self.close()
            raise
        return self

    def restart(self) -> None:
        """Start the server on its existing data (after ``start()`` made it, or after ``crash()``)."""
        assert self.root is not None, "not started"
        log = self.root / "log"
        r = self._run([str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-o", self._opts, "-l", str(log),
                       "-w", "-t", "60", "start"])
        if r.returncode != 0:
            tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
            raise PostgresError(f"PostgreSQL did not start: {r.stderr.strip()[-300:]} {tail}")
        self.started = True

    def crash(self) -> None:
        """An outage: stop the server at once (``-m immediate``, like a crash), keeping its data."""
        assert self.root is not None and self.started, "not running"
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"])
        self.started = False

    @property
    def db_user(self) -> str:
        return self.user or pwd.getpwuid(os.geteuid()).pw_name

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg2://{self.db_user}@/{database}?host={self.socket_dir}&port={self.port}"

    def close(self) -> None:
        """Stop at once (nothing here is worth a clean shutdown) and remove the folder."""
        if self.root is None:
            return
        if self.started:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop"])
            self.started = False
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
