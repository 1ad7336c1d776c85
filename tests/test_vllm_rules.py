"""The rules that replay real vLLM runs: the token budget, vLLM's KV sizing, mixture-of-experts
expert reads, weight-only quantization, the request overhead and lag, and their config keys."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweep.analysis.report import transferred_lines
from sweep.engine.params import engine_params
from sweep.twin import simulate_reference, summarize_reference
from sweep.physics import timing
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.hardware import FITS, VLLM, get_gpu
from sweep.physics.memory import GIB
from sweep.physics.hf_config import load_hf_config
from sweep.study.config import ConfigError, load_study, parse_study
from sweep.study.design import Design
from sweep.study.workload import Requests, shared_paths
from sweep.study.workload import requests as make_requests

MODELS = Path(__file__).parents[1] / "validation" / "data" / "vllm-h100" / "models"


def requests(arrival, prompt, output) -> Requests:
    return make_requests(arrival, prompt, output)


# --- mixture of experts -------------------------------------------------------------------------

def test_mixtral_config_has_its_experts():
    m = load_hf_config(MODELS / "Mixtral-8x7B-v0.1.json")
    assert (m.experts, m.experts_per_token) == (8, 2)
    assert m.params == pytest.approx(46.7e9, rel=0.01)  # Mixtral's published 46.7B
    assert m.active_params == pytest.approx(12.9e9, rel=0.01)  # and 12.9B per token
    assert m.expert_params == 32 * 3 * 4096 * 14336 * 8
    dense = load_hf_config(MODELS / "Llama-2-7b-hf.json")
    assert (dense.experts, dense.expert_params) == (1, 0.0)


@pytest.mark.parametrize("tokens", [0, 1, 2, 7, 40, 2048])
def test_a_moe_pass_reads_the_experts_its_tokens_route_to(tokens):
    m = load_hf_config(MODELS / "Mixtral-8x7B-v0.1.json")
    p = timing.timing_params(m, get_gpu("H100-SXM"), gpus=2)
    flops, weights, kv_read = timing.pass_work(p, tokens, 0, 0)
    nbytes = weights + kv_read
    expert = m.expert_bytes(16) / (m.experts * m.layers)  # one expert of one layer
    read = m.experts * (1 - (1 - 2 / 8) ** tokens)  # experts per layer, in expectation
    dense = m.weight_bytes(16) - m.expert_bytes(16)
    kv = m.kv_bytes_per_token(16) * tokens
    assert nbytes == pytest.approx(dense + read * m.layers * expert + kv, rel=1e-12)
    assert flops == pytest.approx(2 * m.active_params * tokens, rel=1e-12)
    if tokens == 1:  # one token reads exactly its top-2 experts
        assert read == pytest.approx(2.0)


def test_a_dense_model_reads_every_weight_at_any_batch():
    m = load_hf_config(MODELS / "Llama-2-7b-hf.json")
    p = timing.timing_params(m, get_gpu("H100-SXM"))
    for tokens in (0, 1, 100):
        _, weights, kv = timing.pass_work(p, tokens, 0, 0)
        assert weights == m.weight_bytes(16) and kv == m.kv_bytes_per_token(16) * tokens


# --- decode attention ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, heads_per_kv", [("Llama-2-7b-hf.json", 1),
                                                ("CodeLlama-34b-Instruct-hf.json", 8)])
def test_decode_attention_adds_only_the_compute_that_outlasts_its_kv_reads(name, heads_per_kv):
    """A decode of 128 sequences over 1,800 cached tokens each, on two H100s: decode attention
    does ``heads_per_kv`` FLOPs per KV byte; at 2% of the peak that hides behind the reads of an
    MHA model and adds the excess for a grouped-query one."""
    m = load_hf_config(MODELS / name)
    assert m.heads // m.kv_heads == heads_per_kv
    gpu = get_gpu("H100-SXM")
    seqs, context = 128.0, 128.0 * 1800
    inside = timing.timing_params(m, gpu, gpus=2, decode_attention_efficiency=0.0)
    own = timing.timing_params(m, gpu, gpus=2, decode_attention_efficiency=0.02)
    base = timing.pass_time(inside, 0.0, 0.0, seqs, context)
    flops, weights, kv = timing.pass_work(inside, seqs, context, context)
    assert base == pytest.approx(max(flops / inside.flops_per_s, weights / inside.bytes_per_s
                                     + kv / inside.kv_bytes_per_s)
                         + timing.allreduce_time(inside, seqs) + inside.overhead_s,
        rel=1e-12)
    compute = 4 * m.layers * m.heads * m.head_dim * context / (0.02 * gpu.tflops_16bit * 1e12 * 2)
    reads = m.kv_bytes_per_token(16) * context / (gpu.kv_bandwidth_efficiency
                                                  * gpu.bandwidth_tbs * 1e12 * 2)
    assert (compute > reads) == (heads_per_kv == 8)
    assert timing.pass_time(own, 0.0, 0.0, seqs, context) == pytest.approx(
        base + max(0.0, compute - reads), rel=1e-12)


def test_decode_attention_is_a_config_key_inside_the_roofline_by_default():
    assert Design().timing().decode_attn_s_per_flop == 0.0  # no fitted GPU identifies it
    s = parse_study(BASE.format(hw="decode_attention_efficiency = [0.05, 0.5]", levers=""))
    assert [p.design.decode_attention_efficiency for p in s.points] == [0.05, 0.5]
    assert [p.columns["decode_attention_efficiency"] for p in s.points] == [0.05, 0.5]
    assert s.points[0].design.timing().decode_attn_s_per_flop == pytest.approx(
        1 / (0.05 * get_gpu("H100-SXM").tflops_16bit * 1e12))
    cols = parse_study(BASE.format(hw="", levers="")).points[0].columns
    assert cols["decode_attention_efficiency"] == get_gpu("H100-SXM").decode_attention_efficiency


# --- weight-only quantization -------------------------------------------------------------------

def test_weight_bits_change_bytes_only_and_activation_bits_the_peak():
    h100 = get_gpu("H100-SXM")
    w16, w8 = Design().timing(), Design(weight_bits=8).timing()
    assert w8.flops_per_s == w16.flops_per_s  # 8-bit weights multiply at the 16-bit peak
    assert w8.weight_bytes == pytest.approx(w16.weight_bytes / 2)
    w8a8 = Design(weight_bits=8, activation_bits=8).timing()
    assert w8a8.flops_per_s == pytest.approx(w16.flops_per_s * h100.tflops_8bit
                                             / h100.tflops_16bit)
    assert w8a8.weight_bytes == w8.weight_bytes


@pytest.mark.parametrize("gpu, weight_bits, activation_bits, ok", [
    ("H100-SXM", 4, 16, True), ("H100-SXM", 8, 8, True), ("H100-SXM", 4, 8, True),
    ("H100-SXM", 4, 4, False),  # no FP4 tensor cores on Hopper
    ("H100-SXM", 16, 8, False),  # activations narrower than the weights: not a format
    ("A100-80GB", 4, 4, True), ("B200", 4, 4, True), ("MI300X", 4, 4, False),
    ("Apple-M3-Max", 8, 8, False),
])
def test_activation_bits_the_gpu_lacks_are_refused(gpu, weight_bits, activation_bits, ok):
    d = Design(gpu=gpu, model="Llama-3.2-1B", weight_bits=weight_bits,
               activation_bits=activation_bits)
    if ok:
        d.validate()
    else:
        with pytest.raises(ValueError, match=r"^levers\.activation_bits: .*; allowed: "):
            d.validate()


# --- KV capacity as vLLM sizes it ---------------------------------------------------------------

def test_gpu_memory_utilization_sizes_the_cache_like_vllm():
    model = load_hf_config(MODELS / "Llama-2-7b-hf.json")
    d = Design(model=model, max_batch=128, max_num_batched_tokens=2048,
               gpu_memory_utilization=0.9)
    b = d.budget()
    weights = model.weight_bytes(16) / GIB
    assert 0.9 * 80 - weights - 3 < b.kv_gib < 0.9 * 80 - weights - 1  # a GiB or two of reserve
    assert d.total_blocks() == b.kv_tokens // 16
    lower = d.replace(gpu_memory_utilization=0.5).budget()
    assert b.kv_gib - lower.kv_gib == pytest.approx(0.4 * 80)
    wider = d.replace(max_num_batched_tokens=16384).budget()
    assert wider.kv_gib < b.kv_gib  # a larger profiling pass leaves less for the cache
    assert d.replace(kv_blocks=1000).total_blocks() == 1000
    assert d.replace(kv_blocks=1000, kv_cache="contiguous", max_seq_len=4000).total_blocks() == 4


# --- the token budget ---------------------------------------------------------------------------

def test_the_token_budget_covers_decodes_first():
    """Four requests decode while a long prompt arrives: each pass prefills what the budget
    leaves after one token per decoding seat, so the prompt takes ceil(1000 / (B - 4)) passes,
    and the engine agrees with the twin."""
    d = Design(max_batch=5, max_num_batched_tokens=104)
    r = requests([0.0, 0.0, 0.0, 0.0, 1e-4], [8, 8, 8, 8, 1000], [400, 400, 400, 400, 2])
    ref = simulate_reference(engine_params(d), r)
    # Pass 1 prefills the four short prompts; from pass 2 they decode and the long prompt takes
    # 100 tokens a pass for 10 passes: its first token ends pass 11.
    passes_to_first = 11
    assert ref.passes >= passes_to_first
    p = engine_params(d)
    times = [timing.pass_time(p.timing, 32.0, 4 * 36.0, 0.0, 0.0)]
    for i in range(10):
        ctx = 4 * (8 + 1 + i)
        done = 100 * i
        pairs = 100 * done + 100 * 101 // 2
        times.append(timing.pass_time(p.timing, 100.0, float(pairs), 4.0, float(ctx)))
    assert ref.first_token[4] == pytest.approx(sum(float(t) for t in times), rel=1e-12)
    no_budget = simulate_reference(engine_params(d.replace(max_num_batched_tokens=0)), r)
    assert no_budget.first_token[4] < ref.first_token[4]


def test_a_budget_smaller_than_a_decode_of_every_seat_is_refused():
    with pytest.raises(ValueError, match=r"^levers\.max_num_batched_tokens: .*at least 512"):
        Design(max_batch=128, draft_tokens=3, max_num_batched_tokens=500).validate()
    Design(max_batch=128, draft_tokens=3, max_num_batched_tokens=512).validate()


# --- outside the passes -------------------------------------------------------------------------

def test_request_overhead_and_lag_add_to_ttft_and_latency_only():
    r = requests([0.0, 0.01, 0.02], [100, 200, 300], [20, 30, 40])
    plain = Design(request_overhead_ms=0.0, request_lag_passes=0.0, prompt_overhead_us=0.0)
    slow = plain.replace(request_overhead_ms=15.0, request_lag_passes=2.0)
    ref = simulate_reference(engine_params(plain), r)
    a = summarize_reference(ref, r, engine_params(plain))
    b = summarize_reference(simulate_reference(engine_params(slow), r), r, engine_params(slow))
    extra = 0.015 + 2 * a["mean_tpot_ms"] * 1e-3
    for key in ("mean_ttft_s", "p50_ttft_s", "p99_ttft_s", "mean_e2e_s", "p95_e2e_s"):
        assert b[key] == pytest.approx(a[key] + extra, rel=1e-12), key
    for key in ("mean_tpot_ms", "p95_itl_ms", "tokens_per_s", "cost_per_mtok"):
        assert b[key] == a[key], key


def test_prompt_overhead_adds_per_prompt_token_outside_a_cached_prefix_to_ttft_only():
    r = requests([0.0, 0.01, 0.02], [100, 200, 300], [20, 30, 40])
    r = r._replace(**shared_paths([0, -1, 0], 64))
    base = dict(request_overhead_ms=0.0, request_lag_passes=1.0, prompt_overhead_us=0.0)
    for cache, own in ((False, [100, 200, 300]), (True, [36, 200, 236])):
        plain = Design(**base, prefix_cache=cache)
        slow = plain.replace(prompt_overhead_us=250.0)
        a, b = (summarize_reference(simulate_reference(engine_params(d), r), r, engine_params(d))
                for d in (plain, slow))
        assert b["mean_ttft_s"] == pytest.approx(a["mean_ttft_s"] + 250e-6 * np.mean(own),
                                                 rel=1e-12)
        assert b["mean_e2e_s"] == pytest.approx(a["mean_e2e_s"] + 250e-6 * np.mean(own),
                                                rel=1e-12)
        for key in ("mean_tpot_ms", "tokens_per_s"):
            assert b[key] == a[key], key


def test_allreduce_growth_sets_how_the_latency_grows_past_two_gpus():
    for tp in (2, 4, 8):
        ring = Design(gpus=tp, allreduce_latency_us=10.0, allreduce_growth=1.0).timing()
        flat = Design(gpus=tp, allreduce_latency_us=10.0, allreduce_growth=0.0).timing()
        assert ring.allreduce_latency_s == pytest.approx(10e-6 * (tp - 1))
        assert flat.allreduce_latency_s == pytest.approx(10e-6)
    assert Design(gpus=1, allreduce_growth=0.0).timing().allreduce_latency_s == 0.0


def test_every_roofline_gpu_takes_the_engines_terms_and_a_fitted_gpus_factors():
    own = ("compute_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency",
           "decode_attention_efficiency", "dequant_compute_efficiency")
    host = ("overhead_ms", "seq_overhead_us", "request_overhead_ms", "request_lag_passes",
            "prompt_overhead_us", "allreduce_bandwidth_efficiency")
    for name, g in GPU_CATALOG.items():
        if g.timing != "roofline":
            assert g.calibration == "fitted" and g.model_error is None  # the lesson's own fit
            continue
        assert all(getattr(g, k) == getattr(VLLM, k) for k in host), name
        source = name if name in FITS else g.calibration.removeprefix("transferred:")
        assert g.calibration == ("fitted" if name in FITS else f"transferred:{source}")
        assert source in FITS
        assert all(getattr(g, k) == getattr(GPU_CATALOG[source], k) for k in own), name
        if GPU_CATALOG[source].generation != g.generation:  # across generations, a wider error
            assert g.model_error.speed_sd > GPU_CATALOG[source].model_error.speed_sd
    # Its own generation first (B300: Blackwell), else the nearest peak bandwidth.
    assert get_gpu("B300").calibration == "transferred:B200"
    assert get_gpu("MI300X").calibration == "transferred:H200"
    # A factor a fitted GPU's runs do not identify comes from one whose runs do, by that rule.
    assert FITS["H200"].bandwidth_efficiency is None
    assert FITS["H100-SXM"].dequant_bandwidth_efficiency is None
    h100, h200 = get_gpu("H100-SXM"), get_gpu("H200")
    for k in ("bandwidth_efficiency", "kv_bandwidth_efficiency"):
        assert getattr(h200, k) == getattr(FITS["H100-SXM"], k)
    # Only the H200's runs identify the compute efficiency: every other GPU takes it.
    assert [n for n, f in FITS.items() if f.compute_efficiency is not None] == ["H200"]
    for name in ("H100-SXM", "A100-80GB", "L40S", "B200"):
        assert get_gpu(name).compute_efficiency == FITS["H200"].compute_efficiency
    assert h100.dequant_compute_efficiency == FITS["H200"].dequant_compute_efficiency
    assert get_gpu("A100-80GB").dequant_compute_efficiency == FITS["H200"].dequant_compute_efficiency
    assert get_gpu("L40S").kv_bandwidth_efficiency == pytest.approx(
        FITS["L40S"].bandwidth_efficiency * FITS["A100-80GB"].kv_bandwidth_efficiency
        / FITS["A100-80GB"].bandwidth_efficiency)  # the A100's ratio: its runs do not identify it
    nvlink, pcie = get_gpu("H100-SXM").allreduce_latency_us, get_gpu("L40S").allreduce_latency_us
    assert nvlink == VLLM.nvlink_allreduce_us and pcie > nvlink
    # Every design but a weight-only one takes the engine's all-reduce, which dense and MoE runs
    # fit; the fits on weight-only runs hold for such designs on their generation (below).
    for name in ("H200", "B200", "B300", "MI300X", "MI355X"):
        g = get_gpu(name)
        assert (g.allreduce_latency_us, g.allreduce_growth) == (nvlink, 1.0), name
    assert h100.allreduce_growth == get_gpu("L40S").allreduce_growth == 1.0
    t = Design().timing()
    assert t.flops_per_s == pytest.approx(h100.compute_efficiency * h100.tflops_16bit * 1e12)
    assert t.overhead_s == pytest.approx(h100.overhead_ms * 1e-3)


def test_weight_only_kernels_unpack_at_a_rate_that_follows_the_sms():
    """A GPU that takes another's weight-only read share takes its rate per 16-bit TFLOP/s, at
    its own peak, as a share of its own plain read rate, at most 1: the H100 (the H200's SMs,
    less memory bandwidth) reads at its plain rate, the A100 (a third of the H200's peak) slower
    than the H200's share, the GB200 (a higher peak than the B200's) at its plain rate."""
    shares = {n: FITS[n].dequant_bandwidth_efficiency for n in FITS
              if FITS[n].dequant_bandwidth_efficiency is not None}
    for name, g in GPU_CATALOG.items():
        if g.timing != "roofline":
            continue
        if name in shares:
            assert g.dequant_bandwidth_efficiency == shares[name]
            continue
        src = get_gpu("H200" if g.generation in ("Hopper", "Ampere", "Ada", "CDNA3") else "B200")
        rate = (src.dequant_bandwidth_efficiency * src.bandwidth_efficiency * src.bandwidth_tbs
                / src.tflops_16bit * g.tflops_16bit)
        want = min(1.0, rate / (g.bandwidth_efficiency * g.bandwidth_tbs))
        assert g.dequant_bandwidth_efficiency == pytest.approx(want, rel=1e-12), name
    assert get_gpu("H100-SXM").dequant_bandwidth_efficiency == 1.0
    assert get_gpu("GB200").dequant_bandwidth_efficiency == 1.0
    assert get_gpu("A100-80GB").dequant_bandwidth_efficiency < shares["H200"]
    assert get_gpu("B300").dequant_bandwidth_efficiency == pytest.approx(shares["B200"], rel=1e-12)


def test_weight_only_designs_take_their_generations_fitted_allreduce():
    """The all-reduce fits on weight-only runs hold the kernels' own cost under tensor
    parallelism too: gpt-oss's MXFP4 experts take the H200's on Hopper and the B200's on
    Blackwell, and every other design the engine's, which dense and MoE runs fit (on the
    H100, a 21 us latency would put those 6% slow); the A100 and MI300X (no fitted GPU of their
    generation) keep the engine's throughout. The results row names the all-reduce that ran."""
    def design(gpu, model="gpt-oss-20b", **kw):
        return Design(gpu=gpu, model=model, gpus=4, **kw)

    def latency(gpu, model="gpt-oss-20b", **kw):
        return design(gpu, model, **kw).timing().allreduce_latency_s
    engine = VLLM.nvlink_allreduce_us * 1e-6 * 3
    for gpus, src in ((("H100-SXM", "H200"), "H200"),
                      (("B200", "B300", "GB200", "GB300"), "B200")):
        fit = FITS[src]
        fitted = fit.allreduce_latency_us * 1e-6 * (1 + 2 * fit.allreduce_growth)
        for gpu in gpus:
            assert latency(gpu) == pytest.approx(fitted, rel=1e-12), gpu
            assert design(gpu).allreduce() == (fit.allreduce_latency_us, fit.allreduce_growth)
            assert latency(gpu, weight_bits=16) == pytest.approx(engine, rel=1e-12), gpu
            assert latency(gpu, model="Llama-3-8B") == pytest.approx(engine, rel=1e-12), gpu
            assert design(gpu, model="Llama-3-8B").allreduce() == (VLLM.nvlink_allreduce_us, 1.0)
    for gpu in ("A100-80GB", "MI300X"):
        assert latency(gpu) == pytest.approx(engine, rel=1e-12), gpu
    h200 = FITS["H200"]
    assert latency("H100-SXM", allreduce_latency_us=9.0) == pytest.approx(
        9e-6 * (1 + 2 * h200.allreduce_growth), rel=1e-12)  # a stated latency still wins
    text = BASE.replace("H100-SXM", "H200").replace("Llama-3-8B", "gpt-oss-20b")
    cols = parse_study(text.format(hw="", levers="gpus = 4")).points[0].columns
    assert (cols["allreduce_latency_us"], cols["allreduce_growth"]) == (
        h200.allreduce_latency_us, h200.allreduce_growth)


def test_the_calibration_column_says_whose_factors_a_row_ran_with():
    cols = [p.columns["calibration"] for p in parse_study(BASE.format(
        hw="", levers="").replace('gpu = "H100-SXM"', 'gpu = ["H100-SXM", "B300"]')).points]
    assert cols == ["fitted", "transferred:B200"]
    stated = parse_study(BASE.format(hw="bandwidth_efficiency = 0.7", levers="")).points[0]
    assert stated.columns["calibration"] == "stated"
    host = parse_study(BASE.format(hw="overhead_ms = 2.0", levers="")).points[0]
    assert host.columns["calibration"] == "fitted"  # the engine's terms are not the GPU's own
    # Disaggregated pools: the GPUs that run the passes, not the config's gpu.
    pools = parse_study(BASE.format(hw="", levers='prefill_gpus = 1\ndecode_gpus = 1\n'
                                    'prefill_gpu = ["H200", "B300"]\n'
                                    'decode_gpu = ["H100-SXM", "MI300X"]')).points
    assert [p.columns["calibration"] for p in pools] == [
        "fitted", "transferred:H200", "transferred:B200", "transferred:B200,H200"]
    lines = transferred_lines(pd.DataFrame([p.columns for p in pools]))
    note = " ".join(s.strip() for s in lines).strip()
    assert note == ("Note: no real runs of B300, MI300X were fitted: B300 runs with the B200's "
                    "factors; MI300X runs with the H200's factors (the calibration column; "
                    "docs/model.md).")


# --- config keys --------------------------------------------------------------------------------

BASE = """name = "t"
[hardware]
gpu = "H100-SXM"
{hw}
[model]
name = "Llama-3-8B"
[workload]
num_requests = 10
[levers]
max_batch = 64
{levers}
"""


def test_the_new_keys_parse_into_designs_and_columns():
    s = parse_study(BASE.format(hw="gpu_memory_utilization = 0.85\nrequest_lag_passes = 1.5",
                                levers="activation_bits = 8\nweight_bits = 8\n"
                                       "max_num_batched_tokens = [2048, 8192]\nkv_blocks = 9000"))
    assert [p.design.max_num_batched_tokens for p in s.points] == [2048, 8192]
    d, cols = s.points[0].design, s.points[0].columns
    assert (d.activation_bits, d.kv_blocks, d.gpu_memory_utilization) == (8, 9000, 0.85)
    assert cols["activation_bits"] == 8 and cols["kv_blocks"] == 9000
    assert cols["gpu_memory_utilization"] == 0.85 and cols["request_lag_passes"] == 1.5
    h100 = get_gpu("H100-SXM")
    assert cols["compute_efficiency"] == h100.compute_efficiency  # the GPU's default, shown
    assert cols["request_overhead_ms"] == h100.request_overhead_ms


@pytest.mark.parametrize("hw, levers, key", [
    ("", "activation_bits = 4", "levers.activation_bits"),
    ("", "activation_bits = 12", "levers.activation_bits"),
    ("", "max_num_batched_tokens = 10", "levers.max_num_batched_tokens"),
    ("", "kv_blocks = 0", "levers.kv_blocks"),
    ("", "kv_blocks = 1.5", "levers.kv_blocks"),
    ("gpu_memory_utilization = 1.5", "", "hardware.gpu_memory_utilization"),
    ("gpu_memory_utilization = 0.9\nmemory_overhead_fraction = 0.1", "",
     "hardware.memory_overhead_fraction"),
    ("request_overhead_ms = -1", "", "hardware.request_overhead_ms"),
    ("decode_attention_efficiency = -0.1", "", "hardware.decode_attention_efficiency"),
    ("decode_attention_efficiency = 1.5", "", "hardware.decode_attention_efficiency"),
])
def test_bad_new_keys_are_one_line_errors(hw, levers, key):
    with pytest.raises(ConfigError) as e:
        parse_study(BASE.format(hw=hw, levers=levers))
    msg = str(e.value)
    assert "\n" not in msg and f": {key}: " in msg, msg


# --- a real run -----------------------------------------------------------------------------------

def test_the_defaults_serve_a_measured_heavy_stage_as_vllm_did():
    """CodeLlama-34B on two H100s at 20 requests/s: vLLM served it without queueing (the
    brief's roofline predicts a growing queue). Its first 60 s with the shipped defaults: stable,
    and the median latency within 10% of the measured."""
    import dataclasses

    from sweep.execution.runner import run_study

    fit = Path(__file__).parents[1] / "validation" / "fit"
    study = load_study(fit / "codellama-34b-tp2-general-stage1.toml", seeds=1)
    (point,) = study.points
    short = dataclasses.replace(point, workload=dataclasses.replace(point.workload,
                                                                    duration_s=60.0))
    runs = run_study(dataclasses.replace(study, points=[short])).runs
    assert not runs["unstable"].any() and (runs["unfinished"] == 0).all()
    assert runs["p50_e2e_s"].iloc[0] == pytest.approx(study.measured["p50_e2e_s"], rel=0.10)
