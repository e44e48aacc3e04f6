"""Hostlist expand/compress, table-driven."""

import pytest

from burstd.domain.hostlist import HostlistError, compress, expand

EXPAND = [
    ("", []),
    ("n1", ["n1"]),
    ("c[1-4]", ["c1", "c2", "c3", "c4"]),
    ("c[1-2],n1", ["c1", "c2", "n1"]),
    ("cloud[1,3-4],onprem[01-02]", ["cloud1", "cloud3", "cloud4", "onprem01", "onprem02"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("gpu-a[08-10]", ["gpu-a08", "gpu-a09", "gpu-a10"]),
    ("a.b,c", ["a.b", "c"]),
]


@pytest.mark.parametrize("expr,names", EXPAND)
def test_expand(expr, names):
    assert expand(expr) == names


@pytest.mark.parametrize("expr", ["c[1-", "c]1[", "c[a-b]", "c[3-1]", "c[[1]]", "c[1,,2]", "c[0-2000000]"])
def test_expand_rejects_bad_expressions(expr):
    with pytest.raises(HostlistError):
        expand(expr)


COMPRESS = [
    (["n1"], "n1"),
    (["c3", "c1", "c2", "c4"], "c[1-4]"),
    (["c1", "c3", "c4", "n1"], "c[1,3-4],n1"),
    (["onprem01", "onprem02", "onprem03"], "onprem[01-03]"),
    (["login", "c1", "c1"], "c1,login"),
    (["c9", "c10", "c11"], "c[9-11]"),
]


@pytest.mark.parametrize("names,expr", COMPRESS)
def test_compress(names, expr):
    assert compress(names) == expr


@pytest.mark.parametrize("names", [["c1", "c2", "c7"], ["x01", "x02", "y5"], ["a"], ["n10", "n9", "m1"]])
def test_compress_then_expand_gives_the_same_set(names):
    assert sorted(expand(compress(names))) == sorted(set(names))


def test_a_huge_product_is_refused_before_it_is_built():
    with pytest.raises(HostlistError, match="too large"):
        expand("r[1-100000]n[1-100000]")


# --- validate=True: names from outside (the Slurm hooks, the daemon's API); was burstd.daemon.hostlist ----
VALID = [
    ("cloud[1-3,7],gpu01", ["cloud1", "cloud2", "cloud3", "cloud7", "gpu01"]),
    ("n[01-03]", ["n01", "n02", "n03"]),  # zero padding kept
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("a.b_c-d", ["a.b_c-d"]),
    ("  cloud1  ", ["cloud1"]),  # surrounding blanks trimmed
    ("c1,c1", ["c1", "c1"]),  # duplicates kept, as without validate (callers that need a set de-duplicate)
]


@pytest.mark.parametrize("expr,names", VALID)
def test_validated_expand(expr, names):
    assert expand(expr, validate=True) == names
    assert expand(expr.strip()) == names  # validation never changes what a good expression means


@pytest.mark.parametrize("expr,message", [
    ("", "empty hostlist"),
    ("   ", "empty hostlist"),
    (None, "empty hostlist"),
    ("cloud[1-", "malformed hostlist 'cloud[1-': unbalanced"),
    ("cloud1]", "unbalanced"),
    ("cloud[3-1]", "runs backwards"),
    ("cloud[[1]]", "nested"),
    ("cloud[a-b]", "bad range"),
    ("cloud1;rm -rf /", "whitespace"),
    ("cloud1\tcloud2", "whitespace"),
    ("cloud1;id", "bad name 'cloud1;id'"),
    ("cloud[1-2]$x", "bad name 'cloud1$x'"),
    ("-rf", "bad name '-rf'"),
    ("../etc", "bad name '../etc'"),
    ("x" * 65, "bad name"),
    ("c" * 70_000, "too long"),
    ("c[1-100001]", "too large"),
    ("c[1-60000],d[1-60000]", "too large"),
])
def test_validated_expand_refuses_and_names_the_bad_part(expr, message):
    with pytest.raises(HostlistError) as err:
        expand(expr, validate=True)
    assert message in str(err.value)


def test_without_validate_empty_is_no_hosts_and_names_are_not_judged():
    assert expand("") == [] and expand(None) == []
    assert expand("cloud1;id") == ["cloud1;id"]
    assert len(expand("c[1-100001]")) == 100_001


def test_hooks_import_only_the_standard_library():
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = ("import json, sys, burstd.daemon.hooks; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pydantic', 'httpx', 'fastapi', 'sqlmodel', 'boto3', 'burstd'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[3]).stdout
    assert json.loads(out) == ["burstd", "burstd.daemon", "burstd.daemon.client", "burstd.daemon.hooks",
                               "burstd.domain", "burstd.domain.hostlist"]
