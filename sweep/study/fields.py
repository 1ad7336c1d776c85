"""Every config key of ``[hardware]``, ``[model]``, ``[workload]`` and ``[levers]``, declared once.

``FIELDS`` gives each key its type, choices or range, default, unit and help. Everything else is
derived from it: the ``Design`` and ``Workload`` classes themselves (``declared_class``) and
their checks of each value alone (``declarations.check``), the config parser's keys and
choices, the results' columns (``COLUMNS``, in the order of ``FIELDS``: keep new keys at the
end), the factors that may be uncertain (``draw``), the levers the engine reads as they are
(``engine``) and the key tables of README.md and docs/config.md (``python -m
sweep.study.keytables --write``). A new lever is a row here (a ``declarations.Field``) and the
physics or rule that reads it (docs/internals.md, "Adding a lever").
"""
from __future__ import annotations

import dataclasses
import math
import typing

from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.memory import DEFAULT_OVERHEAD_FRACTION
from sweep.physics.catalog import CATALOG as MODEL_CATALOG
from sweep.physics.drafts import DRAFTS
from sweep.physics.engines import ENGINES, v0
from sweep.study.batching import POLICIES
from sweep.study.lengths import PAUSE_KEYS, Lengths
from sweep.study.declarations import Applies, Field
from sweep.study.ranges import Range

BATCHING = tuple(POLICIES)
KV_CACHE = ("contiguous", "paged")
GPUS = (1, 2, 4, 8)
WEIGHT_BITS = (16, 8, 4)
ACTIVATION_BITS = (16, 8, 4)
KV_BITS = (16, 8)
ROUTERS = ("round_robin", "least_outstanding", "prefix_aware", "session")
#: Arrival processes a config may name; "trace" is set by ``[workload] trace`` instead.
#: "closed": a fixed number of clients, each sending its next request when its last returns.
ARRIVALS = ("poisson", "constant", "gamma", "closed")
MAX_DRAFT_TOKENS = 16  # the engine's acceptance thresholds are an array of this length
MAX_REPLICAS = 64
#: GPUs of one NVLink domain (an HGX board): a server's expert all-to-all stays within it.
DOMAIN_GPUS = 8
MAX_DATA_PARALLEL = 64
MAX_PIPELINE_STAGES = 16
MAX_SCHEDULER_STEPS = 64  # vLLM V0's --num-scheduler-steps; its docs suggest 8-16
MAX_ARRIVAL_CV = 10
MAX_TOKENS_PER_PASS = 2**30  # chunk and pass budgets, tokens: far above any real server's
MAX_KV_BLOCKS = 2**31 - 1  # the engine counts blocks in int32
MAX_REQUESTS = 10_000_000  # requests per simulation
MAX_TIME_SCALE = 1e6  # a trace slowed a million-fold; beyond it its times lose their meaning
#: Shared prefixes of a workload at most: the cache keeps a flag and a stamp per prefix, and
#: sorts them each pass to evict, so a million is a few megabytes a simulation.
MAX_PREFIX_COUNT = 2**20
#: Default KV link, Gb/s: one 400 Gb/s NDR InfiniBand port (NVIDIA ConnectX-7 datasheet), as the
#: inter-node link between a prefill and a decode instance (DistServe, Splitwise).
DEFAULT_KV_LINK_GBPS = 400.0
#: The config tables whose keys are declared here; any of their keys may be a sweep axis.
SECTIONS = ("hardware", "model", "workload", "levers")


def _hw(key, kind="num", default=None, **kw) -> Field:
    return Field(key, "hardware", kind, default, **kw)


def _wl(key, kind="num", default=None, **kw) -> Field:
    return Field(key, "workload", kind, default, **kw)


def _lever(key, kind="int", default=None, **kw) -> Field:
    return Field(key, "levers", kind, default, **kw)


_pools = Applies(lambda d, w: d["prefill_gpus"] is not None or d["decode_gpus"] is not None,
                 "with disaggregated pools (prefill_gpus and decode_gpus)")
def _pair(key, kind="int", help="", **kw) -> tuple[Field, Field]:
    """The prefill and the decode pool's ``key`` (``help`` names the pool at ``{}``)."""
    return tuple(_lever(f"{side}_{key}", kind, when=_pools, help=help.format(side), **kw)
                 for side in ("prefill", "decode"))


_closed = Applies(lambda d, w: w["arrival"] == "closed", 'with arrival = "closed"')
_warmed = Applies(
    lambda d, w: w["arrival"] == "closed" or (w.get("trace") is None
                                               and w.get("num_requests") is not None),
    'with arrival = "closed", or open arrivals with num_requests (not a trace)')
#: A separate draft model's own keys (MTP layers and EAGLE-3 heads bring their cost and
#: acceptance).
_model_draft = Applies(lambda d, w: d["draft"] == "model", 'with draft = "model"')
_untraced = Applies(lambda d, w: w.get("trace") is None, "without a trace")
_open = Applies(lambda d, w: w["arrival"] != "closed",
                'with open arrivals (poisson, constant, gamma or a trace), not arrival = "closed"')
_across_nodes = Applies(
    lambda d, w: d.get("pipeline_parallel", 1) > 1 or d.get("gpus", 1) * d.get(
        "data_parallel", 1) > getattr(GPU_CATALOG.get(d["gpu"], d["gpu"]), "node_gpus", 8),
    "with pipeline_parallel > 1 or data-parallel ranks spanning nodes")
_SHARE = Range(0.0, 1.0, lo_open=True)
_INF = math.inf

#: Every key, in the order of the results' columns.
FIELDS: tuple[Field, ...] = (
    _hw("gpu", "str", "H100-SXM", choices=tuple(GPU_CATALOG),
        help="the GPU, from the catalog (`sweep/physics/hardware.py`)", short="the GPU"),
    _hw("price_per_gpu_hour", range=Range(0.0, 1e6), unit="$", gpu_default=True,
        shown="the catalog's", help="what one GPU costs per hour",
        short="price per GPU-hour"),
    _hw("compute_efficiency", range=_SHARE, draw=0, gpu_default=True, fitted="gpu",
        help="share of peak FLOP/s reached", short="share of peak FLOP/s"),
    _hw("bandwidth_efficiency", range=_SHARE, draw=1, gpu_default=True, fitted="gpu",
        help="share of peak bandwidth reached reading the weights",
        short="share of peak bandwidth, weights"),
    _hw("kv_bandwidth_efficiency", range=_SHARE, draw=4, gpu_default=True, fitted="gpu",
        help="share of peak bandwidth reached reading the KV cache; unset: the GPU's ratio of it "
             "to `bandwidth_efficiency`, times that",
        short="share of peak bandwidth, KV cache"),
    _hw("decode_attention_efficiency", range=Range(0.0, 1.0), gpu_default=True, fitted="gpu",
        help="share of the 16-bit tensor peak that decode attention reaches; 0 = inside the "
             "roofline (every fitted GPU's: the runs do not identify it)",
        short="decode attention's share of 16-bit peak"),
    _hw("overhead_ms", range=Range(0.0, 1e4), draw=2, unit="ms", gpu_default=True, fitted="engine",
        help="fixed cost per pass", short="fixed cost per pass"),
    _hw("seq_overhead_us", range=Range(0.0, 1e6), unit="us", gpu_default=True, fitted="engine",
        help="cost per decoding sequence per pass", short="per decoding sequence per pass"),
    _hw("request_overhead_ms", range=Range(0.0, 1e6), unit="ms", gpu_default=True, fitted="engine",
        help="cost per request, outside the passes", short="per request, outside the passes"),
    _hw("request_lag_passes", range=Range(0.0, 100.0), draw=5, unit="TPOTs", gpu_default=True,
        fitted="engine",
        help="mean TPOTs added to TTFT and latency", short="added to TTFT and latency"),
    _hw("memory_overhead_fraction", default=DEFAULT_OVERHEAD_FRACTION, range=Range(0.0, 0.99),
        help="memory held back from the KV cache; not with `gpu_memory_utilization`",
        short="memory held back from the KV cache"),
    _hw("gpu_memory_utilization", range=_SHARE,
        help="vLLM's sizing: the KV cache gets this share of memory less the weights, the "
             "activation peak and the engine reserve ([model.md](model.md))",
        short="vLLM's KV sizing (not with the above)"),
    _hw("profile", "path", values="path",
        help="a profile written by `sweep calibrate` (relative to the config): sets `gpu` and "
             "the fitted factors, which may then not be given here",
        short="a `sweep calibrate` profile"),
    Field("name", "model", "str", "Llama-3-8B", choices=tuple(MODEL_CATALOG), shown="-",
          help="a catalog model", short="a catalog model"),
    Field("config_json", "model", "path", values="path", shown="-",
          help="a local Hugging Face `config.json`: full, windowed, latent, linear-attention "
               "or Mamba layers, DeepSeek-V4's window beside compressed latents, dense, expert "
               "or latent-expert MLPs, its own quantisation (or a sibling "
               "`hf_quant_config.json`; DeepSeek-V4's MXFP4 `expert_dtype`); a config it would "
               "mis-size is refused naming the field ([model.md](model.md)). "
               "Multi-token-prediction layers are counted only where they draft (`draft = "
               "\"mtp\"`): Nemotron-3-Super-120B-A12B reads 120.7B total, 12.8B active with "
               "both embeddings (its report: 120.6B, 12.7B); DeepSeek-V4-Flash 284.3B, 13.3B "
               "active without the input embedding (its card: 284B, 13B)",
          short="a Hugging Face `config.json`"),
    _wl("arrival", "str", "poisson", choices=ARRIVALS,
        help="how requests arrive: `constant` evenly spaced, `gamma` bursty, `closed` from "
             "`concurrency` clients, each sending its next request when its last one returns",
        short="arrival process"),
    _wl("arrival_rate", default=16.0, unit="requests/s", when=_open,
        range=Range(0.0, _INF, lo_open=True, says="a positive number of requests/s"),
        help="mean arrival rate; not with `closed`", short="mean rate"),
    _wl("duration_s", default=60.0, unset=True, unit="s",
        range=Range(0.0, _INF, lo_open=True, says="positive"), shown="-",
        help="arrivals for this long; exactly one of `duration_s` and `num_requests` (a trace: "
             "at most one, to cut it short)",
        short="how long; this or `num_requests`"),
    _wl("num_requests", "int", range=Range(1, MAX_REQUESTS), unit="requests", shown="-",
        help="this many requests (`closed`: the measured ones)", short="how many"),
    _wl("drain_s", default=60.0, unset=True, unit="s", range=Range(0.0, _INF, says=">= 0 seconds"),
        shown="unset: until done", when=_open,
        help="run on this long after the last arrival, then censor the unserved requests; not "
             "with `closed`",
        short="run on after the last arrival, then censor"),
    _wl("prompt_tokens", "lengths", Lengths("exponential", 1024.0), values="length table",
        help="prompt lengths: `fixed` (`mean`), `exponential` (`mean`), `uniform` (`low`, "
             "`high`), `lognormal` (`mean`, `sigma`)",
        short="fixed, exponential, uniform or lognormal lengths"),
    _wl("output_tokens", "lengths", Lengths("exponential", 256.0), values="length table",
        help="output lengths, as `prompt_tokens`", short="as `prompt_tokens`"),
    _lever("batching", "str", "continuous", choices=BATCHING, help="how requests are batched",
           short="batching strategy"),
    _lever("kv_cache", "str", "paged", choices=KV_CACHE, help="KV cache layout",
           short="KV cache layout"),
    _lever("gpus", default=1, choices=GPUS,
           when=Applies(lambda d, w: not _pools(d, w), "without disaggregated pools"),
           help="tensor-parallel degree; not with `prefill_gpus`/`decode_gpus`",
           short="tensor-parallel degree"),
    _lever("weight_bits", choices=WEIGHT_BITS, shown="the checkpoint's",
           help="weight precision (bytes held and read per pass); unset: the checkpoint's own "
                "(16 unless its config.json says otherwise), its 16-bit modules kept",
           short="weight precision"),
    _lever("activation_bits", choices=ACTIVATION_BITS, shown="the checkpoint's",
           help="8 (W8A8) or 4 (FP4) where the GPU has that peak, at least `weight_bits`; "
                "unset: the checkpoint's (fp8: 8, NVFP4: 4) where the GPU has it, else 16",
           short="8: W8A8, 4: FP4, where the GPU has it"),
    _lever("kv_bits", default=16, choices=KV_BITS, help="KV cache precision",
           short="KV cache precision"),
    _lever("draft_tokens", default=0, engine="int32", range=Range(0, MAX_DRAFT_TOKENS),
           unit="tokens", shown="0 (off)",
           help="speculative draft length", short="speculative draft length"),
    _lever("acceptance", "num", 0.7, range=Range(0.0, 1.0), draw=3, when=_model_draft,
           help="acceptance probability per drafted token", short="per-token acceptance"),
    _lever("draft_cost", "num", 0.1, range=Range(0.0, 10.0), when=_model_draft,
           help="cost per drafted token, as a share of a target decode pass",
           short="per drafted token, share of a pass"),
    _lever("max_batch", default=256, range=Range(1, 4096), unit="seats",
           help="sequences decoded together at most", short="sequences per batch"),
    _lever("block_size", default=16, range=Range(1, 4096), unit="tokens",
           help="tokens per paged KV block", short="per paged KV block"),
    _lever("max_seq_len", values="integer in [2, the model's context]", unit="tokens",
           shown="the model's context", help="contiguous reservation per sequence",
           short="contiguous reservation"),
    _wl("arrival_cv", default=1.0, range=Range(0, MAX_ARRIVAL_CV, lo_open=True),
        when=Applies(lambda d, w: w["arrival"] == "gamma", 'with arrival = "gamma"'),
        help="`gamma` only: coefficient of variation of the gaps",
        short="gamma only: cv of the gaps"),
    _wl("trace", "trace", values="path to CSV, Parquet or JSONL",
        help="replay a trace instead: columns `TIMESTAMP`, `ContextTokens`, `GeneratedTokens` "
             "(the Azure LLM inference traces), `timestamp` (ms), `input_length`, "
             "`output_length` (Mooncake's) or `arrival_s`, `prompt_tokens`, `output_tokens`, "
             "each optionally with `hash_ids` (the prompt's block hashes, for the prefix "
             "cache); not with `arrival`, `arrival_rate`, `arrival_cv` or `*_tokens`",
        short="replay a trace (Azure, Mooncake)"),
    _wl("trace_time_scale", default=1.0, range=Range(0.0, MAX_TIME_SCALE, lo_open=True),
        when=Applies(lambda d, w: w["trace"] is not None, "with workload.trace"),
        help="with a trace only: multiply its times (0.5 = twice the load)",
        short="with a trace: multiply its times"),
    _lever("replicas", default=1, range=Range(1, MAX_REPLICAS),
           help="identical servers behind a router", short="identical servers behind a router"),
    _lever("router", "str", "round_robin", choices=ROUTERS,
           help="request `i` to replica `i mod replicas`; to the replica with the fewest "
                "unfinished requests; to one holding its prefix, within a load cap "
                "(`prefix_aware`); or its prefix group's replica (`session`)",
           short="how a replica is picked"),
    _lever("prefill_gpus", choices=GPUS,
           help="both set (and `gpus` unset, `replicas` 1): disaggregated prefill and decode "
                "pools, the KV moved between them over a link ([model.md](model.md))",
           short="each pool's GPUs: disaggregated pools"),
    _lever("decode_gpus", choices=GPUS, help="the decode pool's GPUs (with `prefill_gpus`)",
           short="the decode pool's GPUs"),
    _lever("kv_link_gbps", "num", DEFAULT_KV_LINK_GBPS, range=Range(0.0, 1e6, lo_open=True),
           when=_pools,
           unit="Gb/s", help="the pools' KV link", short="the pools' KV link"),
    _wl("prefix_count", "int", 0, range=Range(0, MAX_PREFIX_COUNT),
        help="shared prefixes (system prompts)", short="shared prefixes (system prompts)"),
    _wl("prefix_tokens", "int", 0, range=Range(0, MAX_REQUESTS), unit="tokens",
        help="each prefix's length, added to a user's sampled prompt", short="each prefix's length"),
    _wl("prefix_share", default=0.0, range=Range(0, 1), shown="0 (none)",
        help="share of requests that use a prefix; not with a trace",
        short="share of requests using one"),
    _lever("prefix_cache", "bool", False, engine="bool",
           help="reuse cached prefixes' KV (paged cache only)",
           short="reuse cached prefixes (paged only)"),
    _lever("prefill_chunk_tokens", default=0, engine="int32", range=Range(0, MAX_TOKENS_PER_PASS),
           unit="tokens", shown="0 (off)",
           help="prefill tokens per pass at most (chunked prefill)", short="chunked prefill"),
    _lever("max_num_batched_tokens", default=0, engine="int32", range=Range(0, MAX_TOKENS_PER_PASS),
           unit="tokens", shown="0 (off)", help="vLLM's token budget per pass, decodes first",
           short="vLLM's token budget per pass"),
    _lever("kv_blocks", range=Range(1, MAX_KV_BLOCKS), unit="blocks", shown="from memory",
           help="KV blocks of `block_size` tokens, as a server log reports",
           short="as a server log reports"),
    _hw("allreduce_latency_us", range=Range(0.0, 1e4), unit="us", gpu_default=True, fitted="engine",
        help="latency of one all-reduce between 2 GPUs; `n` GPUs wait `1 + allreduce_growth x "
             "(n - 2)` of it per phase (two phases above vLLM's one-shot size), plus the "
             "activations' bytes over the interconnect ([model.md](model.md))",
        short="all-reduce latency, 2 GPUs"),
    _hw("allreduce_bandwidth_efficiency", range=_SHARE, gpu_default=True, fitted="engine",
        help="share of the interconnect's bandwidth an all-reduce of a pass's activations "
             "reaches", short="share of link bandwidth, all-reduce"),
    _lever("expert_parallel", "bool", False,
           help="routed experts sharded whole over the server's GPUs (every data-parallel "
                "rank's) rather than sliced; a pass waits for the busiest GPU",
           short="experts sharded"),
    _lever("data_parallel", default=1, range=Range(1, MAX_DATA_PARALLEL), unit="ranks",
           help="attention ranks of `gpus` GPUs, each its own batch (`max_batch`) and KV cache, "
                "sharing the expert GPUs (needs `expert_parallel`): a server of `gpus x "
                "data_parallel` GPUs, its all-to-all over `internode_gbps` where it spans nodes",
           short="ranks sharing the experts"),
    _lever("prefill_gpu", "str", choices=tuple(GPU_CATALOG), when=_pools, shown="`gpu`",
           values="a GPU",
           help="the prefill pool's GPU, with `prefill_gpus`; unset: `gpu`",
           short="each pool's GPU"),
    _lever("decode_gpu", "str", choices=tuple(GPU_CATALOG), when=_pools, shown="`gpu`",
           values="a GPU",
           help="the decode pool's GPU, with `decode_gpus`; unset: `gpu`",
           short="the decode pool's GPU"),
    _hw("dequant_bandwidth_efficiency", range=_SHARE, draw=6, gpu_default=True, fitted="gpu",
        help="share of `bandwidth_efficiency` a weight-only MoE kernel keeps reading the routed "
             "experts it dequantises (experts narrower than `activation_bits`: MXFP4 or int4 at "
             "16-bit compute) ([model.md](model.md))",
        short="weight-only experts, reads"),
    _hw("dequant_compute_efficiency", range=_SHARE, draw=7, gpu_default=True, fitted="gpu",
        help="share of `compute_efficiency` a weight-only MoE kernel keeps multiplying the "
             "routed experts it dequantises", short="weight-only experts, products"),
    _wl("concurrency", "int", range=Range(1, MAX_REQUESTS), unit="clients", when=_closed,
        shown="-", help="`closed` only: clients, all starting at time 0; the run ends when every "
                        "request is done",
        short="closed loop: clients"),
    _wl("warmup_requests", "int", 0, range=Range(0, MAX_REQUESTS), unit="requests",
        when=_warmed,
        help="requests sent before the `num_requests` measured ones (a closed loop's, or open "
             "arrivals' with `num_requests`), excluded from every metric: caches warm up",
        short="sent first, not measured"),
    _wl("think_time_s", "pauses", 0.0, range=Range(0.0, _INF, says=">= 0 seconds"), unit="s",
        values="number >= 0 or length table, s",
        when=Applies(lambda d, w: w["arrival"] == "closed" or w.get("turns") is not None,
                     'with arrival = "closed" or sessions (turns)'),
        help="`closed` or sessions: a client's pause between a response and its next request "
             "(a session's next turn); a length table draws each pause, in seconds, unrounded "
             "([model.md](model.md))",
        short="pause per request (closed, sessions)"),
    _hw("allreduce_growth", range=Range(0.0, 10.0), gpu_default=True, fitted="engine",
        help="share of `allreduce_latency_us` each GPU past 2 adds: 1, `n - 1` times it; 0, one "
             "latency at any degree", short="all-reduce latency growth"),
    _hw("prompt_overhead_us", range=Range(0.0, 1e6), unit="us", gpu_default=True,
        fitted="engine", help="cost per prompt token a request prefills (outside its cacheable "
                              "path), outside the passes: added to TTFT and latency",
        short="per prompt token"),
    _wl("hash_block_tokens", "int", 512, range=Range(1, 2**20), unit="tokens",
        when=Applies(lambda d, w: w["trace"] is not None, "with workload.trace"),
        help="with a trace whose rows state `hash_ids`: the tokens each hash names (Mooncake's "
             "traces: 512)",
        short="with a trace: tokens per hash id"),
    _lever("kv_offload_gib", "num", 0.0, range=Range(0.0, 1e6), unit="GiB",
           when=Applies(lambda d, w: bool(d["prefix_cache"]), "with prefix_cache = true"),
           shown="0 (off)",
           help="host memory per server keeping the prefix cache's blocks past GPU memory, "
                "loaded back over the host link on a hit ([model.md](model.md))",
           short="CPU KV tier per server"),
    _wl("turns", "lengths", values="length table", shown="unset", when=_untraced,
        help="turns per session, `fixed` or `uniform`: with `turn_tokens`, a workload of "
             "sessions, arriving at `arrival_rate` sessions/s (`num_requests` sessions, or for "
             "`duration_s`), or `closed`: `concurrency` users run `num_requests` sessions, one "
             "after another; a turn's prompt is the session's context so far plus its new "
             "tokens ([model.md](model.md))",
        short="sessions: turns per session"),
    _wl("turn_tokens", "lengths", values="length table", shown="unset",
        when=_untraced,
        help="sessions: new user tokens in each turn after the first (the first turn's prompt is "
             "`prompt_tokens`; each turn's answer is `output_tokens`)",
        short="sessions: new tokens per later turn"),
    _lever("draft", "str", "model", choices=DRAFTS,
           help="what drafts: `model`, a separate draft model (`acceptance`, `draft_cost`); "
                "`mtp`, the checkpoint's multi-token-prediction layers; `eagle`, an EAGLE-3 "
                "head; these two cost what their layers do and accept per a published table "
                "([model.md](model.md))",
           short="draft model, MTP layers or EAGLE-3"),
    _lever("pipeline_parallel", default=1, range=Range(1, MAX_PIPELINE_STAGES), unit="stages",
           help="pipeline stages of `gpus` GPUs, each holding its share of the layers; a pass's "
                "sequences go through them in up to this many micro-batches: a server of `gpus "
                "x pipeline_parallel` GPUs, its stages on nodes of the GPU's size "
                "([model.md](model.md))",
           short="pipeline stages of `gpus` GPUs"),
    _hw("internode_gbps", range=Range(0.0, 1e6, lo_open=True), unit="Gb/s", gpu_default=True,
        when=_across_nodes,
        help="each GPU's link to other nodes, per direction: pipeline stages and an expert "
             "all-to-all spanning nodes send over it (the catalog's: InfiniBand or Ethernet per "
             "GPU, [model.md](model.md))",
        short="link between nodes, per GPU"),
    _hw("engine", "str", "vllm", choices=tuple(ENGINES),
        help="the serving engine: `vllm` (0.15), `sglang` (0.5: a prefill runs as a pass of its "
             "own) or `trtllm` (TensorRT-LLM 1.2); each brings its fitted host terms and its "
             "stated error ([model.md](model.md)); a GPU timed by a measured fit keeps `vllm`",
        short="serving engine"),
    _hw("engine_version", "str", "",
        values='`"X.Y"`, `"X.Y.Z"`', shown='`""` (fitted)',
        help="the engine's release (vLLM 0.5-0.15, SGLang 0.4-0.5, TensorRT-LLM 1.0-1.2), "
             "where its rules changed: vLLM before 0.8 is its V0 "
             "engine (without a token budget a prefill runs as a pass of its own; "
             "`num_scheduler_steps`); the host terms stay the fitted ones ([model.md](model.md))",
        short="engine's release"),
    _lever("num_scheduler_steps", default=1, engine="int32", range=Range(1, MAX_SCHEDULER_STEPS),
           unit="passes", when=Applies(lambda d, w: v0(d["engine"], d["engine_version"]),
                                       'with engine = "vllm" and engine_version before "0.8"'),
           help="vLLM V0's `--num-scheduler-steps`: passes per scheduling; requests join (or "
                "rejoin) only on a block's first pass, which alone spends the pass's fixed host "
                "time (`overhead_ms`) ([model.md](model.md))",
           short="vLLM V0's passes per schedule"),
    *_pair("workers", default=1, range=Range(1, MAX_REPLICAS), unit="servers",
           help="servers of the {0} pool, each of `{0}_gpus` (xPyD): the prefill pool's behind "
                "`router`, the decode pool's in turn as KV arrives ([model.md](model.md))",
           short="each pool's servers"),
    *_pair("data_parallel", range=Range(1, MAX_DATA_PARALLEL), unit="ranks",
           shown="`data_parallel`", help="the {} pool's attention ranks, as `data_parallel` "
                                         "(unset: that)", short="each pool's attention ranks"),
    *_pair("expert_parallel", "bool", shown="`expert_parallel`",
           help="the {} pool's experts sharded, as `expert_parallel` (unset: that)",
           short="each pool's experts sharded"),
)

#: section -> key -> Field, in declaration order.
KEYS: dict[str, dict[str, Field]] = {s: {f.key: f for f in FIELDS if f.section == s}
                                     for s in SECTIONS}
#: attribute -> Field, of the Design (hardware, model, levers) and of the Workload.
DESIGN_FIELDS = {f.attr: f for f in FIELDS if f.attr and f.section != "workload"}
WORKLOAD_FIELDS = {f.attr: f for f in FIELDS if f.attr and f.section == "workload"}
ATTRS = {**DESIGN_FIELDS, **WORKLOAD_FIELDS}
#: Columns that follow from the keys: where the GPU-side factors come from (``fitted``,
#: ``transferred:<GPU>`` or ``stated``), and what the model and its memory amount to per server
#: (``study.grid.columns``).
DERIVED_COLUMNS = ("calibration", "params_b", "active_params_b", "kv_bytes_per_token",
                   "weight_gib_per_gpu", "kv_tokens")
#: The factors real runs fit, per GPU and for the serving engine (what a profile may hold).
GPU_FITTED = tuple(f.key for f in FIELDS if f.fitted == "gpu")
ENGINE_FITTED = tuple(f.key for f in FIELDS if f.fitted == "engine")
#: The results' columns: the keys' in declaration order, the derived ones after the keys declared
#: before them (outside readers rely on the order, so a newer key's columns come last).
_BEFORE_DERIVED = 1 + next(i for i, f in enumerate(FIELDS)
                           if f.key == "allreduce_bandwidth_efficiency")
#: A pause key's column is its mean pause; a table's keys come after the keys declared before
#: ``engine``, the keys declared since after them.
PAUSE_COLUMNS = [f"{f.key}_{k}" for f in FIELDS if f.kind == "pauses" for k in PAUSE_KEYS]
_BEFORE_PAUSES = next(i for i, f in enumerate(FIELDS) if f.key == "engine")
COLUMNS: list[str] = ([c for f in FIELDS[:_BEFORE_DERIVED] for c in f.columns]
                      + list(DERIVED_COLUMNS)
                      + [c for f in FIELDS[_BEFORE_DERIVED:_BEFORE_PAUSES] for c in f.columns]
                      + PAUSE_COLUMNS + [c for f in FIELDS[_BEFORE_PAUSES:] for c in f.columns])
#: Columns that hold strings (a brief limit on them makes no sense).
TEXT_COLUMNS = tuple(c for f in FIELDS for c in f.columns if f.kind in ("str", "trace")) + tuple(
    c for c in COLUMNS if c.endswith("_dist")) + ("calibration",)
NUMERIC_COLUMNS = [c for c in COLUMNS if c not in TEXT_COLUMNS]


#: Keys that apply only with others (``when``).
CONDITIONAL = tuple(f for f in FIELDS if f.when is not None)
#: Levers the engine's rules read as they are, in ``EngineParams`` under their own names.
ENGINE_LEVERS = tuple(f for f in FIELDS if f.engine)
#: Factors a config may give as a distribution, in the order of their draws' streams.
UNCERTAIN = tuple(sorted((f for f in FIELDS if f.draw >= 0), key=lambda f: f.draw))
_TYPES = {"num": float, "int": int, "bool": bool, "str": str}


def declared(attr: str) -> dataclasses.Field:
    """A Design or Workload attribute with its declared default (and declaration, as metadata)."""
    return dataclasses.field(default=ATTRS[attr].default, metadata={"field": ATTRS[attr]})


def declared_class(name: str, fields: dict[str, Field], base: type, module: str) -> type:
    """A frozen dataclass with one attribute per declaration, in declaration order, and the
    methods of ``base``: a new key becomes an attribute without being written twice."""
    cls = dataclasses.make_dataclass(
        name, [(attr, typing.Optional[_TYPES.get(f.kind, object)], declared(attr))
               for attr, f in fields.items()], bases=(base,), frozen=True)
    cls.__module__, cls.__qualname__, cls.__doc__ = module, name, base.__doc__
    return cls
