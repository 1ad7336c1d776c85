"""Pass timing: how long one engine pass takes, from what it does.

Roofline (the 'Serve a Model' document's): ``max(FLOPs / (eff_c * peak * tp), weight bytes /
(eff_b * bandwidth * tp) + KV bytes / (eff_kv * bandwidth * tp)) + decode attention FLOPs /
(eff_att * peak16 * tp) + all-reduce time + fixed overhead + per-sequence host time``, the peak
at the activations' precision and a mixture of experts reading only the experts its tokens route to. Decode
attention has its own term where the GPU or config gives ``eff_att`` > 0: one query row per
sequence (a few under grouped-query attention) cannot fill a tensor-core tile, so those kernels
run far below peak and do not hide behind the weight reads; without it, their FLOPs join the
roofline's. Linear (measured hardware, BLIS/Splitwise-style fit):
``fixed + a * prefill tokens + b * decoded tokens + c * context tokens read``.

Every function here takes an array namespace ``xp`` (numpy or jax.numpy) so that the scan engine
and the event-driven twin evaluate the very same arithmetic, in the same order.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from sweep.physics.drafts import cost_share
from sweep.physics.hardware import GPU, SEND_EFFICIENCY, SEND_LATENCY_US
from sweep.physics.models import Model


class TimingParams(NamedTuple):
    """Per-design constants of the pass-time model (floats; a pytree, so a batch vmaps)."""

    flops_per_token: float  # 2 x active parameters, windowed and state layers' attention
    attn_flops_per_pair: float  # QK^T and AV over every layer and query head, per query-key pair
    decode_attn_ratio: float  # decode's attention FLOPs per pair over prefill's (MLA absorbed)
    weight_bytes: float  # bytes of every weight (whole group)
    expert_bytes: float  # of which routed experts' (0 for a dense model)
    expert_skip: float  # probability that one token leaves a given expert unused: 1 - k / E
    expert_flops_per_token: float  # of flops_per_token, the routed experts'
    expert_serial: float  # 1.0: the experts' reads and products add (dequantising kernels)
    kv_bytes_per_token: float  # of the full-attention layers, read per context token
    seq_bytes: float  # read per decoding sequence: a full window's KV, and state read and written
    flops_per_s: float  # achievable: eff_c x peak(activation_bits) x tp
    decode_attn_s_per_flop: float  # 1 / (eff_att x 16-bit peak x tp); 0: inside the roofline
    bytes_per_s: float  # achievable for weights: eff_b x bandwidth x tp
    kv_bytes_per_s: float  # achievable for the KV cache: eff_kv x bandwidth x tp
    allreduces: float  # all-reduces per pass (2 per layer under tensor parallelism, else 0)
    allreduce_latency_s: float  # one (one-shot) all-reduce's latency among the tp GPUs
    allreduce_token_bytes: float  # one token's 16-bit activations
    allreduce_oneshot_bytes: float  # messages below this take the one-shot algorithm
    allreduce_oneshot_s_per_byte: float  # each GPU reads every other's message
    allreduce_ring_s_per_byte: float  # reduce-scatter and all-gather: 2 (tp-1)/tp of it
    overhead_s: float
    seq_overhead_s: float  # host time per decoding sequence per pass (scheduling, sampling)
    linear: float  # 1.0 selects the linear (measured) model
    lin_fixed_s: float
    lin_prefill_token_s: float
    lin_decode_token_s: float
    lin_context_token_s: float
    draft_tokens: float  # k
    draft_cost: float  # draft pass cost per drafted token, as a fraction of a target decode pass
    # (``draft_cost`` for a separate draft model; an MTP module's or EAGLE-3 head's from its
    # layers: ``drafts.cost_share``)
    # Expert parallelism (1.0 selects it): experts whole on each of ``ep_gpus`` GPUs, shared
    # by ``dp`` data-parallel ranks of ``tp`` GPUs.
    ep: float
    dp: float
    tp: float
    ep_gpus: float
    expert_k: float  # experts per token
    expert_pair_flops: float  # FLOPs of one token in one expert, over every expert layer
    ep_load_z: float  # the busiest GPU's load in standard deviations above the mean
    ep_load_var: float  # variance of one token's count of experts on one GPU
    ep_load_cap: float  # the most experts of one token one GPU can hold: min(k, E / ep_gpus)
    a2a_latency_s: float  # dispatch and combine across ranks, latency of a pass
    a2a_s_per_token: float  # and seconds per token of the pass (every expert layer)
    # Pipeline parallelism: stages of ``tp`` GPUs, and the sends of a micro-batch's activations
    # from each stage to the next: their latencies, and seconds per token of the micro-batch.
    pp: float
    pp_send_s: float
    pp_send_s_per_token: float


def timing_params(model: Model, gpu: GPU, *, gpus: int = 1, weight_bits: int | None = 16,
                  kv_bits: int = 16, activation_bits: int | None = 16,
                  compute_efficiency: float | None = None,
                  bandwidth_efficiency: float | None = None,
                  kv_bandwidth_efficiency: float | None = None,
                  decode_attention_efficiency: float | None = None,
                  overhead_ms: float | None = None,
                  seq_overhead_us: float | None = None,
                  allreduce_latency_us: float | None = None,
                  allreduce_bandwidth_efficiency: float | None = None,
                  allreduce_growth: float | None = None, draft_tokens: int = 0,
                  draft_cost: float = 0.1, expert_parallel: bool = False,
                  data_parallel: int = 1, dequant_bandwidth_efficiency: float | None = None,
                  dequant_compute_efficiency: float | None = None,
                  draft: str = "model", pipeline_parallel: int = 1,
                  internode_gbps: float | None = None) -> TimingParams:
    """A design's constants; a factor left at None is the GPU's default, and the KV cache's
    bandwidth efficiency keeps the GPU's ratio to the weights' (``kv_efficiency``). Decode
    attention has its own term only where ``decode_attention_efficiency`` is above 0. A design
    passes every lever named here (``Design.timing``). ``draft``: a separate model at
    ``draft_cost``, or MTP layers or an EAGLE-3 head costing their layers
    (``drafts.cost_share``). ``pipeline_parallel`` stages of ``gpus`` GPUs send on over
    ``internode_gbps`` (None: the GPU's) between nodes."""
    tp = gpus  # the tensor-parallel degree
    activation = model.activation_bits(gpu, activation_bits)
    read, mult, serial = _dequant_slowdown(model, gpu, weight_bits, activation,
                                           dequant_bandwidth_efficiency, dequant_compute_efficiency)
    (compute_efficiency, bandwidth_efficiency, decode_attention_efficiency, overhead_ms,
     seq_overhead_us) = (getattr(gpu, k) if v is None else v for k, v in (
        ("compute_efficiency", compute_efficiency), ("bandwidth_efficiency", bandwidth_efficiency),
        ("decode_attention_efficiency", decode_attention_efficiency),
        ("overhead_ms", overhead_ms), ("seq_overhead_us", seq_overhead_us)))
    if kv_bandwidth_efficiency is None:
        kv_bandwidth_efficiency = kv_efficiency(gpu, bandwidth_efficiency)
    attn_s_per_flop = (1.0 / (decode_attention_efficiency * gpu.tflops_16bit * 1e12 * tp)
                       if decode_attention_efficiency > 0 else 0.0)
    ar = 2.0 * model.layers if tp > 1 else 0.0
    alpha_us, growth, link = allreduce_setting(gpu, serial, allreduce_latency_us,
                                               allreduce_growth, allreduce_bandwidth_efficiency)
    per_byte = 1.0 / link if tp > 1 and link > 0 else 0.0
    lin = gpu.linear
    network = gpu.internode_gbps if internode_gbps is None else internode_gbps
    experts = model.expert_bytes(weight_bits)
    routed = model.expert_params * model.experts_per_token / model.experts  # per token
    return TimingParams(
        flops_per_token=(2.0 * model.active_params + model.window_flops_per_token
                         + model.state_flops_per_token + 2.0 * routed * (mult - 1)),
        attn_flops_per_pair=model.attn_flops_per_pair,
        decode_attn_ratio=(model.decode_attn_flops_per_pair / model.attn_flops_per_pair
                           if model.attn_flops_per_pair > 0 else 1.0),
        weight_bytes=model.weight_bytes(weight_bits) + experts * (read - 1),
        expert_bytes=experts * read,
        expert_skip=1.0 - model.experts_per_token / model.experts,
        expert_flops_per_token=2.0 * routed * mult,
        expert_serial=serial,
        kv_bytes_per_token=model.held_kv_bytes_per_token(kv_bits, tp),
        seq_bytes=model.held_seq_bytes(kv_bits, tp) + model.state_bytes,  # state read, written
        flops_per_s=compute_efficiency * gpu.tflops(activation) * 1e12 * tp,
        decode_attn_s_per_flop=attn_s_per_flop,
        bytes_per_s=bandwidth_efficiency * gpu.bandwidth_tbs * 1e12 * tp,
        kv_bytes_per_s=kv_bandwidth_efficiency * gpu.bandwidth_tbs * 1e12 * tp,
        allreduces=ar,
        allreduce_latency_s=alpha_us * 1e-6 * (1.0 + growth * (tp - 2)) if tp > 1 else 0.0,
        allreduce_token_bytes=model.hidden * 2.0,
        allreduce_oneshot_bytes=oneshot_bytes(tp),
        allreduce_oneshot_s_per_byte=(tp - 1) * per_byte,
        allreduce_ring_s_per_byte=2.0 * (tp - 1) / tp * per_byte,
        overhead_s=overhead_ms * 1e-3,
        seq_overhead_s=seq_overhead_us * 1e-6,
        linear=1.0 if gpu.timing == "linear" else 0.0,
        lin_fixed_s=lin.fixed_ms * 1e-3 if lin else 0.0,
        lin_prefill_token_s=lin.prefill_token_ms * 1e-3 if lin else 0.0,
        lin_decode_token_s=lin.decode_token_ms * 1e-3 if lin else 0.0,
        lin_context_token_s=lin.context_token_us * 1e-6 if lin else 0.0,
        draft_tokens=float(draft_tokens),
        draft_cost=float(cost_share(model, draft, draft_cost)),
        **_expert_parallel(model, gpu, tp, data_parallel if expert_parallel else 0, alpha_us,
                           link, mult, network),
        **_pipeline_sends(model, gpu, tp, pipeline_parallel, network),
    )


def stage_hops(gpu: GPU, tp: int, pp: int) -> tuple[int, int]:
    """Of the ``pp - 1`` sends between consecutive stages of ``tp`` GPUs, laid on nodes of
    ``gpu.node_gpus`` in order: those within a node and those between nodes."""
    network = sum((k + 1) * tp // gpu.node_gpus != k * tp // gpu.node_gpus
                  for k in range(pp - 1))
    return pp - 1 - network, network


def _pipeline_sends(model: Model, gpu: GPU, tp: int, pp: int, internode_gbps: float) -> dict:
    """The constants of ``pp`` pipeline stages: a micro-batch's sends, each a latency and its
    tokens' 16-bit hidden states and residuals (vLLM's intermediate tensors), each of a stage's
    ``tp`` GPUs sending its slice over its own link (``SEND_EFFICIENCY`` of its rate)."""
    node, network = stage_hops(gpu, tp, pp)
    token_bytes = 2.0 * model.hidden * 2.0 / tp
    per_byte = sum(n / (rate * SEND_EFFICIENCY) for n, rate in (
        (node, gpu.interconnect_gbs * 1e9), (network, internode_gbps / 8.0 * 1e9)) if n)
    return dict(pp=float(pp),
                pp_send_s=(node * SEND_LATENCY_US["node"]
                           + network * SEND_LATENCY_US["network"]) * 1e-6,
                pp_send_s_per_token=per_byte * token_bytes)


def allreduce_setting(gpu: GPU, serial: float, latency_us: float | None, growth: float | None,
                      bandwidth_efficiency: float | None) -> tuple[float, float, float]:
    """The all-reduce's 2-GPU latency (us), growth and achievable link rate (bytes/s), each the
    config's where stated, else the GPU's. Weight-only kernels (``serial``) under tensor
    parallelism cost what runs of them measured (``GPU.weight_only_allreduce``: the fit on this
    GPU's generation), every other design what the engine's dense and MoE runs did."""
    alpha, grow = (gpu.weight_only_allreduce if serial and gpu.weight_only_allreduce
                   else (gpu.allreduce_latency_us, gpu.allreduce_growth))
    eff = gpu.allreduce_bandwidth_efficiency if bandwidth_efficiency is None \
        else bandwidth_efficiency
    return (alpha if latency_us is None else latency_us, grow if growth is None else growth,
            gpu.interconnect_gbs * 1e9 * eff)


def _dequant_slowdown(model: Model, gpu: GPU, weight_bits: int | None, activation_bits: int,
                      bandwidth: float | None,
                      compute: float | None) -> tuple[float, float, float]:
    """How many times slower a pass reads and multiplies the routed experts' weights when they
    are narrower than the compute, and 1.0 where their reads and products then add rather than
    overlap: a weight-only MoE kernel (vLLM's Marlin MXFP4 experts on Hopper, its FP4 ones on
    Blackwell) dequantises each tile before it multiplies it, keeping
    ``dequant_bandwidth_efficiency`` of the GPU's weight-read efficiency and
    ``dequant_compute_efficiency`` of its compute efficiency. (1, 1, 0) where weights and compute
    agree, and for a dense model (no runs identify dense weight-only kernels)."""
    if not model.weight_only_experts(weight_bits, activation_bits):
        return 1.0, 1.0, 0.0
    read = gpu.dequant_bandwidth_efficiency if bandwidth is None else bandwidth
    mult = gpu.dequant_compute_efficiency if compute is None else compute
    return 1.0 / read, 1.0 / mult, 1.0


def _expert_parallel(model: Model, gpu: GPU, tp: int, dp: int, alpha_us: float,
                     link: float, slow: float = 1.0, internode_gbps: float = 0.0) -> dict:
    """The constants of expert parallelism over ``tp x dp`` GPUs (``dp`` 0: none). Under top-k
    routing of E experts, G GPUs each hold m = E / G of them, and one token puts a
    hypergeometric count of its k experts on a GPU: mean k / G, variance k (m/E)(1 - m/E)
    (E - k) / (E - 1). Over T tokens a GPU's load is near normal, and the busiest of G is
    ``z`` standard deviations above the mean, z the expected maximum of G standard normals
    (Blom's approximation). Across ranks each token's k activations go to their experts and
    back: per GPU and expert layer, two phases of ``(T / G) k hidden x 2 bytes (G - 1) / G``.
    Where the G GPUs span nodes of N, ``(G - N) / G`` of it crosses the network, at
    ``SEND_EFFICIENCY`` of ``internode_gbps``, beside the rest within the node: a phase takes
    the slower share, and at least the network's latency. ``slow``: a weight-only kernel's
    dequantising slowdown of the experts' FLOPs."""
    if dp == 0:
        return dict(ep=0.0, dp=1.0, tp=float(tp), ep_gpus=1.0, expert_k=1.0,
                    expert_pair_flops=0.0, ep_load_z=0.0, ep_load_var=0.0, ep_load_cap=1.0,
                    a2a_latency_s=0.0, a2a_s_per_token=0.0)
    g, e, k = tp * dp, model.experts, model.experts_per_token
    m = e / g
    var = k * (m / e) * (1 - m / e) * (e - k) / (e - 1) if e > 1 else 0.0
    z = float(_normal_max(g))
    per_byte = 1.0 / link if link > 0 else 0.0
    phases = 2.0 * model.moe_layers * k * model.hidden * 2.0
    per_token, latency = phases * (g - 1) / g / g * per_byte, alpha_us
    if g > gpu.node_gpus:
        node = gpu.node_gpus
        remote = (g - node) / g / (internode_gbps / 8.0 * 1e9 * SEND_EFFICIENCY)
        per_token = phases / g * max((node - 1) / g * per_byte, remote)
        latency = max(alpha_us, SEND_LATENCY_US["network"])
    cross = dp > 1  # within one rank the tokens are on every GPU: its all-reduces combine
    return dict(
        ep=1.0, dp=float(dp), tp=float(tp), ep_gpus=float(g), expert_k=float(k),
        expert_pair_flops=2.0 * model.expert_params / e * slow, ep_load_z=z, ep_load_var=var,
        ep_load_cap=float(min(k, m)),
        a2a_latency_s=2.0 * model.moe_layers * latency * 1e-6 if cross else 0.0,
        a2a_s_per_token=per_token if cross else 0.0)


def _normal_max(n: int) -> float:
    """Expected maximum of ``n`` independent standard normals (Blom 1958: the normal quantile
    at (n - 0.375) / (n + 0.25)); 0 for one."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def oneshot_bytes(tp: int) -> float:
    """The largest message vLLM's custom all-reduce sends by its one-shot algorithm (every GPU
    reads every other's whole message) rather than reduce-scatter and all-gather: any at 2 GPUs
    (the two cost the same there), 512 KiB at 3-4, 256 KiB at 5-8 (vLLM's
    csrc/custom_all_reduce.cuh, ``REDUCE_CASE``)."""
    return math.inf if tp <= 2 else 512 * 1024.0 if tp <= 4 else 256 * 1024.0


def allreduce_time(p: TimingParams, tokens, xp=np):
    """The all-reduces of a pass of ``tokens`` tokens, each its latency and its message (the
    tokens' 16-bit activations) over the link. The latency of ``tp`` GPUs is ``alpha x (1 +
    growth x (tp - 2))``, alpha being 2 GPUs' (growth 1: ``(tp - 1) x alpha``). Below
    ``oneshot_bytes`` one-shot: that latency, each GPU reading every other's message; else
    reduce-scatter then all-gather: two phases, twice it, and ``2 (tp - 1) / tp`` of the
    message."""
    message = p.allreduce_token_bytes * tokens
    oneshot = message < p.allreduce_oneshot_bytes
    per_byte = xp.where(oneshot, p.allreduce_oneshot_s_per_byte, p.allreduce_ring_s_per_byte)
    latency = xp.where(oneshot, 1.0, 2.0) * p.allreduce_latency_s
    return p.allreduces * (latency + per_byte * message)


def kv_efficiency(gpu: GPU, bandwidth_efficiency: float) -> float:
    """The KV cache's read efficiency beside the weights' ``bandwidth_efficiency``: the GPU's
    own ratio of the two (its attention kernels' penalty on paged KV reads), at most 1; the
    GPU's own value at its own weights' efficiency."""
    kv = gpu.kv_bandwidth_efficiency
    if kv is None or bandwidth_efficiency == gpu.bandwidth_efficiency:
        return bandwidth_efficiency if kv is None else kv
    return min(1.0, bandwidth_efficiency * (kv / gpu.bandwidth_efficiency))


def pass_work(p: TimingParams, tokens, pairs, context_read, xp=np):
    """FLOPs, weight bytes and KV bytes of a target pass that processes ``tokens`` new tokens
    whose attention covers ``pairs`` query-key pairs and reads ``context_read`` cached tokens'
    KV.

    A mixture-of-experts pass reads only the experts its tokens route to: with top-k of E
    experts routed independently, an expert is unused by all T tokens with probability
    ``(1 - k/E)^T``, so ``E (1 - (1 - k/E)^T)`` experts per layer are read in expectation."""
    flops = p.flops_per_token * tokens + p.attn_flops_per_pair * pairs
    unread = p.expert_bytes * xp.power(p.expert_skip, tokens)
    return flops, p.weight_bytes - unread, p.kv_bytes_per_token * (context_read + tokens)


def serial_expert_work(p: TimingParams, tokens, weights, xp=np):
    """Seconds of a dequantising expert kernel's products and reads in a pass of ``tokens``
    whose ``pass_work`` read ``weights`` bytes (0, 0 for any other kernel): its routed experts'
    FLOPs, and the bytes of the experts its tokens touch, which are all of ``weights`` but the
    experts' share of the model. Selected, not scaled by ``expert_serial``: a product feeding an
    add may be fused (FMA) in one compiled graph and not another, and results must not depend
    on it."""
    serial = p.expert_serial > 0.5
    return (xp.where(serial, p.expert_flops_per_token * tokens / p.flops_per_s, 0.0),
            xp.where(serial, (weights - (p.weight_bytes - p.expert_bytes)) / p.bytes_per_s, 0.0))


def _roofline_pairs(p: TimingParams, prefill_pairs, decode_pairs, xp):
    """The query-key pairs the roofline's FLOPs count: decode's join prefill's unless decode
    attention has its own term (``decode_attn_s_per_flop`` > 0)."""
    return prefill_pairs + xp.where(p.decode_attn_s_per_flop > 0.0, 0.0, decode_pairs)


def _decode_attention(p: TimingParams, decode_pairs, context_read, xp):
    """Decode attention's own roofline: its KV reads are already in the memory side, so only
    the compute beyond them adds (0 where it has no term of its own)."""
    return xp.maximum(p.attn_flops_per_pair * decode_pairs * p.decode_attn_s_per_flop
                      - p.kv_bytes_per_token * context_read / p.kv_bytes_per_s, 0.0)


def _roofline(p: TimingParams, flops, weights, kv, serial_s, xp):
    """Compute and memory overlap (the larger bounds the pass), but for a dequantising expert
    kernel's products and reads (``serial_s``: their seconds, within ``flops`` and
    ``weights``), which add after it: it unpacks a tile before it multiplies it (docs/model.md,
    "Weight-only kernels")."""
    products, reads = serial_s
    return (xp.maximum(flops / p.flops_per_s - products,
                       weights / p.bytes_per_s - reads + kv / p.kv_bytes_per_s)
            + (products + reads))


def _dense_time(p: TimingParams, prefill_tokens, prefill_pairs, decode_seqs, decode_tokens,
                decode_pairs, context_read, xp):
    """A target pass of one server whose every GPU holds a slice of every weight (tensor
    parallelism; experts sliced too), or the GPU's measured linear form. ``decode_pairs`` are
    in prefill's FLOPs per pair."""
    tokens = prefill_tokens + decode_tokens
    flops, weights, kv = pass_work(p, tokens, _roofline_pairs(p, prefill_pairs, decode_pairs, xp),
                                   context_read, xp)
    kv = kv + p.seq_bytes * decode_seqs
    roof = (_roofline(p, flops, weights, kv, serial_expert_work(p, tokens, weights, xp), xp)
            + _decode_attention(p, decode_pairs, context_read, xp)
            + allreduce_time(p, tokens, xp)
            + p.overhead_s)
    lin = (p.lin_fixed_s + p.lin_prefill_token_s * prefill_tokens
           + p.lin_decode_token_s * decode_tokens + p.lin_context_token_s * context_read)
    return xp.where(p.linear > 0.5, lin, roof)


def _target_time(p: TimingParams, prefill_tokens, prefill_pairs, decode_seqs, decode_tokens,
                 decode_pairs, context_read, xp):
    """A target pass in any form: expert-parallel where the design says so, else dense."""
    dense = _dense_time(p, prefill_tokens, prefill_pairs, decode_seqs, decode_tokens,
                        decode_pairs, context_read, xp)
    ep = _expert_parallel_time(p, prefill_tokens + decode_tokens, prefill_pairs, decode_seqs,
                               decode_pairs, context_read, xp)
    return xp.where(p.ep > 0.5, ep, dense)


def _expert_parallel_time(p: TimingParams, tokens, prefill_pairs, decode_seqs, decode_pairs,
                          context_read, xp):
    """A pass of a server whose experts are sharded whole, timed on its busiest GPU: each of
    ``dp`` ranks (``tp`` GPUs) attends to its share of the batch and reads its attention and
    dense weights; each GPU runs its experts for the tokens routed to them (the busiest GPU's
    expected load) and reads those of them any token uses; across ranks the tokens go to their
    experts and back (all-to-all). Ranks share the batch evenly."""
    dp = p.dp
    rank_tokens = tokens / dp
    pairs = _roofline_pairs(p, prefill_pairs, decode_pairs, xp) / dp
    mean = tokens * p.expert_k / p.ep_gpus
    load = xp.minimum(mean + p.ep_load_z * xp.sqrt(tokens * p.ep_load_var),
                      tokens * p.ep_load_cap)
    dense = (p.flops_per_token - p.expert_pair_flops * p.expert_k) * rank_tokens
    products = p.expert_pair_flops * load * p.tp / p.flops_per_s
    touched = 1.0 - xp.power(p.expert_skip, tokens)
    expert_bytes = p.expert_bytes * touched * p.tp / p.ep_gpus
    weights = p.weight_bytes - p.expert_bytes + expert_bytes
    kv = (p.kv_bytes_per_token * (context_read + tokens) + p.seq_bytes * decode_seqs) / dp
    serial = p.expert_serial > 0.5  # the experts' products and reads add (``_roofline``)
    compute = ((dense + p.attn_flops_per_pair * pairs) / p.flops_per_s
               + xp.where(serial, 0.0, products))
    memory = xp.where(serial, (p.weight_bytes - p.expert_bytes) / p.bytes_per_s,
                      weights / p.bytes_per_s)
    return (xp.maximum(compute, memory + kv / p.kv_bytes_per_s)
            + xp.where(serial, products + expert_bytes / p.bytes_per_s, 0.0)
            + _decode_attention(p, decode_pairs / dp, context_read / dp, xp)
            + allreduce_time(p, rank_tokens, xp)
            + xp.where(tokens > 0, p.a2a_latency_s + p.a2a_s_per_token * tokens, 0.0)
            + p.overhead_s)


def _pass_time_of(target):
    def pass_time(p: TimingParams, prefill_tokens, prefill_pairs, decode_seqs, decode_context,
                  xp=np):
        """Seconds for one pass that prefills ``prefill_tokens`` (``prefill_pairs`` = sum of
        L(L+1)/2 over the prompts) and decodes ``decode_seqs`` sequences holding
        ``decode_context`` cached tokens in total. Under speculation each decoding sequence
        verifies k+1 tokens in the target pass, and the draft costs ``k x draft_cost`` plain
        target decode passes. The host spends ``seq_overhead`` on each decoding sequence,
        besides the pass's fixed overhead."""
        k1 = p.draft_tokens + 1.0
        ratio = p.decode_attn_ratio  # decode's pairs in prefill's FLOPs per pair
        main = target(p, prefill_tokens, prefill_pairs, decode_seqs, decode_seqs * k1,
                      decode_context * k1 * ratio, decode_context, xp)
        plain = target(p, 0.0, 0.0, decode_seqs, decode_seqs, decode_context * ratio,
                       decode_context, xp)
        draft = xp.where(decode_seqs > 0, p.draft_tokens * p.draft_cost * plain, 0.0)
        return main + draft + p.seq_overhead_s * decode_seqs
    return pass_time


#: A pass of any design.
pass_time = _pass_time_of(_target_time)
#: The same for designs without expert parallelism, to the bit, without computing its form: an
#: engine compiled for a batch with no such design uses it (``features.plain``).
dense_pass_time = _pass_time_of(_dense_time)


def staged(time, p: TimingParams, prefill_tokens, prefill_pairs, decode_seqs, decode_context,
           seqs, longest, longest_pairs, xp=np):
    """A pass of ``seqs`` sequences through ``pp`` pipeline stages (``time``: one of the pass
    times above, of the whole model on one stage's GPUs), or that pass as it is on one stage.

    The engine splits the pass's sequences into ``m = min(pp, seqs)`` micro-batches in flight
    at once, evenly by every sum; each goes through every stage, which holds ``1/pp`` of the
    layers, so a micro-batch's round trip is the whole model's time on its share, ``time(sums
    / m)``, plus its sends between stages. In that round trip every stage serves each of the
    ``m`` micro-batches once (``m <= pp``), so every sequence of the pass advances once: fewer
    sequences than stages leave stages idle (the bubble). A prefill is not split: a micro-batch
    holds the pass's longest chunk (``longest`` tokens, ``longest_pairs`` pairs) at least.
    On one stage (``m`` = 1, no sends, no floor) it is ``time`` of the sums, to the bit."""
    k1 = p.draft_tokens + 1.0
    m = xp.maximum(xp.minimum(p.pp, seqs), 1.0)
    share = time(p, prefill_tokens / m, prefill_pairs / m, decode_seqs / m, decode_context / m,
                 xp)
    lone = xp.where((longest > 0) & (p.pp > 1.5),
                    time(p, longest, longest_pairs, 0.0, 0.0, xp), 0.0)
    tokens = xp.maximum((prefill_tokens + decode_seqs * k1) / m, longest)
    return xp.maximum(share, lone) + (p.pp_send_s + p.pp_send_s_per_token * tokens)


class _Scalar:
    """The ``xp`` of one design's pass on Python floats (the twin's): IEEE double arithmetic
    as numpy's float64 scalars do it, about ten times faster. Unlike numpy it raises on a
    division by zero or an overflow of ``power``, and ``max`` does not carry a NaN: a caller
    falls back to numpy there (``scalar_time``)."""

    where = staticmethod(lambda cond, a, b: a if cond else b)
    maximum = staticmethod(max)
    minimum = staticmethod(min)
    power = staticmethod(math.pow)
    sqrt = staticmethod(math.sqrt)


def scalar_time(time, p: TimingParams, *sums) -> np.float64:
    """``time(p, *sums)`` (``staged`` and a pass time) of one design whose ``p`` holds Python
    floats, on Python floats where every step is finite, else on numpy's float64 scalars:
    the same bits either way."""
    try:
        t = time(p, *(float(x) for x in sums), xp=_Scalar)
        if math.isfinite(t):
            return np.float64(t)
    except (ArithmeticError, ValueError):
        pass
    # numpy's inf and nan, as the engine's XLA gives them, without a warning
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return np.float64(time(TimingParams(*(np.float64(v) for v in p)),
                               *(np.float64(x) for x in sums), xp=np))


def unstaged(time, p: TimingParams, prefill_tokens, prefill_pairs, decode_seqs, decode_context,
             seqs, longest, longest_pairs, xp=np):
    """``staged`` for a batch of designs without pipeline stages, without computing its
    form (the same figures to the bit)."""
    return time(p, prefill_tokens, prefill_pairs, decode_seqs, decode_context, xp)
