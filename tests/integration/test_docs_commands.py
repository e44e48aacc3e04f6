"""Every ``burstctl`` command in README.md and docs/*.md works as written, so a documented command cannot rot.

Each example in a code block is split into its commands (``a; b``, ``a / b``; prompts, ``sudo``, environment
assignments, pipes, redirections and comments stripped) and then:

* **run** against a real control API (FastAPI over its unix socket, the real Reconciler and SQLite Store) whose
  Slurm is a replay of saved ``squeue``/``sinfo`` output (``tests/data/slurm-22.05``) and whose cloud is a fake:
  ``status``, ``nodes``, ``leases``, ``events``, ``jobs``, ``explain``, ``pause``, ``resume``, ``drain``,
  ``terminate``, ``budget``, ``spend``, ``config``, ``slurm-conf``, ``snapshot --from``, ``--version``; each must
  exit 0;
* **parsed** (every option and argument checked by the real parser, nothing run) where it runs until Ctrl-C
  (``--watch``), would edit the shell's startup file (``--install-completion``), or would need root and a Slurm
  bed (``testbed``, ``demo``, ``preempt``, live ``snapshot``, ``spend --reconcile``), a cloud (``cloud``), or
  minutes of CPU (``simulate``, whose own tests run it).

A command named inline in prose (```burstctl spend --plot```) must name a real command and real options.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from burstd.cli.app import app
from burstd.slurm.replay import snapshot_from_files
from tests.integration.live_api import live_api
from tests.unit.daemon.fakes import FakeAdapter

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SAVED = REPO / "tests" / "data" / "slurm-22.05"
RUN = {"status", "nodes", "leases", "events", "jobs", "explain", "pause", "resume", "drain", "terminate", "budget", "spend",
       "config", "slurm-conf", "snapshot"}
ROOT = typer.main.get_command(app)

# Placeholders the docs use, and what stands for them here.
PLACEHOLDERS = {"NODE": "cloud1", "LEASE": "3f2a", "ID": "3f2a", "USD": "100", "JOBID": "4242", "ACCOUNT": "chem"}


def _commands(text: str) -> list[str]:
    """burstctl commands in fenced code blocks: one per line (continuations joined), split on ; and ' / '."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"^\s*[$#]\s+", "", line)
            line = re.sub(r"\s+#\s.*$", "", line)  # a trailing comment
            for part in re.split(r";\s+|\s+/\s+", line):
                words = part.strip().split()
                while words and (words[0] == "sudo" or re.fullmatch(r"[A-Z_]+=\S*", words[0])):
                    words.pop(0)
                if words[:1] == ["burstctl"]:
                    cmd = " ".join(words)
                    cmd = re.split(r"\s+\|\s+|\s+>>?\s+", cmd)[0]  # pipes and redirections are the shell's
                    out.append(cmd)
    return out


def _inline(text: str) -> list[str]:
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [c for c in re.findall(r"`(burstctl [^`]+)`", prose)]


def _examples() -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        found += [(doc.name, c) for c in _commands(text)]
    return found


def _inline_examples() -> list[tuple[str, str]]:
    return [(doc.name, c) for doc in DOCS for c in _inline(doc.read_text())]


def _resolve(words: list[str]):
    """(click command, remaining args) for the command path at the start of ``words``."""
    cmd, rest = ROOT, list(words)
    while rest and hasattr(cmd, "commands") and rest[0] in cmd.commands:
        cmd = cmd.commands[rest.pop(0)]
    return cmd, rest


EXAMPLES = _examples()


def test_the_docs_have_examples_to_check():
    assert len(EXAMPLES) > 30, EXAMPLES
    assert ("README.md", "burstctl spend --by account --since 2026-11-01") in EXAMPLES


@pytest.mark.parametrize("doc, command", _inline_examples(), ids=lambda x: x)
def test_inline_commands_name_real_commands_and_options(doc, command):
    words = shlex.split(command)[1:]
    cmd, rest = _resolve(words)
    assert cmd is not ROOT or all(w.startswith("-") for w in words), f"{doc}: `{command}`: no such command"
    opts = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
    for w in rest:
        if w.startswith("-") and not re.match(r"-\d", w):  # "-5" is an amount, not an option
            assert w.split("=")[0] in opts, f"{doc}: `{command}`: {w} is not an option of it"


def _substitute(words: list[str], config: str, tmp: Path) -> list[str]:
    out = []
    for w in words:
        w = PLACEHOLDERS.get(w, w)
        if w.startswith("/etc/burstd/") or w.startswith("/var/lib/burstd-testbed/"):
            w = config  # the documented config path: the live API's config here
        elif w.startswith("/usr/lib/burstd/hooks"):
            w = str(tmp / "hooks")
        elif w in ("squeue.json", "sinfo.json"):
            w = str(SAVED / w)
        out.append(w)
    return out


class ReplayAdapter(FakeAdapter):
    """Slurm as it was: every snapshot is the saved squeue/sinfo capture."""

    def snapshot(self):
        self.snapshots += 1
        return snapshot_from_files([str(SAVED / "squeue.json"), str(SAVED / "sinfo.json")])


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs-api")
    with live_api(tmp, adapter=ReplayAdapter()) as parts:
        path, rec, store, *_ = parts
        lease = store.create_lease(pool="local", node_name="cloud1", lease_id="3f2a" + "0" * 28, reason="docs")
        # the site's slurm.conf, as far as `squeue --version` needs one (slurm-conf reads the live release)
        site_conf = tmp / "slurm.conf"
        site_conf.write_text("ClusterName=docs\nSlurmctldHost=localhost\n")
        with open(path, "a") as fh:
            fh.write(f'[slurm]\nconf = "{site_conf}"\n')
        rec.cycle()
        yield path, tmp, lease


@pytest.mark.parametrize("doc, command", EXAMPLES, ids=lambda x: x)
def test_documented_command_works_as_written(doc, command, api, tmp_path, monkeypatch):
    config, _, _ = api
    monkeypatch.chdir(tmp_path)  # files a command writes (spend --plot spend.html) land here
    words = _substitute(shlex.split(command)[1:], config, tmp_path)
    cmd, rest = _resolve(words)
    if cmd is ROOT:  # burstctl's own options: --version is run; completion would edit the shell's startup file
        root_opts = {o for p in ROOT.params for o in p.opts}
        assert words and set(words) <= root_opts, f"{doc}: `{command}`: no such command"
        if words == ["--version"]:
            r = CliRunner().invoke(app, words)
            assert r.exit_code == 0 and r.output.startswith("burstctl (burstd) "), r.output
        return
    top = words[0]
    # a live snapshot needs Slurm; reconciling spend needs slurmdbd's sacct (its own bed test runs it)
    needs_live_slurm = (top == "snapshot" and "--from" not in words) or "--reconcile" in words
    endless = "--watch" in words  # runs until Ctrl-C: parsed only (tests/unit/cli/test_cli_habits.py runs it)
    if top in RUN and not needs_live_slurm and not endless:
        if top not in ("config", "snapshot") and "-c" not in words and "--config" not in words:
            words += ["-c", config]
        r = CliRunner().invoke(app, words)
        assert r.exit_code == 0, f"{doc}: `{command}` exited {r.exit_code}:\n{r.output}"
    else:
        ctx = cmd.make_context(" ".join(["burstctl", *words[: len(words) - len(rest)]]), list(rest))
        assert ctx.params is not None, f"{doc}: `{command}` does not parse"
