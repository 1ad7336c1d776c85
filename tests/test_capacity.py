"""sweep capacity: the largest rate each design carries within the brief, and fleets."""
import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from sweep.cli import main
from sweep.engine.params import engine_params
from sweep.twin import simulate_reference
from sweep.execution.runner import run_study, simulate_rows
from sweep.study.config import Limit, Point, parse_study
from sweep.study.metric_names import METRICS
from sweep.study.workload import requests
from sweep.workflows import capacity, capacity_tables
from tests.helpers import capacity_refused


def _search(study, most: int):
    """The search's tables, every round run in one call shape per seat tier (its padding
    changes no result), compiled once: one for ``most`` simulations, a round's most."""
    limits = capacity.load_limits(study)

    def run(sub, skip, planned):
        planned = planned._replace(simulations=max(planned.simulations, most))
        return simulate_rows(sub, skip, planned=planned)

    runner = capacity.Runner(study, run)
    found = capacity.search(study, runner, limits)
    return capacity_tables.table(study, runner, found, limits), found, runner, limits


# --- against queueing theory -------------------------------------------------------------------

#: The brief's roofline alone: no host time outside the passes, decode attention inside it.
ROOFLINE = """compute_efficiency = 0.6
bandwidth_efficiency = 0.8
overhead_ms = 0.2
request_overhead_ms = 0.0
request_lag_passes = 0.0
prompt_overhead_us = 0.0
decode_attention_efficiency = 0.0
"""

MD1 = """name = "md1"
[hardware]
gpu = "H100-SXM"
""" + ROOFLINE + """[model]
name = "Llama-3.2-1B"
[workload]
arrival = "poisson"
num_requests = 1000
drain_s = 600.0
prompt_tokens = { dist = "fixed", mean = 64 }
output_tokens = { dist = "fixed", mean = 4 }
[levers]
batching = "one_at_a_time"
[run]
seeds = 3
[brief]
mean_ttft_s = { max = 0.02 }
[capacity]
confidence = 0.5
"""


def test_one_at_a_time_capacity_brackets_the_md1_limit():
    """Poisson arrivals at a server of deterministic service time S (one request at a time):
    mean TTFT = W_q + t_first with Pollaczek-Khinchine's W_q = rho S / (2 (1 - rho)). The rate
    at which it reaches the brief's limit must fall inside the reported bracket, widened by the
    Monte Carlo error of 1,000 requests per seed."""
    study = parse_study(MD1)
    design = study.points[0].design
    one = requests([0.0], [64], [4])
    ref = simulate_reference(engine_params(design), one)
    service, first = float(ref.finish[0]), float(ref.first_token[0])
    x = (0.02 - first) / service  # W_q / S at the limit
    rho = 2 * x / (1 + 2 * x)
    analytic = rho / service
    cap, *_ = _search(study, 10)
    row = cap.iloc[0]
    assert 0 < row["max_rate_low"] <= row["max_rate"] < row["max_rate_high"]
    assert row["max_rate_high"] / row["max_rate_low"] <= 1 + study.capacity["tolerance"] + 1e-9
    assert row["max_rate_low"] * 0.9 <= analytic <= row["max_rate_high"] * 1.1, (
        analytic, row["max_rate_low"], row["max_rate_high"])
    assert row["binding"] in ("mean_ttft_s", "queueing")


# --- the study's story, monotonicity and fleets --------------------------------------------------

BRIEF = """name = "story"
[hardware]
gpu = "H100-SXM"
price_per_gpu_hour = 2.0
""" + ROOFLINE + """[model]
name = "Llama-3-8B"
[workload]
arrival = "poisson"
arrival_rate = 16.0
num_requests = 320  # a fixed count: one request-slot shape at every rate searched
drain_s = 30.0
prompt_tokens = { dist = "exponential", mean = 1024 }
output_tokens = { dist = "exponential", mean = 256 }
[levers]
batching = "static"
kv_cache = "contiguous"
max_batch = 256
acceptance = 0.7
draft_cost = 0.1
[run]
seeds = 2
[brief]
p95_ttft_s = { max = 0.5 }
p95_itl_ms = { max = 15 }
cost_per_mtok = { max = 0.20 }
weight_bits = { min = 8 }
"""
STORY = {
    "start": {},
    "int8_spec4": dict(batching="continuous", kv_cache="paged", weight_bits=8, draft_tokens=4),
    "int8_spec4_2gpu": dict(batching="continuous", kv_cache="paged", weight_bits=8,
                            draft_tokens=4, gpus=2),
    "bf16_spec4": dict(batching="continuous", kv_cache="paged", weight_bits=16, draft_tokens=4),
}


@pytest.fixture(scope="module")
def story():
    base = parse_study(BRIEF)
    p = base.points[0]
    points = [Point(p.design.replace(**ch), p.workload, {**p.columns, **ch})
              for ch in STORY.values()]
    study = dataclasses.replace(base, points=points, axes=list(STORY["int8_spec4_2gpu"]))
    cap, found, runner, limits = _search(study, 64)
    return study, cap.set_index(pd.Index(list(STORY))), found, runner, limits


def test_the_briefs_starting_server_carries_under_16_and_the_winner_at_least_16(story):
    _, cap, *_ = story
    assert cap.loc["start", "max_rate"] < 16.0
    assert cap.loc["int8_spec4", "max_rate"] >= 16.0
    assert cap.loc["int8_spec4", "binding"] not in ("", "none")
    # Cost at capacity is the design's GPU price over the tokens it then sustains.
    row = cap.loc["int8_spec4"]
    assert row["cost_per_mtok_at_max"] == pytest.approx(
        2.0 / 3600 / row["tokens_per_s_at_max"] * 1e6, rel=1e-9)
    assert row["cost_per_mtok_at_max"] <= 0.20


def test_more_gpus_or_fewer_weight_bits_never_lower_capacity(story):
    _, cap, *_ = story
    noise = 0.95
    assert cap.loc["int8_spec4_2gpu", "max_rate"] >= noise * cap.loc["int8_spec4", "max_rate"]
    assert cap.loc["int8_spec4", "max_rate"] >= noise * cap.loc["bf16_spec4", "max_rate"]


def test_a_fleet_of_n_replicas_meets_the_brief_at_n_times_capacity(story):
    study, cap, found, runner, limits = story
    rate = float(cap.loc["int8_spec4", "max_rate"])
    table = cap.reset_index(drop=True)
    fleet = capacity_tables.fleets(study, table, found, runner, 2 * rate * 0.9, limits)
    row = fleet[fleet["design"] == 1].iloc[0]
    assert row["replicas"] == 2 and row["confirmed"], row.to_dict()
    assert fleet["confirmed"].iloc[0]  # confirmed fleets first


# --- the search's bookkeeping, on a stand-in for the engine --------------------------------------

@pytest.mark.parametrize("at_capacity", [False, True])
def test_the_search_finds_the_seeds_quantile_and_runs_only_seeds_it_cannot_imply(at_capacity):
    """Each seed meets the brief up to a capacity of its own. With 16 seeds at confidence 0.9,
    a design carries a rate when 15 seeds do: its capacity is the second-lowest seed's. A
    seed's verdict at a rate that its runs at other rates imply is not simulated, unless the
    brief limits a figure read at capacity: then every seed runs there."""
    # The factors stated: the search's path (its roofline guide) does not move with a refit.
    study = parse_study(TINY.replace('gpu = "H100-SXM"', 'gpu = "H100-SXM"\n' + STATED))
    study = dataclasses.replace(study, seeds=list(range(16)), capacity={
        **study.capacity, "rate_min": 2.0, "rate_max": 400.0},
        brief=[Limit("utilization", min=0.0)] if at_capacity else [])
    factor = np.linspace(0.85, 1.05, 16)[np.random.default_rng(0).permutation(16)]
    base = {8: 20.0, 32: 50.0}  # requests/s by max_batch

    def run(sub, skip, planned):
        recs = []
        for k, point in enumerate(sub.points):
            for seed in sub.seeds:
                if (k, seed) not in skip:
                    own = base[point.design.max_batch] * factor[seed]
                    recs.append({**dict.fromkeys(METRICS, 0.0), "requests": 40, "design": k,
                                 "seed": seed, "unstable": point.workload.arrival_rate > own})
        return pd.DataFrame(recs)

    runner = capacity.Runner(study, run)
    found = capacity.search(study, runner, [])
    for i, s in enumerate(found):
        second = np.sort(base[s.point.design.max_batch] * factor)[1]
        assert s.low <= second < s.high, (s.low, second, s.high)
        assert s.high / s.low <= 1 + study.capacity["tolerance"] + 1e-9
        ran = [key for key in runner.rows if key[0] == i]
        assert len(ran) < len(s.tried) * len(study.seeds)  # some verdicts were implied
        at_max = {seed for _, _, r, seed in ran if r == s.low}
        assert (at_max == set(study.seeds)) == at_capacity


def test_a_planned_batch_runs_one_slot_count_and_a_wider_first_try():
    from sweep.execution.planning import Group, Planned, groups, request_slots, share_of

    study = parse_study(TINY.replace("num_requests = 40", "num_requests = [40, 1000]")
                        .replace("max_batch = [8, 32]", "max_batch = [8, 256]"))
    assert request_slots(study) == [40, 40, 1000, 1000]  # a sweep: each its own bucket
    assert request_slots(study, Planned(100, 128)) == [1024] * 4
    assert request_slots(study, Planned(100, 128, min_slots=4096)) == [4096] * 4
    first, bound = groups(study, share_of(study, (0, 1)), set(), [1024] * 4, first_seats=128)
    assert {g: len(v) for g, v in first.items()} == {Group(8, 1024): 4, Group(128, 1024): 4}
    assert Group(256, 1024) in bound  # an overflow of the first try reruns with every seat
    narrow, _ = groups(study, share_of(study, (0, 1)), set(), [1024] * 4)
    assert Group(64, 1024) in narrow


# --- per-request goodput -------------------------------------------------------------------------

GOODPUT = """name = "g"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
arrival_rate = [5.0, 400.0]
num_requests = 80
[levers]
max_batch = 16
[brief]
{limits}
"""


def test_slo_attainment_counts_requests_within_their_own_limits():
    loose = run_study(parse_study(GOODPUT.format(limits=""))).runs
    assert (loose["slo_attainment"] == loose["completed"] / loose["requests"]).all()
    assert np.allclose(loose["goodput_rps"], loose["completed"] / loose["sim_time_s"])
    tight = run_study(parse_study(GOODPUT.format(
        limits="request_ttft_s = { max = 0.05 }\nrequest_tpot_ms = { max = 1000 }"))).runs
    assert tight.loc[0, "slo_attainment"] > tight.loc[1, "slo_attainment"]  # the overload
    assert (tight["slo_attainment"] <= loose["slo_attainment"]).all()
    none = run_study(parse_study(GOODPUT.format(limits="request_tpot_ms = { max = 1e-6 }"))).runs
    assert (none["slo_attainment"] == 0).all() and (none["goodput_rps"] == 0).all()


# --- the CLI -------------------------------------------------------------------------------------

STATED = """compute_efficiency = 0.9
bandwidth_efficiency = 0.85
kv_bandwidth_efficiency = 0.85
overhead_ms = 1.5
decode_attention_efficiency = 0.02"""
TINY = """name = "tiny"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 40
prompt_tokens = { dist = "exponential", mean = 200 }
output_tokens = { dist = "exponential", mean = 40 }
[levers]
batching = "continuous"
max_batch = [8, 32]
[run]
seeds = 2
[brief]
p95_ttft_s = { max = 0.3 }
request_tpot_ms = { max = 50 }
[capacity]
fleets = 2
"""


def test_sweep_capacity_writes_tables_reports_plots_and_resumes(tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "tiny.toml"
    # Three seeds: the search shapes its calls for twice every design's seeds, which then
    # holds each of its rounds (one compiled shape).
    cfg.write_text(TINY.replace("seeds = 2", "seeds = 3"))
    out = tmp_path / "cap"
    assert main(["capacity", str(cfg), "--out", str(out), "--target-rate", "50",
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "To serve 50 requests/s within the brief:" in text
    cap = pd.read_parquet(out / "capacity.parquet")
    assert list(cap["max_batch"]) == [8, 32]
    for col in ("max_rate", "max_rate_low", "max_rate_high", "binding", "tokens_per_s_at_max",
                "cost_per_mtok_at_max", "censored", "why"):
        assert col in cap.columns
    assert (cap["max_rate"] > 0).all() and (cap["max_rate_high"] > cap["max_rate_low"]).all()
    fleet = pd.read_parquet(out / "fleet.parquet")
    assert fleet["confirmed"].iloc[0]
    assert (fleet["replicas"] >= np.ceil(50 / fleet["max_rate"] - 1e-9)).all()
    assert main(["report", str(out)]) == 0
    assert "To serve 50 requests/s" in capsys.readouterr().out
    assert main(["frontier", str(out)]) == 0
    assert (out / "frontier.png").exists()

    # Interrupted after two rounds, then resumed: the same tables as the uninterrupted run.
    import sweep.execution.runner

    calls = [0]
    real = sweep.execution.runner.simulate_rows

    def flaky(*a, **k):
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    again = tmp_path / "again"
    monkeypatch.setattr(sweep.execution.runner, "simulate_rows", flaky)
    assert main(["capacity", str(cfg), "--out", str(again), "--target-rate", "50",
                 "--quiet"]) == 130
    assert not (again / "capacity.parquet").exists()
    assert main(["capacity", str(cfg), "--out", str(again), "--target-rate", "50",
                 "--quiet"]) == 2  # neither --resume nor --force
    assert main(["capacity", str(cfg), "--out", str(again), "--target-rate", "50", "--resume",
                 "--quiet"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(again / "capacity.parquet"), cap)
    pd.testing.assert_frame_equal(pd.read_parquet(again / "fleet.parquet"), fleet)

    # A finished search is kept: --resume finds it done; --force replaces it only once the new
    # tables are complete, so a rerun killed halfway leaves the old ones.
    written = (again / "capacity.parquet").stat().st_mtime_ns
    args = ["capacity", str(cfg), "--out", str(again), "--target-rate", "50", "--quiet"]
    capsys.readouterr()
    assert main(args + ["--resume"]) == 0
    assert "the search is complete; its tables are kept" in capsys.readouterr().out
    assert (again / "capacity.parquet").stat().st_mtime_ns == written
    calls[0] = 0
    assert main(args + ["--force"]) == 130
    pd.testing.assert_frame_equal(pd.read_parquet(again / "capacity.parquet"), cap)
    monkeypatch.setattr(sweep.execution.runner, "simulate_rows", real)
    (again / "mine").mkdir()
    (again / "mine" / "notes.txt").write_text("kept\n")
    assert main(args + ["--force"]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(again / "capacity.parquet"), cap)
    assert (again / "mine" / "notes.txt").read_text() == "kept\n"  # the user's, not ours
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again", "cap", "tiny.toml"]


def _timed(t: str) -> str:
    """TINY with arrivals for 8 s at 1 request/s: its requests grow with the rate searched."""
    return t.replace("num_requests = 40", "arrival_rate = 1.0\nduration_s = 8.0")


@pytest.mark.parametrize("edit, args, key", [
    (lambda t: t.replace('p95_ttft_s = { max = 0.3 }\nrequest_tpot_ms = { max = 50 }\n', ""),
     [], "brief"),
    (lambda t: t.replace('p95_ttft_s = { max = 0.3 }\nrequest_tpot_ms = { max = 50 }\n',
                         "max_batch = { min = 8 }\n"), [], "brief"),
    (lambda t: t + "rate_min = 5.0\nrate_max = 5.0\n", [], "capacity.rate_min"),
    (lambda t: t, ["--target-rate", "0"], "--target-rate"),
    (lambda t: t + "target_rate = -1.0\n", [], "capacity.target_rate"),
    (lambda t: t + "confidence = 1.5\n", [], "capacity.confidence"),
    (lambda t: _timed(t) + "rate_min = 1e6\n", [], "capacity.rate_min"),
    (lambda t: _timed(t) + "rate_max = 1e6\n", [], "capacity.rate_max"),
    (lambda t: _timed(t).replace("seeds = 2", "seeds = 2\nmax_requests = 100"), [],
     "the roofline's top rate"),
])
def test_bad_capacity_input_is_one_line_and_writes_nothing(tmp_path, capsys, edit, args, key):
    capacity_refused(tmp_path, capsys, edit(TINY), key, args)


def test_roofline_rate_guides_the_search_above_what_a_design_carries(story):
    _, cap, found, *_ = story
    for name, s in zip(STORY, found):
        if cap.loc[name, "max_rate"] > 0:
            assert capacity.roofline_rate(s.point) * capacity.RATE_MAX_FACTOR > \
                cap.loc[name, "max_rate"]
    assert math.isfinite(capacity.roofline_rate(found[0].point))
