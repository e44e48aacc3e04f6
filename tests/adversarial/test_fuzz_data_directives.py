"""Fuzz target for the batch-script data directive parser (burstd.domain.data_directives): any script text
gives a DataNeeds whose paths are absolute, normalised and free of control characters and '..', or one
DataDirectiveError naming the line; declarations written the documented way read back exactly."""

from __future__ import annotations

import os
import posixpath
import shlex

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from burstd.domain.data_directives import DataDirectiveError, parse_data_directives

EXAMPLES = int(os.environ.get("BURSTD_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

words = st.sampled_from(["#BURSTD", "#DW", "#BB", "#BB_LUA", "#SBATCH", "#", "stage-in", "stage-out", "stage_in",
                         "stage_out", "data-never-leaves", "size=", "sha256=", "source=", "destination=", "type=",
                         "file", "directory", "/", "/data", "..", "../x", "'", '"', "\\", "180GB", "1.5TiB", "=",
                         "\x00", "\n", "\t", " ", "echo", "#!/bin/bash", "ab" * 32, "9" * 25, "/a//b/./c"])
hostile_line = st.lists(st.one_of(words, st.text(max_size=12)), max_size=8).map(" ".join)
hostile_script = st.lists(hostile_line, max_size=12).map("\n".join)


@FUZZ
@given(hostile_script)
def test_any_script_parses_to_safe_paths_or_one_directive_error(script):
    try:
        needs = parse_data_directives(script, source="job 7")
    except DataDirectiveError as exc:
        assert str(exc).startswith("job 7") and "\n" not in str(exc).replace(script, "")
        return
    for item in (*needs.inputs, *needs.outputs):
        assert item.path.startswith("/") and posixpath.normpath(item.path) == item.path or item.path == "/"
        assert ".." not in item.path.split("/")
        assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in item.path)
        assert item.size_bytes is None or 0 <= item.size_bytes <= 10**18


path_char = st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="/\\",
                          blacklist_categories=("Cc",))
path_part = st.text(path_char, min_size=1, max_size=10).filter(lambda p: p not in (".", ".."))
abs_path = st.lists(path_part, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


@FUZZ
@given(st.lists(st.tuples(st.booleans(), abs_path, st.integers(0, 10**15)), max_size=6,
                unique_by=lambda t: (t[0], t[1])), st.booleans())
def test_documented_declarations_read_back_exactly(decls, never):
    lines = ["#!/bin/bash", "#SBATCH -t 60"]
    for is_in, path, size in decls:
        lines.append(f"#BURSTD {'stage-in' if is_in else 'stage-out'} {shlex.quote(path)} size={size}")
    if never:
        lines.append("#BURSTD data-never-leaves")
    lines.append("srun train.py")
    needs = parse_data_directives("\n".join(lines))
    assert [(i.path, i.size_bytes) for i in needs.inputs] == [(p, s) for is_in, p, s in decls if is_in]
    assert [(o.path, o.size_bytes) for o in needs.outputs] == [(p, s) for is_in, p, s in decls if not is_in]
    assert needs.never_leaves is never
