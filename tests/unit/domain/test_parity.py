"""The parity gate's comparison: what a node lacks or has differently is named; what it adds, or the site allows,
is not; hardware facts count only where both sides have them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstd.domain.parity import WHERE_PRESENT, Difference, compare, label, rank, reason, reason_of

REFERENCE = {
    "slurm.release": "22.05.8",
    "munge.version": "0.5.15",
    "os.release": "Debian GNU/Linux 12 (bookworm)",
    "python.version": "3.11.2",
    "python.package.numpy": "1.26.4",
    "torch.version": "2.5.1+cpu",
    "slurm.plugin.auth_munge": "present",
    "gpu.model": "NVIDIA A100-SXM4-80GB",
    "cuda.driver": "535.104.05",
    "check.lustre": "2.15.4",
}

keys = st.sampled_from([*REFERENCE, "python.package.scipy", "slurm.plugin.auth_jwt", "check.kernel", "slurm.gres"])
values = st.text(alphabet="0123456789.abc+", min_size=1, max_size=8)
fingerprints = st.dictionaries(keys, values, max_size=12)


def test_slurm_release_difference_reads_as_the_issue_says():
    node = dict(REFERENCE, **{"slurm.release": "24.11.5"})
    assert [d.message for d in compare(REFERENCE, node)] == ["slurmd 24.11.5 on the node, 22.05.8 on-prem"]


@pytest.mark.parametrize(("key", "node_value", "message"), [
    ("munge.version", None, "munge missing on the node, 0.5.15 on-prem"),
    ("python.package.numpy", "2.0.0", "Python package numpy 2.0.0 on the node, 1.26.4 on-prem"),
    ("torch.version", None, "torch missing on the node, 2.5.1+cpu on-prem"),
    ("slurm.plugin.auth_munge", None, "Slurm plugin auth_munge missing on the node, present on-prem"),
    ("check.lustre", "exit 127", "site check lustre exit 127 on the node, 2.15.4 on-prem"),
    ("os.release", "Debian GNU/Linux 13 (trixie)",
     "OS Debian GNU/Linux 13 (trixie) on the node, Debian GNU/Linux 12 (bookworm) on-prem"),
    ("gpu.model", "Tesla T4", "GPU Tesla T4 on the node, NVIDIA A100-SXM4-80GB on-prem"),
])
def test_each_kind_of_fact_is_named_in_words(key, node_value, message):
    node = dict(REFERENCE)
    if node_value is None:
        del node[key]
    else:
        node[key] = node_value
    assert compare(REFERENCE, node) == [Difference(key, REFERENCE[key], node_value)]
    assert compare(REFERENCE, node)[0].message == message


def test_hardware_missing_on_the_node_is_no_difference_but_another_model_is():
    cpu_node = {k: v for k, v in REFERENCE.items() if k not in WHERE_PRESENT}
    assert compare(REFERENCE, cpu_node) == []
    other = dict(REFERENCE, **{"cuda.driver": "550.54.15"})
    assert [d.key for d in compare(REFERENCE, other)] == ["cuda.driver"]


def test_allowed_patterns_silence_only_the_keys_they_match():
    node = dict(REFERENCE, **{"python.package.numpy": "2.0.0", "slurm.release": "22.05.9"})
    assert [d.key for d in compare(REFERENCE, node, ["python.package.*"])] == ["slurm.release"]
    assert compare(REFERENCE, node, ["python.package.*", "slurm.release"]) == []
    assert len(compare(REFERENCE, node, ["python.package.scipy"])) == 2


def test_reason_names_the_differences_that_fit_and_counts_the_rest():
    node = {"slurm.release": "24.11.5"}  # lacks everything else
    diffs = compare(REFERENCE, node)
    text = reason(diffs, max_len=120)
    assert text.startswith("parity: ") and len(text) <= 120
    shown = text.count(" on-prem")
    assert shown >= 1 and text.endswith(f"; and {len(diffs) - shown} more")
    assert reason(compare(REFERENCE, dict(REFERENCE, **node))) == "parity: slurmd 24.11.5 on the node, 22.05.8 on-prem"


@given(st.lists(st.text(alphabet="abc xyz.0123", min_size=1, max_size=300), max_size=20),
       st.integers(min_value=60, max_value=400))
def test_reason_always_fits_and_names_at_least_the_first_difference(messages, max_len):
    text = reason_of(messages, max_len)
    assert len(text) <= max_len and text.startswith("parity: ")
    if messages:
        assert messages[0][:5] in text


def test_the_root_causes_come_first_so_a_short_reason_names_them():
    """A 24.11 image against 22.05 on-prem also lacks dozens of plugins; the reason must lead with slurmd."""
    ref = dict(REFERENCE, **{f"slurm.plugin.p{i:02d}": "present" for i in range(40)})
    node = {k: v for k, v in REFERENCE.items() if k != "python.package.numpy"}
    node.update({"slurm.release": "24.11.5", "munge.version": "0.5.16"})
    diffs = compare(ref, node)
    assert [d.key for d in diffs[:3]] == ["slurm.release", "munge.version", "python.package.numpy"]
    assert reason(diffs).startswith("parity: slurmd 24.11.5 on the node, 22.05.8 on-prem; munge 0.5.16 on the node")


def test_unknown_keys_are_labelled_by_themselves():
    assert label("some.new.fact") == "some.new.fact"
    assert label("slurm.release") == "slurmd"


@given(fingerprints)
def test_a_fingerprint_matches_itself(fp):
    assert compare(fp, fp) == []


@given(fingerprints, fingerprints)
def test_allowing_every_key_silences_every_difference(ref, node):
    assert compare(ref, node, ["*"]) == []


@given(fingerprints, fingerprints)
def test_every_difference_is_a_reference_fact_the_node_does_not_match(ref, node):
    diffs = compare(ref, node)
    assert [d.key for d in diffs] == sorted((d.key for d in diffs), key=rank)
    for d in diffs:
        assert d.reference == ref[d.key] and d.node == node.get(d.key) and d.node != d.reference
        assert not (d.node is None and d.key in WHERE_PRESENT)
    # and every software fact the node does not match is among them
    expected = {k for k, v in ref.items() if node.get(k) != v and not (k in WHERE_PRESENT and k not in node)}
    assert {d.key for d in diffs} == expected


@given(fingerprints, fingerprints, fingerprints)
def test_what_the_node_adds_beyond_the_reference_is_never_a_difference(ref, node, extra):
    extra = {k: v for k, v in extra.items() if k not in ref}
    assert compare(ref, {**node, **extra}) == compare(ref, node)


@given(fingerprints, st.data())
def test_changing_one_fact_makes_exactly_that_difference(ref, data):
    if not ref:
        return
    key = data.draw(st.sampled_from(sorted(ref)))
    node = dict(ref, **{key: ref[key] + "-drift"})
    assert compare(ref, node) == [Difference(key, ref[key], ref[key] + "-drift")]
    assert compare(ref, node, [key]) == []
