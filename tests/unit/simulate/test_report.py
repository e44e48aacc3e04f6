"""The simulate report (burstd/simulate/report.py): which policies are on the cost-versus-JCT frontier, and
the frontier plot that shows them."""

from __future__ import annotations

from burstd.simulate.report import frontier, plot_frontier

ROWS = {
    "never": {"cloud_cost_usd": 0.0, "jct_mean_s": 9000.0, "wait_mean_s": 5000.0},
    "cheap-fast": {"cloud_cost_usd": 10.0, "jct_mean_s": 4000.0, "wait_mean_s": 900.0},
    # shows less wait than cheap-fast but is dearer and slower to complete: dominated
    "spot-restarts": {"cloud_cost_usd": 12.0, "jct_mean_s": 4500.0, "wait_mean_s": 50.0},
    "dear-fastest": {"cloud_cost_usd": 30.0, "jct_mean_s": 3000.0, "wait_mean_s": 100.0},
}


def test_the_frontier_is_judged_on_cost_and_mean_jct_not_first_start_wait():
    assert frontier(ROWS) == ["never", "cheap-fast", "dear-fastest"]


def test_the_plot_draws_the_frontier_and_tells_dominated_policies_apart(tmp_path):
    import matplotlib.image as mpimg

    report = {"trace": "site.swf", "jobs_read": 4, "policies": ROWS, "frontier": frontier(ROWS)}
    drawn = mpimg.imread(str(plot_frontier(report, tmp_path / "f.png")))
    assert drawn.shape[:2] == (600, 960)
    # the same points with another frontier: another staircase, other points hollow
    bare = mpimg.imread(str(plot_frontier({**report, "frontier": ["spot-restarts"]}, tmp_path / "g.png")))
    assert (abs(drawn[..., :3] - bare[..., :3]) > 0.1).any(axis=-1).sum() > 300
