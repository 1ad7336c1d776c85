"""The Serve a Model study in a few lines: five designs of Llama-3-8B on H100s at 16 requests/s.

Run: python examples/quickstart.py
"""
import pandas as pd

from sweep.api import simulate
from sweep.study.design import Design
from sweep.study.workload import Workload

START = Design(batching="static", kv_cache="contiguous")  # the brief's starting server
DESIGNS = {
    "starting server": START,
    "continuous + paged": START.replace(batching="continuous", kv_cache="paged"),
    "... + 2 GPUs": START.replace(batching="continuous", kv_cache="paged", gpus=2),
    "... 8-bit + draft 4": START.replace(batching="continuous", kv_cache="paged", weight_bits=8,
                                        draft_tokens=4),
    "... 4-bit + draft 4": START.replace(batching="continuous", kv_cache="paged", weight_bits=4,
                                        draft_tokens=4),
}
LIMITS = {"p95_ttft_s": 0.5, "p95_itl_ms": 15.0, "cost_per_mtok": 0.20}


def main(seeds: int = 4) -> pd.DataFrame:
    workload = Workload(arrival_rate=16.0, duration_s=60.0, drain_s=60.0)  # the brief's workload
    res = simulate(list(DESIGNS.values()), workload, seeds=seeds)
    table = res.metrics.groupby("design")[list(LIMITS) + ["tokens_per_s", "unstable"]].mean()
    table.index = list(DESIGNS)
    table["passes limits"] = [all(row[k] <= v for k, v in LIMITS.items())
                              for _, row in table.iterrows()]
    table["weight_bits"] = [d.weight_bits for d in DESIGNS.values()]
    return table


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    print(main().round(3).to_string())
