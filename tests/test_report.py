"""The verdict and text report on a synthetic aggregate shaped like the Serve a Model study's story."""

import numpy as np
import pandas as pd
import pytest

from sweep.analysis.report import lever_columns, meets_brief, miss_label, render, verdict
from sweep.study.config import Limit
from sweep.study.metric_names import METRICS

BRIEF = [Limit("p95_ttft_s", max=0.5), Limit("p95_itl_ms", max=15.0),
         Limit("cost_per_mtok", max=0.20), Limit("weight_bits", min=8)]

#: design: (batching, kv_cache, gpus, weight_bits, draft_tokens), p95 TTFT s, p95 ITL ms,
#: cost $/M, unstable share, truncated share, p_pass
STORY = {
    0: (("static", "contiguous", 1, 16, 0), 74.7, 12.0, 0.170, 1.0, 0.0, 0.0),  # queueing
    1: (("continuous", "paged", 1, 16, 0), 0.20, 50.0, 0.155, 0.0, 0.0, 0.0),  # time per token
    2: (("continuous", "paged", 2, 16, 0), 0.15, 8.0, 0.290, 0.0, 0.0, 0.0),  # cost ceiling
    3: (("continuous", "paged", 1, 8, 2), 0.15, 6.0, 0.141, 0.0, 0.0, 1.0),  # passes
    4: (("continuous", "paged", 1, 8, 4), 0.15, 6.2, 0.140, 0.0, 0.0, 0.9375),  # passes
    5: (("continuous", "paged", 1, 4, 2), 0.12, 5.0, 0.139, 0.0, 0.0, 0.0),  # quality floor
    6: (("continuous", "contiguous", 1, 16, 0), 0.40, 45.0, 0.160, 0.0, 0.0, 0.0),  # per token
    7: (("static", "paged", 2, 16, 0), 30.0, 9.0, 0.310, 0.0, 0.0, 0.0),  # queueing + cost
    8: (("continuous", "paged", 1, 16, 4), 0.30, 20.0, 0.150, 0.0, 0.25, 0.0),  # truncated
}
LEVERS = ("batching", "kv_cache", "gpus", "weight_bits", "draft_tokens")


def story_agg() -> pd.DataFrame:
    rows = []
    for d, (lev, ttft, itl, cost, unstable, trunc, p_pass) in STORY.items():
        row = {"design": d, "gpu": "H100-SXM", "model": "Llama-3-8B", "arrival_rate": 16.0,
               **dict(zip(LEVERS, lev)), "kv_bits": 16, "acceptance": 0.7, "draft_cost": 0.1,
               "max_batch": 256, "seeds": 16}
        mets = {m: 1.0 for m in METRICS}
        mets.update(p95_ttft_s=ttft, p95_itl_ms=itl, cost_per_mtok=cost, unstable=unstable,
                    truncated=trunc, tokens_per_s=4000.0, passes=25000.0)  # engine pass count
        for m, v in mets.items():
            row.update({m: v, f"{m}_std": 0.1 * v, f"{m}_ci_low": 0.95 * v,
                        f"{m}_ci_high": 1.05 * v})
        row["p_pass"] = p_pass
        rows.append(row)
    return pd.DataFrame(rows).sample(frac=1.0, random_state=3)  # order must not matter


def keys(limits):
    return [lim.key for lim in limits]


def test_verdict_follows_the_brief():
    v = verdict(story_agg(), BRIEF)
    assert v.passing["design"].tolist() == [4, 3]  # the 8-bit designs, cheapest first
    assert v.passing["p_pass"].tolist() == [0.9375, 1.0]
    assert int(v.baseline["design"]) == 0 and v.baseline["batching"] == "static"
    assert keys(v.baseline_misses) == ["p95_ttft_s"]
    assert keys(v.failures[0]) == ["p95_ttft_s"]
    assert keys(v.failures[1]) == ["p95_itl_ms"]
    assert keys(v.failures[2]) == ["cost_per_mtok"]
    assert keys(v.failures[5]) == ["weight_bits"]
    assert keys(v.failures[7]) == ["p95_ttft_s", "cost_per_mtok"]
    assert sorted(v.failures) == [0, 1, 2, 5, 6, 7, 8]
    fams = {f.label: f.designs for f in v.families}
    assert fams == {
        "fails on time per token": [8, 1, 6],  # cheapest first
        "fails on queueing (queue still growing)": [0],
        "over the cost ceiling": [2],
        "below the quality floor": [5],
        "fails on queueing; over the cost ceiling": [7],
    }
    assert v.families[0].label == "fails on time per token"  # largest family first
    assert v.truncated["design"].tolist() == [8]
    assert v.meets[3] and v.meets[4] and not v.meets[5]


def test_render_tells_the_story():
    agg = story_agg()
    v = verdict(agg, BRIEF)
    text = render(v, BRIEF, list(LEVERS) + ["gpu", "model"])
    for phrase in ("fails on queueing", "fails on time per token", "over the cost ceiling",
                   "below the quality floor", "(queue still growing)", "p95_ttft_s <= 0.5",
                   "weight_bits >= 8", "Starting design 0"):
        assert phrase in text, phrase
    lines = text.splitlines()
    assert all(len(line) < 120 for line in lines)
    warning = [line for line in lines if line.startswith("WARNING")]
    assert len(warning) == 1 and "truncated" in warning[0] and warning[0].endswith(": 8")
    assert "TRUNCATED" in text  # flagged where the design itself is listed too
    passing = text[text.index("Designs that meet the brief"):text.index("Failing designs")]
    assert passing.index("design 4:") < passing.index("design 3:")
    assert "p_pass=0.9375" in passing and "weight_bits=8" in passing
    assert "gpu=" not in text  # constant columns are not repeated per design
    assert render(verdict(agg.sample(frac=1.0, random_state=9), BRIEF), BRIEF,
                  list(LEVERS) + ["gpu", "model"]) == text  # deterministic
    assert render(v, BRIEF) == text  # default columns: the levers that vary
    short = render(v, BRIEF, max_passing=1)
    assert "design 4:" in short and "design 3:" not in short and "... and 1 more" in short
    fresh = [Limit(lim.key, lim.min, lim.max) for lim in BRIEF]  # equal limits, new objects
    assert render(v, fresh, list(LEVERS)) == text


def test_no_truncation_no_warning_and_other_baseline():
    agg = story_agg()
    agg = agg[agg["design"] != 8]
    v = verdict(agg, BRIEF, baseline=3)
    assert int(v.baseline["design"]) == 3 and v.baseline_misses == []
    text = render(v, BRIEF)
    assert "WARNING" not in text and "It meets the brief." in text


def test_partial_instability_and_other_labels():
    agg = story_agg()
    agg.loc[agg["design"] == 7, ["unstable", "cost_per_mtok"]] = [1.0, 0.17]
    agg.loc[agg["design"] == 2, ["p95_ttft_s", "cost_per_mtok"]] = [2.0, 0.15]
    v = verdict(agg, BRIEF)
    fam = next(f for f in v.families if 0 in f.designs)
    assert sorted(fam.designs) == [0, 2, 7]
    assert fam.label == "fails on queueing (queue still growing in 2 of 3)"
    assert miss_label(Limit("tokens_per_s", min=1000), "min") == "misses tokens_per_s"
    assert miss_label(Limit("p99_tpot_ms", max=30)) == "fails on time per token"
    assert miss_label(Limit("gpus", max=1), "max") == "above the gpus limit"
    assert miss_label(Limit("weight_bits", min=8), "min") == "below the quality floor"
    assert miss_label(Limit("p95_ttft_s_ci_high", max=0.5)) == "fails on queueing"
    assert miss_label(Limit("p_pass", min=0.9), "min") == "misses p_pass"


def test_nan_and_infinite_means_miss():
    agg = story_agg()
    agg.loc[agg["design"] == 3, "p95_itl_ms"] = np.nan
    agg.loc[agg["design"] == 4, "cost_per_mtok"] = np.inf
    v = verdict(agg, BRIEF)
    assert v.passing.empty
    labels = {f.label for f in v.families}
    assert "fails on time per token (p95_itl_ms undefined)" in labels
    assert "None" not in render(v, BRIEF) and "none" in render(v, BRIEF)


def test_errors_and_helpers():
    agg = story_agg()
    with pytest.raises(ValueError, match="'latency'"):
        verdict(agg, [Limit("latency", max=1.0)])
    with pytest.raises(ValueError, match="baseline design 42"):
        verdict(agg, BRIEF, baseline=42)
    assert meets_brief(agg, []).all()
    levers = lever_columns(agg)
    assert "weight_bits" in levers and "gpu" in levers
    assert not {"design", "seeds", "p_pass", "passes", "p95_ttft_s", "p95_ttft_s_std"} & {*levers}


def test_the_report_notes_gpus_whose_factors_were_transferred():
    from sweep.analysis.report import transferred_lines

    table = pd.DataFrame({"gpu": ["H100-SXM", "B200", "B200", "H200"],
                          "calibration": ["fitted", "transferred:H100-SXM",
                                          "transferred:H100-SXM", "stated"]})
    text = "\n".join(transferred_lines(table))
    assert "no real runs of B200 were fitted" in text and "the H100-SXM's factors" in text
    assert "H200" not in text  # its factors were stated
    assert transferred_lines(table[table["gpu"] == "H100-SXM"]) == []
