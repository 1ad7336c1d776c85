"""The summary metrics a simulation reports, by name: what a brief, a capacity search and
the tables check keys against, below the engine that computes them."""

#: Every summary metric, in output order: name -> dtype ("f8" float64, "i8" int64, "b" bool).
METRICS = {
    "mean_ttft_s": "f8", "p50_ttft_s": "f8", "p90_ttft_s": "f8", "p95_ttft_s": "f8",
    "p99_ttft_s": "f8",
    "mean_tpot_ms": "f8", "p50_tpot_ms": "f8", "p95_tpot_ms": "f8", "p99_tpot_ms": "f8",
    "p95_itl_ms": "f8", "p99_itl_ms": "f8",
    "mean_e2e_s": "f8", "p50_e2e_s": "f8", "p90_e2e_s": "f8", "p95_e2e_s": "f8", "p99_e2e_s": "f8",
    "tokens_per_s": "f8", "requests": "i8", "completed": "i8", "unfinished": "i8",
    "preemptions": "i8", "peak_kv_gb": "f8", "max_queue": "i8", "cost_per_mtok": "f8",
    "mean_in_system": "f8", "utilization": "f8", "sim_time_s": "f8", "passes": "i8",
    "unstable": "b", "truncated": "b", "prefix_hit_rate": "f8", "prefill_tokens_saved": "i8",
    "prefix_token_hit_rate": "f8",
    "slo_attainment": "f8", "goodput_rps": "f8", "requests_per_s": "f8", "replica_load_cv": "f8",
}


def unit(column: str) -> str:
    """A column's name with its unit, for an axis."""
    units = {"cost_per_mtok": "$ per million tokens", "usd_per_hour": "$/hour",
             "fleet_usd_per_hour": "$/hour", "tokens_per_s": "tokens/s",
             "tokens_per_s_per_gpu": "tokens/s per GPU",
             "tokens_per_s_per_user": "tokens/s per user",
             "max_rate": "requests/s", "goodput_rps": "requests/s", "requests_per_s": "requests/s",
             "peak_kv_gb": "GB"}
    if column in units:
        return f"{column} ({units[column]})"
    for suffix, word in (("_ms", "ms"), ("_s", "s")):
        if column.endswith(suffix):
            return f"{column} ({word})"
    return column


def unit_of(column: str) -> str:
    """The unit alone (``unit``'s bracket), or "other" for a column without one: values are
    compared on one scale only within a unit."""
    text = unit(column)
    return text[text.index("(") + 1:-1] if text.endswith(")") else "other"
