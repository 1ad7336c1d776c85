"""The scan engine and the event-driven twin agree request by request on random designs."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sweep.engine import ITL_LOG_WIDTH, active_features, simulate_batch
from sweep.engine.params import engine_params
from sweep.twin import summarize_reference
from sweep.execution.batch import stack
from sweep.physics.models import Model
from sweep.physics.timing import TimingParams
from sweep.study.design import Design
from sweep.study.trace import Trace
from sweep.study.workload import Lengths, Workload, sample_n
from tests.helpers import LANES, run_batch, twins

N_DESIGNS = 64
SEATS = 12
K_MAX = 4
N_REQ = 72
#: The features compiled into every call of the agreement tests (``simulate_batch``'s
#: ``features``): one program for them all, and a feature no case uses changes no bit
#: (``test_a_feature_compiled_in_but_unused_changes_no_bit``).
COMPILED = ("prefills", "kv_offload", "closed_loop", "expert_parallel", "pipeline",
            "multi_step", "reservation")
#: A step bound above every simulation's own (the same results as none), passed where no
#: bound is meant, so that bounded and unbounded calls share one program.
UNBOUNDED = 2**31 - 1
CONTEXT = 512  # requests are clipped to this, so small caches still hold one full sequence

GPUS = ["H100-SXM", "H200", "A100-80GB", "L40S", "B200", "MI300X", "Apple-M3-Max"]
#: gpt-oss-20b has windowed layers and Nemotron-3 Mamba layers: every running sequence holds
#: a fixed share of blocks besides its context's (``seq_blocks``).
MODELS = ["Llama-3-8B", "Mistral-7B", "Llama-3.2-1B", "Llama-3-70B", "gpt-oss-20b",
          "Nemotron-3-Nano-30B-A3B"]
EXPERT_MODELS = ("gpt-oss-20b", "Nemotron-3-Nano-30B-A3B")
DISTS = [Lengths("exponential", 60.0), Lengths("fixed", 40.0), Lengths("uniform", 0, 10, 120),
         Lengths("lognormal", 50.0, sigma=0.8)]
OUTS = [Lengths("exponential", 12.0), Lengths("fixed", 9.0), Lengths("uniform", 0, 1, 30),
        Lengths("lognormal", 10.0, sigma=1.0)]


def _random_case(rng: np.random.Generator, i: int):
    """A random valid design, its (possibly shrunken) KV cache, and a random workload."""
    d, p, small = _random_design(rng, i)
    wl = Workload(
        arrival_rate=2000.0 if small else float(rng.choice([2.0, 20.0, 200.0, 2000.0])),
        duration_s=None, num_requests=int(rng.integers(20, N_REQ + 1)),
        drain_s=None if rng.random() < 0.5 else float(rng.choice([0.0, 0.05, 0.5])),
        arrival=str(rng.choice(["poisson", "constant"])),
        prompt_tokens=DISTS[int(rng.integers(len(DISTS)))],
        output_tokens=Lengths("uniform", 0, 20, 80) if small else OUTS[int(rng.integers(4))],
    )
    return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, N_REQ)


def _random_design(rng: np.random.Generator, i: int, experts: bool = True):
    """A random valid design, its engine arrays (the KV cache shrunken when ``small``), small;
    with ``experts``, some shard a mixture of experts over data-parallel ranks."""
    while True:
        gpu = GPUS[i % len(GPUS)] if i < 2 * len(GPUS) else str(rng.choice(GPUS))
        d = Design(
            gpu=gpu, model=str(rng.choice(MODELS)),
            batching=["one_at_a_time", "static", "continuous"][i % 3],
            max_batch=int(rng.integers(1, SEATS + 1)),
            kv_cache=["contiguous", "paged"][(i // 3) % 2],
            block_size=int(rng.choice([8, 16, 32])),
            max_seq_len=CONTEXT,
            gpus=1 if gpu == "Apple-M3-Max" else int(rng.choice([1, 2, 4, 8])),
            weight_bits=[16, 8, 4][i % 3 if i < 9 else int(rng.integers(3))],
            kv_bits=int(rng.choice([16, 8])),
            draft_tokens=int(rng.integers(0, K_MAX + 1)),
            acceptance=float(rng.choice([0.0, 1.0, rng.uniform(0.3, 0.95)])),
            draft_cost=float(rng.uniform(0.0, 0.3)),
        )
        if experts and d.batching == "continuous" and rng.random() < 0.5:
            # Experts sharded over every rank's GPUs; the server's seats stay within SEATS.
            dp = int(rng.choice([1, 2, 4]))
            d = d.replace(model=str(rng.choice(EXPERT_MODELS)), expert_parallel=True,
                          data_parallel=dp, max_batch=max(1, d.max_batch // dp))
            if d.server_gpus > 8:
                continue  # within a node: the ranks' all-to-all is a constant like any other
        if i % 4 == 1 and d.gpu != "Apple-M3-Max" and d.data_parallel == 1:
            d = d.replace(pipeline_parallel=[2, 4, 3][(i // 4) % 3])
        try:
            p = engine_params(d)
        except ValueError:
            continue  # e.g. a 70B model on too little memory
        one_seq = math.ceil(CONTEXT / int(p.block_tokens)) + int(p.seq_blocks)
        small = rng.random() < 0.6  # a small cache under a burst: admission and preemption
        if small and p.seq_blocks == 0 and rng.random() < 0.3:  # a share of its own, small
            p = p._replace(seq_blocks=np.int32(rng.integers(1, 4)))
            one_seq += int(p.seq_blocks)
        if small:
            p = p._replace(total_blocks=np.int32(rng.integers(one_seq, one_seq + 8)))
        return d, p, small


def call(params, reqs, max_steps=UNBOUNDED, count=None, **kwargs):
    """The engine on the cases ``params`` and ``reqs`` (lists; the first ``count``, default
    all, simulated), padded to N_DESIGNS unsimulated ones and compiled with COMPILED: the
    program of every call of the agreement tests."""
    m = len(params)
    pad = N_DESIGNS - m
    out = simulate_batch(stack(list(params) + [params[0]] * pad),
                         stack(list(reqs) + [reqs[0]] * pad), seats=SEATS, k_max=K_MAX,
                         lanes=LANES, count=m if count is None else count, features=COMPILED,
                         max_steps=jnp.int32(max_steps), **kwargs)
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:m], out)


def _run_cases(make_case, seed: int):
    """N_DESIGNS random cases through one engine call (one compiled shape for every test)."""
    rng = np.random.default_rng(seed)
    designs, params, reqs = zip(*(make_case(rng, i) for i in range(N_DESIGNS)))
    out, mets = run_batch(stack(params), stack(reqs), SEATS, K_MAX, jnp.int32(UNBOUNDED),
                          features=COMPILED)
    return designs, params, reqs, out, mets


@pytest.fixture(scope="module")
def cases():
    return _run_cases(_random_case, 20261207)


def test_cases_cover_every_lever(cases):
    designs, params, _, out, mets = cases
    for field, values in [("batching", {"one_at_a_time", "static", "continuous"}),
                          ("kv_cache", {"contiguous", "paged"}), ("gpus", {1, 2, 4, 8}),
                          ("weight_bits", {16, 8, 4}), ("kv_bits", {16, 8}),
                          ("draft_tokens", {0, 1, 2, 3, 4})]:
        assert {getattr(d, field) for d in designs} == values, field
    assert {d.gpu for d in designs} == set(GPUS)
    ep = [d.expert_parallel for d in designs]
    assert sum(ep) >= 4 and {d.data_parallel for d in designs} >= {1, 2, 4}
    assert {d.pipeline_parallel for d in designs} == {1, 2, 3, 4}
    held = [int(p.seq_blocks) > 0 for p in params]
    assert sum(held) >= 5 and sum(h and int(m) > 0 for h, m in zip(held, mets["preemptions"]))
    assert (mets["preemptions"] > 0).sum() >= 5
    assert (mets["unfinished"] > 0).sum() >= 3  # censored by a drain
    spec = [d.draft_tokens > 0 and 0 < d.acceptance < 1 for d in designs]
    assert sum(spec) >= 10
    assert not mets["truncated"].any()


def test_per_request_times_agree(cases):
    designs, params, reqs, out, mets = cases
    for b, ref in enumerate(twins(cases)):
        msg = f"case {b}: {designs[b]}"
        for name, eng, twin in [("first", out.first[b], ref.first_token),
                                ("finish", out.finish[b], ref.finish)]:
            eng = np.asarray(eng)
            assert np.array_equal(np.isnan(eng), np.isnan(twin)), (name, msg)
            ok = ~np.isnan(twin)
            np.testing.assert_allclose(eng[ok], twin[ok], rtol=1e-9, atol=0, err_msg=msg)
        np.testing.assert_array_equal(np.asarray(out.generated[b]), ref.generated, err_msg=msg)
        assert float(out.t_stop[b]) == pytest.approx(ref.t_stop, rel=1e-9), msg
        for name in ("tokens", "preemptions", "max_queue", "peak_blocks", "passes"):
            assert int(getattr(out, name)[b]) == int(getattr(ref, name)), (name, msg)
        assert float(out.area[b]) == pytest.approx(ref.area_in_system, rel=1e-9, abs=1e-12), msg

        # Summary metrics: exact quantities to 1e-9; the ITL histogram to its bin width.
        twin = summarize_reference(ref, reqs[b], params[b])
        for key, value in twin.items():
            eng_v = mets[key][b]
            if key.endswith("_itl_ms"):
                if math.isnan(value):
                    assert math.isnan(eng_v), (key, msg)
                else:
                    width = math.exp(ITL_LOG_WIDTH)
                    assert value / width**1.01 <= eng_v <= value * width**1.01 or (
                        value == 0 and eng_v == 0), (key, eng_v, value, msg)
            elif isinstance(value, float) and math.isnan(value):
                assert math.isnan(eng_v), (key, msg)
            else:
                assert eng_v == pytest.approx(value, rel=1e-9, abs=1e-12), (key, msg)


def _bursty_case(rng: np.random.Generator, i: int):
    """A random design on Gamma arrivals (even cases) or a random trace (odd cases), some of
    whose requests exceed the context and are clipped."""
    d, p, small = _random_design(rng, i)
    drain = None if rng.random() < 0.5 else float(rng.choice([0.0, 0.05, 0.5]))
    if i % 2 == 0:
        wl = Workload(arrival="gamma", arrival_cv=float(rng.choice([0.3, 1.0, 2.5, 6.0])),
                      arrival_rate=float(rng.choice([20.0, 200.0, 2000.0])), duration_s=None,
                      num_requests=int(rng.integers(20, N_REQ + 1)), drain_s=drain,
                      prompt_tokens=DISTS[int(rng.integers(len(DISTS)))],
                      output_tokens=Lengths("uniform", 0, 20, 80) if small else
                      OUTS[int(rng.integers(4))])
    else:
        rows = int(rng.integers(20, N_REQ + 20))
        trace = Trace("random", np.sort(rng.exponential(0.02, rows).cumsum() - 0.01).clip(0),
                      rng.integers(1, 2 * CONTEXT, rows).astype(np.int32),
                      rng.integers(1, 100, rows).astype(np.int32))
        wl = Workload(arrival="trace", trace=trace, duration_s=None,
                      num_requests=int(rng.integers(20, N_REQ + 1)), drain_s=drain,
                      trace_time_scale=float(rng.choice([0.1, 1.0, 3.0])))
    return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, N_REQ)


def _assert_requests_agree(out, b: int, ref, msg: str) -> None:
    """Simulation ``b``'s first-token and finish times (to 1e-9) and tokens equal the twin's."""
    for eng, twin in [(out.first[b], ref.first_token), (out.finish[b], ref.finish)]:
        eng = np.asarray(eng)
        assert np.array_equal(np.isnan(eng), np.isnan(twin)), msg
        ok = ~np.isnan(twin)
        np.testing.assert_allclose(eng[ok], twin[ok], rtol=1e-9, atol=0, err_msg=msg)
    np.testing.assert_array_equal(np.asarray(out.generated[b]), ref.generated, err_msg=msg)


def test_bursty_and_trace_workloads_agree_with_the_twin():
    """Gamma arrivals and trace replay only change the requests both simulators consume; the
    engine and the twin still agree request by request (same shapes as above: no new compile)."""
    runs = _run_cases(_bursty_case, 54)
    designs, params, reqs, out, _ = runs
    clipped = 0
    for b, ref in enumerate(twins(runs)):
        msg = f"case {b}: {designs[b]}"
        _assert_requests_agree(out, b, ref, msg)
        assert int(out.preemptions[b]) == ref.preemptions, msg
        real = np.isfinite(np.asarray(reqs[b].arrival))
        total = np.asarray(reqs[b].prompt)[real] + np.asarray(reqs[b].output)[real]
        assert (total <= CONTEXT).all()
        clipped += int((np.asarray(reqs[b].prompt)[real] == CONTEXT - 1).sum())
    assert clipped > 0  # some trace prompts were longer than the context
    assert sum(int(x) > 0 for x in out.preemptions) >= 5


#: A small mixture of experts (Llama-3.2-1B's attention, 8 experts of top-2 routing).
TINY_MOE = Model.gqa("tiny-moe", 3.9e9, 1.5e9, 16, 2048, 32, 8, 64, 4096, 128256, 131072,
                     experts=8, experts_per_token=2, expert_params=3.2e9)


def _extension_case(rng: np.random.Generator, i: int):
    """A random design with prefix caching (paged designs), chunked prefill and/or a token
    budget (decodes first), some of a mixture-of-experts model, on a workload that shares
    prefixes."""
    d, p, small = _random_design(rng, i, experts=False)  # the features run on one rank
    chunk = int(rng.choice([0, 0, 1, 16, 64, 200]))
    cache = d.kv_cache == "paged" and rng.random() < 0.8
    # Budgets from the smallest allowed (one decode per seat) to a few prefill tokens more.
    extra = int(rng.choice([-1, -1, 0, 1, 5, 40]))  # -1: no budget
    budget = 0 if extra < 0 else d.seats * (d.draft_tokens + 1) + extra
    d = d.replace(prefix_cache=cache, prefill_chunk_tokens=chunk, max_num_batched_tokens=budget)
    p = p._replace(prefix_cache=np.bool_(cache), prefill_chunk_tokens=np.int32(chunk),
                   max_num_batched_tokens=np.int32(budget))
    if d.gpu != "Apple-M3-Max" and rng.random() < 0.3:
        d = d.replace(model=TINY_MOE)
        p = p._replace(timing=TimingParams(*(np.float64(v) for v in d.timing())))
    wl = Workload(
        arrival_rate=2000.0 if small else float(rng.choice([20.0, 200.0, 2000.0])),
        duration_s=None, num_requests=int(rng.integers(20, N_REQ + 1)),
        drain_s=None if rng.random() < 0.5 else float(rng.choice([0.0, 0.05, 0.5])),
        arrival=str(rng.choice(["poisson", "constant"])),
        prompt_tokens=DISTS[int(rng.integers(len(DISTS)))],
        output_tokens=Lengths("uniform", 0, 20, 80) if small else OUTS[int(rng.integers(4))],
        prefix_count=int(rng.choice([1, 3, 8, 128])),
        prefix_tokens=int(rng.choice([8, 24, 64, 128])),
        prefix_share=float(rng.choice([0.3, 0.8, 1.0])))
    return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, N_REQ)


@pytest.fixture(scope="module")
def extension_cases():
    return _run_cases(_extension_case, 7)


def test_prefix_caching_and_chunked_prefill_agree_with_the_twin(extension_cases):
    """Every request's times, and every count, agree with the twin on random designs that cache
    prefixes and chunk prefills (some with neither: the same compiled engine runs them)."""
    designs, params, reqs, out, mets = extension_cases
    for b, ref in enumerate(twins(extension_cases)):
        msg = f"case {b}: {designs[b]}"
        _assert_requests_agree(out, b, ref, msg)
        assert float(out.t_stop[b]) == pytest.approx(ref.t_stop, rel=1e-9), msg
        for name in ("tokens", "preemptions", "max_queue", "peak_blocks", "passes",
                     "prefix_lookups", "prefix_hits"):
            assert int(getattr(out, name)[b]) == int(getattr(ref, name)), (name, msg)
        twin = summarize_reference(ref, reqs[b], params[b])
        for key in ("prefix_hit_rate", "prefill_tokens_saved", "mean_ttft_s", "p50_tpot_ms"):
            eng_v = float(mets[key][b])
            if isinstance(twin[key], float) and math.isnan(twin[key]):
                assert math.isnan(eng_v), (key, msg)
            elif key.startswith("prefi"):  # a count, and a ratio of counts: exact
                assert eng_v == twin[key], (key, eng_v, twin[key], msg)
            else:
                assert eng_v == pytest.approx(twin[key], rel=1e-9, abs=1e-12), (key, msg)


def test_extension_cases_cover_the_features(extension_cases):
    designs, _, _, out, mets = extension_cases
    cached = np.array([d.prefix_cache for d in designs])
    chunked = np.array([d.prefill_chunk_tokens > 0 for d in designs])
    budgeted = np.array([d.max_num_batched_tokens > 0 for d in designs])
    moe = np.array([d.model is TINY_MOE for d in designs])
    assert budgeted.sum() >= 10 and (budgeted & ~chunked).sum() >= 5
    assert moe.sum() >= 8 and (moe & budgeted).sum() >= 2
    assert (cached & chunked).sum() >= 5 and (cached & ~chunked).sum() >= 5
    assert (~cached & chunked).sum() >= 5
    staged = np.array([d.pipeline_parallel > 1 for d in designs])
    assert (staged & chunked).sum() >= 3 and (staged & cached).sum() >= 3
    assert (mets["prefill_tokens_saved"][cached] > 0).sum() >= 10
    assert ((mets["prefix_hit_rate"] > 0) & (mets["prefix_hit_rate"] < 1)).sum() >= 5
    assert (mets["preemptions"][cached | chunked] > 0).sum() >= 3
    assert not mets["truncated"].any()


def test_results_do_not_depend_on_where_decode_runs_are_cut(cases):
    """Static batches' decode runs (a call of static batches only) may take 16 or 64 passes at
    once: every output, the step count and a step bound's truncation included, is the same to
    the bit."""
    _, params, reqs, _, _ = cases
    static = [b for b in range(N_DESIGNS) if params[b].static]
    p, r = [params[b] for b in static], [reqs[b] for b in static]
    runs = [call(p, r, max_steps=40, static_lookahead=look) for look in (16, 64)]
    truncated = np.asarray(runs[0].truncated)
    assert 0 < truncated.sum() < len(static)
    # Runs are long (about 10 passes per 16-pass step), so 64-pass runs span several steps.
    assert np.asarray(runs[0].passes).sum() > 8 * np.asarray(runs[0].steps).sum()
    for name in runs[0]._fields:
        np.testing.assert_array_equal(np.asarray(getattr(runs[0], name)),
                                      np.asarray(getattr(runs[1], name)), err_msg=name)
    # Without the speculating ones, the call takes the plain decode run (engine.decode.plain_run):
    # the same bits again, truncation included.
    plain = [i for i, b in enumerate(static) if params[b].draft_tokens == 0]
    alone = call([p[i] for i in plain], [r[i] for i in plain], max_steps=40)
    assert 0 < np.asarray(alone.truncated).sum() < len(plain)
    _assert_outputs_equal(alone, runs[0], plain)


def _assert_outputs_equal(out, ref, rows) -> None:
    """Every field of ``out`` equals, to the bit, the ``rows`` of ``ref``."""
    for name in out._fields:
        np.testing.assert_array_equal(np.asarray(getattr(out, name)),
                                      np.asarray(getattr(ref, name))[np.asarray(rows)],
                                      err_msg=name)


def test_calls_without_speculation_take_the_plain_decode_run_to_the_same_bits(cases):
    """A call in which no simulation speculates takes the plain decode run from its first step
    (engine.decode.plain_run); in the mixed call the same designs took the general one while a
    speculating simulation ran. Their results are equal to the bit, so the plain run agrees
    with the twin as the general one does."""
    designs, params, reqs, out, _ = cases
    plain = [b for b in range(N_DESIGNS) if params[b].draft_tokens == 0]
    assert {designs[b].batching for b in plain} == {"one_at_a_time", "static", "continuous"}
    alone = call([params[b] for b in plain], [reqs[b] for b in plain])
    _assert_outputs_equal(alone, out, plain)


def test_simulations_after_count_are_padding_left_unsimulated(cases):
    """``count`` simulates the leading simulations only (the runner's padding after them
    would hold a lane for a whole block): their rows are the same bits, the rest stay zero."""
    _, params, reqs, out, _ = cases
    plain = [b for b in range(N_DESIGNS) if params[b].draft_tokens == 0]
    half = len(plain) // 2
    part = call([params[b] for b in plain], [reqs[b] for b in plain], count=half)
    _assert_outputs_equal(jax.tree_util.tree_map(lambda x: np.asarray(x)[:half], part), out,
                          plain[:half])
    for name in part._fields:
        assert not np.asarray(getattr(part, name))[half:].any(), name
    assert np.asarray(out.steps)[plain[half:]].all()  # the same rows, simulated, took steps


def test_a_feature_compiled_in_but_unused_changes_no_bit(cases):
    """The random cases' engine compiled with the features they use, and no other (as a sweep
    compiles it), gives the bits of the one compiled with COMPILED; a feature the batch uses
    may not be left out."""
    _, params, reqs, out, _ = cases
    p, r = stack(params), stack(reqs)
    used = active_features(p, r)
    assert used and set(used) < set(COMPILED)
    _assert_outputs_equal(simulate_batch(p, r, seats=SEATS, k_max=K_MAX, lanes=LANES), out,
                          range(N_DESIGNS))
    with pytest.raises(ValueError, match="features: '[a-z_]+' is used by the batch"):
        simulate_batch(p, r, seats=SEATS, k_max=K_MAX, features=("prefills",))
    with pytest.raises(ValueError, match="features: 'paging' unknown"):
        simulate_batch(p, r, seats=SEATS, k_max=K_MAX, features=("paging",))
