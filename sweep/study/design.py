"""Designs (the levers a capacity planner chooses) and their array form for the engine."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sweep.physics.hardware import GPU, get_gpu
from sweep.physics.memory import DEFAULT_OVERHEAD_FRACTION, DEFAULT_PROFILE_TOKENS, memory_budget
from sweep.physics.models import Model, get_model
from sweep.physics.rng import acceptance_thresholds
from sweep.physics.timing import TimingParams, timing_params

BATCHING = ("one_at_a_time", "static", "continuous")
KV_CACHE = ("contiguous", "paged")
GPUS = (1, 2, 4, 8)
WEIGHT_BITS = (16, 8, 4)
ACTIVATION_BITS = (16, 8, 4)
KV_BITS = (16, 8)
MAX_DRAFT_TOKENS = 16
ROUTERS = ("round_robin", "least_outstanding")
MAX_REPLICAS = 64
#: Default KV link: one 400 Gb/s NDR InfiniBand port (NVIDIA ConnectX-7 datasheet), as the
#: inter-node link between a prefill and a decode instance (DistServe, Splitwise).
DEFAULT_KV_LINK_GBPS = 400.0


@dataclass(frozen=True)
class Design:
    """One serving design. ``gpu`` and ``model`` are catalog names (or objects)."""

    gpu: str | GPU = "H100-SXM"
    model: str | Model = "Llama-3-8B"
    batching: str = "continuous"
    max_batch: int = 256  # seats: sequences decoded together at most
    kv_cache: str = "paged"
    block_size: int = 16  # tokens per KV block under the paged cache
    max_seq_len: int | None = None  # contiguous reservation per sequence; None: model's context
    gpus: int = 1  # tensor-parallel degree of the replica
    weight_bits: int = 16  # weight storage: bytes read per pass
    activation_bits: int = 16  # precision the matrix multiplies run in: the compute peak
    kv_bits: int = 16
    draft_tokens: int = 0  # speculative draft length k (0 = off)
    acceptance: float = 0.7  # per-token acceptance probability of a drafted token
    draft_cost: float = 0.1  # cost per drafted token, as a fraction of a target decode pass
    compute_efficiency: float | None = None  # None: the GPU's default (hardware.py)
    bandwidth_efficiency: float | None = None
    kv_bandwidth_efficiency: float | None = None  # None: the weights' (bandwidth_efficiency)
    decode_attention_efficiency: float | None = None  # None: the GPU's default
    overhead_ms: float | None = None
    seq_overhead_us: float | None = None  # None: the GPU's default (per decoding sequence)
    request_overhead_ms: float | None = None  # None: the GPU's default (outside the passes)
    request_lag_passes: float | None = None  # None: the GPU's default
    memory_overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION
    gpu_memory_utilization: float | None = None  # vLLM's KV sizing instead (memory.py)
    kv_blocks: int | None = None  # KV blocks of block_size tokens, as a server log reports
    price_per_gpu_hour: float | None = None  # None: the catalog's price
    replicas: int = 1  # identical servers behind a router (docs/model.md "Replicas")
    router: str = "round_robin"
    prefill_gpus: int | None = None  # both set: disaggregated prefill and decode pools
    decode_gpus: int | None = None
    kv_link_gbps: float = DEFAULT_KV_LINK_GBPS  # prefill -> decode KV transfer, Gb/s
    prefix_cache: bool = False  # reuse the KV of cached shared prefixes (paged cache only)
    prefill_chunk_tokens: int = 0  # prefill tokens per pass at most (chunked prefill; 0 = off)
    max_num_batched_tokens: int = 0  # tokens per pass, decodes first (vLLM's budget; 0 = off)

    @property
    def gpu_spec(self) -> GPU:
        return self.gpu if isinstance(self.gpu, GPU) else get_gpu(self.gpu)

    @property
    def model_spec(self) -> Model:
        return self.model if isinstance(self.model, Model) else get_model(self.model)

    @property
    def disaggregated(self) -> bool:
        return self.prefill_gpus is not None or self.decode_gpus is not None

    def pool(self, gpus: int) -> "Design":
        """One server of this design: ``gpus`` GPUs, no router, no disaggregation."""
        return self.replace(gpus=gpus, replicas=1, router="round_robin", prefill_gpus=None,
                            decode_gpus=None, kv_link_gbps=DEFAULT_KV_LINK_GBPS)

    @property
    def total_gpus(self) -> int:
        """Every GPU the design pays for."""
        if self.disaggregated:
            return self.prefill_gpus + self.decode_gpus
        return self.replicas * self.gpus

    @property
    def seats(self) -> int:
        return 1 if self.batching == "one_at_a_time" else self.max_batch

    @property
    def context_limit(self) -> int:
        """Longest sequence (prompt + output) this design serves; workloads are clipped to it."""
        return self.max_seq_len or self.model_spec.max_context

    @property
    def block_tokens(self) -> int:
        """Allocation unit: a block under paging; a whole maximum-length sequence if contiguous."""
        if self.kv_cache == "paged":
            return self.block_size
        return self.context_limit

    def validate(self) -> None:
        def allowed(key, value, options):
            if value not in options:
                raise ValueError(f"levers.{key}: {value!r} is not allowed; allowed: "
                                 f"{', '.join(map(str, options))}")

        def number(key, value, lo, hi, lo_open=False):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(value) and (value > lo if lo_open else value >= lo) and value <= hi
            if not ok:
                raise ValueError(f"levers.{key}: must be a number in {'(' if lo_open else '['}"
                                 f"{lo}, {hi}], got {value!r}")

        def integer(key, value, lo, hi):
            if not (isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi):
                raise ValueError(f"levers.{key}: must be an integer in [{lo}, {hi}], got {value!r}")

        integer("replicas", self.replicas, 1, MAX_REPLICAS)
        allowed("router", self.router, ROUTERS)
        if self.disaggregated:
            for key in ("prefill_gpus", "decode_gpus"):
                if getattr(self, key) is None:
                    raise ValueError(f"levers.{key}: missing; allowed: both prefill_gpus and "
                                     "decode_gpus, or neither")
                allowed(key, getattr(self, key), GPUS)
            if self.gpus != 1:
                raise ValueError("levers.gpus: not used with prefill_gpus and decode_gpus; "
                                 "allowed: leave gpus unset")
            if self.replicas != 1:
                raise ValueError("levers.replicas: must be 1 with prefill_gpus and decode_gpus; "
                                 "allowed: 1")
            number("kv_link_gbps", self.kv_link_gbps, 0.0, 1e6, lo_open=True)
            self._one_server_features()
            self.pool(self.prefill_gpus).validate()
            self.pool(self.decode_gpus).validate()
            return
        gpu, model = self.gpu_spec, self.model_spec
        allowed("batching", self.batching, BATCHING)
        allowed("kv_cache", self.kv_cache, KV_CACHE)
        allowed("gpus", self.gpus, GPUS)
        allowed("weight_bits", self.weight_bits, WEIGHT_BITS)
        allowed("kv_bits", self.kv_bits, KV_BITS)
        integer("max_batch", self.max_batch, 1, 4096)
        integer("block_size", self.block_size, 1, 4096)
        integer("draft_tokens", self.draft_tokens, 0, MAX_DRAFT_TOKENS)
        number("acceptance", self.acceptance, 0.0, 1.0)
        number("draft_cost", self.draft_cost, 0.0, 10.0)
        allowed("activation_bits", self.activation_bits, ACTIVATION_BITS)
        if self.activation_bits < self.weight_bits:
            raise ValueError(f"levers.activation_bits: {self.activation_bits}-bit activations with "
                             f"{self.weight_bits}-bit weights is not a format; allowed: "
                             f"activation_bits >= weight_bits ({self.weight_bits})")
        if not gpu.has_activation_bits(self.activation_bits):
            have = [b for b in ACTIVATION_BITS if gpu.has_activation_bits(b)]
            raise ValueError(f"levers.activation_bits: {gpu.name} has no "
                             f"{self.activation_bits}-bit tensor peak; allowed: "
                             f"{', '.join(map(str, have))}")
        for key, lo_open, hi in (("compute_efficiency", True, 1.0),
                                 ("bandwidth_efficiency", True, 1.0),
                                 ("kv_bandwidth_efficiency", True, 1.0),
                                 ("decode_attention_efficiency", False, 1.0),
                                 ("overhead_ms", False, 1e4),
                                 ("seq_overhead_us", False, 1e6),
                                 ("request_overhead_ms", False, 1e6),
                                 ("request_lag_passes", False, 100.0)):
            if getattr(self, key) is not None:
                number(key, getattr(self, key), 0.0, hi, lo_open=lo_open)
        number("memory_overhead_fraction", self.memory_overhead_fraction, 0.0, 0.99)
        if self.gpu_memory_utilization is not None:
            number("gpu_memory_utilization", self.gpu_memory_utilization, 0.0, 1.0, lo_open=True)
        if self.kv_blocks is not None:
            integer("kv_blocks", self.kv_blocks, 1, 2**31 - 1)
        integer("prefill_chunk_tokens", self.prefill_chunk_tokens, 0, 2**30)
        integer("max_num_batched_tokens", self.max_num_batched_tokens, 0, 2**30)
        decode_tokens = self.seats * (self.draft_tokens + 1)
        if 0 < self.max_num_batched_tokens < decode_tokens:
            raise ValueError(f"levers.max_num_batched_tokens: {self.max_num_batched_tokens} cannot "
                             f"hold a pass decoding every seat ({self.seats} x "
                             f"{self.draft_tokens + 1} tokens); allowed: 0 (no budget) or at least "
                             f"{decode_tokens}")
        if not isinstance(self.prefix_cache, bool):
            raise ValueError(f"levers.prefix_cache: must be true or false, got "
                             f"{self.prefix_cache!r}")
        if self.prefix_cache and self.kv_cache != "paged":
            raise ValueError("levers.prefix_cache: shares KV blocks, so it needs kv_cache = "
                             "\"paged\"; allowed: false with a contiguous cache")
        self._one_server_features()
        if self.max_seq_len is not None:
            integer("max_seq_len", self.max_seq_len, 2, model.max_context)
        if self.price_per_gpu_hour is not None:
            number("price_per_gpu_hour", self.price_per_gpu_hour, 0.0, 1e6)
        if self.gpus > 1 and gpu.interconnect_gbs <= 0:
            raise ValueError(f"levers.gpus: {gpu.name} has no tensor-parallel interconnect; "
                             "allowed: 1")
        budget = self.budget()
        if not budget.fits and self.kv_blocks is None:
            raise ValueError(
                f"design: {model.name} at {self.weight_bits}-bit weights does not fit on "
                f"{self.gpus} x {gpu.name} (weights {budget.weights_gib:.1f} GiB, "
                f"{budget.total_gib - budget.overhead_gib:.1f} GiB usable); use more gpus or "
                "fewer weight_bits")
        longest = self.context_limit
        if self.total_blocks() * self.block_tokens < longest:
            raise ValueError(
                f"design: the KV cache of {model.name} on {self.gpus} x {gpu.name} holds "
                f"{self.kv_tokens()} tokens, less than one {longest}-token sequence; use more "
                "gpus or fewer weight_bits")

    def budget(self):
        return memory_budget(self.model_spec, self.gpu_spec.memory_gib, self.gpus,
                             self.weight_bits, self.kv_bits, self.memory_overhead_fraction,
                             utilization=self.gpu_memory_utilization,
                             profile_tokens=self.max_num_batched_tokens or DEFAULT_PROFILE_TOKENS,
                             profile_seqs=self.seats)

    def kv_tokens(self) -> int:
        """Tokens of KV cache: ``kv_blocks`` blocks when given, else the memory budget's."""
        if self.kv_blocks is not None:
            return self.kv_blocks * self.block_size
        return self.budget().kv_tokens

    def total_blocks(self) -> int:
        return self.kv_tokens() // self.block_tokens

    def timing(self) -> TimingParams:
        return timing_params(
            self.model_spec, self.gpu_spec, tp=self.gpus, weight_bits=self.weight_bits,
            kv_bits=self.kv_bits, activation_bits=self.activation_bits,
            compute_efficiency=self.compute_efficiency,
            bandwidth_efficiency=self.bandwidth_efficiency,
            kv_bandwidth_efficiency=self.kv_bandwidth_efficiency,
            decode_attention_efficiency=self.decode_attention_efficiency,
            overhead_ms=self.overhead_ms,
            seq_overhead_us=self.seq_overhead_us, draft_tokens=self.draft_tokens,
            draft_cost=self.draft_cost)

    def _one_server_features(self) -> None:
        """Prefix caching and chunked prefill are checked against the twin on one server only."""
        chunking = self.prefill_chunk_tokens or self.max_num_batched_tokens
        if (self.prefix_cache is True or chunking) and (self.replicas != 1 or self.disaggregated):
            key = "prefix_cache" if self.prefix_cache is True else (
                "prefill_chunk_tokens" if self.prefill_chunk_tokens else "max_num_batched_tokens")
            raise ValueError(f"levers.{key}: not yet combined with replicas or disaggregated "
                             "pools; allowed: one server (replicas = 1, no prefill_gpus)")

    def params(self) -> "EngineParams":
        """One server's engine arrays (validated first); a design with replicas or
        disaggregated pools runs as several servers: ``sweep.execution.topology.plan``."""
        self.validate()
        if self.replicas != 1 or self.disaggregated:
            raise ValueError("design: replicas and prefill/decode pools are several servers; "
                             "allowed: sweep.execution.topology.plan(design)")
        gpu = self.gpu_spec
        price = gpu.price_per_gpu_hour if self.price_per_gpu_hour is None else self.price_per_gpu_hour
        return EngineParams(
            timing=TimingParams(*(np.float64(v) for v in self.timing())),
            max_batch=np.int32(self.seats),
            static=np.bool_(self.batching != "continuous"),
            block_tokens=np.int32(self.block_tokens),
            total_blocks=np.int32(min(self.total_blocks(), 2**31 - 1)),
            draft_tokens=np.int32(self.draft_tokens),
            # Thresholds past k are 0 (never accept): the engine needs no mask by k.
            accept_thresholds=np.where(np.arange(MAX_DRAFT_TOKENS) < self.draft_tokens,
                                       acceptance_thresholds(self.acceptance, MAX_DRAFT_TOKENS),
                                       0).astype(np.int32),
            block_bytes=np.float64(self.block_tokens * self.model_spec.kv_bytes_per_token(
                self.kv_bits)),
            gpus=np.float64(self.gpus),
            transferred=np.bool_(False),
            price_per_gpu_s=np.float64(price / 3600.0),
            prefix_cache=np.bool_(self.prefix_cache),
            prefill_chunk=np.int32(self.prefill_chunk_tokens),
            token_budget=np.int32(self.max_num_batched_tokens),
            request_overhead_s=np.float64((gpu.request_overhead_ms if self.request_overhead_ms
                                           is None else self.request_overhead_ms) * 1e-3),
            request_lag_passes=np.float64(gpu.request_lag_passes if self.request_lag_passes
                                          is None else self.request_lag_passes),
            slo_ttft_s=np.float64(np.inf),
            slo_tpot_s=np.float64(np.inf),
        )

    def replace(self, **changes) -> "Design":
        return dataclasses.replace(self, **changes)


class EngineParams(NamedTuple):
    """A design in the engine's array form (a pytree: stack many to vmap a sweep)."""

    timing: TimingParams
    max_batch: np.ndarray  # int32: seats in use (1 for one-at-a-time)
    static: np.ndarray  # bool: admit only into an empty batch (static and one-at-a-time)
    block_tokens: np.ndarray  # int32: KV allocation unit in tokens
    total_blocks: np.ndarray  # int32
    draft_tokens: np.ndarray  # int32: k
    accept_thresholds: np.ndarray  # int32[MAX_DRAFT_TOKENS]: round(acceptance**j x 2**24), 0 past k
    block_bytes: np.ndarray  # float64: bytes per KV block (for peak KV memory)
    gpus: np.ndarray  # float64
    transferred: np.ndarray  # bool: requests arrive prefilled (a decode pool: sweep/execution/topology.py)
    price_per_gpu_s: np.ndarray  # float64, $ per GPU-second
    prefix_cache: np.ndarray  # bool: reuse cached shared prefixes
    prefill_chunk: np.ndarray  # int32: prefill tokens per pass at most, 0 = unlimited
    token_budget: np.ndarray  # int32: tokens per pass, decodes' first, 0 = unlimited
    request_overhead_s: np.ndarray  # float64: added to every request's TTFT and latency
    request_lag_passes: np.ndarray  # float64: so many mean TPOTs added to them too
    # A brief's per-request limits (metrics only: slo_attainment, goodput_rps); inf: none.
    slo_ttft_s: np.ndarray  # float64
    slo_tpot_s: np.ndarray  # float64
