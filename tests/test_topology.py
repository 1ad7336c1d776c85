"""Replicas behind a router and disaggregated prefill/decode pools: the engine's
composition (sweep/engine/topology.py) and the event-driven twin's agree request by request, and
switching either off changes nothing."""
import math

import numpy as np
import pytest

from sweep.analysis.metrics import summarize
from sweep.engine import ITL_LOG_WIDTH
from sweep.engine import routers, topology
from sweep.engine.params import engine_params
from sweep.twin import (simulate_disaggregated_reference, simulate_mixed_reference,
                                    simulate_replicas_reference, summarize_reference)
from sweep.execution.batch import stack
from sweep.physics.hardware import get_gpu
from sweep.physics.numerics import float64
from sweep.study.config import ConfigError, parse_study
from sweep.study.design import Design
from sweep.study.fleet import MixedFleet
from sweep.study.workload import Lengths, Workload, sample_n
from tests.helpers import in_two_processes
from tests.test_twin_agreement import (CONTEXT, EXPERT_MODELS, N_DESIGNS, N_REQ, SEATS,
                                       _random_design, call)

N_CASES = 12

#: GPUs a disaggregated pool may run on (tensor parallel: an interconnect).
POOL_GPUS = ["H100-SXM", "H200", "A100-80GB", "B200", "MI300X", "L40S"]


def _call(params, reqs):
    """One engine call (``reqs`` stacked) in the agreement tests' compiled program."""
    return call(params, [topology._pick(reqs, k) for k in range(len(params))])


def _workload(rng, small, prefixes=False):
    shared = dict(prefix_count=int(rng.choice([1, 3, 8])),
                  prefix_tokens=int(rng.choice([8, 24, 64])),
                  prefix_share=float(rng.choice([0.5, 1.0]))) if prefixes else {}
    return Workload(
        arrival_rate=2000.0 if small else float(rng.choice([20.0, 200.0, 2000.0])),
        duration_s=None,
        num_requests=int(rng.integers(20, N_REQ + 1)),
        drain_s=None if rng.random() < 0.5 else float(rng.choice([0.0, 0.05, 0.5])),
        arrival=str(rng.choice(["poisson", "constant"])),
        prompt_tokens=Lengths("exponential", 60.0),
        output_tokens=Lengths("uniform", 0, 20, 80) if small else Lengths("exponential", 12.0),
        **shared)


def _features(rng, d):
    """``d`` with some of prefix caching (paged designs), chunked prefill and a token budget
    (from the least a rank allows: one decode per seat), or none of them."""
    chunk = int(rng.choice([0, 0, 16, 64]))
    extra = int(rng.choice([-1, 0, 5, 40]))  # -1: no budget
    budget = 0 if extra < 0 else d.rank_seats * (d.draft_tokens + 1) + extra
    return d.replace(prefix_cache=d.kv_cache == "paged" and rng.random() < 0.8,
                     prefill_chunk_tokens=chunk, max_num_batched_tokens=budget)


#: Each kind of case's router (the disaggregated and mixed kinds have their own).
ROUTER = {"replicas": "round_robin", "lor": "least_outstanding", "prefix": "prefix_aware",
          "session": "session"}


def _cases(kind: str, seed: int, features: bool = False):
    """Random designs with replicas behind ``ROUTER[kind]`` or with pools, their plans (the
    KV caches of some shrunken to force preemption) and random requests; with ``features``,
    most cache prefixes, chunk prefills or keep a token budget, on workloads that share
    prefixes."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(N_CASES):
        d, _, small = _random_design(rng, i, experts=kind != "disaggregated")
        if i % 4 == 1:  # a full paged cache under a burst: preemptions
            d, small = d.replace(batching="continuous", kv_cache="paged",
                                 max_batch=SEATS // d.data_parallel), True
        if features and i % 6 != 5:  # as vLLM serves: continuous batching, a paged cache
            d = _features(rng, d.replace(batching="continuous", kv_cache="paged"))
        if features and i % 6 == 0 and kind != "disaggregated":  # data-parallel ranks
            ranks = d.replace(model=str(rng.choice(EXPERT_MODELS)), expert_parallel=True,
                              data_parallel=2, gpus=min(d.gpus, 4),
                              max_batch=max(1, min(d.max_batch, SEATS // 2)))
            try:
                ranks.validate()
                d = ranks
            except ValueError:
                pass
        if features and small and d.prefix_cache:  # a CPU tier under a full cache
            tier = d.replace(kv_offload_gib=64.0)
            try:
                tier.validate()
                d = tier
            except ValueError:
                pass
        if kind != "disaggregated":
            d = d.replace(replicas=int(rng.integers(1, 6)), router=ROUTER[kind])
        else:
            g = d.gpus
            d = d.replace(gpus=1, prefill_gpus=int(rng.choice([1, g])), decode_gpus=g,
                          kv_link_gbps=float(rng.choice([1.0, 100.0, 400.0])))
            try:
                d.validate()
            except ValueError:
                d = d.replace(prefill_gpus=g)
            if i % 3 == 2:  # pools on different GPUs, where the model fits both
                mixed = d.replace(prefill_gpu=str(rng.choice(POOL_GPUS)),
                                  decode_gpu=str(rng.choice(POOL_GPUS)))
                try:
                    mixed.validate()
                    d = mixed
                except ValueError:
                    pass
            # xPyD: several servers a pool, the prefill pool's behind any router
            d = d.replace(prefill_workers=int(rng.choice([1, 2, 3])),
                          decode_workers=int(rng.choice([1, 2, 3])),
                          router=str(rng.choice(list(ROUTER.values()))))
            if features and i % 4 == 0:  # a pool of data-parallel attention ranks
                ranks = d.replace(model=str(rng.choice(EXPERT_MODELS)), prefill_gpu=None,
                                  decode_gpu=None, decode_data_parallel=2,
                                  decode_expert_parallel=True, prefill_gpus=min(g, 4),
                                  decode_gpus=1, max_batch=max(1, min(d.max_batch, SEATS // 2)))
                try:
                    ranks.validate()
                    d = ranks
                except ValueError:
                    pass
        if features and i % 5 == 3:  # vLLM V0 scheduling once per several passes
            d = d.replace(engine_version="0.6", num_scheduler_steps=[4, 8][i % 2])
        if features and i % 5 == 1 and d.gpu_spec.timing == "roofline":  # SGLang's rules
            d = d.replace(engine="sglang")
        p = topology.plan(d)
        if small:
            servers = p.first + ([] if p.decode is None else [p.decode])
            one = max(math.ceil(CONTEXT / int(x.block_tokens)) + int(x.seq_blocks)
                      for x in servers)
            shrink = dict(total_blocks=np.int32(rng.integers(one, one + 8)))
            if d.kv_offload_gib > 0:  # a tier of about two caches: it drops nodes too
                shrink["host_blocks"] = shrink["total_blocks"] * 2
            p = p._replace(first=[x._replace(**shrink) for x in p.first],
                           decode=None if p.decode is None else p.decode._replace(**shrink))
        out.append((d, p, sample_n(_workload(rng, small, features), int(rng.integers(2**31)),
                                   CONTEXT, N_REQ)))
    return out


def _mixed_cases(seed: int):
    """Random mixed fleets: two or three random designs (any GPU, model and levers, one context
    limit), a replica or two each, random capacity weights; some servers' KV caches shrunken."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(N_CASES):
        members, weights = [], []
        for j in range(2 + int(i % 3 == 0)):
            d = _random_design(rng, 3 * i + j, experts=False)[0]
            if i % 2 == 1 and j == 0:  # a full paged cache under a burst: preemptions
                d = d.replace(batching="continuous", kv_cache="paged", max_batch=SEATS)
            members.append(d.replace(replicas=int(rng.integers(1, 3)) if j < 2 else 1))
            weights.append(float(rng.uniform(0.2, 5.0)))
        fleet = MixedFleet(tuple(members), tuple(weights))
        p = topology.plan(fleet)
        servers = []
        for x in p.first:
            if i % 2 == 1 or rng.random() < 0.3:  # a small cache
                one = math.ceil(CONTEXT / int(x.block_tokens)) + int(x.seq_blocks)
                x = x._replace(total_blocks=np.int32(rng.integers(one, one + 8)))
            servers.append(x)
        wl = _workload(rng, i % 2 == 1)
        out.append((fleet, p._replace(first=servers), sample_n(wl, int(rng.integers(2**31)),
                                                                CONTEXT, N_REQ)))
    return out


def _twin(d, p, r):
    if p.weights is not None:
        return simulate_mixed_reference(p.first, p.weights, r)
    if p.decode is None:
        return simulate_replicas_reference(p.first[0], r, len(p.first), p.router)
    return simulate_disaggregated_reference(p.first[0], p.decode, r, p.kv_bytes_per_token,
                                            p.link_bytes_per_s, len(p.first), p.decoders,
                                            p.router)


def _closed(cases, rng):
    """The cases' designs under closed loops of a few clients (some with think time and a
    warm-up), on the same lengths and prefixes."""
    out = []
    for d, p, r in cases:
        wl = Workload(arrival="closed", concurrency=int(rng.choice([4, 8])),
                      think_time_s=float(rng.choice([0.0, 0.01])),
                      warmup_requests=int(rng.choice([0, 5])), duration_s=None,
                      num_requests=int(rng.integers(16, 40)),
                      prompt_tokens=Lengths("exponential", 60.0),
                      output_tokens=Lengths("exponential", 12.0), prefix_count=3,
                      prefix_tokens=24, prefix_share=0.8)
        out.append((d, p, sample_n(wl, int(rng.integers(2**31)), CONTEXT, N_REQ)))
    return out


@pytest.mark.parametrize("kind, features", [
    ("replicas", False), ("lor", False), ("disaggregated", False), ("mixed", False),
    ("replicas", True), ("lor", True), ("prefix", True), ("session", True),
    ("disaggregated", True), ("closed", True), ("closed-pools", True)])
def test_engine_and_twin_agree_per_request(kind, features):
    """Per request, per count and per metric, on random designs (with ``features``: prefix
    caching, chunked prefill and token budgets too, data-parallel ranks among them)."""
    seed = {"replicas": 20261201, "disaggregated": 20261202, "lor": 20261204,
            "mixed": 20261205, "prefix": 20261206, "session": 20261208, "closed": 20261209,
            "closed-pools": 20261210}[kind] + 7 * features
    if kind == "mixed":
        cases = _mixed_cases(seed)
    elif kind.startswith("closed"):  # every router, and pools
        rng = np.random.default_rng(seed)
        cases = _closed([c for k in (["disaggregated"] if kind == "closed-pools" else ROUTER)
                         for c in _cases(k, seed, features)[:N_CASES // 4 if kind == "closed"
                                                           else N_CASES // 2]], rng)
    else:
        cases = _cases(kind, seed, features)
    designs, plans, reqs = zip(*cases)
    width = sum(len(p.first) for p in plans)
    out = topology.run(list(plans), stack(reqs), _call, width)
    preempted = moved = 0
    for b, ((d, p, r), ref) in enumerate(zip(cases, in_two_processes(_twin, cases))):
        msg = f"case {b}: {d}"
        if kind == "lor" and len(p.first) > 1:
            moved += _check_least_outstanding(r, ref, len(p.first))
        if kind == "mixed":
            _check_shares(r, ref, p.weights)
        for name, eng, twin in [("first", out.first[b], ref.first_token),
                                ("finish", out.finish[b], ref.finish)]:
            assert np.array_equal(np.isnan(eng), np.isnan(twin)), (name, msg)
            ok = ~np.isnan(twin)
            np.testing.assert_allclose(eng[ok], twin[ok], rtol=1e-9, atol=0, err_msg=msg)
        np.testing.assert_array_equal(out.generated[b], ref.generated, err_msg=msg)
        assert float(out.t_stop[b]) == pytest.approx(ref.t_stop, rel=1e-9), msg
        for name in ("tokens", "preemptions", "max_queue", "peak_blocks", "passes",
                     "prefix_lookups", "prefix_hits"):
            assert int(getattr(out, name)[b]) == int(getattr(ref, name)), (name, msg)
        preempted += int(ref.preemptions > 0)
        with float64():  # as the runner's summaries run
            eng_m = summarize(type(out)(*(x[b] for x in out)), r, p.system)
        for key, value in summarize_reference(ref, r, p.system).items():
            v = float(eng_m[key])
            if key.endswith("_itl_ms") and not math.isnan(value):
                w = math.exp(ITL_LOG_WIDTH) ** 1.01
                assert value / w <= v <= value * w or value == v == 0, (key, v, value, msg)
            elif isinstance(value, float) and math.isnan(value):
                assert math.isnan(v), (key, msg)
            else:
                assert v == pytest.approx(float(value), rel=1e-9, abs=1e-12), (key, msg)
    if kind.startswith("closed"):
        _check_closed(cases, out)
        return
    assert preempted >= 1
    if features:
        _check_features_covered(designs, out)
    if kind == "mixed":
        assert len({str(g) for d in designs for g in (m.gpu for m in d.members)}) >= 4
        assert any(len({m.model for m in d.members}) > 1 for d in designs)
    elif kind != "disaggregated":
        assert {len(p.first) for p in plans} >= {1, 2, 3}
        assert (moved > 0) == (kind == "lor")
        cv = np.asarray(out.load_cv)
        assert (cv[[len(p.first) == 1 for p in plans]] == 0).all()
    else:
        assert {d.kv_link_gbps for d in designs} >= {1.0, 400.0}
        assert sum(d.prefill_gpu not in (None, d.decode_gpu) for d in designs) >= 2
        assert {d.prefill_workers for d in designs} >= {1, 2, 3}
        assert {d.decode_workers for d in designs} >= {1, 2, 3}
        assert len({d.router for d in designs if d.prefill_workers > 1}) >= 3
        assert not features or any(d.decode_data_parallel == 2 for d in designs)


def _check_closed(cases, out) -> None:
    """Each closed loop keeps its clients busy: no more than ``concurrency`` requests are ever
    in the fleet, and each measured request after the first clients' was sent by a finish."""
    several = 0
    for b, (d, p, r) in enumerate(cases):
        arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
        real = np.isfinite(np.asarray(r.arrival))
        assert np.isfinite(arrival[real]).all() and not out.truncated[b]
        for t in arrival[real]:
            inside = (arrival[real] <= t) & ~(finish[real] <= t)
            assert inside.sum() <= int(r.clients), (b, t)
        several += len(p.first) > 1 or p.decode is not None
    assert several >= 3


def _check_features_covered(designs, out) -> None:
    """The random cases cache, chunk and budget, some on data-parallel ranks or with a CPU
    tier, and hit."""
    cached = [d.prefix_cache for d in designs]
    assert sum(d.kv_offload_gib > 0 for d in designs) >= 1
    assert sum(cached) >= 3 and (np.asarray(out.prefix_hits) > 0).sum() >= 2
    assert sum(d.prefill_chunk_tokens > 0 for d in designs) >= 2
    assert sum(d.max_num_batched_tokens > 0 for d in designs) >= 3
    if any(d.replicas > 1 for d in designs):  # not the pools' kind
        assert any(d.data_parallel > 1 and (d.prefix_cache or d.max_num_batched_tokens)
                   for d in designs)


def _check_shares(r, ref, weights) -> None:
    """Every server's count of the requests so far stays within one of its capacity share."""
    w = np.asarray(weights) / np.sum(weights)
    n = int(np.sum(np.isfinite(np.asarray(r.arrival))))
    counts = np.zeros(w.size)
    for k in range(n):
        counts[ref.replica[k]] += 1
        assert np.all(np.abs(counts - (k + 1) * w) < 1.0), (k, counts, w)


def _check_least_outstanding(r, ref, n_rep) -> int:
    """Every request went to a replica with the fewest outstanding requests (sent there
    earlier, unfinished at its arrival), the lowest of them on a tie: by brute force. Returns
    how many went elsewhere than round robin would send them."""
    a = np.asarray(r.arrival)
    done = np.where(np.isnan(ref.finish), np.inf, ref.finish)
    moved = 0
    for i in np.flatnonzero(np.isfinite(a)):
        counts = [int(np.sum((ref.replica[:i] == j) & (done[:i] > a[i]))) for j in range(n_rep)]
        assert ref.replica[i] == int(np.argmin(counts)), (i, counts)
        moved += int(ref.replica[i] != i % n_rep)
    return moved


def test_one_replica_is_the_plain_engine():
    cases = _cases("replicas", 7)
    plain = [p.first[0] for _, p, _ in cases]
    reqs = stack([r for _, _, r in cases])
    one = topology.run([p._replace(first=p.first[:1], gpus=p.gpus[:1]) for _, p, _ in cases],
                       reqs, _call, N_CASES)
    base = _call(plain, reqs)
    for a, b in zip(one, base):
        np.testing.assert_array_equal(a, b)
    # One replica of a mixed call (beside replicated designs) is also the plain engine.
    mixed = topology.run([p for _, p, _ in cases], reqs, _call, N_DESIGNS)
    for b, (_, p, _) in enumerate(cases):
        if len(p.first) == 1:
            for x, y in zip(mixed, base):
                np.testing.assert_array_equal(x[b], y[b])


def test_replicas_split_round_robin_and_cost_every_gpu():
    d = Design(max_batch=8, replicas=3, gpus=2)
    p = topology.plan(d)
    assert len(p.first) == 3 and float(p.system.summary.gpus) == 6.0
    r = sample_n(Workload(num_requests=10, duration_s=None), 0, 8192, 12)
    r = type(r)(*(np.asarray(x) for x in r))
    subs = topology.split(r, routers.round_robin(12, 3), 3)
    np.testing.assert_array_equal(subs[1].arrival[:3], np.asarray(r.arrival)[[1, 4, 7]])
    assert np.isinf(subs[1].arrival[4:]).all()


def test_design_refuses_bad_topologies():
    with pytest.raises(ValueError,
                       match=r"^levers.router: .*allowed: round_robin, least_outstanding, "
                             r"prefix_aware, session$"):
        Design(router="random").validate()
    with pytest.raises(ValueError, match=r"^levers.replicas: "):
        Design(replicas=0).validate()
    with pytest.raises(ValueError, match=r"^levers.decode_gpus: missing"):
        Design(prefill_gpus=1).validate()
    with pytest.raises(ValueError, match=r"^levers.gpus: not used"):
        Design(prefill_gpus=1, decode_gpus=1, gpus=2).validate()
    with pytest.raises(ValueError, match=r"^levers.kv_link_gbps: "):
        Design(prefill_gpus=1, decode_gpus=1, kv_link_gbps=0.0).validate()
    with pytest.raises(ValueError, match=r"^levers.replicas: pools count their servers in "
                                         r"prefill_workers and decode_workers; allowed: 1$"):
        Design(prefill_gpus=1, decode_gpus=1, replicas=2).validate()
    with pytest.raises(ValueError, match=r"^levers.decode_workers: a disaggregated pool's, "
                                         r"only with prefill_gpus and decode_gpus"):
        Design(decode_workers=2).validate()
    with pytest.raises(ValueError, match=r"^levers.decode_data_parallel: ranks share the "
                                         r"experts only under expert_parallel"):
        Design(prefill_gpus=1, decode_gpus=1, decode_data_parallel=2).validate()
    two = Design(model="Mixtral-8x22B", prefill_gpus=8, decode_gpus=1, prefill_workers=3,
                 decode_workers=2, decode_data_parallel=4, decode_expert_parallel=True,
                 weight_bits=8)
    two.validate()
    assert two.total_gpus == 3 * 8 + 2 * 4 and two.servers == 3
    assert two.decode_pool().seats == 4 * two.max_batch == two.seats
    assert two.usd_per_hour == pytest.approx(32 * two.resolved("price_per_gpu_hour"))
    # A fleet of two such designs is one of twice the servers per pool.
    assert (two.times(2).prefill_workers, two.times(2).decode_workers) == (6, 4)
    assert two.times(2).total_gpus == 2 * two.total_gpus
    assert Design(replicas=2).times(3).replicas == 6
    with pytest.raises(ValueError, match=r"^design: replicas"):
        engine_params(Design(replicas=2))


MINIMAL = '''\
name = "t"
[model]
name = "Llama-3-8B"
[workload]
num_requests = 10
[levers]
'''


@pytest.mark.parametrize("levers, key, what", [
    ("gpus = 2\nprefill_gpus = 1\ndecode_gpus = 1\n", "levers.gpus", "not used with prefill_gpus"),
    ("prefill_gpus = 1\n", "levers.decode_gpus", "missing"),
    ("prefill_gpus = 3\ndecode_gpus = 1\n", "levers.prefill_gpus", "allowed: 1, 2, 4, 8"),
    ('router = "random"\n', "levers.router", "allowed: round_robin, least_outstanding"),
    ("replicas = 0\n", "levers.replicas", "integer in [1, 64]"),
    ("prefill_gpus = 1\ndecode_gpus = 1\nkv_link_gbps = -1.0\n", "levers.kv_link_gbps", "(0.0"),
    ("decode_workers = 2\n", "levers.decode_workers", "only with prefill_gpus and decode_gpus"),
    ("prefill_gpus = 1\ndecode_gpus = 1\nprefill_workers = 0\n", "levers.prefill_workers",
     "integer in [1, 64]"),
])
def test_config_refuses_in_one_line(levers, key, what):
    with pytest.raises(ConfigError) as err:
        parse_study(MINIMAL + levers)
    msg = str(err.value)
    assert "\n" not in msg and f"{key}:" in msg and what in msg, msg


def test_config_columns_of_pools_and_replicas():
    pools = parse_study(MINIMAL + "prefill_gpus = [1, 2]\ndecode_gpus = 4\n")
    cols = [p.columns for p in pools.points]
    assert [c["prefill_gpus"] for c in cols] == [1, 2] and cols[0]["gpus"] is None
    assert cols[0]["kv_link_gbps"] == 400.0 and pools.points[0].design.total_gpus == 5
    assert cols[0]["prefill_data_parallel"] == 1 and cols[0]["decode_expert_parallel"] is False
    xpyd = parse_study(MINIMAL + "prefill_gpus = 2\ndecode_gpus = 4\nprefill_workers = 3\n"
                       "decode_workers = 2\n").points[0]
    assert xpyd.design.total_gpus == 3 * 2 + 2 * 4 and xpyd.columns["prefill_workers"] == 3
    reps = parse_study(MINIMAL + 'replicas = 3\nrouter = "least_outstanding"\n').points[0]
    assert reps.columns["kv_link_gbps"] is None and reps.design.total_gpus == 3
    assert reps.columns["router"] == "least_outstanding"


def test_rows_do_not_depend_on_the_chunking():
    from sweep.execution.runner import run_study
    small = MINIMAL.replace("num_requests = 10", "num_requests = 24\narrival_rate = 60.0")
    study = parse_study(small + 'max_batch = 4\nreplicas = [1, 3]\nrouter = "least_outstanding"\n'
                        "[run]\nseeds = 2\n")
    pools = parse_study(small + "max_batch = 4\nprefill_gpus = 1\ndecode_gpus = [1, 2]\n"
                        "[run]\nseeds = 2\n")
    for s in (study, pools):
        whole = run_study(s, per_request=True)
        apart = run_study(s, chunk_size=1, per_request=True)
        assert whole.runs.equals(apart.runs) and whole.requests.equals(apart.requests)
        assert not whole.runs["truncated"].any()


def test_pools_on_different_gpus_cost_each_its_own_price():
    d = Design(model="Llama-3-8B", gpu="H100-SXM", gpus=1, prefill_gpus=2, decode_gpus=4,
               prefill_gpu="B200", decode_gpu="A100-80GB")
    p = topology.plan(d)
    b200, a100 = get_gpu("B200"), get_gpu("A100-80GB")
    want = 2 * b200.price_per_gpu_hour + 4 * a100.price_per_gpu_hour
    assert d.usd_per_hour == pytest.approx(want)
    assert float(p.system.summary.price_per_gpu_s) * 6 * 3600 == pytest.approx(want)
    assert p.first[0].timing.flops_per_s != p.decode.timing.flops_per_s  # each its own GPU
    with pytest.raises(ValueError, match="levers.prefill_gpu"):
        Design(model="Llama-3-8B", prefill_gpu="B200").validate()


def test_a_mix_of_one_design_at_equal_weights_is_its_replicas():
    """Capacity weights that are equal are round robin: two members of one design, weighted
    alike, are the design's three replicas, bit for bit."""
    d = Design(model="Llama-3.2-1B", max_batch=4, max_seq_len=CONTEXT)
    fleet = MixedFleet((d.replace(replicas=2), d), (3.5, 3.5))
    r = sample_n(Workload(arrival_rate=500.0, num_requests=N_REQ, duration_s=None), 3,
                 CONTEXT, N_REQ)
    a = topology.run([topology.plan(fleet)], stack([r]), _call, 3)
    b = topology.run([topology.plan(d.replace(replicas=3))], stack([r]), _call, 3)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert float(topology.plan(fleet).system.summary.gpus) == 3.0


def test_a_prefix_aware_fleet_misses_each_prefix_once_and_round_robin_once_per_replica():
    """With KV memory for every prefix, at a load where no two requests of a group prefill in
    one pass: under the prefix-aware router every request of a group after its first hits, the
    share the workload's draws imply; under round robin each replica misses each group once;
    the session router keeps each group on one replica."""
    wl = Workload(arrival_rate=10.0, duration_s=None, num_requests=N_REQ,
                  prompt_tokens=Lengths("fixed", 40.0), output_tokens=Lengths("fixed", 8.0),
                  prefix_count=5, prefix_tokens=64, prefix_share=0.9)
    r = sample_n(wl, 11, CONTEXT, N_REQ)
    prefix = np.asarray(r.prefix)
    grouped = prefix >= 0
    base = Design(model="Llama-3.2-1B", max_batch=SEATS, prefix_cache=True, replicas=4,
                  max_seq_len=CONTEXT)
    routers = ("prefix_aware", "round_robin", "session", "least_outstanding")
    plans = [topology.plan(base.replace(router=k)) for k in routers]
    out = topology.run(plans, stack([r] * len(plans)), _call, N_DESIGNS)
    hits = dict(zip(routers, np.asarray(out.prefix_hits)))
    lookups = dict(zip(routers, np.asarray(out.prefix_lookups)))
    assert set(lookups.values()) == {grouped.sum()}
    assert hits["prefix_aware"] == grouped.sum() - np.unique(prefix[grouped]).size
    pairs = {(c, i % 4) for i, c in enumerate(prefix) if c >= 0}
    assert hits["round_robin"] == grouped.sum() - len(pairs) < hits["prefix_aware"]
    assert hits["session"] == hits["prefix_aware"]
    cv = dict(zip(routers, np.asarray(out.load_cv)))
    assert cv["round_robin"] < 0.05 and cv["session"] > cv["round_robin"]
