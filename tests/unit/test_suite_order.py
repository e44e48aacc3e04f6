"""The order the suite hands files to xdist's workers (tests/conftest.py): the ranked live files longest first,
then every other file in collection order, each file whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import LONGEST_FIRST, longest_first


@dataclass
class Item:
    path: Path
    name: str


def _items(paths: list[str], per_file: int = 2) -> list[Item]:
    return [Item(Path("/r/tests") / p, f"t{i}") for p in paths for i in range(per_file)]


def _runs(items: list[Item]) -> list[str]:
    files = [str(item.path.relative_to("/r/tests")) for item in items]
    return [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]


def test_ranked_live_files_first_in_their_rank_then_the_rest_in_collection_order_each_file_whole():
    ranked = [f"integration/{name}" for name in reversed(LONGEST_FIRST[:3])]  # given in reverse
    rest = ["unit/test_b.py", "integration/test_zz_new.py", "unit/test_a.py"]
    given = _items([rest[0], ranked[0], rest[1], ranked[1], rest[2], ranked[2]])
    out = longest_first(given)
    assert sorted(map(id, out)) == sorted(map(id, given)), "every test once, none lost"
    assert _runs(out) == [*reversed(ranked), *rest]
    assert len(_runs(out)) == len(set(_runs(out))), "each file's tests together"


def test_every_ranked_file_exists():
    here = Path(__file__).resolve().parent.parent / "integration"
    assert [name for name in LONGEST_FIRST if not (here / name).exists()] == []
