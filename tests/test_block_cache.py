"""The KV cache as a cache of blocks: a trace's hash ids replayed, the cached tokens exactly those
an independent replay finds where memory is ample, least-recently-used eviction as memory
shrinks, a CPU KV tier recovering what it evicts, and the engine and its twin agreeing request
by request."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import sweep
from sweep.engine import topology
from sweep.engine.params import engine_params
from sweep.execution.batch import stack
from sweep.study.design import Design
from sweep.study.trace import Trace, load_trace
from sweep.study.lengths import Lengths
from sweep.study.workload import Workload, path_shape, sample_n
from sweep.twin import simulate_reference, simulate_replicas_reference, summarize_reference
from tests.helpers import run_batch

SAMPLE = Path(__file__).parents[1] / "configs" / "traces" / "mooncake_conversation_sample.jsonl"
BLOCK = 512  # tokens per hash id in Mooncake's traces
GAP_S = 30.0  # arrivals this far apart: each prefill is done before the next request arrives
SEATS = 64


def spaced_trace(output: int = 4) -> Trace:
    """The shipped sample, one request every ``GAP_S`` seconds, each answering ``output``
    tokens (the cache is about the prompts)."""
    t = load_trace(SAMPLE)
    n = len(t.arrival)
    return Trace("spaced", np.arange(n) * GAP_S, t.prompt, np.full(n, output, np.int32),
                 t.hash_flat, t.hash_offsets)


def replay(rows: list[list[int]], prompts) -> np.ndarray:
    """Each request's cached tokens by an independent replay of the hashes: its longest prefix
    of blocks, among those ending before its last prompt token, that earlier requests' such
    blocks hold."""
    seen: set[int] = set()
    got = []
    for ids, prompt in zip(rows, prompts):
        usable = ids[:(int(prompt) - 1) // BLOCK]
        k = 0
        while k < len(usable) and usable[k] in seen:
            k += 1
        got.append(k * BLOCK)
        seen.update(usable)
    return np.asarray(got)


def simulate(trace: Trace, designs: list[Design]):
    wl = Workload(arrival="trace", trace=trace, hash_block_tokens=BLOCK)
    n = len(trace.arrival)
    reqs = [sample_n(wl, 0, d.context_limit, n) for d in designs]
    params = [engine_params(d) for d in designs]
    out, mets = run_batch(stack(params), stack(reqs), SEATS, 0)
    return reqs, params, out, mets


#: The CPU tiers (GiB per server) beside the smallest GPU cache: a Llama-3.1-8B token's KV is
#: 128 KiB, so 256 GiB hold about 2.1M tokens, and 1,024 GiB every block of the sample.
TIERS_GIB = (256.0, 1024.0)


@pytest.fixture(scope="module")
def shrinking():
    """One batch: prefix caching off, then on with KV memory from ample down to little more
    than the longest prompt needs, then that least memory with CPU tiers."""
    base = dict(gpu="H200", model="Llama-3.1-8B", max_batch=SEATS)
    designs = [Design(**base), *(Design(**base, prefix_cache=True, kv_blocks=b)
                                 for b in (400_000, 40_000, 16_000, 8_200)),
               *(Design(**base, prefix_cache=True, kv_blocks=8_200, kv_offload_gib=g)
                 for g in TIERS_GIB)]
    return spaced_trace(), designs, simulate(spaced_trace(), designs)


def test_a_trace_with_ample_memory_caches_exactly_what_a_replay_of_its_hashes_finds(shrinking):
    trace, _, (_, _, out, mets) = shrinking
    rows = [json.loads(line)["hash_ids"] for line in SAMPLE.read_text().splitlines()]
    expected = replay(rows, trace.prompt)
    assert expected.sum() > 0  # the sample's conversations resend their context
    np.testing.assert_array_equal(np.asarray(out.cached_tokens[1]), expected)
    assert int(np.asarray(out.cached_tokens[0]).sum()) == 0  # no prefix caching, no hits
    rate = mets["prefix_token_hit_rate"]
    assert rate[1] == pytest.approx(expected.sum() / trace.prompt.sum())
    assert int(mets["prefill_tokens_saved"][1]) == expected.sum()


def test_the_hit_rate_falls_as_memory_shrinks(shrinking):
    _, _, (_, _, out, mets) = shrinking
    rate = mets["prefix_token_hit_rate"][1:5]
    assert (np.diff(rate) <= 0).all(), rate
    assert rate[-1] < rate[0]
    assert not np.asarray(mets["truncated"]).any()


def test_a_cpu_tier_recovers_what_gpu_memory_evicts_and_pays_for_its_loads(shrinking):
    """Beside the least GPU memory, a tier recovers part of the hit rate, and one that holds
    every block all of it: exactly the ample cache's tokens per request, the loads making no
    first token earlier than the ample cache's."""
    trace, _, (_, _, out, mets) = shrinking
    rate = mets["prefix_token_hit_rate"]
    assert rate[4] < rate[5] < rate[6] == rate[1]
    np.testing.assert_array_equal(np.asarray(out.cached_tokens[6]),
                                  np.asarray(out.cached_tokens[1]))
    assert (np.asarray(out.first[6]) >= np.asarray(out.first[1])).all()
    assert (np.asarray(out.first[6]) > np.asarray(out.first[1])).any()


@pytest.mark.parametrize("k", [1, 3, 4, 5, 6])
def test_engine_and_twin_agree_per_request_on_a_block_trace(shrinking, k):
    """Ample memory, and two sizes that evict: first tokens, finishes and cached tokens per
    request, and the cache's counts."""
    _, designs, (reqs, params, out, mets) = shrinking
    r = reqs[k]
    ref = simulate_reference(params[k], r)
    np.testing.assert_array_equal(np.asarray(out.cached_tokens[k]), ref.cached_tokens)
    np.testing.assert_allclose(np.asarray(out.first[k]), ref.first_token, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(out.finish[k]), ref.finish, rtol=1e-12)
    assert int(out.prefix_hits[k]) == ref.prefix_hits
    assert int(out.prefix_lookups[k]) == ref.prefix_lookups
    assert int(out.prefix_saved[k]) == ref.prefix_saved
    twin = summarize_reference(ref, r, params[k])
    assert mets["prefix_token_hit_rate"][k] == pytest.approx(twin["prefix_token_hit_rate"])


def test_paths_stop_before_the_last_prompt_token_and_shapes_cover_the_trace():
    trace = spaced_trace()
    wl = Workload(arrival="trace", trace=trace, hash_block_tokens=BLOCK)
    length, nodes = path_shape([wl])
    assert length == int(np.diff(trace.hash_offsets).max())
    assert nodes == max(128, len(np.unique(trace.hash_flat)))
    r = sample_n(wl, 0, 131072, len(trace.arrival))
    path = np.asarray(r.path)
    ends = np.asarray(r.node_end)
    covered = np.where(path >= 0, ends[np.maximum(path, 0)], 0).max(axis=1)
    assert (covered < np.asarray(r.prompt)).all()
    assert (covered == (np.asarray(r.prompt) - 1) // BLOCK * BLOCK).all()
    assert (np.asarray(r.prefix) == -1).all()  # no prefix group: the routers see none


def test_a_prefix_aware_fleet_follows_the_conversations_blocks():
    """Three replicas: the prefix-aware router sends a turn where the longest start of its
    blocks went before, so the fleet finds more of them cached than round robin; the twin
    agrees request by request on both."""
    trace = spaced_trace()
    wl = Workload(arrival="trace", trace=trace, hash_block_tokens=BLOCK)
    designs = [Design(gpu="H200", model="Llama-3.1-8B", max_batch=SEATS, prefix_cache=True,
                      replicas=3, router=router) for router in ("round_robin", "prefix_aware")]
    res = sweep.simulate(designs, wl, seeds=1, model_error=False)
    cached = res.requests.groupby("sim")["cached_tokens"].sum()
    assert cached[1] > cached[0] > 0
    for k, d in enumerate(designs):
        reqs = sample_n(wl, 0, d.context_limit, len(trace.arrival))
        ref = simulate_replicas_reference(topology.plan(d).first[0], reqs, 3, d.router)
        mine = res.requests[res.requests["sim"] == k]
        np.testing.assert_array_equal(mine["cached_tokens"], ref.cached_tokens)
        np.testing.assert_allclose(mine["first_token_s"], ref.first_token, rtol=1e-12)
        np.testing.assert_allclose(mine["finish_s"], ref.finish, rtol=1e-12)


def test_a_thousand_prefixes_each_miss_once_and_evict_as_the_twin_does():
    """Beyond the 128 nodes every batch holds: with ample memory each prefix misses once, its
    first request's, and every later one hits; with little memory the engine evicts request by
    request as the twin does."""
    wl = Workload(arrival="constant", arrival_rate=4.0, num_requests=1500,
                  prompt_tokens=Lengths("fixed", 64), output_tokens=Lengths("fixed", 2),
                  prefix_count=1000, prefix_tokens=256, prefix_share=1.0)
    assert path_shape([wl]) == (1, 1024)
    designs = [Design(gpu="H100-SXM", model="Llama-3-8B", max_batch=16, prefix_cache=True,
                      kv_blocks=b) for b in (200_000, 3_000)]
    reqs = [sample_n(wl, 0, d.context_limit, 1500) for d in designs]
    params = [engine_params(d) for d in designs]
    out, mets = run_batch(stack(params), stack(reqs), 16, 0)
    groups = np.asarray(reqs[0].prefix)
    assert int(out.prefix_hits[0]) == len(groups) - len(np.unique(groups))
    assert int(out.prefix_hits[1]) < int(out.prefix_hits[0])
    ref = simulate_reference(params[1], reqs[1])
    np.testing.assert_array_equal(np.asarray(out.cached_tokens[1]), ref.cached_tokens)
    np.testing.assert_allclose(np.asarray(out.first[1]), ref.first_token, rtol=1e-12)
    assert int(out.prefix_hits[1]) == ref.prefix_hits
