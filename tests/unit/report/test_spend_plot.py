"""The spend plot: exact running totals, a real PNG with one curve per account, a self-contained HTML page."""

from __future__ import annotations

import pytest

from burstd.report.spend_plot import cumulative, html_page, png_bytes, render, totals

T0 = 1_773_144_000.0
SERIES = [(T0, "chem", 1_500_000), (T0 + 3600, "bio", 250_000), (T0 + 3600, "chem", 1), (T0 + 7200, "chem", 2_000_000)]


def test_running_totals_are_exact_and_ordered_by_total():
    cum = cumulative(SERIES)
    assert list(cum) == ["chem", "bio"]
    assert cum["chem"] == ([T0, T0 + 3600, T0 + 7200], [1_500_000, 1_500_001, 3_500_001])
    assert totals(SERIES) == {"chem": 3_500_001, "bio": 250_000}


def test_png_draws_the_curves(tmp_path):
    import matplotlib.image as mpimg

    path = render(SERIES, tmp_path / "spend.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(str(path))
    assert img.shape[:2] == (500, 1000)
    empty = mpimg.imread(str(render([], tmp_path / "empty.png")))
    # the two curves and their legend change pixels against the empty chart
    assert (abs(img[..., :3] - empty[..., :3]) > 0.1).any(axis=-1).sum() > 500


def test_html_is_self_contained_and_escapes_keys(tmp_path):
    page = render(SERIES + [(T0, "<script>x</script>", 5)], tmp_path / "spend.html").read_text()
    assert "src='data:image/png;base64," in page
    assert "http://" not in page and "https://" not in page and "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "$3.50" in page and "$0.25" in page and "<th style='text-align:right'>$3.75</th>" in page


def test_many_accounts_fold_into_others():
    series = [(T0 + i, f"acct{i}", 1000 * (i + 1)) for i in range(30)]
    assert png_bytes(series, max_lines=5)[:4] == b"\x89PNG"
    assert "acct29" in html_page(series, max_lines=5)  # the table still lists every account


def test_unknown_suffix_is_refused(tmp_path):
    with pytest.raises(ValueError, match="use a .png or .html"):
        render(SERIES, tmp_path / "spend.pdf")
    assert not (tmp_path / "spend.pdf").exists()


def test_budgets_are_drawn_in_their_accounts_colour_and_a_far_cap_does_not_flatten_the_curves():
    from burstd.report.spend_plot import _figure

    fig = _figure(cumulative(SERIES), "t", 12, budgets={"chem": 5_000_000, "bio": 900_000_000})
    ax = fig.axes[0]
    labels = [line.get_label() for line in ax.get_lines()]
    assert "chem budget ($5.00)" in labels and "bio budget ($900.00), above the chart" in labels
    chem, chem_cap = (next(x for x in ax.get_lines() if x.get_label().startswith(p)) for p in ("chem (", "chem budget"))
    assert chem.get_color() == chem_cap.get_color()
    assert ax.get_ylim()[1] < 10  # dollars: the $900 cap is named, not drawn


def test_the_time_axis_is_the_period_asked_for():
    from matplotlib.dates import num2date

    from burstd.report.spend_plot import _figure

    ax = _figure(cumulative(SERIES), "t", 12, since=T0 - 86400, until=T0 + 86400).axes[0]
    left, right = (num2date(x).timestamp() for x in ax.get_xlim())
    assert (round(left), round(right)) == (T0 - 86400, T0 + 86400)


@pytest.mark.parametrize("window", [{}, {"since": T0}, {"until": T0}, {"since": T0, "until": T0 + 3600}])
def test_an_empty_plot_says_so_on_a_sane_time_axis(window):
    """Issue 26: with no spend the axis ran from matplotlib's default (1970) backwards from --since."""
    import time

    from matplotlib.dates import num2date

    from burstd.report.spend_plot import _figure

    ax = _figure(cumulative([]), "t", 12, **window).axes[0]
    left, right = (num2date(x).timestamp() for x in ax.get_xlim())
    assert T0 - 2 * 86400 <= left < right <= time.time() + 60
    assert left == pytest.approx(window.get("since", right - 86400))
    if "until" in window:
        assert right == pytest.approx(window["until"])
    assert [t.get_text() for t in ax.texts] == ["no spend in this period"]
    assert ax.get_ylim() == (0, 1)
