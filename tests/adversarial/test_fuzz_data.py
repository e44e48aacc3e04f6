"""Adversarial inputs to burstd.data's parsers of outside input (a manifest from the store, an output name).

Each returns a result or raises its module's documented error (ManifestError, ValueError), never another
exception; a manifest that parses never names a path outside its destination.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.data.manifest import Manifest, ManifestError, destination, parse_manifest
from burstd.data.objectstore import output_key

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROOT = Path("/dest/root")

path_text = st.one_of(st.text(max_size=20), st.lists(st.sampled_from(["a", "..", ".", "", "/", "b\\c", "\x00"]),
                                                     max_size=4).map("/".join))
entry = st.fixed_dictionaries({"path": st.one_of(path_text, st.integers(), st.none()),
                               "size": st.one_of(st.integers(-5, 2**70), st.booleans(), st.text(max_size=3)),
                               "sha256": st.one_of(st.just("a" * 64), st.text(max_size=70))})
doc = st.fixed_dictionaries({"version": st.sampled_from([1, 1, 2, "1"]),
                             "single_file": st.sampled_from([False, True, 0]),
                             "files": st.one_of(st.lists(entry, max_size=4), st.text(max_size=4))})


def _inside(manifest: Manifest) -> None:
    for e in manifest.files:
        target = os.path.normpath(destination(ROOT, manifest, e))
        assert target == str(ROOT) or target.startswith(str(ROOT) + "/")


@FUZZ
@given(doc)
def test_a_manifest_document_parses_inside_its_destination_or_raises_manifest_error(d):
    try:
        m = parse_manifest(json.dumps(d).encode())
    except ManifestError:
        return
    _inside(m)


@FUZZ
@given(st.binary(max_size=300))
def test_manifest_bytes_parse_or_raise_manifest_error(raw):
    try:
        m = parse_manifest(raw)
    except ManifestError:
        return
    _inside(m)


@FUZZ
@given(st.text(max_size=40), st.text(max_size=40))
def test_an_output_name_is_one_key_segment_or_value_error(job, label):
    try:
        key = output_key(job, label)
    except ValueError:
        return
    assert key.count("/") == 2 and ".." not in key.split("/")
