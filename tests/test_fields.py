"""sweep.study.fields: one declaration per config key, and what is derived from it (the Design's
and Workload's attributes, the results' columns, the README and docs tables). Fast."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from sweep.engine.params import engine_params
from sweep.errors import DoesNotFit, FieldError
from sweep.physics.timing import timing_params
from sweep.study import keytables
from sweep.study.config import load_study
from sweep.study.design import TIMING_KEYS, Design
from sweep.study.fields import (COLUMNS, DESIGN_FIELDS, ENGINE_LEVERS, FIELDS, KEYS, TEXT_COLUMNS,
                                UNCERTAIN, WORKLOAD_FIELDS)
from sweep.study.grid import columns
from sweep.study.uncertainty import FACTORS
from sweep.study.workload import Workload

#: The results' grid columns: outside readers rely on these names and this order; a new key's
#: columns come after them.
PINNED_COLUMNS = [
    "gpu", "price_per_gpu_hour", "compute_efficiency", "bandwidth_efficiency",
    "kv_bandwidth_efficiency", "decode_attention_efficiency", "overhead_ms", "seq_overhead_us",
    "request_overhead_ms", "request_lag_passes", "memory_overhead_fraction",
    "gpu_memory_utilization", "model",
    "arrival", "arrival_rate", "duration_s", "num_requests", "drain_s",
    "prompt_tokens_dist", "prompt_tokens_mean", "prompt_tokens_low", "prompt_tokens_high",
    "prompt_tokens_sigma",
    "output_tokens_dist", "output_tokens_mean", "output_tokens_low", "output_tokens_high",
    "output_tokens_sigma",
    "batching", "kv_cache", "gpus", "weight_bits", "activation_bits", "kv_bits", "draft_tokens",
    "acceptance", "draft_cost", "max_batch", "block_size", "max_seq_len",
    "arrival_cv", "trace", "trace_time_scale",
    "replicas", "router", "prefill_gpus", "decode_gpus", "kv_link_gbps",
    "prefix_count", "prefix_tokens", "prefix_share", "prefix_cache", "prefill_chunk_tokens",
    "max_num_batched_tokens", "kv_blocks", "allreduce_latency_us",
    "allreduce_bandwidth_efficiency", "calibration",
]


def test_columns_are_pinned():
    assert COLUMNS[:len(PINNED_COLUMNS)] == PINNED_COLUMNS
    assert COLUMNS[len(PINNED_COLUMNS):] == ["params_b", "active_params_b",
                                             "kv_bytes_per_token", "weight_gib_per_gpu",
                                             "kv_tokens", "expert_parallel", "data_parallel",
                                             "prefill_gpu", "decode_gpu",
                                             "dequant_bandwidth_efficiency",
                                             "dequant_compute_efficiency", "concurrency",
                                             "warmup_requests", "think_time_s",
                                             "allreduce_growth", "prompt_overhead_us",
                                             "hash_block_tokens", "kv_offload_gib",
                                             *(f"{k}_{x}" for k in ("turns", "turn_tokens")
                                               for x in ("dist", "mean", "low", "high",
                                                         "sigma")), "draft",
                                             "pipeline_parallel", "internode_gbps",
                                             *(f"think_time_s_{x}"
                                               for x in ("dist", "low", "high", "sigma")),
                                             "engine", "engine_version", "num_scheduler_steps",
                                                 *(f"{pool}_{k}" for k in (
                                                     "workers", "data_parallel",
                                                     "expert_parallel")
                                                   for pool in ("prefill", "decode"))]
    assert len(set(COLUMNS)) == len(COLUMNS)
    assert set(TEXT_COLUMNS) == {"gpu", "model", "arrival", "prompt_tokens_dist",
                                 "output_tokens_dist", "batching", "kv_cache", "trace", "router",
                                 "calibration", "prefill_gpu", "decode_gpu", "turns_dist",
                                 "turn_tokens_dist", "draft", "think_time_s_dist", "engine",
                                 "engine_version"}


@pytest.mark.parametrize("cls,declared", [(Design, DESIGN_FIELDS), (Workload, WORKLOAD_FIELDS)])
def test_every_attribute_is_declared_with_its_default(cls, declared):
    attrs = {f.name: f for f in dataclasses.fields(cls)}
    assert set(attrs) == set(declared)
    made = cls()
    for name, f in attrs.items():
        # (a workload's duration_s left out is resolved when it is made: the declared 60 s,
        # or unset where num_requests, a closed loop or a trace sets the run's length)
        assert getattr(made, name) == declared[name].default
        assert f.metadata["field"] is declared[name]


def test_declarations_are_well_formed():
    assert len({(f.section, f.key) for f in FIELDS}) == len(FIELDS)
    for f in FIELDS:
        assert f.help and f.short, f.key
        assert not (f.choices and f.range), f.key
        assert f.kind in ("num", "int", "bool", "str", "path", "lengths", "pauses", "trace"), \
            f.key
        if f.choices and f.config_default is not None:
            assert f.config_default in f.choices, f.key
        if f.range and f.config_default is not None:
            assert f.range.holds(f.config_default, f.kind), f.key


def test_uncertain_factors_keep_their_draw_streams():
    """A factor's draws follow its stream: renumbering one would change every seeded result."""
    assert {f.key: f.draw for f in UNCERTAIN} == {
        "compute_efficiency": 0, "bandwidth_efficiency": 1, "overhead_ms": 2, "acceptance": 3,
        "kv_bandwidth_efficiency": 4, "request_lag_passes": 5, "dequant_bandwidth_efficiency": 6,
        "dequant_compute_efficiency": 7}
    for key, (section, lo, hi, lo_open) in FACTORS.items():
        r = KEYS[section][key].range
        assert (r.lo, r.hi, r.lo_open) == (lo, hi, lo_open)


def test_a_lever_is_declared_once_and_read_where_it_acts():
    """The timing function's keywords are declared keys (a design passes each one), and every
    lever declared with an engine dtype is an EngineParams field of that dtype and value."""
    keywords = [k for k, v in inspect.signature(timing_params).parameters.items()
                if v.kind is v.KEYWORD_ONLY]
    assert list(TIMING_KEYS) == keywords and set(keywords) <= set(DESIGN_FIELDS)
    d = Design(draft_tokens=3, prefix_cache=True, prefill_chunk_tokens=64,
               max_num_batched_tokens=1024)
    p = engine_params(d)
    assert ENGINE_LEVERS and all(f.key in p._fields for f in ENGINE_LEVERS)
    for f in ENGINE_LEVERS:
        v = getattr(p, f.key)
        assert v.dtype == np.dtype(f.engine) and v == getattr(d, f.key), f.key
    assert d.timing().draft_tokens == 3


def test_the_readme_and_docs_tables_are_generated_from_the_declarations():
    assert keytables.stale() == [], "run: python -m sweep.study.keytables --write"
    readme = (keytables.REPO / "README.md").read_text()
    docs = (keytables.REPO / "docs/config.md").read_text()
    for f in FIELDS:
        assert f"`{f.key}`" in readme and f"| `{f.key}` |" in docs


def test_a_stale_table_is_found():
    text = (keytables.REPO / "README.md").read_text()
    assert keytables.render(text.replace("| `kv_bits` |", "| `kv_bit` |"), True) == text


def test_refusals_are_structured():
    with pytest.raises(FieldError) as info:
        Design(weight_bits=3).validate()
    err = info.value
    assert (err.key, err.value, err.reason, err.allowed) == (
        "levers.weight_bits", 3, "3 is not allowed", "16, 8, 4")
    assert str(err) == "levers.weight_bits: 3 is not allowed; allowed: 16, 8, 4"
    with pytest.raises(FieldError) as info:
        Workload(arrival_rate=-1.0).validate()
    assert info.value.parts == ["workload", "arrival_rate"] and info.value.allowed is None
    assert str(info.value) == ("workload.arrival_rate: must be a positive number of requests/s, "
                               "got -1.0")
    with pytest.raises(DoesNotFit):
        Design(model="Llama-3-70B", gpu="A100-80GB").validate()


def test_a_points_row_is_its_design_and_workload_columns():
    """The row a config gives a point is what ``columns`` derives from the point's design and
    workload alone, the same designs built in Python (as ``sweep.simulate`` builds them)."""
    study = load_study(str(keytables.REPO / "configs" / "serve_a_model.toml"))
    for p in study.points[::7]:
        built = Design(**{a: getattr(p.design, a) for a in DESIGN_FIELDS})
        row = columns(built, Workload(**{a: getattr(p.workload, a) for a in WORKLOAD_FIELDS}))
        assert list(row) == COLUMNS and row == p.columns
    gamma = Workload(arrival="gamma", arrival_cv=2.0)
    assert columns(Design(), gamma)["arrival_cv"] == 2.0
    assert columns(Design(), Workload(arrival_cv=2.0))["arrival_cv"] is None  # poisson: n/a
    pools = columns(Design(prefill_gpus=1, decode_gpus=2), Workload())
    assert pools["gpus"] is None and pools["kv_link_gbps"] == Design().kv_link_gbps
    drawn = columns(Design(compute_efficiency=0.5), Workload(), ["compute_efficiency"])
    assert drawn["compute_efficiency"] is None  # drawn per seed: its column is empty


def test_a_rows_sizes_say_what_the_model_and_its_memory_amount_to():
    d = Design(gpu="H100-SXM", model="Llama-3-8B", gpus=2, kv_bits=8)
    row = columns(d, Workload())
    assert row["params_b"] == pytest.approx(8.03) and row["active_params_b"] == row["params_b"]
    assert row["kv_bytes_per_token"] == 32 * 8 * 128 * 2 * 1.0  # layers x KV heads x dim x K,V
    assert row["weight_gib_per_gpu"] == pytest.approx(8.03e9 * 2 / 2**30 / 2)
    assert row["kv_tokens"] == d.kv_tokens() > 0
    pools = Design(gpu="H100-SXM", model="Llama-3-8B", prefill_gpus=1, decode_gpus=2)
    assert columns(pools, Workload())["kv_tokens"] == pools.pool(2).kv_tokens()
