"""Hand-checkable scenarios for the event-driven twin (sweep/twin/).

Every expected time is rebuilt here from ``timing.pass_time`` by listing the passes that
docs/model.md prescribes, and accumulating the clock the same way (t = t + duration).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sweep.engine.params import engine_params
from sweep.twin import simulate_reference, summarize_reference
from sweep.physics import rng, timing
from sweep.study.design import Design as _Design
from sweep.study.workload import Lengths, Requests, Workload, requests, sample

RTOL = 1e-13
#: The brief's roofline and no time outside the passes: the rules alone, in round numbers.
BRIEF = dict(compute_efficiency=0.6, bandwidth_efficiency=0.8, overhead_ms=0.2,
             request_overhead_ms=0.0, request_lag_passes=0.0, prompt_overhead_us=0.0)


def Design(**kw) -> _Design:
    return _Design(**{**BRIEF, **kw})


def make_requests(arrival, prompt, output, end_time=np.inf, seed=0, prefix=None,
                  prefix_tokens=0) -> Requests:
    return requests(arrival, prompt, output, end_time, seed, prefix, prefix_tokens)


def pt(params, prefills=(), decode_contexts=()) -> float:
    """Pass time of a pass that prefills lengths ``prefills`` and decodes sequences whose
    contexts (p + g) are ``decode_contexts``."""
    P = sum(prefills)
    pairs = sum(L * (L + 1) // 2 for L in prefills)
    return float(timing.pass_time(params.timing, np.float64(P), np.float64(pairs),
                                  np.float64(len(decode_contexts)),
                                  np.float64(sum(decode_contexts)), xp=np))


def close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64),
                               np.asarray(expected, dtype=np.float64), rtol=RTOL, atol=0)


@pytest.fixture(scope="module")
def h100():
    return engine_params(Design(gpu="H100-SXM", model="Llama-3-8B"))


# ----------------------------------------------------------------------------------------------
# One request


def test_single_request(h100):
    p, o, a = 100, 5, 0.5
    res = simulate_reference(h100, make_requests([a], [p], [o]))
    t = a + pt(h100, [p])
    first = t
    decodes = []
    for g in range(1, o):
        d = pt(h100, decode_contexts=[p + g])
        decodes.append(d)
        t = t + d
    close(res.first_token, [first])
    close(res.finish, [t])
    assert res.generated.tolist() == [o]
    assert res.tokens == o and res.passes == o and res.steps == o
    assert res.t_stop == res.finish[0]
    close(res.itl_gaps, decodes)
    assert res.preemptions == 0 and res.max_queue == 0 and not res.truncated
    assert res.peak_blocks == math.ceil((p + o) / 16)  # the last pass needs p + (o-1) + 1
    close(res.area_in_system, t - a)
    # A 100-token prefill and decode passes of an 8B model on an H100: a few milliseconds each.
    assert 5e-3 < first - a < 8e-3 and all(5e-3 < d < 8e-3 for d in decodes)

    s = summarize_reference(res, make_requests([a], [p], [o]), h100)
    close(s["mean_ttft_s"], first - a)
    close(s["p99_ttft_s"], first - a)
    close(s["p50_tpot_ms"], (t - first) / (o - 1) * 1e3)
    close(s["p99_itl_ms"], np.percentile(np.array(decodes) * 1e3, 99, method="inverted_cdf"))
    close(s["p50_e2e_s"], t - a)
    close(s["tokens_per_s"], o / t)
    close(s["cost_per_mtok"], 2.0 / 3600.0 * t / o * 1e6)
    close(s["peak_kv_gb"], math.ceil((p + o) / 16) * 16 * 131072 / 1e9)
    assert s["completed"] == 1 and s["unfinished"] == 0
    assert not s["unstable"] and not s["truncated"]


def test_single_output_token_and_idle_gap(h100):
    # Request 0 finishes long before request 1 arrives: the clock jumps to a_1.
    req = make_requests([1.0, 5.0], [64, 32], [1, 2])
    res = simulate_reference(h100, req)
    t0 = 1.0 + pt(h100, [64])
    t1 = 5.0 + pt(h100, [32])
    t2 = t1 + pt(h100, decode_contexts=[33])
    close(res.first_token, [t0, t1])
    close(res.finish, [t0, t2])
    close(res.itl_gaps, [t2 - t1])
    close(res.t_stop, t2)
    close(res.area_in_system, (t0 - 1.0) + (t2 - 5.0))
    s = summarize_reference(res, req, h100)
    close(s["p50_tpot_ms"], (t2 - t1) * 1e3)
    close(s["mean_in_system"], ((t0 - 1.0) + (t2 - 5.0)) / t2)


# ----------------------------------------------------------------------------------------------
# Batching


def _two_together(params):
    """Expected (first, finish) of requests (p=100, o=3) and (p=200, o=5), both at t=0, batched."""
    t = pt(params, [100, 200])
    first = [t, t]
    t += pt(params, decode_contexts=[101, 201])
    t += pt(params, decode_contexts=[102, 202])
    f0 = t
    t += pt(params, decode_contexts=[203])
    t += pt(params, decode_contexts=[204])
    return first, [f0, t]


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_two_simultaneous_batched(batching):
    params = engine_params(Design(batching=batching, max_batch=8))
    res = simulate_reference(params, make_requests([0.0, 0.0], [100, 200], [3, 5]))
    first, fin = _two_together(params)
    close(res.first_token, first)
    close(res.finish, fin)
    assert res.passes == 5 and res.tokens == 8 and res.max_queue == 0


def test_two_simultaneous_one_at_a_time():
    params = engine_params(Design(batching="one_at_a_time", max_batch=8))
    assert int(params.max_batch) == 1
    res = simulate_reference(params, make_requests([0.0, 0.0], [100, 200], [3, 5]))
    t = pt(params, [100])
    f0_first = t
    t += pt(params, decode_contexts=[101])
    t += pt(params, decode_contexts=[102])
    f0 = t
    t += pt(params, [200])
    f1_first = t
    for g in range(1, 5):
        t += pt(params, decode_contexts=[200 + g])
    close(res.first_token, [f0_first, f1_first])
    close(res.finish, [f0, t])
    assert res.max_queue == 1 and res.passes == 8


def test_late_arrival_continuous_vs_static():
    # Requests 0 and 1 arrive together; request 2 arrives during the first pass.
    arrival, prompt, output = [0.0, 0.0, 1e-6], [100, 200, 50], [3, 5, 2]
    req = make_requests(arrival, prompt, output)

    cont = engine_params(Design(batching="continuous", max_batch=8))
    res = simulate_reference(cont, req)
    t1 = pt(cont, [100, 200])
    t2 = t1 + pt(cont, [50], [101, 201])  # request 2 joins the second pass
    t3 = t2 + pt(cont, [], [102, 202, 51])  # requests 0 and 2 finish
    t4 = t3 + pt(cont, [], [203])
    t5 = t4 + pt(cont, [], [204])
    close(res.first_token, [t1, t1, t2])
    close(res.finish, [t3, t5, t3])

    stat = engine_params(Design(batching="static", max_batch=8))
    res = simulate_reference(stat, req)
    first, fin = _two_together(stat)  # request 2 waits for the whole batch
    t = fin[1] + pt(stat, [50])
    t_first2 = t
    t += pt(stat, [], [51])
    close(res.first_token, [first[0], first[1], t_first2])
    close(res.finish, [fin[0], fin[1], t])
    assert res.max_queue == 1


def test_static_batch_capped_by_seats():
    # Three simultaneous requests, two seats: the third waits for the batch's longest member.
    params = engine_params(Design(batching="static", max_batch=2))
    res = simulate_reference(params, make_requests([0, 0, 0], [10, 20, 30], [1, 3, 1]))
    t1 = pt(params, [10, 20])  # request 0 finishes at once; its seat stays empty
    t2 = t1 + pt(params, [], [21])
    t3 = t2 + pt(params, [], [22])
    t4 = t3 + pt(params, [30])
    close(res.first_token, [t1, t1, t4])
    close(res.finish, [t1, t3, t4])


# ----------------------------------------------------------------------------------------------
# KV memory


def test_contiguous_cache_blocks_admission():
    # Llama-3-70B at 8-bit weights on one H100 holds 2 contiguous 8192-token sequences.
    params = engine_params(Design(model="Llama-3-70B", weight_bits=8, kv_cache="contiguous"))
    assert int(params.total_blocks) == 2 and int(params.block_tokens) == 8192
    req = make_requests([0, 0, 0], [100, 200, 300], [2, 4, 2])
    res = simulate_reference(params, req)
    t1 = pt(params, [100, 200])  # request 2 does not fit: both blocks are taken
    t2 = t1 + pt(params, [], [101, 201])  # request 0 finishes, freeing its block
    t3 = t2 + pt(params, [300], [202])
    t4 = t3 + pt(params, [], [203, 301])
    close(res.first_token, [t1, t1, t3])
    close(res.finish, [t2, t4, t4])
    assert res.max_queue == 1 and res.peak_blocks == 2 and res.preemptions == 0
    s = summarize_reference(res, req, params)
    close(s["peak_kv_gb"], 2 * float(params.summary.block_bytes) / 1e9)


def test_fifo_admission_does_not_skip(h100):
    # 10 blocks of 16 tokens: request 0 takes 7; request 1 needs 7 and waits; request 2 needs
    # only 1 but may not overtake request 1.
    params = h100._replace(total_blocks=np.int32(10))
    res = simulate_reference(params, make_requests([0, 0, 0], [100, 100, 10], [2, 1, 1]))
    t1 = pt(params, [100])
    t2 = t1 + pt(params, [], [101])
    t3 = t2 + pt(params, [100, 10])
    close(res.first_token, [t1, t3, t3])
    close(res.finish, [t2, t3, t3])
    assert res.max_queue == 2 and res.peak_blocks == 8


def test_paged_preemption_and_recompute(h100):
    # 6 blocks of 16 tokens, two requests of 30 + 40 tokens. Both fit until g = 18, when each
    # needs a 4th block: request 1 (the later one) is preempted, request 0 runs to the end, then
    # request 1 is readmitted, recomputing its 48-token context in a prefill.
    params = h100._replace(total_blocks=np.int32(6))
    req = make_requests([0.0, 0.0], [30, 30], [40, 40])
    res = simulate_reference(params, req)

    t = pt(params, [30, 30])
    first = t
    for g in range(1, 18):
        t += pt(params, [], [30 + g, 30 + g])
    last1 = t  # request 1's 18th token
    for g in range(18, 40):
        t += pt(params, [], [30 + g])
    f0 = t
    t += pt(params, [48])  # readmission: one token, 19th
    recompute_gap = t - last1
    for g in range(19, 40):
        t += pt(params, [], [30 + g])
    f1 = t

    close(res.first_token, [first, first])
    close(res.finish, [f0, f1])
    assert res.preemptions == 1
    assert res.generated.tolist() == [40, 40] and res.tokens == 80
    assert res.passes == 1 + 17 + 22 + 1 + 21 and res.steps == res.passes + 1
    assert res.peak_blocks == 6
    assert len(res.itl_gaps) == 78  # 39 gaps per request
    assert np.any(np.isclose(res.itl_gaps, recompute_gap, rtol=RTOL, atol=0))
    assert recompute_gap == pytest.approx(res.itl_gaps.max(), rel=RTOL)


def test_paged_preemption_random_workload_completes():
    d = Design(max_batch=64)
    wl = Workload(arrival_rate=50.0, duration_s=None, num_requests=120, drain_s=None,
                  prompt_tokens=Lengths("uniform", low=16, high=400),
                  output_tokens=Lengths("uniform", low=1, high=200))
    req = sample(wl, 3, d.model_spec.max_context)
    params = engine_params(d)._replace(total_blocks=np.int32(200))  # 3200 tokens of cache
    res = simulate_reference(params, req)
    out = np.asarray(req.output)
    assert res.preemptions > 0
    assert np.all(np.isfinite(res.finish)) and res.generated.tolist() == out.tolist()
    assert res.tokens == int(out.sum()) and res.peak_blocks <= 200
    assert np.all(res.first_token >= np.asarray(req.arrival))
    assert np.all(res.finish >= res.first_token)
    assert len(res.itl_gaps) == int((out - 1).sum())
    assert res.steps == res.passes + res.preemptions


# ----------------------------------------------------------------------------------------------
# Speculative decoding


def test_speculation_acceptance_zero():
    params = engine_params(Design(draft_tokens=3, acceptance=0.0))
    assert not np.asarray(params.accept_thresholds).any()
    p, o = 100, 6
    res = simulate_reference(params, make_requests([0.0], [p], [o]))
    t = pt(params, [p])
    first = t
    gaps = []
    for g in range(1, o):  # one token per pass, but each pass pays for k + 1 and the draft
        d = pt(params, [], [p + g])
        gaps.append(d)
        t += d
    close(res.first_token, [first])
    close(res.finish, [t])
    close(res.itl_gaps, gaps)
    assert res.passes == o
    # The speculative pass costs more than a plain one.
    assert pt(params, [], [101]) > pt(engine_params(Design()), [], [101])


def test_speculation_acceptance_one():
    params = engine_params(Design(draft_tokens=3, acceptance=1.0))
    thr = np.asarray(params.accept_thresholds)
    assert (thr[:3] == 1 << 24).all() and not thr[3:].any()  # 0 past k: never accepted
    p, o = 100, 10
    res = simulate_reference(params, make_requests([0.0], [p], [o]))
    t1 = pt(params, [p])  # g = 1
    d1 = pt(params, [], [101])  # +4 -> 5
    d2 = pt(params, [], [105])  # +4 -> 9
    d3 = pt(params, [], [109])  # capped: +1 -> 10
    close(res.first_token, [t1])
    close(res.finish, [t1 + d1 + d2 + d3])
    close(res.itl_gaps, [d1, 0, 0, 0, d2, 0, 0, 0, d3])
    assert res.passes == 4 and res.tokens == 10


def test_speculation_partial_acceptance_uses_shared_draws():
    k, seed = 4, 7
    params = engine_params(Design(draft_tokens=k, acceptance=0.6))
    p, o = 50, 40
    res = simulate_reference(params, make_requests([0.0, 0.0], [p, p], [o, o], seed=seed))
    thr = np.asarray(params.accept_thresholds)[:k]
    npass = [0, 0]
    # Rebuild both requests' token counts pass by pass from the draws.
    g = [1, 1]
    t = pt(params, [p, p])
    n_passes = 1
    fin = [None, None]
    while any(x is None for x in fin):
        live = [i for i in range(2) if fin[i] is None]
        t += pt(params, [], [p + g[i] for i in live])
        n_passes += 1
        for i in live:
            u = int(rng.uniform_bits(seed, i, npass[i])[0])
            npass[i] += 1
            A = 0
            while A < k and u < thr[A]:  # thresholds fall: acceptance**j
                A += 1
            g[i] += min(A + 1, o - g[i])
            if g[i] == o:
                fin[i] = t
    close(res.finish, fin)
    assert res.passes == n_passes
    assert n_passes < o  # some drafts were accepted


# ----------------------------------------------------------------------------------------------
# Drain, censoring, truncation, stability, Little's law


def test_drain_censors_unserved_requests():
    params = engine_params(Design(batching="one_at_a_time"))
    arrival, prompt, output = [0.0, 0.0, 0.0], [100, 100, 100], [2, 2, 2]
    t1 = pt(params, [100])
    f0 = t1 + pt(params, [], [101])

    # end_time == request 0's finish: no pass may start then.
    req = make_requests(arrival, prompt, output, end_time=f0)
    res = simulate_reference(params, req)
    close(res.t_stop, f0)
    close(res.finish[0], f0)
    assert np.isnan(res.first_token[1:]).all() and np.isnan(res.finish[1:]).all()
    s = summarize_reference(res, req, params)
    assert s["completed"] == 1 and s["unfinished"] == 2
    close(s["mean_ttft_s"], (t1 + 2 * f0) / 3)  # censored TTFT = t_stop - a
    close(s["p95_e2e_s"], f0)
    close(s["tokens_per_s"], 2 / f0)

    # end_time just after: request 1's prefill starts before it and completes after it.
    req = make_requests(arrival, prompt, output, end_time=f0 + 1e-9)
    res = simulate_reference(params, req)
    t3 = f0 + pt(params, [100])
    close(res.t_stop, t3)
    close(res.first_token[:2], [t1, t3])
    assert res.generated.tolist() == [2, 1, 0] and not res.truncated
    s = summarize_reference(res, req, params)
    assert s["completed"] == 1 and s["unfinished"] == 2
    close(s["mean_ttft_s"], (t1 + t3 + t3) / 3)
    close(s["p50_e2e_s"], t3)
    close(res.area_in_system, f0 + t3 + t3)


def test_truncation(h100):
    req = make_requests([0.0], [100], [50])
    res = simulate_reference(h100, req, max_steps=3)
    assert res.truncated and res.steps == 3 and res.passes == 3 and res.generated[0] == 3
    assert np.isnan(res.finish[0])
    assert summarize_reference(res, req, h100)["truncated"]
    res = simulate_reference(h100, req, max_steps=50)  # exactly enough
    assert not res.truncated and res.steps == 50 and res.finish[0] == res.t_stop


def test_unstable_queue():
    # One at a time, a request every millisecond, 50 tokens each (~0.3 s): the queue grows.
    n = 41
    params = engine_params(Design(batching="one_at_a_time"))
    arrival = np.arange(n) * 1e-3
    req = make_requests(arrival, [20] * n, [50] * n)
    res = simulate_reference(params, req, max_steps=60)
    # Only request 0 has its first token (after ~6 ms) while the others arrive: 20 wait at the
    # middle arrival (t = 20 ms), 30 three quarters in, 40 at the last: each 10 more, beyond
    # 0.05 x 10 + 1.
    assert res.first_token[0] < arrival[n // 2]
    assert not (res.first_token[1:] <= arrival[-1]).any()
    assert summarize_reference(res, req, params)["unstable"]

    res = simulate_reference(engine_params(Design()), req)  # 256 seats keep up
    assert not summarize_reference(res, req, engine_params(Design()))["unstable"]


def test_unstable_needs_a_trend_not_a_burst():
    # 30 requests a second apart, each served in 0.1 s but the last few, still waiting at the
    # end. Five at the end is a burst: 1 waits at the middle arrival and three quarters in, 5 at
    # the last. Fourteen is a trend: 1, then 7 (beyond 1 + 0.05 x 7 + 1), then 14.
    from sweep.twin.metrics import _unstable
    n = 30
    arrival = np.arange(n, dtype=float)
    real = np.ones(n, dtype=bool)
    for waiting, grew in ((5, False), (14, True)):
        first = np.where(np.arange(n) < n - waiting, arrival + 0.1, np.inf)
        assert _unstable(arrival, first, real, n, 0) == grew


def test_littles_law_and_invariants():
    d = Design(max_batch=32)
    params = engine_params(d)
    wl = Workload(arrival_rate=20.0, duration_s=None, num_requests=300, drain_s=None,
                  prompt_tokens=Lengths("exponential", 256.0),
                  output_tokens=Lengths("exponential", 64.0))
    req = sample(wl, 1, d.model_spec.max_context)
    res = simulate_reference(params, req)
    arrival, out = np.asarray(req.arrival), np.asarray(req.output)
    assert np.all(np.isfinite(res.finish)) and res.generated.tolist() == out.tolist()
    sojourn = res.finish - arrival
    s = summarize_reference(res, req, params)
    # L = lambda W, with lambda = n / t_stop over the whole run.
    assert s["mean_in_system"] == pytest.approx(len(out) / res.t_stop * sojourn.mean(), rel=1e-12)
    assert s["completed"] == 300 and s["unfinished"] == 0 and not s["truncated"]
    assert res.tokens == int(out.sum()) and len(res.itl_gaps) == int((out - 1).sum())
    # Every request waits at least its own prefill alone.
    lone = np.array([pt(params, [int(p)]) for p in np.asarray(req.prompt)])
    assert np.all(res.first_token - arrival >= lone * (1 - 1e-12))
    close(s["p95_ttft_s"], np.percentile(res.first_token - arrival, 95))
    long = out > 1
    close(s["p99_tpot_ms"],
          np.percentile(((res.finish - res.first_token) / np.maximum(out - 1, 1) * 1e3)[long], 99))


def test_padding_requests_never_arrive(h100):
    req = make_requests([0.0, 0.0, np.inf, np.inf], [10, 10, 10, 10], [2, 2, 2, 2])
    res = simulate_reference(h100, req)
    t1 = pt(h100, [10, 10])
    t2 = t1 + pt(h100, [], [11, 11])
    close(res.finish[:2], [t2, t2])
    assert np.isnan(res.finish[2:]).all() and res.t_stop == t2
    s = summarize_reference(res, req, h100)
    assert s["completed"] == 2 and s["unfinished"] == 0
