"""Timing-model uncertainty: factors drawn per seed, the same for every design; off (or
degenerate) it changes nothing."""
import numpy as np
import pandas as pd
import pytest

from sweep.analysis.tables import aggregate
from sweep.execution.runner import run_study
from sweep.physics.hardware import get_gpu
from sweep.study.config import ConfigError, Limit, parse_study
from sweep.study.uncertainty import Uncertain, draws

H100 = get_gpu("H100-SXM")
# Shapes of the small study of tests/conftest.py (40 requests, 8 seats, k <= 2, 33-64
# simulations): the compiled engine is shared.
PLAIN = '''
name = "u"
[hardware]
gpu = "H100-SXM"
{hardware}
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = 40.0
num_requests = 40
prompt_tokens = {{ dist = "exponential", mean = 256 }}
output_tokens = {{ dist = "exponential", mean = 16 }}
[levers]
batching = "continuous"
draft_tokens = [0, 2]
max_batch = 8
{levers}
[run]
seeds = 20
model_error = false  # the stated distributions alone (the model's own error: test_model_error)
[brief]
p95_ttft_s = {{ max = 0.05 }}
'''


def study(hardware="", levers=""):
    return parse_study(PLAIN.format(hardware=hardware, levers=levers))


@pytest.fixture(scope="module")
def plain():
    return run_study(study()).runs


def test_draws_are_reproducible_bounded_and_per_factor():
    u = {"compute_efficiency": Uncertain("uniform", 0.5, 0.7),
         "acceptance": Uncertain("normal", 0.4, 0.9, mean=0.7, sd=0.1)}
    a = [draws(u, s) for s in range(2000)]
    assert a[:5] == [draws(u, s) for s in range(5)]
    ce = np.array([d["compute_efficiency"] for d in a])
    acc = np.array([d["acceptance"] for d in a])
    assert ce.min() >= 0.5 and ce.max() <= 0.7 and len(set(ce)) == 2000
    assert ce.mean() == pytest.approx(0.6, abs=0.01)
    assert acc.min() >= 0.4 and acc.max() <= 0.9
    assert acc.mean() == pytest.approx(0.7 - 0.1 * 0.0856, abs=0.01)  # truncated at 2 sd / 3 sd
    assert acc.std() == pytest.approx(0.1, rel=0.1)
    # A factor's draw depends only on the seed and the factor, not on the other factors.
    alone = draws({"acceptance": u["acceptance"]}, 3)
    assert alone["acceptance"] == a[3]["acceptance"]


def test_degenerate_distributions_give_bit_identical_runs(plain):
    ce, be, oh = H100.compute_efficiency, H100.bandwidth_efficiency, H100.overhead_ms
    same = study(f'compute_efficiency = {{ dist = "uniform", low = {ce}, high = {ce} }}\n'
                 f'bandwidth_efficiency = {{ dist = "normal", mean = {be}, sd = 0.1, low = {be}, '
                 f'high = {be} }}\noverhead_ms = {{ dist = "normal", mean = {oh}, sd = 0, '
                 'low = 0, high = 5 }',
                 'acceptance = { dist = "uniform", low = 0.7, high = 0.7 }')
    assert set(same.uncertain) == {"compute_efficiency", "bandwidth_efficiency", "overhead_ms",
                                   "acceptance"}
    runs = run_study(same).runs
    # The config states the GPU's factors (as numbers it draws): only the calibration says so.
    assert (runs.pop("calibration") == "stated").all()
    assert (plain["calibration"] == "fitted").all()
    pd.testing.assert_frame_equal(runs, plain.drop(columns="calibration"), check_exact=True)


def test_wide_distributions_spread_the_seeds_and_are_recorded(plain):
    wide = study('compute_efficiency = { dist = "uniform", low = 0.15, high = 1.0 }\n'
                 'bandwidth_efficiency = { dist = "uniform", low = 0.2, high = 1.0 }')
    runs = run_study(wide).runs
    spread = runs.groupby("design")["p50_e2e_s"].std()
    assert (spread > 1.5 * plain.groupby("design")["p50_e2e_s"].std()).all()
    # Each run's draw is in its columns: the same for every design of a seed, new per seed.
    by_seed = runs.pivot(index="seed", columns="design", values="compute_efficiency")
    assert (by_seed[0] == by_seed[1]).all() and by_seed[0].nunique() == 20
    for seed in (0, 7):
        row = runs[(runs.seed == seed) & (runs.design == 1)].iloc[0]
        d = draws(wide.uncertain, seed)
        assert (row.compute_efficiency, row.bandwidth_efficiency) == (
            d["compute_efficiency"], d["bandwidth_efficiency"])
    assert (runs.overhead_ms == H100.overhead_ms).all()  # a plain factor stays plain
    # Slower draws, slower runs: the model's error reaches the metrics.
    slow = runs.bandwidth_efficiency < runs.bandwidth_efficiency.median()
    assert runs[slow].p50_e2e_s.mean() > runs[~slow].p50_e2e_s.mean()
    # Aggregation over seeds includes the draws: p_pass and the intervals come from the runs.
    brief = [Limit("p95_ttft_s", None, float(runs.p95_ttft_s.median()))]
    designs = aggregate(runs, brief, drawn=list(wide.uncertain))
    for d, group in runs.groupby("design"):
        assert designs.p_pass[d] == (group.p95_ttft_s <= brief[0].max).mean()
        assert designs.compute_efficiency[d] == pytest.approx(group.compute_efficiency.mean())
        assert designs.p50_e2e_s_std[d] == pytest.approx(group.p50_e2e_s.std())
    assert 0 < designs.p_pass.mean() < 1


@pytest.mark.parametrize("hardware, needle", [
    ('compute_efficiency = [{ dist = "uniform", low = 0.5, high = 0.7 }, 0.6]',
     "hardware.compute_efficiency: a distribution cannot be an axis value"),
    ('compute_efficiency = { dist = "uniform", low = 0.7, high = 0.5 }',
     "hardware.compute_efficiency: low 0.7 > high 0.5"),
    ('compute_efficiency = { dist = "uniform", low = 0, high = 0.5 }',
     "hardware.compute_efficiency.low: must be in (0, 1]"),
    ('overhead_ms = { dist = "beta", low = 0, high = 0.5 }',
     "hardware.overhead_ms.dist: unknown distribution 'beta'; allowed: uniform, normal"),
    ('overhead_ms = { dist = "normal", mean = 0.2, low = 0, high = 0.5 }',
     "hardware.overhead_ms: normal needs sd"),
    ('bandwidth_efficiency = { dist = "normal", mean = 0.9, sd = 0.1, low = 0.5, high = 0.8 }',
     "hardware.bandwidth_efficiency.mean: 0.9 is outside [low, high]"),
    ('bandwidth_efficiency = { dist = "uniform", low = 0.5, high = 0.8, sd = 1 }',
     "hardware.bandwidth_efficiency.sd: does not apply to uniform"),
    ('memory_overhead_fraction = { dist = "uniform", low = 0.1, high = 0.2 }',
     "hardware.memory_overhead_fraction: must be a number, got a table"),
])
def test_bad_distributions_are_refused_in_one_line(hardware, needle):
    with pytest.raises(ConfigError) as info:
        parse_study(PLAIN.format(hardware=hardware, levers=""), path="u.toml")
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_design_holds_the_centre_and_the_column_is_left_to_the_runs():
    s = study('compute_efficiency = { dist = "uniform", low = 0.5, high = 0.7 }',
              'acceptance = { dist = "normal", mean = 0.6, sd = 0.1, low = 0.3, high = 0.9 }')
    p = s.points[0]
    assert p.design.compute_efficiency == pytest.approx(0.6) and p.design.acceptance == 0.6
    assert p.columns["compute_efficiency"] is None and p.columns["acceptance"] is None
