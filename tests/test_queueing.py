"""Queueing theory where it applies exactly: M/G/1 (Pollaczek-Khinchine) and Little's law."""
import numpy as np
import pytest

from sweep.api import simulate
from sweep.physics.timing import pass_time
from sweep.study.design import Design
from sweep.study.workload import Lengths, Workload

SEEDS = 24
RATE = 6.0  # requests/s; with ~0.1 s of service, utilisation ~0.6


@pytest.fixture(scope="module")
def mg1():
    """One-at-a-time serving with Poisson arrivals is an M/G/1 FIFO queue (every seed at the
    central factors: the service times are the design's)."""
    design = Design(batching="one_at_a_time")
    wl = Workload(arrival_rate=RATE, duration_s=None, num_requests=1500, drain_s=None,
                  prompt_tokens=Lengths("exponential", 256.0),
                  output_tokens=Lengths("exponential", 16.0))
    return design, simulate(design, wl, seeds=SEEDS, model_error=False)


def service_times(design, prompt, output):
    """A request's service: one prefill pass, then o - 1 single-sequence decode passes."""
    tp = design.timing()
    out = np.empty(len(prompt))
    for i, (p, o) in enumerate(zip(prompt, output)):
        ctx = p + np.arange(1, o, dtype=np.float64)
        out[i] = pass_time(tp, float(p), p * (p + 1) / 2, 0.0, 0.0) + np.sum(
            pass_time(tp, 0.0, 0.0, 1.0, ctx))
    return out


def test_mean_wait_matches_pollaczek_khinchine(mg1):
    design, res = mg1
    req = res.requests
    assert res.metrics["completed"].eq(res.metrics["requests"]).all()
    s = service_times(design, req["prompt_tokens"].to_numpy(), req["output_tokens"].to_numpy())
    prefill = np.array([pass_time(design.timing(), float(p), p * (p + 1) / 2, 0.0, 0.0)
                        for p in req["prompt_tokens"]])
    # The engine's service time of each request equals the pass sum (nothing else is running).
    np.testing.assert_allclose(req["finish_s"] - req["first_token_s"] + prefill, s, rtol=1e-9)
    wait = req["first_token_s"] - prefill - req["arrival_s"]
    assert (wait > -1e-9).all()
    rho = RATE * s.mean()
    assert 0.4 < rho < 0.8
    pk = RATE * np.mean(s**2) / (2 * (1 - rho))
    per_seed = wait.groupby(req["sim"]).mean()
    half_width = 2.58 * per_seed.std(ddof=1) / np.sqrt(SEEDS)  # 99% confidence
    assert abs(per_seed.mean() - pk) < half_width, (per_seed.mean(), pk, half_width)
    print(f"M/G/1: rho={rho:.3f} mean wait {per_seed.mean():.4f} s, P-K {pk:.4f} s, 99% CI +-{half_width:.4f}")
    assert half_width < 0.2 * pk  # the check has teeth


def test_littles_law_mg1(mg1):
    """Time-average number in system (integrated by the engine) = throughput x mean sojourn."""
    _, res = mg1
    m, req = res.metrics, res.requests
    sojourn = (req["finish_s"] - req["arrival_s"]).groupby(req["sim"]).mean()
    lam = m["requests"] / m["sim_time_s"]
    np.testing.assert_allclose(m["mean_in_system"], lam * sojourn.to_numpy(), rtol=1e-9)
    # And against the true arrival rate, statistically.
    assert abs(m["mean_in_system"].mean() / (RATE * sojourn.mean()) - 1) < 0.05


def test_a_simulation_out_of_steps_is_flagged_not_trusted(mg1):
    """The same simulations with a step bound far too small: every one is flagged truncated and
    counts its unfinished requests; none pretends to be complete."""
    design, full = mg1
    wl = Workload(arrival_rate=RATE, duration_s=None, num_requests=1500, drain_s=None,
                  prompt_tokens=Lengths("exponential", 256.0),
                  output_tokens=Lengths("exponential", 16.0))
    cut = simulate(design, wl, seeds=SEEDS, max_steps=200, model_error=False).metrics
    assert cut["truncated"].all() and not full.metrics["truncated"].any()
    assert (cut["unfinished"] > 0).all()
    assert (cut["completed"] + cut["unfinished"] == cut["requests"]).all()
    assert (cut["completed"] < full.metrics["completed"]).all()


def test_burstier_arrivals_wait_longer(mg1):
    """The same queue with Gamma gaps of cv 3 instead of Poisson's 1 (same rate and shapes):
    Kingman's G/G/1 approximation scales the mean wait by (cv_a^2 + cv_s^2) / (1 + cv_s^2),
    here several times; the simulated mean wait must at least double."""
    design, poisson = mg1
    wl = Workload(arrival="gamma", arrival_cv=3.0, arrival_rate=RATE, duration_s=None,
                  num_requests=1500, drain_s=None, prompt_tokens=Lengths("exponential", 256.0),
                  output_tokens=Lengths("exponential", 16.0))
    bursty = simulate(design, wl, seeds=SEEDS, model_error=False).metrics
    assert bursty["completed"].eq(bursty["requests"]).all()
    assert bursty["mean_ttft_s"].mean() > 2 * poisson.metrics["mean_ttft_s"].mean()
    assert (bursty["max_queue"] > poisson.metrics["max_queue"].to_numpy()).mean() > 0.8
