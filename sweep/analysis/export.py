"""A results folder's designs in another tool's terms: one record per design under the field
names of vLLM's ``vllm bench serve --save-result`` files, so that a prediction can be laid
beside a measured run (``sweep.study.vllm_bench`` reads those same names).

Only the figures the model computes are written. Its latencies are per-request statistics like
vLLM's, averaged over the seeds; its ``_std`` columns spread over seeds, not over requests, so
vLLM's ``std_*`` fields are left out, as are figures it has no counterpart of (mean and median
ITL) and ``total_token_throughput`` (the designs table holds no prompt tokens served)."""
from __future__ import annotations

import math

import pandas as pd

from sweep.analysis.launch import LAUNCH_COLUMNS
from sweep.study.metric_names import METRICS
from sweep.study.vllm_bench import FIELDS

#: vLLM's field -> (our column, its units in one of ours): the reader's latencies and output
#: throughput, and completed requests per second.
VLLM_FIELDS = {**FIELDS, "request_throughput": ("requests_per_s", 1.0)}
#: The designs table's columns that are not levers, besides the metrics and their statistics.
_DERIVED = ("seeds", "p_pass", "meets_brief", *LAUNCH_COLUMNS, "tokens_per_s_per_gpu",
            "tokens_per_s_per_user")
_STATS = ("_std", "_ci_low", "_ci_high", "_lo", "_hi")


def lever_columns(designs: pd.DataFrame) -> list[str]:
    """The designs table's columns that say what the design is, in its order."""
    derived = set(_DERIVED) | {m + s for m in METRICS for s in ("",) + _STATS}
    return [c for c in designs.columns if c not in derived]


def _plain(v):
    """A table value as JSON holds it: None where missing, Python numbers and text."""
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def vllm_records(designs: pd.DataFrame) -> list[dict]:
    """One dict per design: ``design`` and the lever columns under their own names, every vLLM
    field the model has a finite figure for (latencies in milliseconds), and ``launch_vllm``
    where the table has it."""
    levers = lever_columns(designs)
    records = []
    for row in designs.to_dict("records"):
        rec = {c: _plain(row[c]) for c in levers}
        for key, (col, per) in VLLM_FIELDS.items():
            value = float(row[col]) * per if col in row else math.nan
            if math.isfinite(value):
                rec[key] = value
        if "launch_vllm" in row:
            rec["launch_vllm"] = _plain(row["launch_vllm"])
        records.append(rec)
    return records
