"""The engine's input for one server: a validated design in array form (``EngineParams``, a
pytree: stack many to vmap a sweep), built once by ``engine_params``.

Its fields are the rules' derived values, then every lever declared with an ``engine`` dtype
(``sweep.study.fields.ENGINE_LEVERS``) under its own name, then what only the metrics read
(``SummaryParams``). A rule lever the rules read as it is needs no line here.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sweep.engine.arith import ceil_div
from sweep.errors import FieldError
from sweep.physics.drafts import accepted_at_least
from sweep.physics.engines import ENGINES, prefills_alone
from sweep.physics.rng import acceptance_thresholds, table_thresholds
from sweep.physics.timing import TimingParams
from sweep.study.batching import POLICIES
from sweep.study.design import Design
from sweep.study.fields import ENGINE_LEVERS, MAX_DRAFT_TOKENS


class SummaryParams(NamedTuple):
    """What a simulation's metrics read besides the engine's output; of them the engine reads
    only ``request_overhead_s``, a closed loop's clients' time between a finish and their next
    request (``arrivals.gap``)."""

    block_bytes: np.ndarray  # float64: bytes per KV block (for peak KV memory)
    gpus: np.ndarray  # float64
    price_per_gpu_s: np.ndarray  # float64, $ per GPU-second
    request_overhead_s: np.ndarray  # float64: added to every request's TTFT and latency
    request_lag_passes: np.ndarray  # float64: so many mean TPOTs added to them too
    prompt_overhead_s: np.ndarray  # float64: and this per prompt token the request prefills
    # A brief's per-request limits (slo_attainment, goodput_rps); inf: none.
    slo_ttft_s: np.ndarray  # float64
    slo_tpot_s: np.ndarray  # float64


#: The values the rules read that no lever states as it is.
_DERIVED = [
    ("timing", TimingParams),  # the pass-time constants (float64)
    ("max_batch", np.ndarray),  # int32: seats in use (1 for one-at-a-time)
    ("static", np.ndarray),  # bool: admit only into an empty server (the policy's empty_only)
    ("block_tokens", np.ndarray),  # int32: KV allocation unit in tokens
    ("total_blocks", np.ndarray),  # int32
    ("seq_blocks", np.ndarray),  # int32: blocks a running sequence holds besides its context's
    ("accept_thresholds", np.ndarray),  # int32[MAX_DRAFT_TOKENS]: P(A >= j) x 2**24, 0 past k
    ("transferred", np.ndarray),  # bool: requests arrive prefilled (a decode pool: topology.py)
    ("host_blocks", np.ndarray),  # int32: a CPU KV tier's blocks (0: none; Design.host_tier)
    ("load_s_per_token", np.ndarray),  # float64: seconds to load a token's KV from it
    ("prefill_alone", np.ndarray),  # bool: a pass that prefills decodes nothing (the engine's)
    ("reserves", np.ndarray),  # bool: admission keeps room for the running outputs (SGLang's)
]
EngineParams = NamedTuple("EngineParams", [*_DERIVED, *((f.key, np.ndarray) for f in ENGINE_LEVERS),
                                           ("summary", SummaryParams)])
EngineParams.__module__ = __name__
EngineParams.__doc__ = """A design in the engine's array form: the rules' derived values, each
lever of ``ENGINE_LEVERS`` as it is, and ``summary``, what only the metrics read."""


def context_blocks(p: EngineParams, tokens):
    """KV blocks a running sequence with ``tokens`` of context holds: its context's, and its
    fixed share (windowed layers' KV over a full window and the state of linear-attention and
    state-space layers, ``seq_blocks``)."""
    return ceil_div(tokens, p.block_tokens) + p.seq_blocks


def _ranks_budget(design: Design) -> dict:
    """A server's token budget and chunk as its ranks run together: each data-parallel rank
    schedules its own passes within ``max_num_batched_tokens``, so the shared batch has the
    ranks' sum, and one prompt's chunk stays within a rank's budget."""
    budget, dp = design.max_num_batched_tokens, design.data_parallel
    if dp == 1 or budget == 0:
        return {}
    return {"max_num_batched_tokens": np.int32(budget * dp),
            "prefill_chunk_tokens": np.int32(min(design.prefill_chunk_tokens or budget, budget))}


def _thresholds(design: Design) -> np.ndarray:
    """The acceptance thresholds: a separate draft model's flat ``acceptance`` per drafted
    token, or an MTP module's or EAGLE-3 head's published table per position
    (``drafts.CONDITIONAL``). Thresholds past k are 0 (never accept): the engine needs no mask
    by k."""
    table = (acceptance_thresholds(design.acceptance, MAX_DRAFT_TOKENS)
             if design.draft == "model"
             else table_thresholds(accepted_at_least(design.draft, MAX_DRAFT_TOKENS)))
    return np.where(np.arange(MAX_DRAFT_TOKENS) < design.draft_tokens, table, 0).astype(np.int32)


def engine_params(design: Design) -> EngineParams:
    """One server's engine arrays (validated first); a design with replicas or disaggregated
    pools runs as several servers: ``sweep.engine.topology.plan``."""
    design.validate()
    if design.replicas != 1 or design.disaggregated:
        raise FieldError("design", "replicas and prefill/decode pools are several servers",
                         "sweep.engine.topology.plan(design)")
    host_blocks, load_s = design.host_tier()
    return EngineParams(
        timing=TimingParams(*(np.float64(v) for v in design.timing())),
        max_batch=np.int32(design.seats),
        static=np.bool_(POLICIES[design.batching].empty_only),
        block_tokens=np.int32(design.block_tokens),
        total_blocks=np.int32(min(design.total_blocks(), 2**31 - 1)),
        seq_blocks=np.int32(design.seq_blocks()),
        accept_thresholds=_thresholds(design),
        transferred=np.bool_(False),
        host_blocks=np.int32(host_blocks), load_s_per_token=np.float64(load_s),
        prefill_alone=np.bool_(prefills_alone(
            design.engine, design.engine_version,
            budget=design.max_num_batched_tokens > 0 or design.prefill_chunk_tokens > 0)),
        reserves=np.bool_(ENGINES[design.engine].reserves),
        **{**{f.key: np.dtype(f.engine).type(getattr(design, f.key)) for f in ENGINE_LEVERS},
           **_ranks_budget(design)},
        summary=SummaryParams(
            # A block is the full-attention layers' KV of block_tokens tokens, as the group
            # holds it: a sequence's window and state are counted in such blocks too.
            block_bytes=np.float64(design.block_tokens * design.served_spec.held_kv_bytes_per_token(
                design.kv_bits, design.gpus)),
            gpus=np.float64(design.server_gpus),
            price_per_gpu_s=np.float64(design.resolved("price_per_gpu_hour") / 3600.0),
            request_overhead_s=np.float64(design.resolved("request_overhead_ms") * 1e-3),
            request_lag_passes=np.float64(design.resolved("request_lag_passes")),
            prompt_overhead_s=np.float64(design.resolved("prompt_overhead_us") * 1e-6),
            slo_ttft_s=np.float64(np.inf),
            slo_tpot_s=np.float64(np.inf)),
    )
