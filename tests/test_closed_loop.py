"""Closed-loop load: the engine and the twin agree request by request, with one think time or
each pause drawn from a table, Little's law holds, warm-up requests count in no metric (one
engine call, one compiled shape, for these), and a capacity search brackets the most clients
within a brief."""
import math

import numpy as np
import pytest

from sweep.engine import features, simulate_batch, topology
from sweep.engine.params import engine_params
from sweep.execution.batch import stack
from sweep.execution.runner import simulate_rows
from sweep.study.config import parse_study
from sweep.study.design import Design
from sweep.study.lengths import Pauses
from sweep.study.workload import Lengths, Workload, sample, sample_n
from sweep.twin import simulate_replicas_reference
from sweep.workflows import capacity, capacity_checks, capacity_tables
from tests.helpers import (against_the_twin, agrees_per_request, capacity_refused, run_cases,
                           twins)
from tests.test_twin_agreement import CONTEXT, DISTS, K_MAX, OUTS, SEATS, _random_design

N_REQ = 240
N_RANDOM = 40
#: Little's law cases: (clients, think time s) x seeds, on one design; the last two draw each
#: pause (exponential), the others pause alike.
LITTLE = [(c, z) for c in (2, 5) for z in (0.0, 0.05)] + [(c, Pauses("exponential", 0.1))
                                                           for c in (2, 5)]
LITTLE_SEEDS = 4
LITTLE_WARMUP = 20
#: Random closed loops whose pauses are drawn from a table, after the Little's law cases.
N_DRAWN = 16
DRAWN = 20261203
PAUSES = [Pauses("exponential", 0.05), Pauses("uniform", low=0.0, high=0.3),
          Pauses("lognormal", 0.02, sigma=1.5), Pauses("fixed", 0.01)]


def _random_closed(rng: np.random.Generator, i: int):
    """A random design on a random closed loop: clients below and above the seats, think time
    or none, a warm-up or none."""
    d, p, small = _random_design(rng, i)
    n = int(rng.integers(30, N_REQ + 1))
    wl = Workload(arrival="closed", concurrency=int(rng.choice([1, 3, 8, 20])),
                  think_time_s=float(rng.choice([0.0, 0.0, 0.01, 0.2])),
                  warmup_requests=int(rng.choice([0, 5])), num_requests=n, duration_s=None,
                  prompt_tokens=DISTS[int(rng.integers(len(DISTS)))],
                  output_tokens=Lengths("uniform", 0, 20, 80) if small else
                  OUTS[int(rng.integers(4))])
    return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, N_REQ)


def _random_drawn(rng: np.random.Generator, i: int):
    """A random design on a random closed loop whose every pause is drawn from a table."""
    d, p, r = _random_closed(rng, i)
    wl = Workload(arrival="closed", concurrency=int(r.clients), warmup_requests=int(r.warmup),
                  think_time_s=PAUSES[i % len(PAUSES)], num_requests=N_REQ - 60,
                  duration_s=None, prompt_tokens=DISTS[i % len(DISTS)],
                  output_tokens=OUTS[int(rng.integers(4))])
    return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, N_REQ)


def _mean_pause(think) -> float:
    return think.average if isinstance(think, Pauses) else think


def _little(clients: int, think, seed: int):
    d = Design(model="Llama-3-8B", max_batch=8, max_seq_len=CONTEXT)
    wl = Workload(arrival="closed", concurrency=clients, think_time_s=think,
                  warmup_requests=LITTLE_WARMUP, num_requests=N_REQ - LITTLE_WARMUP,
                  duration_s=None, prompt_tokens=Lengths("uniform", 0, 50, 300),
                  output_tokens=Lengths("uniform", 0, 5, 60))
    return d, engine_params(d), sample_n(wl, seed, CONTEXT, N_REQ)


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(20261202)
    cases = [_random_closed(rng, i) for i in range(N_RANDOM)]
    cases += [_little(c, z, s) for c, z in LITTLE for s in range(LITTLE_SEEDS)]
    rng = np.random.default_rng(DRAWN)
    cases += [_random_drawn(rng, i) for i in range(N_DRAWN)]
    return run_cases(cases, SEATS, K_MAX)


def test_closed_loop_agrees_with_the_twin_request_by_request(runs):
    designs, params, reqs, out, mets = runs
    queued = 0
    for b, ref in enumerate(twins(runs)):
        ref, twin, msg = against_the_twin(runs, b, ref)
        for key in ("mean_ttft_s", "p90_ttft_s", "mean_tpot_ms", "mean_e2e_s", "tokens_per_s",
                    "cost_per_mtok", "completed", "goodput_rps", "mean_in_system"):
            assert mets[key][b] == pytest.approx(twin[key], rel=1e-9, nan_ok=True), (key, msg)
        assert not twin["unstable"], msg
        queued += int(ref.max_queue) > 0
    assert queued >= 10  # clients beyond the seats wait in the queue
    assert (mets["preemptions"][:N_RANDOM] > 0).sum() >= 3
    # A closed loop's queue holds at most its clients: never unstable, however long it waits.
    assert not mets["unstable"].any() and not mets["truncated"].any()


def _sends(clients: int, warmup: int, due, n: int) -> np.ndarray:
    """When n requests are sent, client by client: the first clients at 0; then one at each
    send in the order they are ``due``, except that the measured requests start together once
    the whole warm-up has returned and paused."""
    times = [0.0] * (min(clients, warmup) if warmup else clients)
    for j, t in enumerate(due):
        if warmup and j < warmup:
            times += ([t] if j + clients < warmup else [t] * clients if j == warmup - 1 else [])
        else:
            times.append(t)
    return np.array(times[:n])


def test_every_request_is_sent_at_a_finish_plus_the_gap(runs):
    """A request is sent when a client's last one returns plus its pause (the j-th finish's:
    request clients + j's draw) and the request overhead outside the passes, in the order the
    pauses end; the measured requests start together after the warm-up; all of them are
    served. Drawn pauses let a later finish's send overtake an earlier one's."""
    _, params, reqs, out, mets = runs
    overtaken = 0
    for b, r in enumerate(reqs):
        c, w = int(r.clients), int(r.warmup)
        gap = np.asarray(r.think) + float(params[b].summary.request_overhead_s)
        n = int(np.isfinite(np.asarray(r.arrival)).sum())
        finish = np.sort(np.asarray(out.finish[b])[:n])
        due = finish + gap[np.minimum(c + np.arange(n), len(gap) - 1)]
        np.testing.assert_array_equal(np.asarray(out.arrival[b])[:n],
                                      _sends(c, w, np.sort(due), n))
        assert mets["completed"][b] == n - w
        assert mets["requests"][b] == n - w
        overtaken += bool(np.any(np.diff(due[:n - c]) < 0))
    assert overtaken >= N_DRAWN // 2


def test_littles_law_within_the_monte_carlo_interval(runs):
    """Clients = throughput x (mean E2E + think time), while every client is active: from the
    first measured request's arrival to the last request's, throughput is the requests finished
    in that window per second, and E2E theirs, the request overhead outside the passes
    included."""
    _, params, reqs, out, _ = runs
    for k, (clients, think) in enumerate(LITTLE):
        ratios = []
        for s in range(LITTLE_SEEDS):
            b = N_RANDOM + k * LITTLE_SEEDS + s
            arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
            lo, hi = arrival[LITTLE_WARMUP], arrival.max()
            inside = (finish > lo) & (finish <= hi)
            x = inside.sum() / (hi - lo)
            w = (np.mean(finish[inside] - arrival[inside]) + _mean_pause(think)
                 + float(params[b].summary.request_overhead_s))
            ratios.append(x * w / clients)
        mean, se = np.mean(ratios), np.std(ratios, ddof=1) / math.sqrt(LITTLE_SEEDS)
        # A window's edges cut a cycle of each client: within one cycle per client in all.
        edge = clients / (N_REQ - LITTLE_WARMUP)
        assert abs(mean - 1) <= 3 * se + edge, (clients, think, ratios)
        assert abs(mean - 1) < 0.05, (clients, think, ratios)


def test_warmup_requests_count_in_no_metric(runs):
    """Every metric reads the measured requests alone: recomputed by hand from the per-request
    results after the warm-up, and the rates over the window from the first measured arrival."""
    _, params, reqs, out, mets = runs
    for k in range(len(LITTLE)):
        b = N_RANDOM + k * LITTLE_SEEDS
        w = LITTLE_WARMUP
        arrival, first = np.asarray(out.arrival[b]), np.asarray(out.first[b])
        finish, gen = np.asarray(out.finish[b]), np.asarray(out.generated[b])
        # Every request's own prompt tokens (no shared prefix here) cost the prompt overhead.
        assert not bool(params[b].prefix_cache)
        outside = float(params[b].summary.request_overhead_s) + float(
            params[b].summary.prompt_overhead_s) * np.mean(np.asarray(reqs[b].prompt)[w:])
        out_tok = np.asarray(reqs[b].output)
        tpot = (finish[w:] - first[w:]) / np.maximum(out_tok[w:] - 1, 1) * 1e3
        lag = float(params[b].summary.request_lag_passes) * np.mean(tpot[out_tok[w:] > 1]) * 1e-3
        assert mets["mean_ttft_s"][b] == pytest.approx(
            np.mean(first[w:] - arrival[w:]) + outside + lag, rel=1e-9)
        assert mets["mean_tpot_ms"][b] == pytest.approx(np.mean(tpot[out_tok[w:] > 1]), rel=1e-9)
        span = float(out.t_stop[b]) - arrival[w]
        assert mets["tokens_per_s"][b] == pytest.approx(gen[w:].sum() / span, rel=1e-9)
        # The warm-up's first requests, all sent at once, waited longer than the rest.
        assert np.mean(first[:w] - arrival[:w]) != pytest.approx(np.mean(first[w:] - arrival[w:]))


def test_pauses_are_drawn_per_request_as_real_numbers_the_same_however_many_slots():
    """A table's pauses are real numbers >= 0, drawn per request (not rounded) with the
    table's mean; the same seed draws the same pauses into any number of slots; a number, or
    a fixed table, is every request's."""
    for think, sd in [(Pauses("exponential", 2.0), 2.0), (Pauses("uniform", low=1.0, high=3.0),
                                                          2 / math.sqrt(12)),
                      (Pauses("lognormal", 2.0, sigma=0.5), 2.0 * math.sqrt(math.e**0.25 - 1))]:
        wl = Workload(arrival="closed", concurrency=8, think_time_s=think, num_requests=200,
                      duration_s=None)
        x = np.asarray(sample_n(wl, 3, CONTEXT, N_REQ).think)
        assert (x >= 0).all() and (x != np.round(x)).all()
        assert abs(x.mean() - 2.0) < 4 * sd / math.sqrt(x.size), think
        assert abs(x.std() - sd) < 0.3 * sd, think
        np.testing.assert_array_equal(np.asarray(sample(wl, 3, CONTEXT).think), x[:200])
    for think in (0.25, Pauses("fixed", 0.25)):
        wl = Workload(arrival="closed", concurrency=8, think_time_s=think, num_requests=200,
                      duration_s=None)
        assert (np.asarray(sample_n(wl, 3, CONTEXT, N_REQ).think) == 0.25).all()


def test_only_drawn_pauses_compile_the_merge_of_sends(runs):
    """The sends are merged in time order only in a batch with a closed loop whose pauses
    differ: one pause for every request compiles the closed loop as it was."""
    _, params, reqs, _, _ = runs
    drawn = N_RANDOM + len(LITTLE) * LITTLE_SEEDS
    assert "pauses" in features.active(stack(params), stack(reqs))
    assert "pauses" not in features.active(stack(params[:drawn - 8]), stack(reqs[:drawn - 8]))
    open_ = reqs[drawn]._replace(clients=np.int32(0))
    assert "pauses" not in features.active(params[drawn], open_)


def _fleet_call(params, reqs):
    return simulate_batch(stack(params), reqs, seats=SEATS, k_max=K_MAX)


def test_a_closed_loop_of_drawn_pauses_on_two_replicas_agrees_with_the_twin():
    """The fleet's clients pause, each finish on either replica its own draw, before the next
    request; behind round robin and least outstanding the engine and the twin agree request
    by request, arrivals included."""
    wl = Workload(arrival="closed", concurrency=6, think_time_s=Pauses("exponential", 0.05),
                  warmup_requests=4, num_requests=60, duration_s=None,
                  prompt_tokens=DISTS[2], output_tokens=OUTS[2])
    base = Design(model="Llama-3-8B", max_batch=4, max_seq_len=CONTEXT, replicas=2)
    designs = [base, base.replace(router="least_outstanding")]
    reqs = sample_n(wl, 5, CONTEXT, N_REQ)
    out = topology.run([topology.plan(d) for d in designs], stack([reqs] * 2), _fleet_call, 4)
    for i, d in enumerate(designs):
        ref = simulate_replicas_reference(topology.plan(d).first[0], reqs, 2, d.router)
        assert not ref.truncated and not out.truncated[i]
        agrees_per_request(out, i, ref, str(d))


def test_a_think_time_table_in_a_config_is_its_columns():
    """``think_time_s`` as a table in a config: its mean pause under ``think_time_s``, its
    other keys in their own columns, an axis of a number and tables."""
    text = CLOSED_CAPACITY.replace("[levers]", 'think_time_s = [2.0, { dist = "exponential", '
                                   'mean = 0.5 }, { dist = "uniform", low = 1.0, high = 4.0 }]\n'
                                   "[levers]")
    study = parse_study(text)
    cols = [{k: v for k, v in p.columns.items() if k.startswith("think")} for p in study.points]
    assert [c["think_time_s"] for c in cols] == [2.0, 0.5, 2.5]
    assert [c["think_time_s_dist"] for c in cols] == [None, "exponential", "uniform"]
    assert cols[2]["think_time_s_low"] == 1.0 and cols[1]["think_time_s_low"] is None
    assert study.points[2].workload.think_time_s == Pauses("uniform", low=1.0, high=4.0)
    assert "think_time_s_dist" in study.axes


CLOSED_CAPACITY = """name = "closed-capacity"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
arrival = "closed"
concurrency = 8
num_requests = 24
warmup_requests = 8
prompt_tokens = { dist = "uniform", low = 200, high = 400 }
output_tokens = { dist = "uniform", low = 20, high = 40 }
[levers]
max_batch = 16
[run]
seeds = 2
[brief]
p90_ttft_s = { max = 0.05 }
[capacity]
confidence = 1.0
"""


def test_capacity_of_a_closed_loop_brackets_the_most_clients_within_the_brief():
    """The search's own runs: every seed meets the brief at ``max_concurrency`` and some seed
    misses it one client more; the rate reported is the requests/s those clients drive."""
    study = parse_study(CLOSED_CAPACITY)
    limits = capacity.load_limits(study)
    probes = []

    def run(sub, skip, planned):
        probes.extend(p.workload for p in sub.points)
        # Every round in one call shape (its padding changes no result), compiled once: the
        # most simulations a round runs, and the request rows of the most clients probed.
        planned = planned._replace(simulations=max(planned.simulations, 10),
                                   min_slots=max(planned.min_slots, 128))
        return simulate_rows(sub, skip, planned=planned)

    runner = capacity.Runner(study, run)
    found = capacity.search(study, runner, limits)
    row = capacity_tables.table(study, runner, found, limits).iloc[0]
    best, over = int(row["max_concurrency"]), row["max_concurrency_high"]
    assert best > 1 and over == best + 1
    runs = runner.table()
    assert set(runs.columns[:4]) == {"design", "fleet", "concurrency", "seed"}
    at = runs[runs["concurrency"] == best]
    assert len(at) == 2 and (at["p90_ttft_s"] <= 0.05).all()
    above = runs[runs["concurrency"] == over]
    assert len(above) and (above["p90_ttft_s"] > 0.05).any()
    assert row["max_rate"] == pytest.approx(at["requests_per_s"].mean())
    # Every probe runs the configured benchmark per client: 3 measured requests and 1 warm-up.
    assert {(w.num_requests, w.warmup_requests) for w in probes} == \
        {(3 * w.concurrency, w.concurrency) for w in probes}
    assert max(w.concurrency for w in probes) > 8
    with pytest.raises(capacity.CapacityError, match="--target-rate"):
        capacity_checks.check(study, 10.0)


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("concurrency = 8", "concurrency = 64"), "workload.num_requests: 24"),
    (lambda t: t.replace("seeds = 2", "seeds = 2\nmax_requests = 100"), "requests per simulation"),
])
def test_a_closed_loop_capacity_search_refuses_bursts_and_oversized_probes(tmp_path, capsys,
                                                                          edit, key):
    capacity_refused(tmp_path, capsys, edit(CLOSED_CAPACITY), key)
