"""Hostlist expand/compress, table-driven."""

import pytest

from burstd.slurm.hostlist import HostlistError, compress, expand

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
