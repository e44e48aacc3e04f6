"""What a new site gets wrong, checked before it bites (``burstctl doctor``).

Two halves: pure rules over what Slurm says of itself (``scontrol show config``) and over burstd's config, and
probes that run the site's own tools (``munge``, the database and its schema, the daemon, its metrics endpoint,
the clouds' credential chains). Each check gives one :class:`Finding`: ``ok``, ``warn`` or ``fail``, what was
seen, and (unless ok) how to fix it. A probe takes what does the I/O as an argument, so the tests give it theirs.

The rule that matters most for money: without ``AccountingStorageEnforce=associations`` Slurm takes any
``sbatch -A`` string, so a user with no association could charge a funded account's budget (issue 21, item 2).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

from burstd.config import Config
from burstd.slurm.conf import HOOK_DIR, default_resume_timeout

Level = Literal["ok", "warn", "fail"]


@dataclass(frozen=True, slots=True)
class Finding:
    check: str
    level: Level
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def parse_show_config(text: str) -> dict[str, str]:
    """``scontrol show config`` as ``{key: value}`` (the first of a repeated key; keys and values stripped)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            values.setdefault(key.strip(), value.strip())
    return values


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read(65536)
    except OSError:
        return ""


def is_burstd_hook(program: str, hook_dir: str = HOOK_DIR, read: Callable[[str], str] = _read) -> bool:
    """``program`` is one of burstd's hooks: in the hook folder ``burstctl slurm-conf`` names, or a script that
    runs burstd's hook entry point (a site may install the hooks elsewhere)."""
    if program.startswith(hook_dir.rstrip("/") + "/"):
        return True
    text = read(program) if program not in ("", "(null)") else ""
    return "burstd.daemon.hooks" in text or "burstd-hook" in text


def slurm_findings(values: dict[str, str], cfg: Config, hook_dir: str = HOOK_DIR,
                   read: Callable[[str], str] = _read) -> list[Finding]:
    """The slurm.conf settings burstd depends on, judged from ``scontrol show config`` (``read`` opens a hook
    program to see what it runs)."""
    out: list[Finding] = []
    storage = values.get("AccountingStorageType", "")
    if "slurmdbd" not in storage:
        out.append(Finding("slurmdbd", "fail", f"AccountingStorageType is {storage or 'unset'}",
                           "run slurmdbd and set AccountingStorageType=accounting_storage/slurmdbd: budgets "
                           "need the accounts and associations it keeps, and spend --reconcile reads sacct"))
    else:
        out.append(Finding("slurmdbd", "ok", storage))
    enforce = {w.strip().lower() for w in values.get("AccountingStorageEnforce", "").split(",")}
    if "associations" not in enforce:
        out.append(Finding(
            "association enforcement", "fail",
            f"AccountingStorageEnforce is {values.get('AccountingStorageEnforce') or 'unset'}: Slurm accepts any "
            "`sbatch -A` string, so a user with no association can charge another account's budget",
            "set AccountingStorageEnforce=associations,limits,qos in slurm.conf and restart slurmctld"))
    else:
        out.append(Finding("association enforcement", "ok", values["AccountingStorageEnforce"]))
    for key in ("ResumeProgram", "SuspendProgram", "ResumeFailProgram"):
        got = values.get(key, "(null)")
        if not is_burstd_hook(got, hook_dir, read):
            out.append(Finding(f"{key}", "fail", f"{key} is {got}, which does not run burstd's hook",
                               f"point it at burstd's hook in {hook_dir}: `burstctl slurm-conf` prints the lines"))
        else:
            out.append(Finding(f"{key}", "ok", got))
    suspend = values.get("SuspendTime", "NONE")
    if suspend.upper() in ("NONE", "INFINITE", "-1", "0", ""):
        out.append(Finding("SuspendTime", "fail", f"SuspendTime is {suspend}: idle cloud nodes are never released",
                           "set SuspendTime (burstctl slurm-conf prints it)"))
    else:
        out.append(Finding("SuspendTime", "ok", suspend))
    resume_timeout = _seconds(values.get("ResumeTimeout", ""))
    need = default_resume_timeout(cfg)
    if cfg.pools and resume_timeout is not None and resume_timeout < need:
        out.append(Finding("ResumeTimeout", "warn", f"ResumeTimeout is {resume_timeout} s, under the {need} s a "
                                                    "cloud node may take to boot here",
                           f"set ResumeTimeout={need} (burstctl slurm-conf)"))
    if any(p.provider != "local" for p in cfg.pools):
        host = values.get("SlurmctldHost[0]", "")
        addr = values.get("SlurmctldAddr", "(null)")
        seen = addr if addr not in ("", "(null)") else host.split("(")[-1].rstrip(")")
        if _is_loopback(seen):
            out.append(Finding("cloud nodes reach slurmctld", "fail",
                               f"slurmctld is at {seen}, which a cloud node cannot reach",
                               "set SlurmctldHost/SlurmctldAddr to an address the cloud network routes to"))
    return out


def _seconds(text: str) -> int | None:
    word = text.split()[0] if text.split() else ""
    return int(word) if word.isdigit() else None


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def config_findings(cfg: Config) -> list[Finding]:
    """burstd's own settings that are legal but unwise. Pure."""
    out: list[Finding] = []
    d = cfg.daemon
    if d.metrics_port is not None and not _is_loopback(d.metrics_address):
        out.append(Finding("metrics port", "warn", f"metrics listen on {d.metrics_address}:{d.metrics_port} and "
                                                   "name every account's budget and spend",
                           "keep daemon.metrics_address on 127.0.0.1, or fence the port (docs/security.md)"))
    if cfg.budget.default_account_usd:
        out.append(Finding("default budget", "warn",
                           f"every account slurmdbd knows gets ${cfg.budget.default_account_usd} a period",
                           "give budgets by name (burstctl budget set) unless every account should burst"))
    return out


# --------------------------------------------------------------------------------------------------
# Probes: the site's own tools
# --------------------------------------------------------------------------------------------------
Runner = Callable[[list[str], str | None], tuple[int, str]]


def run_command(argv: list[str], stdin: str | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``argv``; 127 when it is not installed, 124 when it hangs. ``env``: what to
    set on top of this process's environment."""
    if shutil.which(argv[0]) is None and "/" not in argv[0]:
        return 127, f"{argv[0]}: not found"
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=20, check=False,
                           env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer in 20 s"
    except OSError as exc:
        return 126, str(exc)
    return p.returncode, p.stdout + p.stderr


def munge_finding(run: Runner = run_command) -> Finding:
    rc, cred = run(["munge", "-n"], None)
    if rc == 0:
        rc, out = run(["unmunge"], cred)
    else:
        out = cred
    if rc == 0:
        return Finding("munge", "ok", "a credential made here decodes here")
    return Finding("munge", "fail", out.strip().splitlines()[-1] if out.strip() else f"exit {rc}",
                   "start munged (systemctl start munge) with the cluster's key in /etc/munge/munge.key")


def credential_findings(cfg: Config) -> list[Finding]:
    """Whether each cloud's client finds credentials the way the daemon will (nothing is called)."""
    out: list[Finding] = []
    providers = {p.provider for p in cfg.pools}
    if "aws" in providers:
        try:
            import boto3

            ok = boto3.Session().get_credentials() is not None
        except Exception as exc:  # noqa: BLE001 - any failure of the chain is the finding
            ok, why = False, str(exc)
        else:
            why = "no credentials in the environment, profile or instance role"
        out.append(Finding("AWS credentials", "ok", "found") if ok else Finding(
            "AWS credentials", "fail", why, "set AWS_PROFILE or the keys in /etc/burstd/burstd.env (docs/clouds.md)"))
    if "gcp" in providers:
        try:
            import google.auth

            google.auth.default()
            out.append(Finding("GCP credentials", "ok", "found"))
        except Exception as exc:  # noqa: BLE001
            out.append(Finding("GCP credentials", "fail", str(exc).splitlines()[0],
                               "set GOOGLE_APPLICATION_CREDENTIALS in /etc/burstd/burstd.env (docs/clouds.md)"))
    return out


#: reads a database's schema revision, this burstd's head and every revision it knows (``db.engine.schema_revisions``)
Revisions = Callable[[str], tuple[str | None, str, frozenset[str]]]


def shown_url(url: str) -> str:
    """A database URL fit to print: its password hidden."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url.partition("://")[0] + "://..."


def database_finding(url: str, revisions: Revisions) -> Finding:
    """burstd's database opens, and its schema is the one this burstd runs on (the Alembic head)."""
    where = shown_url(url)
    try:
        current, head, known = revisions(url)
    except FileNotFoundError as exc:
        return Finding("database", "warn", f"{exc}: nothing recorded yet",
                       "start burstd (systemctl start burstd): it creates the database and its schema; or correct "
                       "database.url if the records are elsewhere")
    except Exception as exc:  # noqa: BLE001 - any failure to open or read it is the finding
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Finding("database", "fail", f"cannot read {where}: {why}",
                       "check database.url, that the database server runs and lets this user in (the SQLite file "
                       "is the daemon's alone, mode 0600: run doctor as burstd's user or root)")
    if current == head:
        return Finding("database", "ok", f"{where}: schema at the current revision {head}")
    if current is None:
        return Finding("database", "fail", f"{where} holds no burstd schema",
                       "start burstd once against it (it migrates a database to the current schema on start), or "
                       "correct database.url")
    if current not in known:
        return Finding("database", "fail", f"{where}: schema revision {current} is unknown to this burstd (head "
                                           f"{head}): a newer burstd wrote it",
                       "upgrade burstd to the release that wrote the database (an older one must not run on it)")
    return Finding("database", "fail", f"{where}: schema at revision {current}, this burstd needs {head}",
                   "back the database up, then restart burstd: it migrates the schema to the current revision on "
                   "start")


#: GETs a URL: (HTTP status, body); raises OSError when nothing answers
Fetch = Callable[[str], tuple[int, str]]


def http_get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:  # an http URL built from the config, never a user's
            return r.status, r.read(1 << 20).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def metrics_finding(cfg: Config, daemon_up: bool, fetch: Fetch = http_get) -> Finding:
    """Can Prometheus scrape burstd: ``daemon.metrics_port`` set, and (the daemon running) ``/metrics`` answering
    with burstd's metrics."""
    d = cfg.daemon
    if d.metrics_port is None:
        return Finding("metrics", "warn", "daemon.metrics_port is not set: Prometheus cannot scrape burstd (no "
                                          "alerts, no Grafana dashboard)",
                       "set daemon.metrics_port (e.g. 9464) in burstd.toml, restart burstd and add the target to "
                       "Prometheus (monitoring/README.md)")
    # a wildcard listen address is reached on loopback here
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(d.metrics_address, d.metrics_address)
    url = f"http://{f'[{host}]' if ':' in host else host}:{d.metrics_port}/metrics"
    if not daemon_up:
        return Finding("metrics", "warn", f"{url} not checked: the daemon is not running",
                       "start burstd, then run burstctl doctor again")
    try:
        status, body = fetch(url)
    except OSError as exc:
        return Finding("metrics", "fail", f"{url}: {exc}",
                       "is burstd running with this config? Another process on the port? (journalctl -u burstd)")
    if status != 200 or "burstd_" not in body:
        return Finding("metrics", "fail", f"{url} answered HTTP {status} without burstd's metrics",
                       "another service holds the port: give daemon.metrics_port a free one and restart burstd")
    return Finding("metrics", "ok", f"{url} answers with burstd's metrics")


def failed(findings: list[Finding]) -> bool:
    return any(f.level == "fail" for f in findings)
