"""The cli backend's argument lists, environment, call counts and errors, against fake Slurm binaries.

The fakes (tiny Python scripts in a temp ``bin_dir``) record their argv and environment and print recorded
22.05 output; the live behaviour is checked in tests/integration/test_slurm_adapter.py on the real bed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from burstd.config import SlurmConfig
from burstd.slurm import make_adapter, squeue_text
from burstd.slurm.base import SlurmError
from burstd.slurm.cli import CliAdapter, parse_version

DATA = Path(__file__).resolve().parents[2] / "data" / "slurm-22.05"

FAKE = r'''#!{python}
import json, os, sys, time
name = os.path.basename(sys.argv[0])
log = os.environ["FAKE_LOG"]
with open(log, "a") as f:
    f.write(json.dumps({{"argv": [name] + sys.argv[1:], "env": {{k: v for k, v in os.environ.items()
        if k.startswith(("SLURM_", "SQUEUE_", "LC_ALL"))}}}}) + "\n")
data = os.environ["FAKE_DATA"]
args = sys.argv[1:]
if os.environ.get("FAKE_FAIL") == name:
    sys.stderr.write("slurm_update error: Invalid job id specified\n"); sys.exit(1)
if os.environ.get("FAKE_SLEEP") == name:
    time.sleep(5)
if args == ["--version"]:
    print(os.environ.get("FAKE_VERSION", "slurm-wlm 22.05.8")); sys.exit(0)
if name == "squeue" and "--json" in args:
    sys.stdout.write(open(os.path.join(data, "squeue.json")).read()); sys.exit(0)
if name == "squeue" and "-j" in args and "-t" in args:  # job_state: FAKE_JOB_STATES answered one per call
    jid = args[args.index("-j") + 1]
    states = os.environ.get("FAKE_JOB_STATES", "PENDING").split(",")
    n = sum(1 for line in open(log) if '"-t"' in line and '"squeue"' in line)  # this call is logged: n >= 1
    print(jid + "|" + states[min(n, len(states)) - 1]); sys.exit(0)
if name == "squeue" and "-o" in args:  # 22.05's pending jobs' exclusions (no ExcNodes in its -O)
    sys.stdout.write(os.environ.get("FAKE_EXCLUSIONS", "")); sys.exit(0)
if name == "squeue" and "-j" in args:
    jid = args[args.index("-j") + 1]
    print("999|other"); print(jid + "|" + os.environ.get("FAKE_PARTITIONS", "onprem")); sys.exit(0)
if name == "squeue":
    body = open(os.environ.get("FAKE_TEXT", os.path.join(data, "squeue_text.txt")), "rb").read()  # bytes, as Slurm
    # like squeue: each record ends with the format's last suffix (RS + the caller's nonce)
    end = os.environ["SQUEUE_FORMAT2"].rsplit(":0", 1)[1].encode()
    body = body.replace(b"\x1e\n", end + b"\n")
    sys.stdout.buffer.write(body * int(os.environ.get("FAKE_REPEAT", "1"))); sys.exit(0)
if name == "sinfo":
    sys.stdout.write(open(os.path.join(data, "sinfo.json")).read()); sys.exit(0)
if name == "scontrol" and args[:2] == ["show", "job"]:
    flags = [f for f in os.environ.get("FAKE_JOB_FLAGS", "").split(",") if f]
    print(json.dumps({{"jobs": [{{"job_id": int(args[2]), "flags": flags}}]}})); sys.exit(0)
if name == "scontrol" and args[:2] == ["show", "partitions"]:
    sys.stdout.write(open(os.path.join(data, "scontrol_show_partitions_o.txt")).read()); sys.exit(0)
sys.exit(0)
'''


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("squeue", "sinfo", "scontrol", "scancel"):
        p = bindir / name
        p.write_text(FAKE.format(python=sys.executable))
        p.chmod(p.stat().st_mode | stat.S_IXUSR)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("FAKE_DATA", str(DATA))
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")  # must never reach squeue
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")  # must be overridden

    class Fake:
        bin_dir = str(bindir)
        conf = str(tmp_path / "slurm.conf")

        def calls(self):
            if not log.exists():
                return []
            return [json.loads(line) for line in log.read_text().splitlines()]

        def argvs(self):
            return [c["argv"] for c in self.calls() if c["argv"][1:] != ["--version"]]

        def adapter(self, **kw):
            return CliAdapter(SlurmConfig(bin_dir=self.bin_dir, conf=self.conf, command_timeout_s=2.0), **kw)

    return Fake()


def _started(adapter):
    """The commands the adapter started, in order (the fakes' own log is unordered: they run side by side)."""
    return [[os.path.basename(a[0]), *a[1:]] for a in adapter.calls if a[1:] != ["--version"]]


def test_snapshot_uses_one_squeue_one_sinfo_one_partition_call_and_on_2205_one_for_the_exclusions(fake_slurm):
    a = fake_slurm.adapter()
    snap = a.snapshot()
    assert sorted(x[0] for x in fake_slurm.argvs()) == ["scontrol", "sinfo", "squeue", "squeue"]
    assert [x[0] for x in _started(a)] == ["squeue", "sinfo", "scontrol", "squeue"]
    squeue, *_, exclusions = _started(a)
    assert squeue == ["squeue", "-h", "-a"]  # the format (with its nonce) travels in the environment
    assert exclusions == ["squeue", "-h", "-a", "-t", "PENDING", "-o", "%A|%x"]
    assert len(snap.jobs) == 11 and len(snap.nodes) == 5 and len(snap.partitions) == 2
    assert snap.source == "cli" and snap.slurm_version == "22.05.8"


@pytest.mark.parametrize("repeat", [1, 50, 400])
def test_call_count_does_not_grow_with_the_queue(fake_slurm, monkeypatch, tmp_path, repeat):
    # the same 11 records with fresh ids, repeated: the commands run stay the same
    body = (DATA / "squeue_text.txt").read_text()
    records = body.split(squeue_text.RECORD_END + "\n")[:-1]
    out = []
    for k in range(repeat):
        for r in records:
            fields = r.split(squeue_text.FIELD_SEP)
            fields[0] = str(int(fields[0]) + 1000 * k)
            out.append(squeue_text.FIELD_SEP.join(fields) + squeue_text.RECORD_END + "\n")
    text = tmp_path / "many.txt"
    text.write_text("".join(out))
    monkeypatch.setenv("FAKE_TEXT", str(text))
    a = fake_slurm.adapter()
    snap = a.snapshot()
    assert len(snap.jobs) == 11 * repeat
    assert len(fake_slurm.argvs()) == 4 and len(a.calls) == 5  # + one cached `squeue --version`
    a.snapshot()
    assert len(a.calls) == 8  # the version is asked once per adapter, the exclusions once a job


def test_environment_is_scrubbed_and_set(fake_slurm):
    fake_slurm.adapter().snapshot()
    for call in fake_slurm.calls():
        env = call["env"]
        assert env["SLURM_CONF"] == fake_slurm.conf
        assert env["SLURM_TIME_FORMAT"] == "%s"
        assert "SQUEUE_FORMAT" not in env
        if call["argv"][0] == "squeue" and "--version" not in call["argv"] and "-o" not in call["argv"]:
            nonce = env["SQUEUE_FORMAT2"].rsplit(squeue_text.RECORD_END, 1)[1]
            assert env["SQUEUE_FORMAT2"] == squeue_text.squeue_text_format(nonce, exc_nodes=False)  # 22.05
            assert len(nonce) == 16


def test_each_snapshot_ends_records_with_a_fresh_nonce(fake_slurm):
    a = fake_slurm.adapter()
    a.snapshot()
    a.snapshot()
    formats = [c["env"]["SQUEUE_FORMAT2"] for c in fake_slurm.calls() if "SQUEUE_FORMAT2" in c["env"]]
    assert len(formats) == 2 and formats[0] != formats[1]
    assert not any("SQUEUE_FORMAT2" in c["env"] for c in fake_slurm.calls() if c["argv"][0] != "squeue")


def test_json_mode_and_text_mode_agree(fake_slurm):
    text = fake_slurm.adapter().snapshot()
    js = fake_slurm.adapter(job_format="json").snapshot()
    assert text.jobs == js.jobs
    assert ["squeue", "-a", "--json"] in fake_slurm.argvs()


def test_a_record_that_does_not_split_falls_back_to_json_for_that_snapshot(fake_slurm, monkeypatch, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text((DATA / "squeue_text.txt").read_text().replace("too_long", "too" + squeue_text.FIELD_SEP + "long"))
    monkeypatch.setenv("FAKE_TEXT", str(bad))
    a = fake_slurm.adapter()
    snap = a.snapshot()
    assert a.text_fallbacks == 1
    started = _started(a)
    assert started[0][:3] == ["squeue", "-h", "-a"] and started[-1] == ["squeue", "-a", "--json"]
    assert any(j.name == "too_long" for j in snap.jobs)  # the JSON path has the real name


def test_invalid_utf8_in_a_job_reads_as_replacement_characters_like_the_rest_backend(fake_slurm, monkeypatch,
                                                                                      tmp_path):
    """Slurm prints a job's name byte for byte: invalid UTF-8 becomes U+FFFD (the one decoding of both backends,
    ``parse.decode_output``), never a surrogate escape that the database and the API could not encode again."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes((DATA / "squeue_text.txt").read_bytes().replace(b"too_long", b"too\xff\xfe_long"))
    monkeypatch.setenv("FAKE_TEXT", str(bad))
    a = fake_slurm.adapter()
    names = [j.name for j in a.snapshot().jobs]
    assert "too\ufffd\ufffd_long" in names and len(names) == 11 and a.text_fallbacks == 0
    "".join(names).encode("utf-8")  # strict: no surrogates


def test_the_exclusions_of_2205_join_the_text_snapshot_and_match_the_json_path(fake_slurm, monkeypatch, tmp_path):
    """22.05's squeue -O has no ExcNodes (it prints an empty field for the name): the pending jobs' ``sbatch -x``
    lists come from one more squeue beside the snapshot, and the text path reads what the JSON path reads."""
    plain = fake_slurm.adapter().snapshot()
    pending = [j.job_id for j in plain.jobs if j.is_pending]
    assert len(pending) >= 2 and all(j.excluded_nodes == "" for j in plain.jobs)
    monkeypatch.setenv("FAKE_EXCLUSIONS", f"{pending[0]}|c[1-2]\n{pending[1]}|(null)\n{pending[1] + 10**6}|c3\n")
    jobs = {j.job_id: j for j in fake_slurm.adapter().snapshot().jobs}
    assert jobs[pending[0]].excluded_nodes == "c[1-2]" and jobs[pending[0]].job_id == pending[0]
    assert all(j.excluded_nodes == "" for i, j in jobs.items() if i != pending[0])
    assert {i: replace(j, excluded_nodes="") for i, j in jobs.items()} == {j.job_id: j for j in plain.jobs}
    assert [j.excluded_nodes for j in fake_slurm.adapter().jobs() if j.job_id == pending[0]] == ["c[1-2]"]
    monkeypatch.setenv("FAKE_EXCLUSIONS", "c[1-2]\n")  # not squeue's: this snapshot comes from JSON
    a = fake_slurm.adapter()
    assert len(a.snapshot().jobs) == len(plain.jobs) and a.text_fallbacks == 1


def test_2205_asks_for_the_exclusions_only_when_a_pending_job_is_new_or_they_are_old(fake_slurm, monkeypatch,
                                                                                      tmp_path):
    exclusions = ["squeue", "-h", "-a", "-t", "PENDING", "-o", "%A|%x"]
    a = fake_slurm.adapter()
    a.snapshot()
    assert _started(a).count(exclusions) == 1
    a.snapshot()
    a.jobs()
    assert _started(a).count(exclusions) == 1  # the same pending jobs: their lists are known
    body = (DATA / "squeue_text.txt").read_text()
    first = body.split(squeue_text.RECORD_END + "\n")[0].split(squeue_text.FIELD_SEP)
    pending = next(r for r in body.split(squeue_text.RECORD_END + "\n")[:-1] if "PENDING" in r)
    new = pending.split(squeue_text.FIELD_SEP)
    new[0] = str(int(first[0]) + 100_000)
    more = tmp_path / "more.txt"
    more.write_text(body + squeue_text.FIELD_SEP.join(new) + squeue_text.RECORD_END + "\n")
    monkeypatch.setenv("FAKE_TEXT", str(more))
    monkeypatch.setenv("FAKE_EXCLUSIONS", f"{new[0]}|c[1-2]\n")
    jobs = {j.job_id: j for j in a.snapshot().jobs}
    assert _started(a).count(exclusions) == 2 and jobs[int(new[0])].excluded_nodes == "c[1-2]"
    a._exclusions_refresh_at = 0.0  # EXCLUSIONS_REFRESH_S later: an admin may have changed a list
    monkeypatch.setenv("FAKE_EXCLUSIONS", "")
    jobs = {j.job_id: j for j in a.snapshot().jobs}
    assert _started(a).count(exclusions) == 3 and jobs[int(new[0])].excluded_nodes == ""


def test_a_release_whose_squeue_prints_exc_nodes_reads_them_in_the_one_text_call(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_VERSION", "slurm 24.11.5")
    a = fake_slurm.adapter()
    a.jobs()
    assert [x for x in _started(a) if x[0] == "squeue"] == [["squeue", "-h", "-a"]]
    [fmt] = [c["env"]["SQUEUE_FORMAT2"] for c in fake_slurm.calls() if "SQUEUE_FORMAT2" in c["env"]]
    assert ",ExcNodes:0" in fmt
    monkeypatch.setenv("FAKE_VERSION", "slurm-wlm 22.05.8")
    fake_slurm.adapter().jobs()
    fmt = [c["env"]["SQUEUE_FORMAT2"] for c in fake_slurm.calls() if "SQUEUE_FORMAT2" in c["env"]][-1]
    assert "ExcNodes" not in fmt and fmt.rsplit(squeue_text.RECORD_END, 1)[0].endswith(",Reservation:0")


def test_newer_slurm_reads_nodes_and_partitions_as_json(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_VERSION", "slurm 24.11.5")
    a = fake_slurm.adapter()
    with pytest.raises(SlurmError):  # the fake prints nothing for scontrol show nodes --json
        a.snapshot()
    assert ["scontrol", "show", "nodes", "--json"] in fake_slurm.argvs()


ACTIONS = [
    (lambda a: a.set_partitions(5, ["onprem", "cloud"]), [["scontrol", "update", "jobid=5", "partition=onprem,cloud"]]),
    (lambda a: a.add_partition(5, "cloud"),
     [["squeue", "-h", "-j", "5", "-O", "JobID:0|,Partition:0"], ["scontrol", "update", "jobid=5", "partition=onprem,cloud"]]),
    (lambda a: a.add_partition(5, "onprem"), [["squeue", "-h", "-j", "5", "-O", "JobID:0|,Partition:0"]]),  # already there
    (lambda a: a.requeue(7), [["scontrol", "requeue", "7"]]),
    (lambda a: a.signal(7, "USR1", batch=True), [["scancel", "--signal=USR1", "--batch", "7"]]),
    (lambda a: a.signal(7, "sigterm", full=True), [["scancel", "--signal=SIGTERM", "--full", "7"]]),
    (lambda a: a.signal(7, "TERM"), [["scancel", "--signal=TERM", "7"]]),
    (lambda a: a.drain(["c1", "c[2-3]"], "spot reclaim at 12:00; $(no)"),
     [["scontrol", "update", "nodename=c1,c[2-3]", "state=DRAIN", "reason=spot reclaim at 12:00; $(no)"]]),
    (lambda a: a.resume(["c1"]), [["scontrol", "update", "nodename=c1", "state=RESUME"]]),
    (lambda a: a.clear_reason(["c1"]), [["scontrol", "update", "nodename=c1", "reason="]]),
    (lambda a: a.power_down(["c1"], force=True, reason="preempted"),
     [["scontrol", "update", "nodename=c1", "state=POWER_DOWN_FORCE", "reason=preempted"]]),
    (lambda a: a.power_down(["c1"]), [["scontrol", "update", "nodename=c1", "state=POWER_DOWN_ASAP"]]),
    (lambda a: a.power_up(["c2"]), [["scontrol", "update", "nodename=c2", "state=POWER_UP"]]),
    (lambda a: a.set_node_address("c2", "10.77.0.102", "cloud2"),
     [["scontrol", "update", "nodename=c2", "nodeaddr=10.77.0.102", "nodehostname=cloud2"]]),
]


@pytest.mark.parametrize("action,argvs", ACTIONS)
def test_action_argument_lists(fake_slurm, action, argvs):
    action(fake_slurm.adapter())
    assert fake_slurm.argvs() == argvs


def test_remove_partition(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_PARTITIONS", "onprem,cloud")
    fake_slurm.adapter().remove_partition(5, "cloud")
    assert fake_slurm.argvs()[-1] == ["scontrol", "update", "jobid=5", "partition=onprem"]
    monkeypatch.setenv("FAKE_PARTITIONS", "cloud")
    with pytest.raises(SlurmError, match="only partition"):
        fake_slurm.adapter().remove_partition(5, "cloud")


BAD = [
    lambda a: a.set_partitions(5, ["cloud;rm -rf /"]),
    lambda a: a.set_partitions(5, []),
    lambda a: a.add_partition(5, "--help"),
    lambda a: a.requeue(-1),
    lambda a: a.requeue("5"),
    lambda a: a.signal(5, "USR1; id"),
    lambda a: a.drain(["c1 c2"], "x"),
    lambda a: a.drain(["c1"], "two\nlines"),
    lambda a: a.drain(["c1"], ""),
    lambda a: a.drain(["-c1"], "x"),
    lambda a: a.resume([]),
    lambda a: a.set_node_address("c1", "1.2.3.4 extra"),
    lambda a: a.set_node_address("c1;x", "1.2.3.4"),
]


@pytest.mark.parametrize("action", BAD)
def test_bad_input_is_refused_before_any_command_runs(fake_slurm, action):
    with pytest.raises(ValueError):
        action(fake_slurm.adapter())
    assert fake_slurm.argvs() == []


def test_slurm_errors_carry_slurms_words(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "scontrol")
    with pytest.raises(SlurmError, match="Invalid job id specified"):
        fake_slurm.adapter().requeue(99)


def test_timeout_is_a_slurm_error(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SLEEP", "scontrol")
    with pytest.raises(SlurmError, match="command_timeout_s"):
        fake_slurm.adapter().requeue(99)


def test_missing_binaries_name_bin_dir(tmp_path):
    a = CliAdapter(SlurmConfig(bin_dir=str(tmp_path / "nowhere")))
    with pytest.raises(SlurmError, match="bin_dir"):
        a.snapshot()


@pytest.mark.parametrize("text,want", [("slurm-wlm 22.05.8", (22, 5)), ("slurm 24.11.5", (24, 11)),
                                       ("slurm-wlm 26.05.5\n", (26, 5))])
def test_parse_version(text, want):
    assert parse_version(text) == want


def test_make_adapter_picks_the_backend():
    assert make_adapter(SlurmConfig()).backend == "cli"
    assert make_adapter(SlurmConfig(backend="rest", rest_url="http://127.0.0.1:9")).backend == "rest"
    if not _has_pyslurm():
        with pytest.raises(SlurmError, match="pyslurm"):
            make_adapter(SlurmConfig(backend="pyslurm"))


def _has_pyslurm() -> bool:
    try:
        import pyslurm  # noqa: F401
    except ImportError:
        return False
    return True


def test_no_shell_anywhere_in_the_backends():
    src = "".join(
        (Path(__file__).resolve().parents[3] / "burstd" / "slurm" / f).read_text()
        for f in os.listdir(Path(__file__).resolve().parents[3] / "burstd" / "slurm") if f.endswith(".py")
    )
    assert "shell=True" not in src and "os.system" not in src and "os.popen" not in src


# ---------------------------------------------------------------------- what each release gets (features)
@pytest.mark.parametrize(("version", "action", "argvs"), [
    ("slurm-wlm 22.05.8", lambda a: a.power_up(["c1"]), [["scontrol", "update", "nodename=c1", "state=POWER_UP"]]),
    ("slurm-wlm 24.11.5", lambda a: a.power_up(["c1"]), [["scontrol", "power", "up", "c1"]]),
    ("slurm-wlm 24.11.5", lambda a: a.power_down(["c1", "c2"], force=True),
     [["scontrol", "power", "down", "force", "c1,c2"]]),
    ("slurm-wlm 24.11.5", lambda a: a.power_down(["c1"]), [["scontrol", "power", "down", "asap", "c1"]]),
    # 24.11's `power down` takes no reason: a reason keeps the update form, which still carries one
    ("slurm-wlm 24.11.5", lambda a: a.power_down(["c1"], force=True, reason="spot reclaimed"),
     [["scontrol", "update", "nodename=c1", "state=POWER_DOWN_FORCE", "reason=spot reclaimed"]]),
    ("slurm-wlm 26.05.5", lambda a: a.power_down(["c1"], force=True, reason="spot reclaimed"),
     [["scontrol", "power", "down", "force", "c1", "reason=spot reclaimed"]]),
    ("slurm-wlm 24.11.5", lambda a: a.set_instance("c1", "i-0abc", "g5.xlarge"),
     [["scontrol", "update", "nodename=c1", "instanceid=i-0abc", "instancetype=g5.xlarge"]]),
    ("slurm-wlm 22.05.8", lambda a: a.set_instance("c1", "i-0abc", "g5.xlarge"), []),
    ("slurm-wlm 22.05.8", lambda a: a.requeue(7, expedite=True),
     [["scontrol", "requeue", "7"], ["squeue", "-h", "-t", "all", "-j", "7", "-O", "JobID:0|,State:0"], ["scontrol", "update", "jobid=7", "starttime=now+2"]]),
])
def test_node_and_job_actions_follow_the_live_release(fake_slurm, monkeypatch, version, action, argvs):
    monkeypatch.setenv("FAKE_VERSION", version)
    adapter = fake_slurm.adapter()
    action(adapter)
    assert _started(adapter) == argvs


@pytest.mark.parametrize(("version", "flags", "argvs"), [
    # 25.11+: a job submitted with --requeue=expedite is made eligible at once (and first) by Slurm itself
    ("slurm-wlm 26.05.5", "JOB_WAS_RUNNING,EXPEDITED_REQUEUE",
     [["scontrol", "show", "job", "7", "--json"], ["scontrol", "requeue", "7"]]),
    ("slurm-wlm 26.05.5", "JOB_WAS_RUNNING",
     [["scontrol", "show", "job", "7", "--json"], ["scontrol", "requeue", "7"],
      ["squeue", "-h", "-t", "all", "-j", "7", "-O", "JobID:0|,State:0"], ["scontrol", "update", "jobid=7", "starttime=now+2"]]),
    # before 25.11 there is no such flag to read: burstd expedites every preempted job itself
    ("slurm-wlm 24.11.5", "EXPEDITED_REQUEUE",
     [["scontrol", "requeue", "7"], ["squeue", "-h", "-t", "all", "-j", "7", "-O", "JobID:0|,State:0"], ["scontrol", "update", "jobid=7", "starttime=now+2"]]),
])
def test_expedited_requeue_is_left_to_slurm_where_the_job_asked_for_it(fake_slurm, monkeypatch, version, flags,
                                                                       argvs):
    monkeypatch.setenv("FAKE_VERSION", version)
    monkeypatch.setenv("FAKE_JOB_FLAGS", flags)
    adapter = fake_slurm.adapter()
    adapter.requeue(7, expedite=True)
    assert _started(adapter) == argvs


def test_an_expedited_requeue_moves_the_start_only_once_the_job_is_pending(fake_slurm, monkeypatch):
    """Live on 22.05 and 24.11, `update starttime=now` sent while the requeue is still under way is answered
    rc 0 and dropped: the update waits until squeue shows the job PENDING."""
    monkeypatch.setenv("FAKE_JOB_STATES", "COMPLETING,REQUEUED,PENDING")
    adapter = fake_slurm.adapter()
    adapter.requeue(7, expedite=True)
    started = _started(adapter)
    polls = [a for a in started if a[0] == "squeue"]
    assert [a[0] for a in started] == ["scontrol", "squeue", "squeue", "squeue", "scontrol"]
    assert len(polls) == 3 and started[-1] == ["scontrol", "update", "jobid=7", "starttime=now+2"]


def test_a_plain_requeue_reads_no_flags(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_VERSION", "slurm-wlm 26.05.5")
    adapter = fake_slurm.adapter()
    adapter.requeue(7)
    assert _started(adapter) == [["scontrol", "requeue", "7"]]


def test_set_instance_says_whether_slurm_recorded_it(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_VERSION", "slurm-wlm 22.05.8")
    assert fake_slurm.adapter().set_instance("c1", "i-1", "t3.micro") is False
    monkeypatch.setenv("FAKE_VERSION", "slurm-wlm 26.05.5")
    assert fake_slurm.adapter().set_instance("c1", "i-1", "t3.micro") is True


@pytest.mark.parametrize("bad", ["i-1 instancetype=x", "", "i-1;rm", "a" * 200])
def test_set_instance_refuses_odd_values_before_any_command(fake_slurm, bad):
    adapter = fake_slurm.adapter()
    with pytest.raises(ValueError):
        adapter.set_instance("c1", bad, "t3.micro")
    assert _started(adapter) == []


def test_a_jobs_batch_script_is_read_through_scontrol_write_to_stdout(fake_slurm):
    a = fake_slurm.adapter()
    with pytest.raises(SlurmError, match="no batch script"):  # the fake prints nothing, as for an unknown job
        a.batch_script(42)
    assert _started(a) == [["scontrol", "write", "batch_script", "42", "-"]]
    with pytest.raises(ValueError):
        a.batch_script(-1)  # a job id is checked before it reaches the command line
