"""Serving engines: the host's costs and the scheduling rule each engine brings to every GPU it
drives (``[hardware] engine``). vLLM's terms are the catalog's (``hardware._served``); another
engine's replace them (``served_by``) and add its own model error to the GPU's.

Each engine's terms are fitted on runs of that engine alone (docs/validation.md): vLLM's on
vLLM 0.15's, SGLang's and TensorRT-LLM's on their closed-loop runs in
``validation/engines/fit/``. The GPU-side factors are the GPU's whatever the engine: every engine
runs the same kernels' kind on the same chip, and only vLLM's runs are many enough to fit them.
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class EngineError:
    """How far an engine's predictions stray beyond the GPU's own model error, on its runs held
    out of its fit: relative standard deviations of the speed and of ``request_lag_passes``
    (``hardware.ModelError``'s meaning), combined with the GPU's in quadrature
    (``validation/fit_engines.py --errors`` on ``validation/engines/holdout/``)."""

    speed_sd: float
    lag_sd: float


@dataclass(frozen=True)
class ServingEngine:
    """The serving engine's own costs, the same on every GPU it drives: the host's time per pass
    and per decoding sequence, a request's time outside the passes (and per prompt token it
    prefills), and its all-reduce's latency and share of the link's bandwidth; and its rule for
    forming a pass (``prefill_alone``: a pass that prefills decodes nothing)."""

    name: str
    overhead_ms: float
    seq_overhead_us: float
    request_overhead_ms: float
    request_lag_passes: float
    prompt_overhead_us: float
    nvlink_allreduce_us: float  # one all-reduce between 2 GPUs over NVLink (or xGMI)
    allreduce_bandwidth_efficiency: float
    # Each p99 metric's own error: the relative sd of its log error beyond its mean's on runs
    # held out of the fit (stalls and hiccups of the real engine that no rule here produces).
    tail_sd: tuple[tuple[str, float], ...] = ()
    prefill_alone: bool = False
    reserves: bool = False  # admits only where the running requests' estimated outputs fit
    error: EngineError | None = None  # beyond the GPU's (None: vLLM's, the GPU's own)
    # Its terms and error on models of latent attention (MLA: DeepSeek-V3's family), fitted on
    # its runs of them apart (their prefills and kernels differ most from the others'); None:
    # the ones above.
    latent: "ServingEngine | None" = None
    # Its host terms on a server of disaggregated pools, fitted on its disaggregated runs: the
    # terms above come from servers where prefills and decodes share the passes, and carry what
    # that sharing costs (a prefill waits behind decodes, a decode behind prefills); None: the
    # ones above.
    pooled: "ServingEngine | None" = None
    source: str = field(default="", compare=False)

    def family(self, model) -> "ServingEngine":
        """The terms it serves ``model`` with (``latent_attention``)."""
        return self.latent if self.latent is not None and latent_attention(model) else self

    def allreduce_latency_us(self, nvlink: bool, pcie_ratio: float) -> float:
        """Over NVLink the fitted latency; over PCIe (no runs) the same times ``pcie_ratio``,
        the priors' PCIe-to-NVLink ratio."""
        return self.nvlink_allreduce_us * (1.0 if nvlink else pcie_ratio)


#: vLLM 0.15, fitted by validation/fit.py on the fit cases of every GPU (docs/validation.md).
#: Its time per prompt token: validation/fit_closed.py on the closed-loop fit cases, the only
#: runs whose prefills are long (0.8-8k tokens); the open-loop runs' prefills are 1-68 tokens
#: (prompts cached), which the term leaves within 0.4 ms.
VLLM = ServingEngine("vLLM 0.15", overhead_ms=1.01, seq_overhead_us=0.0,
                     request_overhead_ms=4.27, request_lag_passes=1.30, prompt_overhead_us=4.76,
                     nvlink_allreduce_us=2.99, allreduce_bandwidth_efficiency=0.325,
                     tail_sd=(("p99_e2e_s", 0.187), ("p99_ttft_s", 0.695)),
                     source="validation/fit.py on validation/fit/ (H100, A100 and L40S runs), "
                            "tail_sd on validation/holdout/; prompt_overhead_us "
                            "validation/fit_closed.py")

#: SGLang 0.5: its scheduler runs a waiting prefill (or a chunk of one) as a batch of its own,
#: the running requests' decodes waiting for the next pass (``prefill_alone``; mixed batches
#: are off by default: ``--enable-mixed-chunk``). Its only shared runs are of DeepSeek-R1 (H200
#: and B200, 0.5.9 and unversioned images): they fit its terms on models of latent attention
#: (validation/fit_engines.py on validation/engines/fit/, the error on .../holdout/); on every
#: other model it has vLLM's host terms, with that error, which no run of such a model checks.
#: It admits a waiting request only where its prompt and its whole output (up to
#: ``CLIP_NEW_TOKENS``) fit in the KV cache beside a reservation for the running requests' outputs
#: still to come, their sum times a ratio that falls from ``INIT_NEW_TOKEN_RATIO`` to
#: ``MIN_NEW_TOKEN_RATIO`` over ``NEW_TOKEN_RATIO_DECAY_PASSES`` passes and returns to the start
#: on a preemption (``reserves``; docs/model.md, "SGLang's admission").
SGLANG_LATENT = dataclasses.replace(
    VLLM, name="SGLang 0.5, latent attention", overhead_ms=4.17, seq_overhead_us=132.0,
    request_overhead_ms=4.27, request_lag_passes=12.0, prompt_overhead_us=164.0,
    prefill_alone=True, reserves=True, error=EngineError(0.185, 4.66),
    source="validation/fit_engines.py on validation/engines/fit/ (SGLang, DeepSeek-R1)")
SGLANG_LATENT = dataclasses.replace(SGLANG_LATENT, pooled=dataclasses.replace(
    SGLANG_LATENT, name="SGLang 0.5, latent attention, disaggregated pools", overhead_ms=4.04,
    seq_overhead_us=30.6, prompt_overhead_us=14.4, request_lag_passes=29.3,
    source="validation/fit_engines.py --pools on validation/disagg/fit/ (SGLang, DeepSeek-R1)"))
SGLANG = dataclasses.replace(
    VLLM, name="SGLang 0.5", prefill_alone=True, reserves=True, error=SGLANG_LATENT.error,
    latent=SGLANG_LATENT, source="vLLM 0.15's host terms (no SGLang run of such a model)")

#: TensorRT-LLM 1.2: in-flight batching mixes context (prefill) chunks and generation in one
#: pass within ``max_num_tokens``, as vLLM's token budget does. Its terms fitted by
#: validation/fit_engines.py on validation/engines/fit/ (1.1-1.2, a custom build and unversioned
#: images; H200 and B200): on gpt-oss-120b, and apart on DeepSeek-R1 for models of latent
#: attention; the errors on validation/engines/holdout/.
TRTLLM = dataclasses.replace(
    VLLM, name="TensorRT-LLM 1.2", overhead_ms=1.22, seq_overhead_us=0.0,
    request_overhead_ms=4.27, request_lag_passes=1.61, prompt_overhead_us=0.44,
    error=EngineError(0.216, 4.11),
    latent=dataclasses.replace(
        VLLM, name="TensorRT-LLM 1.2, latent attention", overhead_ms=0.88,
        seq_overhead_us=101.0, request_overhead_ms=4.27, request_lag_passes=16.3,
        prompt_overhead_us=3.5, error=EngineError(0.313, 0.576),
        source="validation/fit_engines.py on validation/engines/fit/ (TensorRT-LLM, "
               "DeepSeek-R1)",
        pooled=dataclasses.replace(
            VLLM, name="TensorRT-LLM 1.2, latent attention, disaggregated pools",
            overhead_ms=3.59, seq_overhead_us=0.0, request_overhead_ms=4.27,
            request_lag_passes=62.2, prompt_overhead_us=0.0, error=EngineError(0.313, 0.576),
            source="validation/fit_engines.py --pools on validation/disagg/fit/ "
                   "(TensorRT-LLM in Dynamo 0.8.1, DeepSeek-R1)")),
    source="validation/fit_engines.py on validation/engines/fit/ (TensorRT-LLM, gpt-oss-120b)")

#: SGLang's admission estimate (``sglang.srt.environ``'s defaults, SGLang 0.5):
#: SGLANG_INIT_NEW_TOKEN_RATIO, 0.7 x SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR (0.14),
#: SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS (its decode batches; here passes) and
#: SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (tokens).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY_PASSES = 600
CLIP_NEW_TOKENS = 4096


def new_token_ratio(passes, xp=np):
    """SGLang's estimate of the share of the running requests' outputs still to come that their
    KV will need, ``passes`` passes after the start or the last preemption."""
    decay = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / NEW_TOKEN_RATIO_DECAY_PASSES
    return xp.maximum(INIT_NEW_TOKEN_RATIO - decay * passes, MIN_NEW_TOKEN_RATIO)


#: ``[hardware] engine`` -> its terms.
ENGINES = {"vllm": VLLM, "sglang": SGLANG, "trtllm": TRTLLM}
#: ``[hardware] engine_version``: the releases whose rules servesweep has, per engine, as
#: (oldest, newest) (major, minor); the host terms are those fitted whatever the version.
VERSIONS = {"vllm": ((0, 5), (0, 15)), "sglang": ((0, 4), (0, 5)), "trtllm": ((1, 0), (1, 2))}
#: vLLM before 0.8 ran its V0 engine: without a token budget its scheduler runs the waiting
#: prefills as a pass of their own (the running requests decode in the next), and it may run
#: ``--num-scheduler-steps`` passes per scheduling (vLLM 0.6 docs, "Multi-step scheduling";
#: V1 became the default in 0.8).
V1_FROM = (0, 8)
# MAJOR.MINOR[.PATCH], then a pre-, post- or dev-release tag or a local label (PEP 440's forms).
_VERSION = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})(?:\.[0-9]{1,4})?"
                      r"(?:[.-]?(?:rc|post|dev|a|b)[0-9]{0,4})?(?:\+[A-Za-z0-9.]{1,24})?")


def version_of(engine: str, version: str) -> tuple[int, int] | None:
    """``version`` (``"0.6"``, ``"0.6.3"``, ``"1.2.0rc6"``; "": the fitted one) of ``engine``
    as (major, minor), or None where servesweep has not its rules."""
    oldest, newest = VERSIONS[engine]
    if version == "":
        return newest
    m = _VERSION.fullmatch(version)
    if m is None:
        return None
    v = (int(m[1]), int(m[2]))
    return v if oldest <= v <= newest else None


def allowed_versions(engine: str) -> str:
    (a, b), (c, d) = VERSIONS[engine]
    return f'"{a}.{b}" to "{c}.{d}" (or a patch release of one), or "" for {ENGINES[engine].name}'


def v0(engine: str, version: str) -> bool:
    """Whether ``engine`` at ``version`` is vLLM's V0 engine (``V1_FROM``)."""
    return engine == "vllm" and (version_of(engine, version) or V1_FROM) < V1_FROM


def prefills_alone(engine: str, version: str, budget: bool) -> bool:
    """Whether a pass that prefills decodes nothing: SGLang's rule, and vLLM V0's without a
    token budget (``budget``: one is set)."""
    return ENGINES[engine].prefill_alone or (v0(engine, version) and not budget)
#: The host terms an engine sets on a GPU (the GPU's fields of the same names).
HOST_TERMS = ("overhead_ms", "seq_overhead_us", "request_overhead_ms", "request_lag_passes",
              "prompt_overhead_us")


def pool_terms(engine: str, model) -> dict:
    """The host terms ``engine`` runs a server of a disaggregated pool of ``model`` with, where
    its runs fitted terms of their own (``ServingEngine.pooled``); else none."""
    pooled = ENGINES[engine].family(model).pooled
    return {} if pooled is None else {k: getattr(pooled, k) for k in HOST_TERMS}


def widened(error, extra: EngineError | None):
    """A GPU's model error (``hardware.ModelError`` or None) with an engine's added in
    quadrature."""
    if error is None or extra is None:
        return error
    return dataclasses.replace(error, speed_sd=math.hypot(error.speed_sd, extra.speed_sd),
                               lag_sd=math.hypot(error.lag_sd, extra.lag_sd))


def latent_attention(model) -> bool:
    """Whether ``model`` attends through a compressed latent (MLA), whose decode runs in the
    absorbed form: its decode attention's FLOPs per pair differ from its prefill's."""
    return model is not None and model.decode_attn_flops_per_pair != model.attn_flops_per_pair


def served_by(gpu, engine: str, model=None):
    """``gpu`` (a catalog entry, served by vLLM) driven by ``engine`` serving ``model``: its host
    terms (of the model's family, ``ServingEngine.family``) and its model errors widened by the
    engine's. vLLM's is the entry itself; a GPU timed by a measured fit of its passes
    (``timing = "linear"``) keeps its own."""
    if engine == "vllm" or gpu.timing != "roofline":
        return gpu
    eng = ENGINES[engine].family(model)
    return dataclasses.replace(
        gpu, **{k: getattr(eng, k) for k in HOST_TERMS},
        model_error=widened(gpu.model_error, eng.error),
        weight_only_model_error=widened(gpu.weight_only_model_error, eng.error))
