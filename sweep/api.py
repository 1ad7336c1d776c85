"""One call from Python: designs x seeds on a workload -> per-request results and metrics, run
by the same runner as ``sweep run`` (so a design's rows equal the CLI's, bit for bit)."""
from __future__ import annotations

from dataclasses import dataclass, fields

import pandas as pd

from sweep.execution.runner import run_study
from sweep.study.config import Point, Study
from sweep.study.design import Design
from sweep.study.grid import columns
from sweep.study.metric_names import METRICS
from sweep.study.workload import Workload


@dataclass
class Result:
    metrics: pd.DataFrame  # one row per design x seed
    requests: pd.DataFrame  # one row per request of every simulation


def simulate(designs: Design | list[Design], workload: Workload, seeds: int | list[int] = 1,
             max_steps: int | None = None, model_error: bool = True) -> Result:
    """Simulate every design with every seed (common random numbers: a seed's requests are the
    same for every design with the same context limit). ``seeds`` is a count (0..n-1) or a list.
    ``model_error`` draws the model's own error per seed, as ``[run] model_error`` does (seed 0
    is the central prediction). Simulation ``sim`` of the requests table is row ``sim`` of the
    metrics table."""
    designs = [designs] if isinstance(designs, Design) else list(designs)
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    workload.validate()
    study = Study(name="simulate", path=None, text="",
                  points=[Point(d, workload, columns(d, workload)) for d in designs], axes=[],
                  skipped=[],
                  seeds=seeds, brief=[], chunk_size=None, per_request=True,
                  max_designs=len(designs), max_steps=max_steps, model_error=model_error)
    res = run_study(study)
    rows = pd.DataFrame([{"design": i, **_lever_columns(d), "seed": seed}
                         for i, d in enumerate(designs) for seed in seeds])
    metrics = pd.concat([rows, res.runs[list(METRICS)]], axis=1)
    # The runner orders requests by seed value; ``sim`` follows the order of ``seeds``.
    order = {seed: k for k, seed in enumerate(seeds)}
    reqs = res.requests
    sim = reqs["design"] * len(seeds) + reqs["seed"].map(order)
    requests = reqs.drop(columns=["design", "seed"]).assign(sim=sim)
    requests = requests[["sim", *requests.columns[:-1]]].sort_values(
        ["sim", "request"], kind="stable", ignore_index=True)
    return Result(metrics, requests)


def _lever_columns(d: Design) -> dict:
    cols = {}
    for f in fields(d):
        v = getattr(d, f.name)
        cols[f.name] = getattr(v, "name", v)
    return cols
