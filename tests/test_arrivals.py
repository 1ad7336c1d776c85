"""Gamma (bursty) arrivals: their statistics, reproducibility, validation and queueing effect."""
import numpy as np
import pytest

from sweep.execution.batch import stack
from sweep.study.config import ConfigError, parse_study
from sweep.study.workload import Workload, sample_batch, sample_n, workload_params

#: Every sampler call here has this many slots and a batch of SEEDS: one compilation each (the
#: same slot count as tests/test_queueing.py's).
N = 1500
SEEDS = 8


def gamma_workload(cv, rate=10.0, **kw):
    kw.setdefault("num_requests", N)
    return Workload(arrival="gamma", arrival_cv=cv, arrival_rate=rate,
                    duration_s=kw.pop("duration_s", None), **kw)


def batch(workloads):
    """Requests of ``workloads[j]`` with seed j, sampled together."""
    return sample_batch(N, stack([workload_params(w, j, 4096, N) for j, w in enumerate(workloads)]))


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gaps_have_the_rate_and_the_coefficient_of_variation(cv):
    arrival = np.asarray(batch([gamma_workload(cv)] * SEEDS).arrival)
    gaps = np.diff(arrival, axis=1, prepend=0.0).ravel()
    # Standard error of the mean gap over 12000 gaps: cv/sqrt(n) of it (2.7% at cv 3); the
    # sample cv's is larger for heavy tails, hence the wider tolerance there.
    assert gaps.mean() == pytest.approx(0.1, rel=4 * cv / np.sqrt(gaps.size))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.04 if cv <= 1 else 0.15)


def test_sample_and_sample_batch_give_the_same_bits():
    wls = [gamma_workload(0.4), gamma_workload(6.0), Workload(
        arrival_rate=10.0, duration_s=None, num_requests=N)] * 2 + [gamma_workload(2.0)] * 2
    many = batch(wls)
    for j, w in enumerate(wls):
        one = sample_n(w, j, 4096, N)
        for field in ("arrival", "prompt", "output", "end_time"):
            np.testing.assert_array_equal(np.asarray(getattr(many, field)[j]),
                                          np.asarray(getattr(one, field)), err_msg=str(j))
        assert (np.diff(np.asarray(one.arrival)) >= 0).all()  # sorted, even when bursts make
        #                                                       gaps of ~1e-18 s
    assert not np.array_equal(np.asarray(many.arrival[6]), np.asarray(many.arrival[7]))


def test_duration_bound_covers_bursty_counts():
    wl = gamma_workload(4.0, rate=20.0, duration_s=20.0, num_requests=None)
    assert wl.capacity <= N
    counts = np.isfinite(np.asarray(batch([wl] * SEEDS).arrival)).sum(axis=1)
    assert counts.max() < wl.capacity
    assert np.std(counts) > 2 * np.sqrt(400)  # far burstier than Poisson counts


BASE = '''
name = "g"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = 4.0
duration_s = 10.0
'''


def test_config_columns_and_defaults():
    s = parse_study(BASE + 'arrival = ["poisson", "gamma"]\narrival_cv = 2.5\n')
    assert s.axes == ["arrival"]
    poisson, gamma = s.points
    assert poisson.columns["arrival_cv"] is None and gamma.columns["arrival_cv"] == 2.5
    assert gamma.workload.arrival_cv == 2.5 and poisson.workload.arrival_cv == 1.0
    assert gamma.workload.capacity > poisson.workload.capacity
    assert parse_study(BASE + 'arrival = "gamma"\n').points[0].workload.arrival_cv == 1.0


@pytest.mark.parametrize("extra, key", [
    ('arrival = "gamma"\narrival_cv = 0\n', "workload.arrival_cv: must be a number in (0, 10]"),
    ('arrival = "gamma"\narrival_cv = -1.5\n', "workload.arrival_cv"),
    ("arrival_cv = 2.0\n", 'workload.arrival_cv: applies only to bursty arrivals'),
    ('arrival = "bursty"\n', "allowed: poisson, constant, gamma"),
])
def test_bad_gamma_keys_are_refused_in_one_line(extra, key):
    with pytest.raises(ConfigError) as info:
        parse_study(BASE + extra, path="g.toml")
    assert key in str(info.value) and "\n" not in str(info.value)
