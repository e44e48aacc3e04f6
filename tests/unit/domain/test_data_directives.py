"""The batch-script data directives (issue 24 item 1): the documented forms, and what is refused."""

from __future__ import annotations

import pytest

from burstd.domain.data import DataItem, DataNeeds, format_bytes, never_leave_path
from burstd.domain.data_directives import DataDirectiveError, parse_data_directives, parse_size

HEX = "0f" * 32


def test_burstd_and_burst_buffer_forms_in_the_header():
    script = f"""#!/bin/bash
#SBATCH --time=60
#BURSTD stage-in /data/imagenet size=180GB sha256={HEX}
#BURSTD stage-out "/scratch/alice/my results" size=2GiB
#DW stage_in source=/proj/vocab.txt destination=$DW_JOB_STRIPED/vocab.txt type=file
#BB_LUA stage_out source=$DW_JOB_STRIPED/ckpt destination=/proj/ckpt/ type=directory
#DW jobdw capacity=10GB access_mode=striped type=scratch

srun python train.py
#BURSTD stage-in /after/the/first/command
"""
    needs = parse_data_directives(script)
    assert needs == DataNeeds(
        (DataItem("/data/imagenet", 180 * 10**9, "sha256:" + HEX), DataItem("/proj/vocab.txt")),
        (DataItem("/scratch/alice/my results", 2 * 2**30), DataItem("/proj/ckpt")),
        False,
    )
    assert needs.input_bytes == 180 * 10**9 and needs.declared
    assert parse_data_directives("#!/bin/sh\n#BURSTD data-never-leaves\n").never_leaves
    assert not parse_data_directives("#!/bin/sh\nhostname\n").declared


@pytest.mark.parametrize("line, words", [
    ("#BURSTD stage-in data/relative", "line 2: path 'data/relative' is not absolute"),
    ("#BURSTD stage-in /a/../etc/shadow", "has a '..' component"),
    ("#BURSTD stagein /a", "unknown #BURSTD directive 'stagein'"),
    ("#BURSTD", "#BURSTD without a directive"),
    ("#BURSTD stage-in", "stage-in needs a path"),
    ("#BURSTD stage-in /a size=12XB", "size '12XB' is not a number with a unit"),
    ("#BURSTD stage-in /a size=2000PB", "over an exabyte"),
    ("#BURSTD stage-in /a sha256=xyz", "is not 64 lower-case hex digits"),
    ("#BURSTD stage-in /a size=1 size=2", "option size= given twice"),
    ("#BURSTD stage-out /a sha256=" + HEX, "unknown option"),
    ("#BURSTD data-never-leaves please", "takes no arguments"),
    ("#BURSTD stage-in '/a", "No closing quotation"),
    ("#DW stage_in destination=/x type=file", "stage_in needs source="),
    ("#DW stage_out source=/x type=pipe destination=/y", "type='pipe' is not file or directory"),
    ("#BB stage_in source=/x pool=fast", "unknown stage_in option 'pool=fast'"),
])
def test_bad_directives_are_errors_naming_the_source_and_line(line, words):
    with pytest.raises(DataDirectiveError) as err:
        parse_data_directives(f"#!/bin/bash\n{line}\necho\n", source="job 42")
    assert str(err.value).startswith("job 42") and words in str(err.value)


def test_a_path_declared_twice_is_an_error():
    with pytest.raises(DataDirectiveError, match="stage-in /a is declared twice"):
        parse_data_directives("#BURSTD stage-in /a\n#BURSTD stage-in /a/\n")


def test_sizes_and_prefixes():
    assert [parse_size(s) for s in ("0", "4096", "1K", "1.5GB", "1.5GiB", "2TB")] == [
        0, 4096, 1000, 1_500_000_000, 3 * 2**29, 2 * 10**12]
    needs = DataNeeds((DataItem("/secure/x"),), (DataItem("/home/a"),))
    assert never_leave_path(needs, ["/secure/"]) == "/secure/x"
    assert never_leave_path(needs, ["/sec", "/home/b"]) == ""
    assert [format_bytes(n) for n in (0, 999, 1500, 180 * 10**9, 1_234 * 10**9)] == [
        "0 B", "999 B", "1.5 KB", "180 GB", "1.2 TB"]
