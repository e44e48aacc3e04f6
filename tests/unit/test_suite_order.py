"""The order the suite hands files to xdist's workers (tests/conftest.py): longest first, quick files spread."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import LONGEST_FIRST, interleaved


@dataclass
class Item:
    path: Path
    name: str


def _items(paths: list[str], per_file: int = 2) -> list[Item]:
    return [Item(Path("/r/tests") / p, f"t{i}") for p in paths for i in range(per_file)]


def test_longest_files_first_then_quick_files_spread_between_the_live_ones_each_file_whole():
    live = [f"integration/test_live{i}.py" for i in range(3)]
    quick = [f"unit/test_q{i}.py" for i in range(6)]
    longest = [f"integration/{LONGEST_FIRST[1]}", f"integration/{LONGEST_FIRST[0]}"]
    given = _items(quick[:3] + live + quick[3:] + longest)
    out = interleaved(given)
    assert sorted(map(id, out)) == sorted(map(id, given)), "every test once, none lost"
    files = [str(item.path.relative_to("/r/tests")) for item in out]
    runs = [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]
    assert len(runs) == len(set(runs)) == 11, "each file's tests stay together"
    assert runs[:2] == [f"integration/{LONGEST_FIRST[0]}", f"integration/{LONGEST_FIRST[1]}"]
    assert runs[2:] == [live[0], quick[0], quick[1], live[1], quick[2], quick[3], live[2], quick[4], quick[5]]


def test_without_live_or_quick_files_the_order_is_the_collection_order_after_the_longest():
    only_quick = _items(["unit/test_b.py", "unit/test_a.py"])
    assert interleaved(only_quick) == only_quick
