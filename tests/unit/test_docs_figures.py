"""Every figure in docs/ is what today's code draws (issue 26 item 4): ``scripts/docs_figures.py --check``, run
here so CI fails on a stale figure, and the check itself catches changed numbers and a changed image."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "docs_figures.py"


@pytest.fixture(scope="module")
def figures():
    spec = importlib.util.spec_from_file_location("docs_figures", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["docs_figures"] = module
    spec.loader.exec_module(module)
    return module


def test_every_docs_figure_is_fresh(figures):
    assert figures.stale() == [], "run: python scripts/docs_figures.py"
    shown = {f.png for f in figures.FIGURES}
    assert shown == {p.name for p in figures.DOCS.glob("*.png")}, "a figure in docs/ the script does not rebuild"
    for fig in figures.FIGURES:
        assert f"]({fig.png})" in (figures.REPO / fig.shown_in).read_text(), (fig.png, fig.shown_in)


def test_the_check_names_a_figure_whose_numbers_or_image_changed(figures, tmp_path, monkeypatch):
    [spend] = [f for f in figures.FIGURES if f.png == "spend-plot.png"]
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(figures.DOCS / "spend-plot.png", docs / "spend-plot.png")
    record = json.loads(figures.RECORD.read_text())
    monkeypatch.setattr(figures, "DOCS", docs)
    monkeypatch.setattr(figures, "REPO", tmp_path)
    monkeypatch.setattr(figures, "RECORD", docs / "figures.json")
    (docs / "figures.json").write_text(json.dumps(record))
    assert figures.stale((spend,)) == []
    record["spend-plot.png"]["budgets"]["chem"] += 1
    (docs / "figures.json").write_text(json.dumps(record))
    assert figures.stale((spend,)) == [("docs/spend-plot.png: today's code draws other numbers than "
                                        "docs/figures.json records")]
    record["spend-plot.png"]["budgets"]["chem"] -= 1
    (docs / "figures.json").write_text(json.dumps(record))
    numbers = dict(record["spend-plot.png"], series=record["spend-plot.png"]["series"][::2])
    spend.draw(numbers, docs / "spend-plot.png")  # an image drawn from other numbers
    [why] = figures.stale((spend,))
    assert why.startswith("docs/spend-plot.png: the image differs")
