"""Pareto frontiers: pareto_mask against brute force, frontier() and the frontier plot."""

import numpy as np
import pandas as pd
import pytest

from sweep.analysis.frontier import _pareto_blocked, frontier, pareto_mask, plot_frontier
from sweep.study.config import Limit


def brute(v):
    """O(n^2) by definition: i is optimal unless some valid j is <= everywhere and < somewhere."""
    v = np.asarray(v, dtype=float)
    if v.ndim == 1:
        v = v[:, None]
    good = ~np.isnan(v).any(axis=1)
    out = np.zeros(len(v), dtype=bool)
    for i in np.flatnonzero(good):
        dominators = good & (v <= v[i]).all(axis=1) & (v < v[i]).any(axis=1)
        out[i] = not dominators.any()
    return out


@pytest.mark.parametrize("k", [1, 2, 3])
def test_pareto_mask_matches_brute_force(k):
    rng = np.random.default_rng(1234 + k)
    for trial in range(200):
        n = int(rng.integers(1, 301)) if trial % 3 else int(rng.integers(1, 12))
        hi = int(rng.choice([2, 4, 10, 1000]))  # small ranges: many ties and duplicates
        v = rng.integers(0, hi, size=(n, k)).astype(float)
        if trial % 4 == 0:  # some NaN rows and infinities
            v[rng.random(n) < 0.1, int(rng.integers(k))] = np.nan
            v[rng.random(n) < 0.1, int(rng.integers(k))] = np.inf
        np.testing.assert_array_equal(pareto_mask(v), brute(v), err_msg=f"k={k} trial={trial}")


def test_blocked_path_agrees_with_sweep_in_2d():
    rng = np.random.default_rng(7)
    for _ in range(20):
        v = rng.integers(0, 6, size=(int(rng.integers(1, 400)), 2)).astype(float)
        np.testing.assert_array_equal(_pareto_blocked(v), pareto_mask(v))


def test_special_cases():
    assert pareto_mask(np.array([[3.0, 4.0]])).tolist() == [True]
    assert pareto_mask(np.empty((0, 2))).tolist() == []
    anti = np.column_stack([np.arange(50), np.arange(50)[::-1]])
    assert pareto_mask(anti).all()
    anti3 = np.array([[0, 1, 2], [1, 2, 0], [2, 0, 1], [1, 1, 1]])
    assert pareto_mask(anti3).all()
    same = np.ones((7, 3))
    assert pareto_mask(same).all() and pareto_mask(same[:, :2]).all()
    nan = np.array([[np.nan, 0.0], [1.0, 1.0], [0.0, np.nan], [np.nan, np.nan]])
    assert pareto_mask(nan).tolist() == [False, True, False, False]
    assert not pareto_mask(np.full((3, 3), np.nan)).any()
    # A lone all-infinite row is optimal; an infinite tie is broken by the finite column.
    assert pareto_mask(np.array([[np.inf, np.inf]])).tolist() == [True]
    assert pareto_mask(np.array([[0, np.inf], [1, np.inf]])).tolist() == [True, False]
    assert pareto_mask(np.array([5.0, 2.0, 2.0, 9.0])).tolist() == [False, True, True, False]


def test_large_3d_is_quick():
    rng = np.random.default_rng(0)
    v = rng.random((20000, 3))
    m = pareto_mask(v)
    sub = np.flatnonzero(m)
    assert 0 < sub.size < 2000
    # Spot-check: no frontier row is dominated by any row; a sample of the rest is dominated.
    for i in sub[:50]:
        assert not ((v <= v[i]).all(axis=1) & (v < v[i]).any(axis=1)).any()
    for i in np.flatnonzero(~m)[:50]:
        assert ((v <= v[i]).all(axis=1) & (v < v[i]).any(axis=1)).any()


def agg_frame():
    return pd.DataFrame({
        "design": [0, 1, 2, 3, 4, 5],
        "batching": ["static", "continuous", "continuous", "continuous", "continuous", "static"],
        "cost_per_mtok": [0.17, 0.155, 0.29, 0.14, 0.139, 0.14],
        "tokens_per_s": [2000.0, 4000.0, 4000.0, 4100.0, 4100.0, 3000.0],
        "p95_itl_ms": [12.0, 50.0, 8.0, 6.0, 5.0, 60.0],
        "p95_ttft_s": [74.7, 0.2, 0.15, 0.15, 0.12, 30.0],
        "weight_bits": [16, 16, 16, 8, 4, 16],
    })


def test_frontier_objectives_and_order():
    agg = agg_frame()
    f = frontier(agg, ["cost_per_mtok", "p95_itl_ms"])
    assert f["design"].tolist() == [4]  # cheapest and fastest at once
    f = frontier(agg.drop(index=4), ["cost_per_mtok", "p95_itl_ms"])
    assert f["design"].tolist() == [3]
    f = frontier(agg, ["-tokens_per_s", "cost_per_mtok"])
    assert f["design"].tolist() == [4]
    f = frontier(agg, ["p95_itl_ms", "-weight_bits"])
    assert f["design"].tolist() == [4, 3, 2]  # sorted by the first objective
    f = frontier(agg, ["-weight_bits", "p95_itl_ms"])
    assert f["design"].tolist() == [2, 3, 4]  # best (largest weight_bits) first


def test_frontier_unknown_column():
    with pytest.raises(ValueError, match="'latency'.*allowed.*cost_per_mtok"):
        frontier(agg_frame(), ["cost_per_mtok", "-latency"])
    with pytest.raises(ValueError, match="'batching' is not a numeric column"):
        frontier(agg_frame(), ["batching"])


def test_plot_frontier_writes_png_and_svg(tmp_path):
    agg = agg_frame()
    brief = [Limit("p95_ttft_s", max=0.5), Limit("p95_itl_ms", max=15.0),
             Limit("cost_per_mtok", max=0.2), Limit("weight_bits", min=8)]
    png, svg = tmp_path / "f.png", tmp_path / "sub" / "f.svg"
    out = plot_frontier(agg, "cost_per_mtok", "p95_itl_ms", brief, png, svg, title="Serve a Model")
    assert out == (str(png), str(svg))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    # Log axis (TTFT spans > 2 decades), a maximised axis, no SVG, infinite cost off the plot.
    agg.loc[5, "cost_per_mtok"] = np.inf
    out = plot_frontier(agg, "-tokens_per_s", "p95_ttft_s", brief, tmp_path / "g.png")
    assert out == (str(tmp_path / "g.png"),)
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
