"""Hardware catalog: accelerators with the datasheet figures a pass-time model needs
(``gpu_catalog``'s rows).

Units are in the field names. Compute figures are *dense* (no structured sparsity) tensor-core
peaks. Memory is in GiB: vendors' "80 GB" parts expose 80 GiB-class HBM (nvidia-smi reports
81,559 MiB on an H100 80GB), and the teaching simulator's budget divides bytes by 1024**3.

Each entry picks its timing model: ``"roofline"`` (datasheet peaks x efficiency factors) or
``"linear"`` (a fit to measured pass times, as BLIS and Splitwise do; see ``LinearTiming``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from sweep.errors import listed
from sweep.physics.engines import VLLM
from sweep.physics.gpu_catalog import HOST_LINKS, INTERNODE, SHEETS

#: A datasheet entry's roofline factors until the catalog gives it a fitted GPU's (``_served``):
#: the 'Serve a Model' document's "60% of peak compute and 80% of peak bandwidth plus 0.2 ms per
#: pass", which configs/serve_a_model.toml states.
PRIOR_COMPUTE_EFFICIENCY = 0.6
PRIOR_BANDWIDTH_EFFICIENCY = 0.8
PRIOR_PASS_OVERHEAD_MS = 0.2
#: Share of the host link's per-direction rate a CPU KV tier's loads reach: stated, not fitted
#: (no shared run loads KV from host memory). vLLM's offloading connector copies contiguous
#: 0.5-2 MB blocks by DMA (vLLM blog, "KV offloading connector", 2026-01-08), which approach the
#: link's rate; PCIe's 128b/130b encoding and packet headers leave about 85-90% of it.
HOST_LINK_EFFICIENCY = 0.8
#: A pipeline stage's send to the next: stated, not fitted (no shared run spans stages). The
#: latency of one NCCL send/receive, microseconds: about 5 us within a node (nccl-tests
#: sendrecv_perf, small messages, NVLink) and 10 us across InfiniBand (the same, between two
#: nodes); and the share of a link's rate a large send reaches (nccl-tests' bus bandwidth of
#: about 45 of a 400 Gb/s port's 50 GB/s).
SEND_LATENCY_US = {"node": 5.0, "network": 10.0}
SEND_EFFICIENCY = 0.9


@dataclass(frozen=True)
class LinearTiming:
    """Measured pass-time model: ``fixed_ms + prefill_token_ms * prefill tokens +
    decode_token_ms * decoded tokens + context_token_us * context tokens attended / 1000``.

    The form is BLIS's and Splitwise's linear step-time fit; coefficients come from a measurement.
    """

    fixed_ms: float
    prefill_token_ms: float
    decode_token_ms: float
    context_token_us: float = 0.0
    source: str = ""


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float
    bandwidth_tbs: float  # peak memory bandwidth, TB/s (1e12 bytes/s)
    tflops_16bit: float  # dense BF16/FP16 tensor peak, TFLOP/s
    tflops_8bit: float  # dense FP8/INT8 tensor peak, TFLOP/s
    tflops_4bit: float  # dense INT4/FP4 peak where the chip has it, else the 8-bit figure
    interconnect_gbs: float  # per-GPU, per-direction bandwidth for tensor-parallel all-reduce, GB/s
    allreduce_latency_us: float  # fixed cost of one small all-reduce, microseconds
    price_per_gpu_hour: float  # default $ per GPU-hour; configs override it
    timing: str = "roofline"  # "roofline" or "linear"
    linear: LinearTiming | None = None
    # Roofline factors used when a config gives none: a fitted GPU's (``_served``).
    compute_efficiency: float = PRIOR_COMPUTE_EFFICIENCY
    bandwidth_efficiency: float = PRIOR_BANDWIDTH_EFFICIENCY
    overhead_ms: float = PRIOR_PASS_OVERHEAD_MS
    # Fraction of the 16-bit tensor peak that decode attention reaches, its time added to the
    # pass (timing.py); 0: decode attention FLOPs join the roofline's, as in the brief.
    decode_attention_efficiency: float = 0.0
    # Share of peak bandwidth reading the KV cache, where it differs from the weights' (None).
    kv_bandwidth_efficiency: float | None = None
    # Host time per decoding sequence per pass, microseconds: an engine's scheduler, sampler
    # and output processing visit every running request each step. 0 in the brief.
    seq_overhead_us: float = 0.0
    # Latency a request spends outside the engine's passes (the HTTP server, tokenization, the
    # hop to the engine process and the streamed response), added to its TTFT and end-to-end
    # latency; 0 in the brief, which times the engine alone.
    request_overhead_ms: float = 0.0
    # Passes a request's tokens reach the client after the rules deliver them (an engine that
    # schedules the next step while one runs and streams a step's output during the next); each
    # counts the run's mean time per output token. 0 in the brief.
    request_lag_passes: float = 0.0
    # Host time per prompt token a request's prefill computes (outside a cached shared prefix),
    # outside the passes: added to its TTFT and end-to-end latency. 0 in the brief.
    prompt_overhead_us: float = 0.0
    # Share of interconnect_gbs that an all-reduce of a pass's activations reaches.
    allreduce_bandwidth_efficiency: float = 1.0
    # Share of the 2-GPU all-reduce latency each further GPU adds: 1, n - 1 times it (a ring's
    # steps); near 0, about one latency at any degree (one-shot reads from every peer at once).
    allreduce_growth: float = 1.0
    # Shares of its weight-read and compute efficiencies kept on the weights a weight-only
    # kernel dequantises (weights narrower than the compute); 1 in the brief (no such kernels).
    dequant_bandwidth_efficiency: float = 1.0
    dequant_compute_efficiency: float = 1.0
    generation: str = ""  # the architecture, for transferring another GPU's fitted factors
    # Where the factors above come from: "fitted" on this GPU's runs, or "transferred:<GPU>".
    calibration: str = "fitted"
    model_error: ModelError | None = None
    # And of a design whose routed experts run in weight-only kernels (None: ``model_error``).
    weight_only_model_error: ModelError | None = None
    # Such a design's all-reduce latency (us, 2 GPUs) and growth: fitted on runs of those
    # kernels, of this GPU or one of its generation (None: the two above, as every other design).
    weight_only_allreduce: tuple[float, float] | None = None
    # Per-direction GB/s of its link to the host's memory (a CPU KV tier's loads); 0: none.
    host_link_gbs: float = 0.0
    # Gb/s per direction of its own link to other nodes (pipeline stages on two nodes), and the
    # GPUs of one node, linked by ``interconnect_gbs``; 0: none.
    internode_gbps: float = 0.0
    node_gpus: int = 1
    source: str = field(default="", compare=False)

    def tflops(self, activation_bits: int) -> float:
        """Dense tensor peak at the precision the matrix multiplies run in: the activations'
        (weight-only formats dequantise to 16 bits before multiplying)."""
        return {16: self.tflops_16bit, 8: self.tflops_8bit, 4: self.tflops_4bit}[activation_bits]

    def has_activation_bits(self, bits: int) -> bool:
        """Whether the chip has a faster tensor path at this precision than the one above it
        (a datasheet that gives no 4-bit peak repeats the 8-bit one)."""
        if bits == 16:
            return True
        if bits == 8:
            return self.tflops_8bit > self.tflops_16bit
        return bits == 4 and self.tflops_4bit > self.tflops_8bit


# NCCL's small-message all-reduce latency inside one NVLink/xGMI node is a few microseconds
# (nccl-tests all_reduce_perf, 8-byte messages); PCIe parts are about three times slower. These
# are the datasheet entries' priors: a served GPU takes the serving engine's fitted latency for
# its kind of link (engines.ServingEngine.allreduce_latency_us).
_NVLINK_AR_US = 5.0
_PCIE_AR_US = 15.0


def _nvlink(gpu: "GPU") -> bool:
    """Whether the datasheet's all-reduce prior is NVLink's (or xGMI's) rather than PCIe's."""
    return gpu.allreduce_latency_us <= _NVLINK_AR_US

#: The batching lesson timed its strategies on an Apple laptop GPU. This fit reproduces its
#: figures (docs/model.md, "The batching lesson"): a 6.3 ms decode pass for one sequence, growing
#: 1.3 ms per extra sequence, and 0.05 ms per prompt token -- the shape of a ~1B-parameter 16-bit
#: model on a 400 GB/s unified-memory GPU.
M3_MAX_LINEAR_FIT = LinearTiming(
    fixed_ms=5.0,
    prefill_token_ms=0.05,
    decode_token_ms=1.3,
    context_token_us=0.0,
    source="fit to the batching lesson's figures (343/299/154 tokens/s, 22 ms/5.3 s/33.7 s "
           "median TTFT)",
)


@dataclass(frozen=True)
class ModelError:
    """How far the model's predictions on one GPU stray from real runs it was not fitted on, as
    relative standard deviations of its factors: ``speed_sd`` of the GPU-side efficiencies
    (compute, bandwidth and decode attention, which err together: a GPU that runs slow runs slow
    in every kernel) and ``lag_sd`` of ``request_lag_passes`` (TTFT's error beyond the speed's)."""

    speed_sd: float
    lag_sd: float
    source: str = field(default="", compare=False)


@dataclass(frozen=True)
class GpuFit:
    """A GPU's own factors, fitted on real serving runs of it, and its model error. A factor
    its runs do not identify is None: it comes from the fitted GPU that ``transfer_source``
    names among those that identify it (``_factor``)."""

    compute_efficiency: float | None
    bandwidth_efficiency: float | None
    kv_bandwidth_efficiency: float | None
    decode_attention_efficiency: float
    error: ModelError
    dequant_bandwidth_efficiency: float | None = None
    dequant_compute_efficiency: float | None = None
    # Its NVLink all-reduce: the 2-GPU latency (us) and growth per further GPU; None: the
    # serving engine's (``ServingEngine.nvlink_allreduce_us``, growth 1).
    allreduce_latency_us: float | None = None
    allreduce_growth: float | None = None
    # Its error on weight-only experts where its held-out runs of them measured one apart from
    # ``error``; None: ``_weight_only_error``.
    weight_only_error: ModelError | None = None
    source: str = field(default="", compare=False)


#: The GPUs with real runs: their factors, fitted on their fit cases of the serving engine's own
#: runs, and their model error, from their held-out cases (docs/validation.md). H100, A100 and
#: L40S: validation/fit.py on open-loop runs, whose prefills are short (prompts are cached) and do
#: not identify compute efficiency: they take the H200's (``_factor``); decode attention is not
#: identified once KV reads have their own efficiency, and stays inside the roofline (0); the
#: L40S's one load does not identify its KV-read efficiency: it keeps the A100's ratio of it to
#: weight reads. H200 and B200: validation/fit_closed.py on closed-loop runs of gpt-oss-120b,
#: whose long prefills identify the compute efficiency (the H200's rows, through the attention
#: and dense layers' share of them; the B200's do not move it, and it takes the H200's) and
#: which fit the weight-only kernels' shares (its MXFP4 experts, their reads
#: and products adding) and, for such designs, the all-reduce's latency and growth (6-7 times
#: the engine's latency at 2 GPUs, about its value at 8: these runs at TP 2-4 are far slower than
#: the open-loop runs' all-reduces give), and take the H100's bandwidth efficiencies
#: (``_factor``). Their model error: the speed's, the log RMS of their held-out mean TPOTs
#: (gpt-oss-120b, the runs the KV cache did not overload); the lag's, their held-out mean TTFTs'
#: beyond it over the lag's typical share of those TTFTs (0.15). The H100's error on weight-only
#: experts: the same rule on its held-out closed-loop runs of gpt-oss-120b.
FITS = {
    "H100-SXM": GpuFit(None, 0.796, 0.842, 0.0, ModelError(0.048, 0.255),
                       weight_only_error=ModelError(0.151, 0.90),
                       source="vLLM 0.15.1 runs at TP 1, 2 and 4 (vllm-h100, blis-vllm); "
                              "weight-only error: closed-loop runs of gpt-oss-120b "
                              "(aic-silicon), held out"),
    "A100-80GB": GpuFit(None, 0.740, 0.346, 0.0, ModelError(0.073, 0.413),
                        source="vLLM 0.15 runs at TP 1 and 2 (blis-vllm)"),
    "L40S": GpuFit(None, 0.887, None, 0.0, ModelError(0.065, 2.52),
                   source="a vLLM 0.15 run at TP 1 (blis-vllm)"),
    "H200": GpuFit(0.614, None, None, 0.0, ModelError(0.084, 0.99),
                   dequant_bandwidth_efficiency=0.76, dequant_compute_efficiency=0.338,
                   allreduce_latency_us=21.8, allreduce_growth=0.021,
                   source="closed-loop vLLM runs of gpt-oss-120b at TP 1-8 (aic-silicon)"),
    "B200": GpuFit(None, None, None, 0.0, ModelError(0.119, 1.83),
                   dequant_bandwidth_efficiency=0.978, dequant_compute_efficiency=0.737,
                   allreduce_latency_us=18.6, allreduce_growth=0.123,
                   source="closed-loop vLLM runs of gpt-oss-120b at TP 1-8 (aic-silicon)"),
}


#: The one GPU whose held-out runs check weight-only shares it takes from another (the H200's).
_SHARES_CHECK = "H100-SXM"


def _weight_only_error(name: str) -> ModelError:
    """A fitted GPU's model error on weight-only experts: its own where held-out runs of them
    measured it (``weight_only_error``, or ``error`` where such runs fitted its shares); a GPU
    that takes another's shares errs as the H100 did with the H200's, or as its own runs where
    they err more."""
    fit = FITS[name]
    if fit.weight_only_error is not None:
        return fit.weight_only_error
    if fit.dequant_bandwidth_efficiency is not None:
        return fit.error
    check = FITS[_SHARES_CHECK].weight_only_error
    return ModelError(max(fit.error.speed_sd, check.speed_sd), max(fit.error.lag_sd, check.lag_sd),
                      source=f"as {_SHARES_CHECK}'s with transferred shares")


def transfer_source(gpu: "GPU", fitted: dict) -> str:
    """The fitted GPU whose factors ``gpu`` takes: its own fit, else a fitted GPU of its
    generation, else the fitted GPU nearest in peak memory bandwidth (on a log scale)."""
    if gpu.name in fitted:
        return gpu.name
    same = [n for n, g in fitted.items() if g.generation == gpu.generation]
    pool = same or list(fitted)
    return min(pool, key=lambda n: (abs(math.log(fitted[n].bandwidth_tbs / gpu.bandwidth_tbs)), n))


#: Datasheet figures (``gpu_catalog``) and the Apple laptop's linear fit; every roofline entry
#: then takes the serving engine's host terms and a fitted GPU's factors (``_served``).
_LINK_AR_US = {"nvlink": _NVLINK_AR_US, "pcie": _PCIE_AR_US}
_DATASHEETS = tuple(
    GPU(s.name, s.memory_gib, s.bandwidth_tbs, s.tflops_16bit, s.tflops_8bit, s.tflops_4bit,
        s.interconnect_gbs, _LINK_AR_US[s.link], s.price_per_gpu_hour,
        generation=s.generation, host_link_gbs=HOST_LINKS[s.name][0],
        internode_gbps=INTERNODE[s.name][0], node_gpus=INTERNODE[s.name][1], source=s.source)
    for s in SHEETS) + (
    GPU("Apple-M3-Max", 48, 0.4, 14.2, 14.2, 14.2, 0.0, 0.0, 0.1,
        timing="linear", linear=M3_MAX_LINEAR_FIT, generation="Apple",
        source="Apple M3 Max (16-core CPU, 40-core GPU) specifications: 400 GB/s unified memory, "
               "~14.2 TFLOP/s FP32/FP16 GPU (no faster low-precision path); single GPU, no "
               "tensor parallelism; price an assumed laptop amortisation"),
)


def _factor(gpu: GPU, fitted: dict[str, GPU], key: str) -> float:
    """A fitted factor of ``gpu``: its own fit's, else (None: its runs do not identify it) that
    of the fitted GPU ``transfer_source`` names among those whose runs do. A KV-read efficiency
    a GPU's runs do not identify beside its own weight-read one keeps that GPU's ratio of the
    two (the L40S: the A100's)."""
    own = getattr(FITS[gpu.name], key) if gpu.name in FITS else None
    if own is not None:
        return own
    if key == "kv_bandwidth_efficiency" and gpu.name in FITS \
            and FITS[gpu.name].bandwidth_efficiency is not None:
        other = {n: g for n, g in fitted.items() if n != gpu.name
                 and FITS[n].kv_bandwidth_efficiency is not None}
        ref = FITS[transfer_source(gpu, other)]
        return (FITS[gpu.name].bandwidth_efficiency * ref.kv_bandwidth_efficiency
                / ref.bandwidth_efficiency)
    able = {n: g for n, g in fitted.items() if getattr(FITS[n], key) is not None}
    if not able:
        return getattr(gpu, key)
    return _factor(fitted[transfer_source(gpu, able)], fitted, key)


#: Factors a GPU takes from its fit or, where that does not identify one, by ``_factor``; the
#: weight-only read share transfers by ``_unpacking_share``.
_FACTORS = ("compute_efficiency", "bandwidth_efficiency", "kv_bandwidth_efficiency",
            "dequant_compute_efficiency")


def _weight_only_source(gpu: GPU, fitted: dict[str, GPU]) -> GPU:
    """The fitted GPU whose weight-only runs ``gpu`` draws on: ``transfer_source`` among the
    fitted GPUs whose runs fit weight-only shares."""
    able = {n: g for n, g in fitted.items() if FITS[n].dequant_bandwidth_efficiency is not None}
    return fitted[transfer_source(gpu, able)]


def _unpacking_share(gpu: GPU, fitted: dict[str, GPU], bandwidth_efficiency: float) -> float:
    """``gpu``'s weight-only kernels' read share: its own fit's, else the rate of
    ``_weight_only_source``'s, in bytes per second per 16-bit TFLOP/s, at ``gpu``'s own 16-bit
    peak, as a share of its plain weight-read rate (``bandwidth_efficiency`` x peak bandwidth),
    at most 1. Such a kernel unpacks every weight in its SMs, so its rate follows their
    throughput, not the memory's: under the same load the H100 (the H200's SMs, 0.7 times its
    memory bandwidth) runs gpt-oss-120b's MXFP4 experts 0-6% slower than the H200, where reads
    bound by memory would be up to 43% slower."""
    own = FITS[gpu.name].dequant_bandwidth_efficiency if gpu.name in FITS else None
    if own is not None:
        return own
    src = _weight_only_source(gpu, fitted)
    rate = (FITS[src.name].dequant_bandwidth_efficiency * _factor(src, fitted,
            "bandwidth_efficiency") * src.bandwidth_tbs / src.tflops_16bit * gpu.tflops_16bit)
    return min(1.0, rate / (bandwidth_efficiency * gpu.bandwidth_tbs))


def _weight_only_allreduce(gpu: GPU, fitted: dict[str, GPU]) -> tuple[float, float] | None:
    """An NVLink (or xGMI) GPU's all-reduce latency and growth on weight-only designs: those
    fitted on runs of such kernels, of ``_weight_only_source`` where it is of ``gpu``'s
    generation (the H200's for the H100 and itself, the B200's for the B300). Those fits cannot
    tell the all-reduce from the kernels' own cost under tensor parallelism (their slices narrow
    as ``1 / tp``), which the same kernels on the same generation pay too; every other design
    takes the engine's, which dense and MoE runs on NVLink fit (``_served``)."""
    src = _weight_only_source(gpu, fitted)
    fit = FITS[src.name]
    if src.generation != gpu.generation or fit.allreduce_latency_us is None or not _nvlink(gpu):
        return None
    return fit.allreduce_latency_us, fit.allreduce_growth


def _served(gpu: GPU, sheets: dict[str, GPU]) -> GPU:
    """A roofline entry with the serving engine's host terms and the factors of the fitted GPU
    ``transfer_source`` names (each factor that GPU's runs do not identify by ``_factor``).
    Across generations its model error widens by how far the fitted GPUs' bandwidth
    efficiencies differ among themselves (their log's sd)."""
    if gpu.timing != "roofline":
        return gpu
    fitted = {n: sheets[n] for n in FITS}
    donor = transfer_source(gpu, fitted)
    fit = FITS[donor]
    error, weight_only = fit.error, _weight_only_error(donor)
    if fitted[donor].generation != gpu.generation:
        spread = float(np.std([math.log(_factor(g, fitted, "bandwidth_efficiency"))
                               for g in fitted.values()]))
        error, weight_only = (ModelError(math.hypot(e.speed_sd, spread), e.lag_sd,
                                         source=f"{donor}'s, widened across generations")
                              for e in (error, weight_only))
    factors = {k: _factor(fitted[donor], fitted, k) for k in _FACTORS}
    factors["dequant_bandwidth_efficiency"] = _unpacking_share(
        gpu, fitted, factors["bandwidth_efficiency"])
    return dataclasses.replace(
        gpu, **factors,
        decode_attention_efficiency=fit.decode_attention_efficiency,
        overhead_ms=VLLM.overhead_ms, seq_overhead_us=VLLM.seq_overhead_us,
        request_overhead_ms=VLLM.request_overhead_ms,
        request_lag_passes=VLLM.request_lag_passes,
        prompt_overhead_us=VLLM.prompt_overhead_us,
        allreduce_latency_us=VLLM.allreduce_latency_us(_nvlink(gpu), _PCIE_AR_US / _NVLINK_AR_US), allreduce_growth=1.0,
        allreduce_bandwidth_efficiency=VLLM.allreduce_bandwidth_efficiency,
        calibration="fitted" if donor == gpu.name else f"transferred:{donor}",
        model_error=error, weight_only_model_error=weight_only,
        weight_only_allreduce=_weight_only_allreduce(gpu, fitted))


CATALOG: dict[str, GPU] = {g.name: _served(g, {s.name: s for s in _DATASHEETS})
                           for g in _DATASHEETS}


def get_gpu(name: str) -> GPU:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(
            f"hardware.gpu: unknown GPU {name!r}; allowed: {listed(CATALOG, near=name)}"
        ) from None
