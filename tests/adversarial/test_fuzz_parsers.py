"""Standing adversarial suite: every parser of outside input, fed hostile input by hypothesis.

The rule for each: it returns a result, or raises the one documented error type of its module (with a
message); never another exception, never a hang. Seeds come from the captured Slurm output in
tests/data (slurm-fixtures: 24.11 and 26.05; slurm-22.05). Budgets are bounded (``EXAMPLES`` a test) so CI
stays fast; ``BURSTD_FUZZ_EXAMPLES`` raises them for a longer local run.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.agent.watchers import AwsImdsWatcher, GcpMetadataWatcher, WatchError
from burstd.config import ConfigError, load_config
from burstd.domain.preemption import preemption_reason
from burstd.simulate.traces import TraceError, read_trace
from burstd.slurm import parse, squeue_text
from burstd.slurm.base import SlurmError, check_reason
from burstd.domain.hostlist import HostlistError, expand
from tests.conftest import FIXTURES

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                               HealthCheck.data_too_large])
DATA = Path(__file__).resolve().parents[1] / "data" / "slurm-22.05"
SACCT_JSON = Path(__file__).resolve().parents[1] / "data" / "slurm-22.05-bed" / "sacct" / "sacct_json.json"
SEED_DOCS = sorted(
    [p for p in FIXTURES.rglob("*.json") if "openapi" not in p.name and "config" not in p.parts]
    + [p for p in DATA.glob("*.json")]
)

json_scalar = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                        st.floats(allow_nan=False), st.text(max_size=30))
json_value = st.recursive(json_scalar, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                              st.dictionaries(st.text(max_size=8), kids, max_size=4)),
                          max_leaves=12)


def _paths(doc, prefix=()):
    """Every (container, key) in a JSON document, to pick mutation points from."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _mutate(doc, data) -> dict:
    doc = copy.deepcopy(doc)
    paths = list(_paths(doc))
    for _ in range(data.draw(st.integers(1, 4))):
        if not paths:
            break
        path = data.draw(st.sampled_from(paths))
        target = doc
        for key in path[:-1]:
            target = target[key]
        if data.draw(st.booleans()):
            target[path[-1]] = data.draw(json_value)
        elif isinstance(target, dict):
            target.pop(path[-1], None)
        paths = list(_paths(doc))
    return doc


@pytest.fixture(scope="module")
def seeds():
    return [(p.name, json.loads(p.read_text())) for p in SEED_DOCS]


def test_the_seed_corpus_is_there():
    assert len(SEED_DOCS) >= 30  # 22.05 bed captures, 24.11 and 26.05 fixtures: CLI and slurmrestd


@FUZZ
@given(st.data())
def test_slurm_json_documents_parse_or_raise_slurm_error(seeds, data):
    """squeue/sinfo/scontrol --json and slurmrestd documents, each mutated at a few points."""
    name, doc = data.draw(st.sampled_from(seeds))
    bad = _mutate(doc, data)
    try:
        snap = parse.snapshot_from_docs([(name, bad)], taken_at=0.0, source="fuzz", active_only=False)
    except SlurmError as exc:
        assert name in str(exc)
        return
    assert all(isinstance(j.job_id, int) for j in snap.jobs)
    # the adapters' direct entry points (cli backend) obey the same rule
    for fn in (parse.jobs_from_doc, parse.nodes_from_doc, parse.partitions_from_doc):
        try:
            fn(bad)
        except SlurmError:
            pass


@FUZZ
@given(st.binary(max_size=400))
def test_load_json_takes_any_bytes(raw):
    try:
        assert isinstance(parse.load_json(raw, "fuzz"), dict)
    except SlurmError as exc:
        assert "fuzz" in str(exc)


text_lines = st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=60), max_size=6).map("\n".join)


@FUZZ
@given(st.one_of(text_lines, st.builds(lambda kv: " ".join(f"{k}={v}" for k, v in kv.items()),
                                       st.dictionaries(st.sampled_from(["PartitionName", "Nodes", "State", "MaxTime",
                                                                        "Default", "TotalCPUs", "TotalNodes"]),
                                                       st.text(max_size=12).filter(lambda s: " " not in s)))))
def test_scontrol_partition_text_parses_or_raises_slurm_error(text):
    try:
        parse.partitions_from_scontrol_text(text)
    except SlurmError:
        pass


@FUZZ
@given(st.text(max_size=300), st.sampled_from(["", "0123456789abcdef"]))
def test_squeue_text_parses_or_asks_for_json(text, nonce):
    try:
        squeue_text.jobs_from_squeue_text(text, nonce=nonce)
    except squeue_text.TextParseError:
        pass


@FUZZ
@given(st.one_of(st.text(max_size=300), st.lists(st.tuples(st.text("0123456789x", max_size=12), st.text(max_size=30))
                                                 .map(lambda t: "|".join(t)), max_size=8).map("\n".join)))
def test_squeue_exclusions_parse_or_ask_for_json(text):
    """22.05's ``squeue -o %A|%x`` after the text snapshot: {job id: hostlist}, or TextParseError (the adapter
    then reads squeue --json for that snapshot); every id a real job id, never another exception."""
    try:
        out = squeue_text.exclusions_from_text(text)
    except squeue_text.TextParseError:
        return
    assert all(isinstance(k, int) and 0 < k < 2**32 and v for k, v in out.items())


hostlist_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="cloud0123456789[]-,^%x", max_size=40),
    st.builds(lambda a, b: f"cloud[{a}-{b}]", st.integers(-5, 10**12), st.integers(-5, 10**12)),
)


@FUZZ
@given(hostlist_text)
def test_hostlists_expand_bounded_or_raise_hostlist_error(expr):
    try:
        names = expand(expr, validate=True)
    except HostlistError:
        return
    assert len(names) <= 100_000 and all(names)


@FUZZ
@given(st.one_of(st.binary(max_size=300), json_value.map(lambda v: json.dumps(v).encode()),
                 st.builds(lambda jobs: json.dumps({"jobs": jobs}).encode(), st.lists(json_value, max_size=3))))
def test_slurm_resume_file_reads_or_raises_value_error(tmp_path_factory, raw):
    from burstd.daemon.hooks import _resume_jobs

    path = tmp_path_factory.mktemp("rf") / "resume.json"
    path.write_bytes(raw)
    os.environ["SLURM_RESUME_FILE"] = str(path)
    try:
        jobs = _resume_jobs()
    except ValueError as exc:
        assert "SLURM_RESUME_FILE" in str(exc)
        return
    finally:
        del os.environ["SLURM_RESUME_FILE"]
    assert all(isinstance(j["job_id"], int) and isinstance(j["nodes"], str) for j in jobs)


# a resume file as an attacker (a user's job name, a broken Slurm, a planted file) could shape it: ids of
# every JSON type, the non-JSON constants Python's json reads by default, nesting thousands deep
id_value = st.one_of(st.integers(-(2**40), 2**40), st.floats(), st.booleans(), st.text(max_size=6), st.none(),
                     st.sampled_from(["Infinity", "-Infinity", "NaN", "1e999", "1.9", "true", "9" * 5000]))
resume_job = st.fixed_dictionaries({"job_id": id_value}, optional={
    "nodes_alloc": st.one_of(st.text(alphabet="cloud0123456789[]-,", max_size=20), id_value),
    "nodes": st.one_of(st.text(max_size=10), id_value), "priority": id_value, "exclusive": id_value})
_CONSTANTS = {"Infinity", "-Infinity", "NaN", "1e999", "1.9", "true", "9" * 5000}


def _resume_bytes(jobs: list) -> bytes:
    # the id strings above stand for raw JSON tokens: written unquoted, as a hostile file would have them
    text = json.dumps({"jobs": jobs})
    for c in _CONSTANTS:
        text = text.replace(json.dumps(c), c)
    return text.encode()


hostile_resume_file = st.one_of(
    st.lists(resume_job, max_size=4).map(_resume_bytes),
    st.builds(lambda depth, opener: (b'{"jobs": ' + opener * depth + (b"]" if opener == b"[" else b"}") * depth
                                     + b"}"), st.integers(1, 200_000), st.sampled_from([b"[", b'{"a":'])),
    st.binary(max_size=200),
    json_value.map(lambda v: json.dumps({"jobs": v}).encode()),
)


@FUZZ
@given(hostile_resume_file)
def test_the_resume_file_parser_gives_strict_ids_or_one_line_value_error(raw):
    from burstd.daemon.hooks import MAX_ID, parse_resume_file

    try:
        jobs = parse_resume_file(raw)
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    for j in jobs:  # never a coerced id: an int, in range, never a bool
        assert type(j["job_id"]) is int and 1 <= j["job_id"] <= MAX_ID
        assert isinstance(j["nodes"], str)
        assert "priority" not in j or (type(j["priority"]) is int and 0 <= j["priority"] <= MAX_ID)
        assert "exclusive" not in j or isinstance(j["exclusive"], str)


@FUZZ
@given(hostile_resume_file)
def test_the_resume_hook_exits_2_or_3_with_one_line_on_any_resume_file(tmp_path_factory, raw):
    """The hook's contract, whole: no traceback, no exit 1; 2 for a bad file, 3 when no daemon answers."""
    import contextlib
    import io

    from burstd.daemon.hooks import run

    folder = tmp_path_factory.mktemp("hook")
    (folder / "resume.json").write_bytes(raw)
    (folder / "burstd.toml").write_text(f'[api]\nsocket = "{folder}/absent.sock"\n[daemon]\nhook_timeout_s = 0.2\n')
    saved = {k: os.environ.get(k) for k in ("SLURM_RESUME_FILE", "BURSTD_CONFIG", "BURSTD_SOCKET")}
    os.environ.update(SLURM_RESUME_FILE=str(folder / "resume.json"), BURSTD_CONFIG=str(folder / "burstd.toml"))
    os.environ.pop("BURSTD_SOCKET", None)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = run(["resume", "cloud1"])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    lines = err.getvalue().splitlines()
    assert code in (2, 3) and len(lines) == 1 and lines[0].startswith("burstd-hook: resume")


swf_line = st.lists(st.one_of(st.integers(-10, 10**6).map(str), st.sampled_from(["1e300", "nan", "-inf", "x", "1.5"])),
                    min_size=16, max_size=19).map(" ".join)


@FUZZ
@given(st.sampled_from(["swf", "philly", "sacct"]),
       st.one_of(st.lists(swf_line, max_size=5).map("\n".join), text_lines, st.binary(max_size=200)))
def test_traces_read_or_raise_trace_error(tmp_path_factory, fmt, body):
    path = tmp_path_factory.mktemp("tr") / f"t.{fmt}"
    if isinstance(body, bytes):
        path.write_bytes(body)
    else:
        path.write_text(body)
    try:
        jobs, _info = read_trace(path, format=fmt)
    except TraceError as exc:
        assert str(path) in str(exc)
        return
    assert jobs and all(0 < j.cpus <= 10_000_000 for j in jobs)


toml_value = st.recursive(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=20), st.booleans()),
    lambda kids: st.lists(kids, max_size=3), max_leaves=6)


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if v != v else ("inf" if v == float("inf") else "-inf" if v == float("-inf") else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return str(v)


SECTIONS = {"daemon": ["cycle_interval_s", "hook_timeout_s", "metrics_address", "state_dir", "launch_timeout_s"],
            "api": ["socket", "tcp_listen", "max_body_bytes", "hook_users", "token_file"],
            "database": ["url"], "budget": ["site_usd", "accrual_interval_s", "period"],
            "policy": ["min_priority", "burst_reasons", "prewarm_nodes"], "slurm": ["command_timeout_s", "backend"]}


@FUZZ
@given(st.one_of(
    st.dictionaries(st.sampled_from(sorted(SECTIONS)), st.just(None), min_size=1).flatmap(
        lambda secs: st.fixed_dictionaries({s: st.dictionaries(st.sampled_from(SECTIONS[s]), toml_value, max_size=3)
                                            for s in secs})).map(
        lambda d: "".join(f"[{s}]\n" + "".join(f"{k} = {_toml(v)}\n" for k, v in kv.items()) for s, kv in d.items())),
    st.text(max_size=200),
    st.integers(1, 2000).map(lambda n: "x = " + "[" * n + "]" * n + "\n"),
))
def test_toml_config_loads_or_raises_config_error(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("cfg") / "burstd.toml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as exc:
        assert str(path) in str(exc)


iso_time = st.one_of(st.text(max_size=30), st.sampled_from(["2026-11-23T22:00:00Z", "9999-12-31T23:59:59Z",
                                                            "0001-01-01T00:00:00+14:00", "2026-11-23T22:00:00"]))
imds_body = st.one_of(
    st.text(max_size=200), json_value.map(json.dumps),
    st.fixed_dictionaries({"action": st.one_of(st.text(max_size=30), st.sampled_from(["terminate", "stop"])),
                           "time": iso_time}).map(json.dumps),
    st.fixed_dictionaries({"noticeTime": iso_time}).map(json.dumps),
)


@FUZZ
@given(imds_body, st.sampled_from([200, 404, 500]), imds_body, st.sampled_from([200, 404]))
def test_metadata_answers_give_a_notice_slurm_accepts_or_a_watch_error(action, action_status, rebalance,
                                                                       rebalance_status):
    """An IMDS answer (from a cloud, or from root on a compromised node) never yields a drain reason Slurm would
    refuse, and never anything but WatchError."""

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "PUT":
            return httpx.Response(200, text="tok")
        if request.url.path.endswith("instance-action"):
            return httpx.Response(action_status, text=action)
        return httpx.Response(rebalance_status, text=rebalance)

    watcher = AwsImdsWatcher("http://169.254.169.254", client=httpx.Client(transport=httpx.MockTransport(answer)),
                             retries=0)
    try:
        notices = watcher.poll()
    except WatchError:
        return
    for n in notices:
        check_reason(preemption_reason(n))


gcp_answer = st.tuples(
    st.sampled_from([200, 200, 200, 304, 403, 404, 500, 503]),
    st.one_of(st.sampled_from(["TRUE", "FALSE", "true\n", " TRUE ", ""]), st.text(max_size=80),
              st.binary(max_size=80).map(lambda b: b.decode("latin-1"))),
    st.one_of(st.none(), st.binary(max_size=60).filter(lambda b: b"\r" not in b and b"\n" not in b)),
)


@FUZZ
@given(st.lists(gcp_answer, min_size=1, max_size=4), st.floats(0, 600))
def test_gcp_metadata_answers_give_a_notice_slurm_accepts_or_a_watch_error(answers, notice_s):
    """GCP's ``instance/preempted`` answers (any status, body and ETag, from a cloud or from root on a
    compromised node), polled in turn: each poll gives notices whose drain reason Slurm accepts, or WatchError;
    the next long poll still goes out whatever ETag came back."""
    pending = list(answers)

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["Metadata-Flavor"] == "Google"
        status, body, etag = pending.pop(0)
        return httpx.Response(status, text=body, headers=[] if etag is None else [(b"ETag", etag)])

    watcher = GcpMetadataWatcher("http://metadata.google.internal", notice_s=notice_s, retries=0,
                                 client=httpx.Client(transport=httpx.MockTransport(answer)),
                                 clock=lambda: 1_900_000_000.0)
    while pending:
        try:
            notices = watcher.poll()
        except WatchError:
            continue
        for n in notices:
            check_reason(preemption_reason(n))
            assert n.deadline == float(int(1_900_000_000.0 + notice_s))


# Numbers as a hostile or broken Slurm prints them: infinities, NaN, thousands of digits, non-ASCII digits,
# Slurm's own sentinels, units.
hostile_number = st.builds(
    lambda n, unit: n + unit,
    st.one_of(
        st.sampled_from(["inf", "-inf", "nan", "Infinity", "1e400", "-1e400", "1e308", "\u00b2", "\u0663",
                         "1_000", "0x10", " 7 ", "", "N/A", "(null)", "UNLIMITED", "4294967294",
                         "18446744073709551614", "-1", "0", "1.5", "1-", "1-2-3", ":", "1::"]),
        st.integers(1, 6000).map(lambda n: "9" * n),
        st.integers(-(2**80), 2**80).map(str),
        st.floats().map(repr),
    ),
    st.sampled_from(["", "", "K", "M", "G", "T", "P", "x", ":1", "-1:00:00", "(S:0-1)"]),
)
big_int = st.integers(-(2**80), 2**80)
hostile_scalar = st.one_of(hostile_number, st.floats(), big_int,
                           st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(),
                                                  "number": st.one_of(st.floats(), big_int)}))


@FUZZ
@given(hostile_scalar, hostile_number, st.one_of(st.none(), st.lists(hostile_number, max_size=3)))
def test_slurm_numbers_and_node_fields_read_or_raise_value_error(value, textual, flags):
    """The scalar readers under every Slurm listing (numbers, times, memory, time limits, GRES, node states,
    ``key=value`` lines, release strings): a number or None, or ValueError where the doc says so."""
    from burstd.slurm.features import parse_release

    n = parse.num(value)
    assert n is None or isinstance(n, int)
    t = parse.time_or_none(value)
    assert t is None or 0 < t < 4_102_444_800
    mb = parse.parse_memory_mb(textual)
    assert mb is None or (isinstance(mb, int) and mb > 0)
    for reader in (parse.parse_time_limit, parse.parse_gres, parse_release):
        try:
            reader(textual)
        except ValueError:
            pass
    base, node_flags = parse.split_node_state(textual, flags)
    assert isinstance(base, str) and all(isinstance(f, str) for f in node_flags)
    assert isinstance(parse.parse_kv_line(f"NodeName=x CPUTot={textual} RealMemory={textual}"), dict)


NODE_SEEDS = [p for p in SEED_DOCS if "node" in p.name or p.name.startswith("sinfo")]


def _leaves(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _leaves(v, prefix + (i,))
    else:
        yield prefix


@FUZZ
@given(st.data())
def test_sinfo_and_scontrol_node_listings_with_hostile_values_read_or_raise_slurm_error(data):
    """sinfo --json (per-node and grouped), scontrol show nodes --json and slurmrestd /nodes, with numbers and
    states replaced by hostile ones (a JSON ``1e400`` reads as infinity): nodes, or SlurmError, nothing
    else."""
    path = data.draw(st.sampled_from(NODE_SEEDS))
    doc = json.loads(path.read_text())
    leaves = list(_leaves(doc))
    for _ in range(data.draw(st.integers(1, 6))):
        where = data.draw(st.sampled_from(leaves))
        target = doc
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = data.draw(st.one_of(hostile_scalar, json_value))
    try:
        nodes = parse.nodes_from_doc(doc)
        parse.partitions_from_doc(doc)
    except SlurmError as exc:
        assert "malformed Slurm" in str(exc)
        return
    assert all(isinstance(n.name, str) and isinstance(n.cpus, int) and isinstance(n.memory_mb, int)
               for n in nodes)


@FUZZ
@given(st.dictionaries(st.sampled_from(["PartitionName", "Nodes", "State", "MaxTime", "Default", "TotalCPUs",
                                        "TotalNodes"]),
                       hostile_number.filter(lambda s: " " not in s), min_size=1))
def test_scontrol_partition_text_with_hostile_numbers_parses_or_raises_slurm_error(kv):
    try:
        parts = parse.partitions_from_scontrol_text(" ".join(f"{k}={v}" for k, v in kv.items()))
    except SlurmError as exc:
        assert "MaxTime" in str(exc)
        return
    assert all(isinstance(p.total_cpus, int) and isinstance(p.total_nodes, int) for p in parts)


SQUEUE_BASE = dict(
    JobID="42", ArrayJobID="42", ArrayTaskID="N/A", HetJobID="N/A", HetJobOffset="N/A", UserName="alice",
    Account="physics", Partition="onprem", QOS="normal", PriorityLong="1000", SubmitTime="1795301514",
    EligibleTime="1795301514", StartTime="N/A", EndTime="N/A", TimeLimit="1:00:00", NodeList="",
    NumNodes="1", NumCPUs="4", MinMemory="1G", **{"tres-alloc": "cpu=4,mem=1G,node=1"},
    **{"tres-per-node": "gres/gpu:1", "tres-per-job": "N/A"}, Feature="x86", State="PENDING",
    Reason="Resources", RestartCnt="0", Comment="hello", Name="train", Deadline="N/A", ReqNodes="",
    Reservation="(null)", ExcNodes="",
)


@FUZZ
@given(st.dictionaries(st.sampled_from(squeue_text.SQUEUE_TEXT_FIELDS),
                       st.one_of(hostile_number, hostile_number.map(lambda v: f"mem={v},cpu={v}")),
                       min_size=1, max_size=5))
def test_squeue_text_records_with_hostile_numbers_parse_or_ask_for_json(over):
    """A record that splits cleanly but whose numbers are hostile (the fast squeue path): a Job, or
    TextParseError so the adapter reads squeue --json instead; never another exception."""
    nonce = "0123456789abcdef"
    values = {**SQUEUE_BASE, **over}
    record = squeue_text.FIELD_SEP.join(values[f] for f in squeue_text.SQUEUE_TEXT_FIELDS)
    out = record + squeue_text.RECORD_END
    try:
        jobs = squeue_text.jobs_from_squeue_text(out + nonce + "\n", nonce=nonce)
    except squeue_text.TextParseError:
        return
    assert len(jobs) == 1 and 0 < jobs[0].job_id < 2**32
    assert jobs[0].deadline is None or 0 < jobs[0].deadline < 4_102_444_800


@FUZZ
@given(hostile_scalar)
def test_a_job_records_deadline_reads_as_a_time_or_none(value):
    """``sbatch --deadline`` as any release could print it, or garbage: a time Slurm can hold, or None."""
    rec = {"job_id": 7, "job_state": ["PENDING"], "deadline": value}
    deadline = parse.job_from_json(rec).deadline
    assert deadline is None or (isinstance(deadline, int) and 0 < deadline < 4_102_444_800)


sacct_field = st.one_of(hostile_number, st.text(max_size=12))
SACCT_DELIMITER = "|0123456789abcdef|"  # what the adapter makes fresh for each call (sacct.new_delimiter)


@FUZZ
@given(st.lists(st.lists(sacct_field, min_size=6, max_size=8).map(SACCT_DELIMITER.join), max_size=5).map("\n".join))
def test_sacct_text_reads_or_raises_slurm_error(out):
    """Whatever ``sacct -P`` prints (fields of any text and number, any count of them): checked rows, or a
    SlurmError; never another exception, and never a row with an id Slurm could not have."""
    from burstd.slurm import sacct

    try:
        rows = sacct.jobs_from_text(out, SACCT_DELIMITER)
    except SlurmError:
        return
    assert all(0 < r.job_id < 2**32 and (r.start is None or r.start >= 0) for r in rows)
    assert len(rows) <= out.count("\n") + 1


# Free text as a user can store it in slurmdbd (an account string, where associations are not enforced): any
# character but NUL, with record and field separators weighted in.
sacct_free_text = st.lists(st.one_of(st.sampled_from(["\n", "|", "\r", "||", "\n1|a|u|cloud1|COMPLETED|1|2\n"]),
                                     st.characters(blacklist_characters="\x00")), max_size=12).map("".join)


@FUZZ
@given(st.lists(st.tuples(st.integers(1, 2**32 - 1), sacct_free_text, sacct_free_text,
                          st.sampled_from(["", "onprem1", "cloud[1-3]", "cloud2,onprem[1-2]"]),
                          st.sampled_from(["COMPLETED", "REQUEUED", "CANCELLED by 1001", "PENDING"])),
                max_size=6))
def test_sacct_free_text_never_changes_another_record(records):
    """Issue 21 item 5: rows printed with the call's delimiter read back exactly, whatever their account and user
    hold: the same jobs, in order, on their own nodes (no job invented, hidden or moved)."""
    from burstd.slurm import sacct
    from burstd.domain.hostlist import expand

    out = "".join(SACCT_DELIMITER.join([str(jid), acct, user, nodes or "None assigned", state, "100", "Unknown"])
                  + "\n" for jid, acct, user, nodes, state in records)
    rows = sacct.jobs_from_text(out, SACCT_DELIMITER)
    assert [(r.job_id, r.account, r.user, r.nodes, r.state) for r in rows] == [
        (jid, acct, user, tuple(expand(nodes)) if nodes else (), state.split()[0])
        for jid, acct, user, nodes, state in records]


@FUZZ
@given(st.data())
def test_sacct_json_reads_or_raises_slurm_error(data):
    """``sacct --json`` as captured on the 22.05 bed, mutated at a few points: rows, or SlurmError."""
    from burstd.slurm import sacct

    doc = _mutate(json.loads(SACCT_JSON.read_text()), data)
    try:
        rows = sacct.jobs_from_json(doc)
    except SlurmError:
        return
    assert all(0 < r.job_id < 2**32 and isinstance(r.account, str) for r in rows)


@FUZZ
@given(st.text(max_size=300))
def test_sacct_and_sacctmgr_output_through_the_adapter_reads_or_raises_slurm_error(out):
    """The adapter's own path: whatever sacct prints for ``--json`` (then for ``-P``) and sacctmgr for the
    account list gives rows or SlurmError."""
    from burstd.slurm.accounting import AccountingMixin

    class Printed(AccountingMixin):
        _accounting = True

        def run(self, cmd, args, env=None):  # the printed text stands in for sacct / sacctmgr: this test reads it
            return out

    try:
        jobs = Printed().sacct_jobs(0.0)
    except SlurmError:
        jobs = []
    assert all(0 < j.job_id < 2**32 for j in jobs)
    assert isinstance(Printed().accounts(), set)


@FUZZ
@given(st.one_of(st.text(max_size=300), json_value.map(json.dumps),
                 st.fixed_dictionaries({"lease": json_value, "jobs": json_value, "since": json_value,
                                        "expedite": json_value}).map(json.dumps)))
def test_an_owed_requeue_record_decodes_or_raises_value_error(text):
    """The daemon's owed-requeue record (``daemon.requeue_record``) as read back from the database."""
    from burstd.daemon.requeue_record import decode

    try:
        owed = decode(text)
    except ValueError as exc:
        assert str(exc)
        return
    assert owed.lease_id and all(j > 0 for j in owed.job_ids)


@FUZZ
@given(st.one_of(st.text(max_size=300),
                 st.lists(st.tuples(st.text(max_size=12), st.text(max_size=12)), max_size=8).map(
                     lambda rows: "\n".join(f"{u}|{a}" for u, a in rows))))
def test_sacctmgr_associations_parse_to_clean_pairs_only(text):
    """slurmdbd's associations decide whose budget a job may spend (issue 21 item 2): any output gives pairs of
    one-word fields, each a whole line of the output, so no line can grant a pair it does not spell out."""
    from burstd.slurm.accounting import parse_associations

    pairs = parse_associations(text)
    lines = {line.strip() for line in text.splitlines()}
    for user, account in pairs:
        assert account and "|" not in user + account and not any(c.isspace() for c in user + account)
        assert f"{user}|{account}" in lines
