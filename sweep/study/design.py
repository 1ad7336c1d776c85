"""Designs: the levers a capacity planner chooses, and their combined checks."""
from __future__ import annotations

import dataclasses
import inspect
import math

from sweep.errors import DoesNotFit, FieldError, got, listed, show
from sweep.physics.catalog import get_model
from sweep.physics.drafts import served_model
from sweep.physics.engines import allowed_versions, pool_terms, served_by, v0, version_of
from sweep.physics.hardware import GPU, HOST_LINK_EFFICIENCY, get_gpu
from sweep.physics.memory import DEFAULT_PROFILE_TOKENS, memory_budget
from sweep.physics.models import Model
from sweep.physics.timing import TimingParams, allreduce_setting, stage_hops, timing_params
from sweep.study.batching import POLICIES
from sweep.study.declarations import check
from sweep.study.fields import (ACTIVATION_BITS, DEFAULT_KV_LINK_GBPS, DESIGN_FIELDS,
                                ENGINE_FITTED, GPU_FITTED, Range, declared_class)

#: The levers the timing function reads: its keyword-only parameters, each a declared key.
TIMING_KEYS = tuple(k for k, v in inspect.signature(timing_params).parameters.items()
                    if v.kind is v.KEYWORD_ONLY and k in DESIGN_FIELDS)
#: Checked value by value; ``gpu`` and ``model`` may be catalog objects and are checked by
#: resolving them.
_CHECKED = tuple(f for attr, f in DESIGN_FIELDS.items() if attr not in ("gpu", "model"))
#: Each declared kind: the Python types a value of it may have and how a refusal says so.
KINDS = {"num": ((int, float), "a number"), "int": ((int,), "an integer"),
         "bool": ((bool,), "true or false"), "str": ((str,), "a string")}
#: Keys that also take a catalog object.
_OBJECTS = {"gpu": GPU, "model": Model}
#: A disaggregated design's keys for its pools; a pool's server has them unset.
POOL_KEYS = ("prefill_gpus", "decode_gpus", "prefill_gpu", "decode_gpu", "prefill_workers",
             "decode_workers", "prefill_data_parallel", "decode_data_parallel",
             "prefill_expert_parallel", "decode_expert_parallel")
#: Integers from here on are printed by their digits (``errors.show``); no key takes one.
_BIG_INTEGER = 10**40


class KindError(FieldError, TypeError):
    """A value of the wrong type for its key: a ``TypeError``, and a ``FieldError`` (so a
    ``ValueError``) like every other refused value."""


def check_kind(f, value, types: tuple, what: str) -> None:
    """Refuse ``value`` for ``f`` unless it is one of ``types`` (or None where ``f`` may be
    unset), as the config's reader refuses a value of the wrong TOML type; its range is
    ``check``'s. So is an integer of 40 digits or more, which the range check would print
    whole."""
    if value is None and f.may_be_unset:
        return
    allowed = listed(f.choices) if f.choices else f.range.text(f.kind) if f.range else what
    if f.may_be_unset:
        allowed += ", or None (unset)"
    allowed = None if allowed == what else allowed
    key = f"{f.section}.{f.key}"
    if isinstance(value, bool) != (bool in types) or not isinstance(value, types):
        raise KindError(key, f"must be {what}, got {'None' if value is None else got(value)}",
                        allowed, value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= _BIG_INTEGER:
        raise KindError(key, f"must be {what} of fewer than 40 digits, got {show(value)}",
                        allowed, value)


class _Design:
    """One serving design: an attribute per declared key of ``[hardware]``, ``[model]`` and
    ``[levers]`` (``sweep.study.fields``: what each means, its unit, range and default).
    ``gpu`` and ``model`` are catalog names (or objects). A value of the wrong type or outside
    its key's choices and range is refused when the design is made (``KindError``,
    ``FieldError``), as the config's reader refuses it; the combinations in ``validate``."""

    def __post_init__(self):
        for attr, f in DESIGN_FIELDS.items():
            types, what = KINDS[f.kind]
            if attr in _OBJECTS:
                types, what = types + (_OBJECTS[attr],), f"{what} (a catalog name)"
            check_kind(f, getattr(self, attr), types, what)
        for f in _CHECKED:
            check(f, getattr(self, f.attr), f.section)
        if isinstance(self.gpu, str):  # a name the catalogs lack: now, not when it is run
            get_gpu(self.gpu)
        if isinstance(self.model, str):
            get_model(self.model)

    @property
    def gpu_spec(self) -> GPU:
        """The GPU as the design's serving engine drives it (``engines.served_by``)."""
        gpu = self.gpu if isinstance(self.gpu, GPU) else get_gpu(self.gpu)
        return served_by(gpu, self.engine, None if self.engine == "vllm" else self.model_spec)

    @property
    def model_spec(self) -> Model:
        return self.model if isinstance(self.model, Model) else get_model(self.model)

    @property
    def served_spec(self) -> Model:
        """The model as memory holds it: with its MTP module or EAGLE-3 head's weights and KV
        per token where one drafts (``drafts.served_model``)."""
        return served_model(self.model_spec, self.draft, self.draft_tokens)

    def resolved(self, key: str):
        """A key declared ``gpu_default``: the design's value, or its GPU's where it leaves it
        unset."""
        v = getattr(self, key)
        return getattr(self.gpu_spec, key) if v is None else v

    @property
    def calibration(self) -> str:
        """Where the GPU-side factors come from: ``stated`` (the config gives any of them), else
        ``fitted`` where every GPU that runs a pass is, or ``transferred:<GPU>`` naming the
        fitted GPUs the others take theirs from (a disaggregated design's pools may differ);
        then, for an engine other than vLLM, whose host terms: ``+sglang`` (fitted on its
        runs) or ``+sglang:stated`` (the config gives any of them)."""
        gpu_side = self._gpu_calibration()
        if self.engine == "vllm":
            return gpu_side
        stated = any(getattr(self, k) is not None for k in ENGINE_FITTED)
        return f"{gpu_side}+{self.engine}{':stated' if stated else ''}"

    def _gpu_calibration(self) -> str:
        if any(getattr(self, k) is not None for k in GPU_FITTED):
            return "stated"
        gpus = ([self.prefill_pool().gpu_spec, self.decode_pool().gpu_spec]
                if self.disaggregated else [self.gpu_spec])
        donors = sorted({g.calibration.removeprefix("transferred:") for g in gpus
                         if g.calibration != "fitted"})
        return "transferred:" + ",".join(donors) if donors else "fitted"

    @property
    def disaggregated(self) -> bool:
        return self.prefill_gpus is not None or self.decode_gpus is not None

    def pool(self, gpus: int, gpu: str | None = None, data_parallel: int | None = None,
             expert_parallel: bool | None = None) -> "Design":
        """One server of this design: ``gpus`` GPUs (of ``gpu``, or the design's) a rank, of
        ``data_parallel`` ranks and ``expert_parallel`` (unset: the design's), no router, no
        disaggregation (the design itself when it is one, with what it has computed)."""
        one = self.replace(gpus=gpus, replicas=1, router="round_robin",
                           kv_link_gbps=DEFAULT_KV_LINK_GBPS, gpu=gpu or self.gpu,
                           data_parallel=data_parallel or self.data_parallel,
                           expert_parallel=(self.expert_parallel if expert_parallel is None
                                            else expert_parallel),
                           **{k: DESIGN_FIELDS[k].default for k in POOL_KEYS})
        return self if one == self else one

    def prefill_pool(self) -> "Design":
        """A server of the prefill pool."""
        return self._pooled(self.pool(self.prefill_gpus, self.prefill_gpu,
                                      self.prefill_data_parallel, self.prefill_expert_parallel))

    def decode_pool(self) -> "Design":
        """A server of the decode pool."""
        return self._pooled(self.pool(self.decode_gpus, self.decode_gpu,
                                      self.decode_data_parallel, self.decode_expert_parallel))

    def _pooled(self, one: "Design") -> "Design":
        """A pool's server with its engine's host terms for pools (``engines.pool_terms``)
        where the design leaves them unset."""
        unset = {k: v for k, v in pool_terms(self.engine, self.model_spec).items()
                 if getattr(one, k) is None}
        return one.replace(**unset) if unset else one

    def pools(self) -> tuple[tuple["Design", int], ...]:
        """A disaggregated design's (a server of each pool, its servers): prefill, decode."""
        return ((self.prefill_pool(), self.prefill_workers),
                (self.decode_pool(), self.decode_workers))

    def times(self, n: int) -> "Design":
        """``n`` of this design as one fleet: ``n`` times its replicas, or its pools' servers."""
        if self.disaggregated:
            return self.replace(prefill_workers=self.prefill_workers * n,
                                decode_workers=self.decode_workers * n)
        return self.replace(replicas=self.replicas * n)

    @property
    def usd_per_hour(self) -> float:
        """What every GPU of the design costs an hour (each pool at its own GPU's price)."""
        if self.disaggregated:
            return sum(n * p.total_gpus * p.resolved("price_per_gpu_hour")
                       for p, n in self.pools())
        return self.total_gpus * self.resolved("price_per_gpu_hour")

    @property
    def total_gpus(self) -> int:
        """Every GPU the design pays for."""
        if self.disaggregated:
            return sum(n * p.server_gpus for p, n in self.pools())
        return self.replicas * self.server_gpus

    @property
    def server_gpus(self) -> int:
        """One server's GPUs: ``gpus`` for each data-parallel rank and pipeline stage."""
        return self.gpus * self.data_parallel * self.pipeline_parallel

    @property
    def rank_seats(self) -> int:
        """Sequences one data-parallel rank decodes together at most."""
        return 1 if POLICIES[self.batching].one_seat else self.max_batch

    @property
    def seats(self) -> int:
        """The server's: every rank's (its ranks share one batch, evenly); of pools, the
        largest pool server's."""
        if self.disaggregated:
            return max(p.seats for p, _ in self.pools())
        return self.rank_seats * self.data_parallel

    @property
    def servers(self) -> int:
        """Servers that take the requests first: the replicas, or the prefill pool's."""
        return self.prefill_workers if self.disaggregated else self.replicas

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
        """Every value against its declaration (``sweep.study.fields``), then the combinations;
        a ``FieldError`` names the lever, ``DoesNotFit`` a model too large for its memory. A
        design is immutable, so once it passes, later calls return at once."""
        if self.__dict__.get("_valid"):
            return
        self._checks()
        object.__setattr__(self, "_valid", True)

    def _checks(self) -> None:
        for f in _CHECKED:
            check(f, getattr(self, f.attr), f.section)
        if self.disaggregated:
            self._validate_pools()
            return
        for key in POOL_KEYS:
            if getattr(self, key) != DESIGN_FIELDS[key].default:
                raise FieldError(f"levers.{key}", "a disaggregated pool's, only with "
                                 "prefill_gpus and decode_gpus", "unset without pools",
                                 getattr(self, key))
        gpu, model = self.gpu_spec, self.model_spec
        if gpu.timing == "linear" and self.engine != "vllm":
            raise FieldError("hardware.engine", f"{gpu.name} is timed by a measured fit of its "
                             "passes, whose engine it holds", '"vllm"', self.engine)
        if version_of(self.engine, self.engine_version) is None:
            raise FieldError("hardware.engine_version", f"{show(self.engine_version)}: not a "
                             f"release of {self.engine} whose rules servesweep has",
                             allowed_versions(self.engine), self.engine_version)
        if self.num_scheduler_steps > 1 and not v0(self.engine, self.engine_version):
            raise FieldError("levers.num_scheduler_steps", "passes per scheduling are vLLM V0's "
                             f"(engine_version before 0.8), not {self.engine} "
                             f"{self.engine_version or 'as fitted'}", "1", self.num_scheduler_steps)
        self._validate_precision(gpu)
        # The budget is each data-parallel rank's, as each rank schedules its own passes.
        decode_tokens = self.rank_seats * (self.draft_tokens + 1)
        if 0 < self.max_num_batched_tokens < decode_tokens:
            raise FieldError("levers.max_num_batched_tokens",
                             f"{self.max_num_batched_tokens} cannot hold a pass decoding every "
                             f"seat ({self.rank_seats} x {self.draft_tokens + 1} tokens)",
                             f"0 (no budget) or at least {decode_tokens}",
                             self.max_num_batched_tokens)
        if self.prefix_cache and self.kv_cache != "paged":
            raise FieldError("levers.prefix_cache",
                             "shares KV blocks, so it needs kv_cache = \"paged\"",
                             "false with a contiguous cache", self.prefix_cache)
        # The longest sequence is the model's to say.
        check(DESIGN_FIELDS["max_seq_len"]._replace(range=Range(2, model.max_context)),
              self.max_seq_len, "levers")
        if self.kv_offload_gib > 0 and gpu.host_link_gbs <= 0:
            raise FieldError("levers.kv_offload_gib", f"{gpu.name} has no host link to load KV "
                             "over", "0", self.kv_offload_gib)
        if self.gpus > 1 and gpu.interconnect_gbs <= 0:
            raise FieldError("levers.gpus", f"{gpu.name} has no tensor-parallel interconnect",
                             "1", self.gpus)
        self._validate_experts(gpu, model)
        self._validate_stages(gpu, model)
        if self.draft == "mtp" and not model.mtp_layers:
            raise FieldError("levers.draft", f"{model.name} has no multi-token-prediction "
                             "layers (num_nextn_predict_layers or mtp_num_hidden_layers in its "
                             "config.json)", '"model" or "eagle"', self.draft)
        self._validate_memory(gpu, model)

    def _validate_experts(self, gpu: GPU, model: Model) -> None:
        """Expert parallelism needs experts; data-parallel ranks share them under it, with
        continuous batching, each rank within a node, over the network between nodes."""
        if self.expert_parallel and model.experts <= 1:
            raise FieldError("levers.expert_parallel", f"{model.name} is a dense model (no "
                             "routed experts)", "false", self.expert_parallel)
        if self.data_parallel == 1:
            return
        if not self.expert_parallel:
            raise FieldError("levers.data_parallel", "ranks share the experts only under "
                             "expert_parallel", "1, or expert_parallel = true",
                             self.data_parallel)
        if self.batching != "continuous":
            raise FieldError("levers.data_parallel", f"not with {self.batching} batching",
                             "1, or batching = \"continuous\"", self.data_parallel)
        if gpu.interconnect_gbs <= 0 or (self.server_gpus > gpu.node_gpus
                                         and self.resolved("internode_gbps") <= 0):
            raise FieldError("levers.data_parallel", f"{self.gpus} x {self.data_parallel} GPUs "
                             f"of {gpu.name} have no link for their all-to-all",
                             f"gpus x data_parallel <= {gpu.node_gpus} on a GPU with an "
                             "interconnect", self.data_parallel)
        if self.gpus > gpu.node_gpus:
            raise FieldError("levers.gpus", f"ranks of {self.gpus} GPUs span {gpu.node_gpus}-GPU "
                             f"nodes of {gpu.name} (tensor parallelism across nodes is not "
                             "modelled)", f"at most {gpu.node_gpus}", self.gpus)

    def _validate_stages(self, gpu: GPU, model: Model) -> None:
        """Pipeline stages: each holds at least a layer; the sends between them need a link
        (within a node, or between nodes where the stages span them); the stages share one
        batch, not data-parallel ranks."""
        pp = self.pipeline_parallel
        if pp == 1:
            return
        key = "levers.pipeline_parallel"
        if gpu.timing == "linear":
            raise FieldError(key, f"{gpu.name} is timed by a measured fit of one GPU", "1", pp)
        if pp > model.layers:
            raise FieldError(key, f"{model.name} has {model.layers} layers",
                             f"an integer in [1, {model.layers}]", pp)
        if self.data_parallel > 1:
            raise FieldError(key, "not with data-parallel ranks", "1, or data_parallel = 1", pp)
        node, network = stage_hops(gpu, self.gpus, pp)
        if node and gpu.interconnect_gbs <= 0:
            raise FieldError(key, f"{gpu.name} has no link between GPUs of a node", "1", pp)
        if network and self.resolved("internode_gbps") <= 0:
            raise FieldError(key, f"{gpu.name} has no link between nodes, and {self.gpus} x "
                             f"{pp} GPUs span {gpu.node_gpus}-GPU nodes",
                             f"at most {max(1, gpu.node_gpus // self.gpus)}", pp)

    def _validate_pools(self) -> None:
        """Disaggregated pools: each pool is a one-server design of its own."""
        for key in ("prefill_gpus", "decode_gpus"):
            if getattr(self, key) is None:
                raise FieldError(f"levers.{key}", "missing",
                                 "both prefill_gpus and decode_gpus, or neither")
        if self.gpus != 1:
            raise FieldError("levers.gpus", "not used with prefill_gpus and decode_gpus",
                             "leave gpus unset", self.gpus)
        if self.replicas != 1:
            raise FieldError("levers.replicas", "pools count their servers in prefill_workers "
                             "and decode_workers", "1", self.replicas)
        for side, (pool, _) in zip(("prefill", "decode"), self.pools()):
            try:
                pool.validate()
            except FieldError as e:  # named by the pool's own key, where the design sets it
                own = f"{side}_{e.key.removeprefix('levers.')}"
                if getattr(self, own, None) is None:
                    raise
                raise type(e)(f"levers.{own}", e.reason, e.allowed, e.value) from None

    def _validate_precision(self, gpu: GPU) -> None:
        a, w = self.activation_precision, self.weight_precision
        if a < w:
            raise FieldError("levers.activation_bits", f"{a}-bit activations with {w}-bit "
                             "weights is not a format", f"activation_bits >= weight_bits ({w})",
                             a)
        if not gpu.has_activation_bits(a):
            have = [b for b in ACTIVATION_BITS if gpu.has_activation_bits(b)]
            raise FieldError("levers.activation_bits", f"{gpu.name} has no {a}-bit tensor peak",
                             ", ".join(map(str, have)), a)

    def _validate_memory(self, gpu: GPU, model: Model) -> None:
        budget = self.budget()
        if not budget.fits and self.kv_blocks is None:
            raise DoesNotFit(
                "design", f"{model.name} at {self.weight_precision}-bit weights does not fit "
                f"on {self.server_gpus} x {gpu.name} (weights {budget.weights_gib:.1f} GiB, "
                f"{budget.total_gib - budget.overhead_gib:.1f} GiB usable); use more gpus or "
                "fewer weight_bits")
        longest = self.context_limit
        need = -(-longest // self.block_tokens) + self.seq_blocks()
        if self.total_blocks() < need and self.kv_blocks is not None:
            raise FieldError("levers.kv_blocks", f"{self.kv_blocks} blocks of "
                             f"{self.block_tokens} tokens hold less than one {longest}-token "
                             "sequence", f"at least {need} (or a smaller max_seq_len)",
                             self.kv_blocks)
        if self.total_blocks() < need:
            raise DoesNotFit(
                "design", f"the KV cache of {model.name} on {self.server_gpus} x {gpu.name} "
                f"holds {self.kv_tokens()} tokens, less than one {longest}-token sequence; use "
                "more gpus or pipeline stages, fewer weight_bits or a smaller max_seq_len")

    def budget(self):
        """The memory budget, computed once per design (it is immutable)."""
        if "_budget" not in self.__dict__:
            object.__setattr__(self, "_budget", memory_budget(
                self.served_spec, self.gpu_spec.memory_gib, self.gpus, self.weight_bits,
                self.kv_bits, self.memory_overhead_fraction,
                utilization=self.gpu_memory_utilization,
                profile_tokens=self.max_num_batched_tokens or DEFAULT_PROFILE_TOKENS,
                profile_seqs=self.rank_seats, data_parallel=self.data_parallel,
                pipeline_parallel=self.pipeline_parallel))
        return self.__dict__["_budget"]

    def kv_tokens(self) -> int:
        """Tokens of KV cache: ``kv_blocks`` blocks when given, else the memory budget's."""
        if self.kv_blocks is not None:
            return self.kv_blocks * self.block_size
        return self.budget().kv_tokens

    def total_blocks(self) -> int:
        return self.kv_tokens() // self.block_tokens

    @property
    def weight_precision(self) -> int:
        """Bits per weight as the ``weight_bits`` lever names them: the lever's, or the
        checkpoint's own where it is unset."""
        return self.model_spec.native_nominal_bits if self.weight_bits is None \
            else self.weight_bits

    @property
    def activation_precision(self) -> int:
        """Bits the matrix products compute in: the lever's, or the checkpoint's where the GPU
        has that peak (``Model.activation_bits``) and the weights are no wider."""
        own = self.model_spec.activation_bits(self.gpu_spec, self.activation_bits)
        return own if self.activation_bits is not None else max(own, self.weight_precision)

    def allreduce(self) -> tuple[float, float]:
        """The all-reduce's 2-GPU latency (us) and growth its passes use: the config's, else the
        GPU's for its kernels (``timing.allreduce_setting``, whose weight-only kernels the timing
        constants name)."""
        alpha, growth, _ = allreduce_setting(self.gpu_spec, self.timing().expert_serial,
                                             self.allreduce_latency_us, self.allreduce_growth,
                                             None)
        return alpha, growth

    def seq_blocks(self) -> int:
        """Blocks every running sequence holds besides its context's: its windowed layers' KV
        over a full window and its linear-attention or state-space state, in blocks of the
        full-attention layers' KV (``Model.held_seq_bytes``)."""
        model = self.served_spec
        per_block = self.block_tokens * model.held_kv_bytes_per_token(self.kv_bits, self.gpus)
        return int(math.ceil(model.held_seq_bytes(self.kv_bits, self.gpus) / per_block))

    def host_tier(self) -> tuple[int, float]:
        """A CPU KV tier's blocks (0: none) and seconds to load one token's KV back: each GPU
        (of every pipeline stage) loads its share over its host link (``HOST_LINK_EFFICIENCY`` of it). The tier is used
        only where loading a token beats prefilling it at the roofline's compute rate, as
        vLLM's and LMCache's offloading assume; otherwise a host hit would be recomputed."""
        if not (self.prefix_cache and self.kv_offload_gib > 0):
            return 0, 0.0
        model, gpu, t = self.served_spec, self.gpu_spec, self.timing()
        token_bytes = model.held_kv_bytes_per_token(self.kv_bits, self.gpus)
        load_s = (token_bytes / (self.gpus * self.pipeline_parallel)
                  / (gpu.host_link_gbs * 1e9 * HOST_LINK_EFFICIENCY))
        prefill_s = t.lin_prefill_token_s if t.linear else t.flops_per_token / t.flops_per_s
        if load_s >= prefill_s:
            return 0, 0.0
        return int(min(self.kv_offload_gib * 2**30 // (self.block_tokens * token_bytes),
                       2**31 - 1)), load_s

    def timing(self) -> TimingParams:
        """The pass-time constants: ``timing_params`` gets every lever it names."""
        levers = {k: getattr(self, k) for k in TIMING_KEYS}
        return timing_params(self.model_spec, self.gpu_spec,
                             **{**levers, "activation_bits": self.activation_precision})

    def replace(self, **changes) -> "Design":
        """``dataclasses.replace``, as a method for the many callers that change a few levers."""
        return dataclasses.replace(self, **changes)


Design = declared_class("Design", DESIGN_FIELDS, _Design, __name__)
