"""Physics of the simulator checked against the teaching simulator, the brief and datasheets:
the memory budget, KV sizes, ops:byte and the pass-time roofline.

Fast: plain numpy arithmetic, no JAX compilation.
"""
from __future__ import annotations

import math
import dataclasses

import numpy as np
import pytest

from sweep.physics import timing
from sweep.physics.hardware import get_gpu
from sweep.physics.memory import GIB, memory_budget
from sweep.physics.catalog import get_model
from tests import teaching_sim
from tests.helpers import crossover_ops_per_byte, ops_per_byte

#: The teaching simulator's "Memory budget for Llama 3 70B" table: (GPU, count) -> (KV GiB,
#: users@2K, users@4K), None where it prints DOES NOT FIT.
TEACHING_SIM_70B_TABLE = [
    ("A100-80GB", 1, None),
    ("A100-80GB", 2, (13.6, 21, 10)),
    ("A100-80GB", 4, (157.6, 252, 126)),
    ("H100-SXM", 8, (445.6, 712, 356)),
]

# --------------------------------------------------------------------------------------------
# 1. The teaching simulator's memory-budget table for Llama 3 70B.
# --------------------------------------------------------------------------------------------


def _teaching_sim_70b():
    return dataclasses.replace(get_model("Llama-3-70B"), params=70e9, active_params=70e9)


@pytest.mark.parametrize("gpu,n,expected", TEACHING_SIM_70B_TABLE)
def test_teaching_sim_70b_budget_table_exact(gpu, n, expected):
    assert get_gpu(gpu).memory_gib == 80
    # The table is the teaching simulator's own function's output; our restatement must agree
    # with it first.
    assert teaching_sim.memory_budget(teaching_sim.MODEL_CONFIGS["Llama-3-70B"], 80 * n) == expected
    b = memory_budget(_teaching_sim_70b(), get_gpu(gpu).memory_gib, n)
    assert b.gpus == n
    assert b.total_gib == 80 * n
    assert b.overhead_gib == pytest.approx(8.0 * n)
    assert b.weights_gib == pytest.approx(70e9 * 2 / 1024**3, rel=1e-12)
    if expected is None:
        assert not b.fits
        assert b.kv_tokens == 0
        assert b.kv_tokens // 2048 == 0
    else:
        kv, u2k, u4k = expected
        assert b.fits
        assert round(b.kv_gib, 1) == kv
        assert b.kv_tokens // 2048 == u2k
        assert b.kv_tokens // 4096 == u4k


@pytest.mark.parametrize("gpu,n,expected", TEACHING_SIM_70B_TABLE)
def test_70b_budget_with_real_parameter_count(gpu, n, expected):
    model = get_model("Llama-3-70B")
    assert model.params == pytest.approx(70.55e9, rel=1e-3)
    b = memory_budget(model, get_gpu(gpu).memory_gib, n)
    assert b.fits == (expected is not None)
    if expected is not None:
        kv, u2k, u4k = expected
        # 0.55e9 more 16-bit weights = 1.02 GiB less KV.
        assert b.kv_gib == pytest.approx(kv - 0.55e9 * 2 / GIB, abs=0.06)
        assert 0 <= u2k - b.kv_tokens // 2048 <= 2
        assert 0 <= u4k - b.kv_tokens // 4096 <= 2


def test_budget_quantisation_shrinks_weights_and_kv_bits_double_tokens():
    m = get_model("Llama-3-70B")
    b16 = memory_budget(m, 80, 1)
    b8 = memory_budget(m, 80, 1, weight_bits=8)
    b4 = memory_budget(m, 80, 1, weight_bits=4)
    assert not b16.fits and b8.fits and b4.fits
    assert b8.weights_gib == pytest.approx(b16.weights_gib / 2)
    assert b4.weights_gib == pytest.approx(b16.weights_gib / 4)
    kv8 = memory_budget(m, 80, 1, weight_bits=8, kv_bits=8)
    assert kv8.kv_tokens == pytest.approx(2 * b8.kv_tokens, abs=1)


# --------------------------------------------------------------------------------------------
# 2. The teaching simulator's STEP 1: per-token KV sizes and KV GiB at 4K / 32K / 128K.
# --------------------------------------------------------------------------------------------

#: KiB per token as the teaching simulator prints them (per_token_kb).
TEACHING_SIM_KV_KIB = {"Llama-3-8B": 128.0, "Llama-3-70B": 320.0, "Llama-3-405B": 504.0,
                       "Mistral-7B": 128.0, "GPT-4-est": 5760.0}


@pytest.mark.parametrize("name", sorted(teaching_sim.MODEL_CONFIGS))
def test_teaching_sim_kv_per_token(name):
    cfg = teaching_sim.MODEL_CONFIGS[name]
    expected = teaching_sim.kv_per_token(cfg)
    assert expected / 1024 == TEACHING_SIM_KV_KIB[name]
    m = get_model(name)
    assert m.kv_bytes_per_token() == expected
    assert m.kv_bytes_per_token(16) == expected
    assert m.kv_bytes_per_token(8) == expected / 2


@pytest.mark.parametrize("name", sorted(teaching_sim.MODEL_CONFIGS))
@pytest.mark.parametrize("seq_len", [4096, 32768, 131072])
def test_teaching_sim_kv_gib_at_context(name, seq_len):
    cfg = teaching_sim.MODEL_CONFIGS[name]
    expected_gib = teaching_sim.kv_per_token(cfg) * seq_len / 1024**3
    got = get_model(name).kv_bytes_per_token() * seq_len / GIB
    assert got == pytest.approx(expected_gib, rel=1e-12)
    # The teaching simulator's headline values, to the printed two decimals.
    printed = {("Llama-3-70B", 4096): 1.25, ("Llama-3-70B", 32768): 10.0,
               ("Llama-3-70B", 131072): 40.0, ("Llama-3-8B", 131072): 16.0,
               ("GPT-4-est", 131072): 720.0}
    if (name, seq_len) in printed:
        assert round(got, 2) == printed[name, seq_len]


# --------------------------------------------------------------------------------------------
# 3. The teaching simulator's STEP 6: ops:byte.
# --------------------------------------------------------------------------------------------

TEACHING_SIM_A100_CROSSOVER = 312 / 2.0  # the simulator's a100_tflops / a100_bandwidth_tbs = 156
#: (scenario, ops:byte = tokens per pass, the teaching simulator's classification)
TEACHING_SIM_SCENARIOS = [
    ("prefill 4096", 4096, "Compute"),
    ("decode b=1", 1, "Memory"),
    ("decode b=8", 8, "Memory"),
    ("decode b=32", 32, "Memory"),
    ("decode b=128", 128, "Memory"),
    ("decode b=256", 256, "Compute"),
    ("decode b=512", 512, "Compute"),
]
DENSE = ["Llama-3-8B", "Llama-3-70B", "Llama-3-405B", "Mistral-7B"]


def test_a100_crossover_matches_teaching_sim():
    assert TEACHING_SIM_A100_CROSSOVER == 156
    ours = crossover_ops_per_byte(get_gpu("A100-80GB"))
    assert ours == pytest.approx(TEACHING_SIM_A100_CROSSOVER, rel=0.03)
    assert ours == pytest.approx(312.0 / 2.039, rel=1e-9)


@pytest.mark.parametrize("gpu", ["H100-SXM", "A100-80GB", "B200", "MI300X"])
def test_crossover_is_peak_over_bandwidth_and_rises_with_low_precision(gpu):
    g = get_gpu(gpu)
    assert crossover_ops_per_byte(g) == pytest.approx(g.tflops_16bit / g.bandwidth_tbs)
    assert crossover_ops_per_byte(g, 8) >= crossover_ops_per_byte(g)


@pytest.mark.parametrize("name", DENSE)
@pytest.mark.parametrize("scenario,tokens,bound", TEACHING_SIM_SCENARIOS,
                         ids=[s[0] for s in TEACHING_SIM_SCENARIOS])
def test_teaching_sim_ops_per_byte_classification(name, scenario, tokens, bound):
    m = get_model(name)
    opb = ops_per_byte(m, tokens)
    if scenario.startswith("decode"):
        # The teaching simulator's dense-model rule of thumb: decode ops:byte ~ batch size.
        assert opb == pytest.approx(tokens, rel=0.02)
    crossover = crossover_ops_per_byte(get_gpu("A100-80GB"))
    assert ("Compute" if opb >= crossover else "Memory") == bound
    # Same verdict against the teaching simulator's own crossover.
    assert ("Compute" if opb >= TEACHING_SIM_A100_CROSSOVER else "Memory") == bound


@pytest.mark.parametrize("tokens", [1, 32, 512])
def test_moe_ops_per_byte_scales_with_active_fraction(tokens):
    m = get_model("GPT-4-est")
    assert m.active_params < m.params
    assert ops_per_byte(m, tokens) == pytest.approx(
        tokens * m.active_params / m.params, rel=0.02)


def _roof_terms(p, tokens, pairs, context_read):
    flops, weights, kv = timing.pass_work(p, tokens, pairs, context_read)
    return flops / p.flops_per_s, weights / p.bytes_per_s + kv / p.kv_bytes_per_s


@pytest.mark.parametrize("name,tp", [("Llama-3-8B", 1), ("Llama-3-70B", 2), ("Llama-3-70B", 4),
                                     ("Mistral-7B", 1)])
def test_real_context_decode_is_bandwidth_bound_prefill_compute_bound(name, tp):
    m, g = get_model(name), get_gpu("H100-SXM")
    p = timing.timing_params(m, g, gpus=tp)
    batch, ctx = 32, 2048
    c, b = _roof_terms(p, batch, batch * ctx, batch * ctx)
    assert b > 3 * c, "decode of 32 x 2048 context should be bandwidth-bound"
    # The KV read is a real share of the bytes at this context.
    _, weights, kv = timing.pass_work(p, batch, batch * ctx, batch * ctx)
    assert weights == p.weight_bytes
    assert kv == pytest.approx(m.kv_bytes_per_token() * batch * (ctx + 1))
    L = 4096
    c, b = _roof_terms(p, L, L * (L + 1) // 2, 0)
    assert c > 3 * b, "a 4096-token prefill should be compute-bound"
    # pass_time is max(roofline terms) + all-reduces + overhead.
    t = float(timing.pass_time(p, L, L * (L + 1) / 2, 0, 0))
    ar = timing.allreduce_time(p, L)
    assert t == pytest.approx(max(c, b) + ar + p.overhead_s, rel=1e-12)


@pytest.mark.parametrize("tokens", [1, 64, 4096])
def test_a_dequantising_expert_kernels_products_and_reads_add_to_the_rest_of_the_pass(tokens):
    """gpt-oss's MXFP4 experts at 16-bit compute: the rest of the pass is a roofline (compute
    and memory overlap), its routed experts' products and the bytes of the experts its tokens
    touch add after it; a W8A8 checkpoint, whose experts need no dequantising, overlaps."""
    oss, h200 = get_model("gpt-oss-120b"), get_gpu("H200")
    p = timing.timing_params(oss, h200, gpus=2, weight_bits=None)  # the checkpoint's MXFP4
    assert p.expert_serial == 1.0
    routed = 2.0 * oss.expert_params * oss.experts_per_token / oss.experts
    e_flops = routed / h200.dequant_compute_efficiency * tokens
    touched = 1.0 - (1.0 - oss.experts_per_token / oss.experts) ** tokens
    e_bytes = p.expert_bytes * touched
    flops, weights, kv = timing.pass_work(p, tokens, tokens * (tokens + 1) / 2, 0)
    roof = (max((flops - e_flops) / p.flops_per_s,
                (weights - e_bytes) / p.bytes_per_s + kv / p.kv_bytes_per_s)
            + e_flops / p.flops_per_s + e_bytes / p.bytes_per_s)
    t = float(timing.pass_time(p, tokens, tokens * (tokens + 1) / 2, 0, 0))
    assert t == pytest.approx(roof + timing.allreduce_time(p, tokens) + p.overhead_s, rel=1e-12)
    c, b = _roof_terms(p, tokens, tokens * (tokens + 1) / 2, 0)
    assert t > max(c, b) + timing.allreduce_time(p, tokens) + p.overhead_s  # not overlapped
    fp8 = timing.timing_params(get_model("DeepSeek-V3"), h200, gpus=8, weight_bits=None,
                               activation_bits=8)
    assert fp8.expert_serial == 0.0
    c, b = _roof_terms(fp8, tokens, tokens * (tokens + 1) / 2, 0)
    assert float(timing.pass_time(fp8, tokens, tokens * (tokens + 1) / 2, 0, 0)) == (
        pytest.approx(max(c, b) + timing.allreduce_time(fp8, tokens) + fp8.overhead_s,
                      rel=1e-12))


def test_prefill_flops_include_attention_pairs():
    m = get_model("Llama-3-8B")
    p = timing.timing_params(m, get_gpu("H100-SXM"))
    L = 4096
    pairs = L * (L + 1) // 2
    flops, _, _ = timing.pass_work(p, L, pairs, 0)
    # 2 x params per token, plus QK^T and AV: 4 x head_dim per query head, layer and pair.
    expected = 2 * m.active_params * L + 4 * m.layers * m.heads * m.head_dim * pairs
    assert flops == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------------------------
# 4. Roofline sanity.
# --------------------------------------------------------------------------------------------


#: The brief's roofline (the H100's own defaults are fitted on real vLLM runs).
BRIEF = dict(compute_efficiency=0.6, bandwidth_efficiency=0.8, overhead_ms=0.2)


def _decode1(**kw):
    p = timing.timing_params(get_model("Llama-3-8B"), get_gpu("H100-SXM"), **{**BRIEF, **kw})
    return p, float(timing.pass_time(p, 0, 0, 1, 1))


def test_decode_pass_llama8b_h100_formula():
    p, t = _decode1()
    expected = 16.06e9 / (0.8 * 3.35e12) + 0.2e-3
    assert t == pytest.approx(expected, rel=0.01)
    assert 6.0e-3 < t < 6.4e-3
    assert p.overhead_s == pytest.approx(0.2e-3)
    assert p.bytes_per_s == pytest.approx(0.8 * 3.35e12)
    assert p.flops_per_s == pytest.approx(0.6 * 989.4e12)


@pytest.mark.parametrize("bits,factor", [(8, 0.5), (4, 0.25)])
def test_quantised_weights_shrink_the_weight_term(bits, factor):
    p16, t16 = _decode1()
    pq, tq = _decode1(weight_bits=bits)
    assert pq.weight_bytes == pytest.approx(factor * p16.weight_bytes)
    assert tq - pq.overhead_s == pytest.approx(factor * (t16 - p16.overhead_s), rel=0.01)


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tensor_parallel_divides_roofline_and_adds_allreduce(tp):
    m, g = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    p1, t1 = _decode1()
    pt, tt = _decode1(gpus=tp)
    # tp - 1 latencies of 2 GPUs' all-reduce, and one token's 16-bit activations by the
    # one-shot algorithm (each GPU reads every other's message) over the link at the share of
    # its bandwidth an all-reduce reaches.
    ar = 2 * m.layers * ((tp - 1) * g.allreduce_latency_us * 1e-6
                         + (tp - 1) * m.hidden * 2
                         / (g.interconnect_gbs * 1e9 * g.allreduce_bandwidth_efficiency))
    assert ar > 0
    assert pt.allreduces == 2 * m.layers
    assert p1.allreduces == 0
    assert tt - pt.overhead_s - ar == pytest.approx((t1 - p1.overhead_s) / tp, rel=0.01)
    assert tt < t1


@pytest.mark.parametrize("prefill,decode,ctx", [(0, 1, 0), (0, 8, 4000), (512, 0, 0),
                                                (300, 5, 1234), (0, 0, 0)])
def test_linear_timing_is_fixed_plus_per_token_terms(prefill, decode, ctx):
    g = get_gpu("Apple-M3-Max")
    assert g.timing == "linear" and g.linear is not None
    lt = g.linear
    # A nonzero context coefficient, to see that term too.
    g2 = dataclasses.replace(g, linear=dataclasses.replace(lt, context_token_us=2.0))
    for gpu, c_us in ((g, lt.context_token_us), (g2, 2.0)):
        p = timing.timing_params(get_model("Llama-3-8B"), gpu)
        assert p.linear == 1.0
        pairs = prefill * (prefill + 1) / 2
        t = float(timing.pass_time(p, prefill, pairs, decode, ctx))
        expected = (lt.fixed_ms + lt.prefill_token_ms * prefill + lt.decode_token_ms * decode
                    ) * 1e-3 + c_us * 1e-6 * ctx
        assert t == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k,c", [(1, 0.1), (4, 0.1), (4, 0.5), (8, 0.05)])
@pytest.mark.parametrize("n,ctx", [(1, 100), (16, 16 * 2048)])
def test_speculation_adds_k_times_c_plain_decode_passes(k, c, n, ctx):
    # Linear model: every term explicit.
    g = get_gpu("Apple-M3-Max")
    lt = g.linear
    p = timing.timing_params(get_model("Llama-3-8B"), g, draft_tokens=k, draft_cost=c)
    plain = (lt.fixed_ms + lt.decode_token_ms * n) * 1e-3
    target = (lt.fixed_ms + lt.decode_token_ms * n * (k + 1)) * 1e-3
    assert float(timing.pass_time(p, 0, 0, n, ctx)) == pytest.approx(target + k * c * plain,
                                                                     rel=1e-12)
    # Roofline model: the target verifies k+1 tokens per sequence; the draft adds k*c plain passes
    # (decode attention inside the roofline, as the brief has it).
    m, h = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    p0 = timing.timing_params(m, h, decode_attention_efficiency=0.0)
    pk = timing.timing_params(m, h, draft_tokens=k, draft_cost=c, decode_attention_efficiency=0.0)
    plain = float(timing.pass_time(p0, 0, 0, n, ctx))
    cflop, cbyte = _roof_terms(pk, n * (k + 1), ctx * (k + 1), ctx)
    target = max(cflop, cbyte) + pk.overhead_s
    assert float(timing.pass_time(pk, 0, 0, n, ctx)) == pytest.approx(target + k * c * plain,
                                                                      rel=1e-12)


@pytest.mark.parametrize("gpu", ["Apple-M3-Max", "H100-SXM"])
@pytest.mark.parametrize("prefill", [1, 777])
def test_speculation_costs_nothing_without_decoding_sequences(gpu, prefill):
    m = get_model("Llama-3-8B")
    p0 = timing.timing_params(m, get_gpu(gpu))
    pk = timing.timing_params(m, get_gpu(gpu), draft_tokens=4, draft_cost=0.3)
    pairs = prefill * (prefill + 1) / 2
    assert float(timing.pass_time(pk, prefill, pairs, 0, 0)) == float(
        timing.pass_time(p0, prefill, pairs, 0, 0))


def test_pass_time_vectorises_over_numpy_arrays():
    p = timing.timing_params(get_model("Llama-3-8B"), get_gpu("H100-SXM"))
    seqs = np.array([0.0, 1.0, 64.0, 256.0])
    t = timing.pass_time(p, np.zeros(4), np.zeros(4), seqs, seqs * 1000)
    assert t.shape == (4,)
    assert np.all(np.diff(t) > 0)
    for i, s in enumerate(seqs):
        assert t[i] == pytest.approx(float(timing.pass_time(p, 0.0, 0.0, s, s * 1000)))


@pytest.mark.parametrize("tp, limit", [(2, math.inf), (4, 512 * 1024), (8, 256 * 1024)])
def test_allreduce_takes_vllms_algorithm_by_message_size(tp, limit):
    """Below vLLM's one-shot limit each GPU reads every other's message ((tp - 1) x bytes) in
    one phase of latency; above it reduce-scatter and all-gather move 2 (tp - 1) / tp of it in
    two; at 2 GPUs every message goes one-shot."""
    m, g = get_model("Llama-3-70B"), get_gpu("H100-SXM")
    p = timing.timing_params(m, g, gpus=tp)
    link = g.interconnect_gbs * 1e9 * g.allreduce_bandwidth_efficiency
    per_token = m.hidden * 2
    for tokens in (8, 64, 2048):
        oneshot = tokens * per_token < limit
        factor, phases = (tp - 1, 1) if oneshot else (2 * (tp - 1) / tp, 2)
        expect = 2 * m.layers * (phases * (tp - 1) * g.allreduce_latency_us * 1e-6
                                 + factor * tokens * per_token / link)
        assert float(timing.allreduce_time(p, tokens)) == pytest.approx(expect, rel=1e-12)
    assert timing.allreduce_time(timing.timing_params(m, g, gpus=1), 64) == 0.0


@pytest.mark.parametrize("model, gpu, kw", [
    ("Llama-3-8B", "H100-SXM", {}), ("Llama-3-8B", "H100-SXM", {"draft_tokens": 3}),
    ("DeepSeek-V3", "H200", {"gpus": 8, "weight_bits": None}),
    ("Llama-3-8B", "A100-80GB", {"gpus": 2})])
def test_the_twins_scalar_pass_time_has_numpys_bits(model, gpu, kw):
    """``scalar_time`` on Python floats gives numpy's float64 bits on any pass, and numpy's
    own answer where a step divides by zero (numpy: inf, Python: an error)."""
    p = timing.timing_params(get_model(model), get_gpu(gpu), **kw)
    floats = timing.TimingParams(*(float(v) for v in p))
    numpy = timing.TimingParams(*(np.float64(v) for v in p))
    staged = lambda *a, xp: timing.staged(timing.pass_time, *a, xp=xp)  # noqa: E731
    rng = np.random.default_rng(7)
    for _ in range(200):
        tokens, seqs = int(rng.integers(0, 9000)), int(rng.integers(0, 256))
        sums = (tokens, tokens * (tokens + 1) // 2, seqs, seqs * int(rng.integers(1, 8000)),
                seqs + 1, tokens, tokens * (tokens + 1) // 2)
        want = staged(numpy, *(np.float64(x) for x in sums), xp=np)
        got = timing.scalar_time(staged, floats, *sums)
        assert type(got) is np.float64 and got == want
    broken = floats._replace(flops_per_s=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = staged(numpy._replace(flops_per_s=np.float64(0.0)),
                      *(np.float64(x) for x in sums), xp=np)
        assert np.array_equal(timing.scalar_time(staged, broken, *sums), want, equal_nan=True)
