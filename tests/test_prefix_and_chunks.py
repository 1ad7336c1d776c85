"""Prefix caching and chunked prefill: exact savings on deterministic workloads, and turning
either off (or chunking with a budget above every prompt) changes nothing, bit for bit."""
import numpy as np
import pytest

from sweep.engine.params import engine_params
from sweep.twin import simulate_reference, summarize_reference
from sweep.execution.batch import stack
from sweep.physics import timing
from sweep.study.design import Design
from sweep.study.workload import Lengths, Workload, sample_n
from tests.helpers import run_batch

SEATS, N = 8, 40
CONTEXT = 2048


def _run(designs, reqs):
    """Engine results of the designs, the batch padded to 6 simulations and k_max 2, so that
    every test here shares one compiled shape (with or without the features)."""
    params = [engine_params(d) for d in designs]
    m = len(params)
    params, reqs = params + params[-1:] * (6 - m), list(reqs) + list(reqs[-1:]) * (6 - m)
    out, mets = run_batch(stack(params), stack(reqs), SEATS, 2)
    return out, {k: v[:m] for k, v in mets.items()}


def _same(out, b, ref_out, rb):
    for name in ("first", "finish", "generated", "t_stop", "itl_hist", "tokens", "passes",
                 "preemptions", "peak_blocks", "area", "busy"):
        assert np.array_equal(np.asarray(getattr(out, name)[b]),
                              np.asarray(getattr(ref_out, name)[rb]), equal_nan=True), name


WL = Workload(arrival_rate=50.0, duration_s=None, num_requests=N, drain_s=None,
              prompt_tokens=Lengths("exponential", 300.0),
              output_tokens=Lengths("exponential", 30.0),
              prefix_count=3, prefix_tokens=200, prefix_share=0.7)
BASE = [Design(max_batch=SEATS, draft_tokens=2), Design(max_batch=4, batching="static"),
        Design(gpu="A100-80GB", max_batch=SEATS)]


@pytest.fixture(scope="module")
def plain():
    reqs = [sample_n(WL, s, CONTEXT, N) for s in range(len(BASE))]
    return reqs, _run(BASE, reqs)[0]


def test_features_off_in_the_extended_engine_change_nothing(plain):
    """Designs without either feature, batched with one that chunks (so the engine is compiled
    with both features), give the plain engine's results bit for bit; so does a chunk budget
    above every prompt and context."""
    reqs, base = plain
    big = 10 * CONTEXT
    designs = BASE + [d.replace(prefill_chunk_tokens=big) for d in BASE]
    out, _ = _run(designs, reqs + reqs)
    for b in range(len(BASE)):
        _same(out, b, base, b)
        _same(out, len(BASE) + b, base, b)
    assert int(np.asarray(out.prefix_lookups).sum()) == 0


def test_prefix_caching_saves_exactly_the_cached_tokens():
    """One prefix shared by every request, one request at a time, arrivals far apart: the
    first request prefills its prompt in full, every later one only what follows the prefix,
    and its first token comes after exactly that shorter prefill."""
    P, L, n = 400, 100, 12
    wl = Workload(arrival="constant", arrival_rate=1.0, duration_s=None, num_requests=n,
                  drain_s=None, prompt_tokens=Lengths("fixed", L), output_tokens=Lengths(
                      "fixed", 5), prefix_count=1, prefix_tokens=P, prefix_share=1.0)
    reqs = sample_n(wl, 0, CONTEXT, N)
    assert (np.asarray(reqs.prompt)[:n] == P + L).all() and (np.asarray(reqs.prefix)[:n] == 0).all()
    on = Design(batching="one_at_a_time", prefix_cache=True)
    off = Design(batching="one_at_a_time")
    out, mets = _run([on, off], [reqs, reqs])
    tp = engine_params(on).timing
    ttft = (np.asarray(out.first) - np.asarray(reqs.arrival))[:, :n]
    full = timing.pass_time(tp, float(P + L), (P + L) * (P + L + 1) / 2, 0.0, 0.0)
    rest = timing.pass_time(tp, float(L), L * P + L * (L + 1) / 2, 0.0, 0.0)
    np.testing.assert_allclose(ttft[1], full, rtol=1e-12)
    np.testing.assert_allclose(ttft[0], [full] + [rest] * (n - 1), rtol=1e-12)
    assert mets["prefill_tokens_saved"][0] == (n - 1) * P
    assert mets["prefix_hit_rate"][0] == (n - 1) / n
    assert mets["prefill_tokens_saved"][1] == 0 and np.isnan(mets["prefix_hit_rate"][1])
    # The decode passes are the same: only the prefills got shorter.
    np.testing.assert_allclose(np.asarray(out.finish[0] - out.first[0])[:n],
                               np.asarray(out.finish[1] - out.first[1])[:n], rtol=1e-9)
    ref = summarize_reference(simulate_reference(engine_params(on), reqs), reqs, engine_params(on))
    assert ref["prefill_tokens_saved"] == (n - 1) * P


def test_concurrent_sequences_share_prefix_blocks():
    """Six requests a microsecond apart with one prefix: the first pass serves the first alone
    (a miss: its prefix is cached when it is done), the second pass the other five, which all
    hit and hold the prefix's blocks once, beside their own."""
    P, L, n = 320, 16, 6
    wl = Workload(arrival="constant", arrival_rate=1e6, duration_s=None, num_requests=n,
                  drain_s=None, prompt_tokens=Lengths("fixed", L), output_tokens=Lengths(
                      "fixed", 1), prefix_count=1, prefix_tokens=P, prefix_share=1.0)
    reqs = sample_n(wl, 0, CONTEXT, N)
    d = Design(max_batch=SEATS, prefix_cache=True, block_size=16)
    out, mets = _run([d, d.replace(prefix_cache=False)], [reqs, reqs])
    full = -(-(P + L + 1) // 16)
    own = full - P // 16
    assert int(out.peak_blocks[1]) == 5 * full
    assert int(out.peak_blocks[0]) == 5 * own + P // 16
    assert int(out.passes[0]) == int(out.passes[1]) == 2
    assert mets["prefix_hit_rate"][0] == 5 / 6
    assert mets["prefill_tokens_saved"][0] == 5 * P
    ref = simulate_reference(engine_params(d), reqs)
    assert (ref.peak_blocks, ref.prefix_hits, ref.prefix_lookups) == (5 * own + P // 16, 5, 6)


def test_chunked_prefill_splits_a_long_prompt():
    """A 1000-token prompt under a 256-token budget takes four passes (256, 256, 256, 232),
    each attending to everything prefilled before it; its first token ends the fourth."""
    wl = Workload(arrival="constant", arrival_rate=1.0, duration_s=None, num_requests=1,
                  drain_s=None, prompt_tokens=Lengths("fixed", 1000),
                  output_tokens=Lengths("fixed", 3))
    reqs = sample_n(wl, 0, CONTEXT, N)
    d = Design(max_batch=SEATS, prefill_chunk_tokens=256)
    out, _ = _run([d], [reqs])
    tp = engine_params(d).timing
    expect, done = 0.0, 0
    for c in (256, 256, 256, 232):
        expect += timing.pass_time(tp, float(c), c * done + c * (c + 1) / 2, 0.0, 0.0)
        done += c
    np.testing.assert_allclose(float(out.first[0, 0] - reqs.arrival[0]), expect, rtol=1e-12)
    assert int(out.passes[0]) == 4 + 2


def test_workload_prefixes_leave_the_default_requests_unchanged():
    base = Workload(duration_s=None, num_requests=50)
    shared = Workload(duration_s=None, num_requests=50, prefix_count=4, prefix_tokens=64,
                      prefix_share=0.5)
    a, b = sample_n(base, 7, CONTEXT, 50), sample_n(shared, 7, CONTEXT, 50)
    assert (np.asarray(a.prefix) == -1).all()
    np.testing.assert_array_equal(np.asarray(a.arrival), np.asarray(b.arrival))
    np.testing.assert_array_equal(np.asarray(a.output)[np.asarray(b.prefix) < 0],
                                  np.asarray(b.output)[np.asarray(b.prefix) < 0])
    uses = np.asarray(b.prefix) >= 0
    assert 10 < uses.sum() < 40 and set(np.asarray(b.prefix)[uses]) <= {0, 1, 2, 3}
    np.testing.assert_array_equal(np.asarray(b.prompt)[uses],
                                  np.minimum(np.asarray(a.prompt)[uses] + 64, CONTEXT - 1))


@pytest.mark.parametrize("changes, key", [
    (dict(prefix_cache=True, kv_cache="contiguous"), "levers.prefix_cache"),
    (dict(prefill_chunk_tokens=-1), "levers.prefill_chunk_tokens"),
])
def test_design_refuses_bad_levers(changes, key):
    with pytest.raises(ValueError, match=key):
        Design(**changes).validate()


@pytest.mark.parametrize("changes, key", [
    (dict(prefix_count=2**20 + 1), "workload.prefix_count"),
    (dict(prefix_share=1.5), "workload.prefix_share"),
    (dict(prefix_share=0.5), "workload.prefix_share"),  # no prefixes to share
])
def test_workload_refuses_bad_prefixes(changes, key):
    with pytest.raises(ValueError, match=key):
        Workload(**changes).validate()
