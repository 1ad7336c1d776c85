"""Hardware catalog: accelerators with the datasheet figures a pass-time model needs.

Units are in the field names. Compute figures are *dense* (no structured sparsity) tensor-core
peaks. Memory is in GiB: vendors' "80 GB" parts expose 80 GiB-class HBM (nvidia-smi reports
81,559 MiB on an H100 80GB), and the teaching simulator's budget divides bytes by 1024**3.

Each entry picks its timing model: ``"roofline"`` (datasheet peaks x efficiency factors) or
``"linear"`` (a fit to measured pass times, as BLIS and Splitwise do; see ``LinearTiming``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

#: The 'Serve a Model' brief's efficiency factors ("60% of peak compute and 80% of peak bandwidth
#: plus 0.2 ms per pass"): the roofline's factors for a GPU that has not been calibrated on real
#: runs.
BRIEF_COMPUTE_EFFICIENCY = 0.6
BRIEF_BANDWIDTH_EFFICIENCY = 0.8
BRIEF_PASS_OVERHEAD_MS = 0.2


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
    # Roofline factors used when a config gives none: fitted on real serving runs where the GPU
    # has them (docs/validation.md), else the brief's assumptions.
    compute_efficiency: float = BRIEF_COMPUTE_EFFICIENCY
    bandwidth_efficiency: float = BRIEF_BANDWIDTH_EFFICIENCY
    overhead_ms: float = BRIEF_PASS_OVERHEAD_MS
    # Fraction of the 16-bit tensor peak that decode attention reaches, its time added to the
    # pass (timing.py); 0: decode attention FLOPs join the roofline's, as in the brief.
    decode_attention_efficiency: float = 0.0
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
# (nccl-tests all_reduce_perf, 8-byte messages); PCIe parts are slower.
_NVLINK_AR_US = 5.0
_PCIE_AR_US = 15.0

#: The batching lesson timed its strategies on an Apple laptop GPU. This fit reproduces its
#: figures (docs/model.md, "The batching lesson"): a 6.3 ms decode pass for one sequence, growing
#: 1.3 ms per extra sequence, and 0.05 ms per prompt token -- the shape of a ~1B-parameter 16-bit
#: model on a 400 GB/s unified-memory GPU.
LESSON_LAPTOP_FIT = LinearTiming(
    fixed_ms=5.0,
    prefill_token_ms=0.05,
    decode_token_ms=1.3,
    context_token_us=0.0,
    source="fit to the batching lesson's figures (343/299/154 tokens/s, 22 ms/5.3 s/33.7 s "
           "median TTFT)",
)

#: The H100's factors fitted on real vLLM 0.15.1 runs (validation/fit.py on validation/fit/:
#: the 'general' workload of Llama-2-7B, CodeLlama-34B and Mixtral-8x7B, both stages; see
#: docs/validation.md). The A100's are these scaled by its measured ratio to the H100 in the
#: Splitwise pass times (compute 2.26x slower against a 3.17x datasheet ratio, capped at 90%,
#: and decode attention's efficiency scaled alike; bandwidth 1.47x slower against 1.64x); its
#: host-side terms are the H100's.
H100_VLLM_FIT = {"compute_efficiency": 0.9, "bandwidth_efficiency": 0.85, "overhead_ms": 1.5,
                 "decode_attention_efficiency": 0.02, "request_overhead_ms": 0.0,
                 "request_lag_passes": 1.69}

CATALOG: dict[str, GPU] = {
    g.name: g
    for g in (
        GPU("H100-SXM", 80, 3.35, 989.4, 1978.9, 1978.9, 450, _NVLINK_AR_US, 2.0,
            compute_efficiency=H100_VLLM_FIT["compute_efficiency"],
            bandwidth_efficiency=H100_VLLM_FIT["bandwidth_efficiency"],
            overhead_ms=H100_VLLM_FIT["overhead_ms"],
            decode_attention_efficiency=H100_VLLM_FIT["decode_attention_efficiency"],
            request_overhead_ms=H100_VLLM_FIT["request_overhead_ms"],
            request_lag_passes=H100_VLLM_FIT["request_lag_passes"],
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM5): 3.35 TB/s HBM3, BF16 989 TF, "
                   "FP8 1979 TF dense; NVLink 4 900 GB/s bidirectional; no INT4 tensor cores; "
                   "$2/GPU-h per the 'Serve a Model' brief"),
        GPU("H200", 141, 4.8, 989.4, 1978.9, 1978.9, 450, _NVLINK_AR_US, 3.0,
            source="NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, same compute as H100; "
                   "price an assumed cloud on-demand rate"),
        GPU("A100-80GB", 80, 2.039, 312.0, 624.0, 1248.0, 300, _NVLINK_AR_US, 1.5,
            compute_efficiency=0.9, bandwidth_efficiency=0.948, decode_attention_efficiency=0.028,
            overhead_ms=H100_VLLM_FIT["overhead_ms"],
            request_overhead_ms=H100_VLLM_FIT["request_overhead_ms"],
            request_lag_passes=H100_VLLM_FIT["request_lag_passes"],
            source="NVIDIA A100 datasheet (80GB SXM): 2,039 GB/s HBM2e, BF16 312 TF, INT8 624 TOPS, "
                   "INT4 1248 TOPS dense; NVLink 3 600 GB/s bidirectional; price assumed"),
        GPU("L40S", 48, 0.864, 362.05, 733.0, 733.0, 32, _PCIE_AR_US, 1.0,
            source="NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 362 TF, FP8 733 TF dense; "
                   "PCIe Gen4 x16 64 GB/s bidirectional; price assumed"),
        GPU("B200", 180, 8.0, 2250.0, 4500.0, 9000.0, 900, _NVLINK_AR_US, 5.0,
            source="NVIDIA HGX B200 datasheet: 180 GB HBM3e, 8 TB/s, BF16 2.25 PF, FP8 4.5 PF, "
                   "FP4 9 PF dense; NVLink 5 1.8 TB/s bidirectional; price assumed"),
        GPU("MI300X", 192, 5.3, 1307.4, 2614.9, 2614.9, 448, _NVLINK_AR_US, 2.5,
            source="AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, FP16 1307 TF, FP8 2615 TF "
                   "dense; 7 Infinity Fabric links, 896 GB/s aggregate; no INT4 peak; price assumed"),
        GPU("Apple-M3-Max", 48, 0.4, 14.2, 14.2, 14.2, 0.0, 0.0, 0.1,
            timing="linear", linear=LESSON_LAPTOP_FIT,
            source="Apple M3 Max (16-core CPU, 40-core GPU) specifications: 400 GB/s unified memory, "
                   "~14.2 TFLOP/s FP32/FP16 GPU (no faster low-precision path); single GPU, no "
                   "tensor parallelism; price an assumed laptop amortisation"),
    )
}


def get_gpu(name: str) -> GPU:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(
            f"hardware.gpu: unknown GPU {name!r}; allowed: {', '.join(sorted(CATALOG))}"
        ) from None
