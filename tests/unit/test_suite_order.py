"""The order the suite hands files to xdist's workers (tests/conftest.py): longest live files first, the quick
files spread between the live ones after the first wave, each file whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import FIRST_WAVE, LONGEST_FIRST, interleaved


@dataclass
class Item:
    path: Path
    name: str


def _items(paths: list[str], per_file: int = 2) -> list[Item]:
    return [Item(Path("/r/tests") / p, f"t{i}") for p in paths for i in range(per_file)]


def _runs(items: list[Item]) -> list[str]:
    files = [str(item.path.relative_to("/r/tests")) for item in items]
    return [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]


def test_ranked_live_files_first_then_quick_files_spread_after_the_first_wave_each_file_whole():
    ranked = [f"integration/{name}" for name in reversed(LONGEST_FIRST[:FIRST_WAVE + 1])]  # given in reverse
    unranked = ["integration/test_zz_new.py", "integration/test_aa_new.py"]
    quick = [f"unit/test_q{i}.py" for i in range(6)]
    given = _items(quick[:3] + unranked + ranked + quick[3:])
    out = interleaved(given)
    assert sorted(map(id, out)) == sorted(map(id, given)), "every test once, none lost"
    runs = _runs(out)
    assert len(runs) == len(set(runs)) == len(ranked) + len(unranked) + len(quick), "each file's tests together"
    wave = [f"integration/{name}" for name in LONGEST_FIRST[:FIRST_WAVE]]
    assert runs[:FIRST_WAVE] == wave, "the longest go out first, in their rank, with no quick file among them"
    rest = [f"integration/{LONGEST_FIRST[FIRST_WAVE]}", *unranked]  # unranked live files keep collection order
    assert runs[FIRST_WAVE:] == [rest[0], *quick[0:2], rest[1], *quick[2:4], rest[2], *quick[4:6]]


def test_with_no_live_file_after_the_first_wave_the_quick_files_follow_in_collection_order():
    given = _items([f"integration/{LONGEST_FIRST[1]}", "unit/test_b.py", "unit/test_a.py",
                    f"integration/{LONGEST_FIRST[0]}"])
    assert _runs(interleaved(given)) == [f"integration/{LONGEST_FIRST[0]}", f"integration/{LONGEST_FIRST[1]}",
                                         "unit/test_b.py", "unit/test_a.py"]


def test_every_ranked_file_exists():
    here = Path(__file__).resolve().parent.parent / "integration"
    assert [name for name in LONGEST_FIRST if not (here / name).exists()] == []
