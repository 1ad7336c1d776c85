"""One call from Python: designs x seeds on a workload -> per-request results and metrics, run
by the same runner as ``sweep run`` (so a design's rows equal the CLI's, bit for bit)."""
from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass, fields

import pandas as pd

from sweep.errors import got
from sweep.execution.planning import check_per_request
from sweep.execution.runner import run_study
from sweep.study.config import Point, Study
from sweep.study.design import Design
from sweep.study.grid import _check_workload, columns
from sweep.study.metric_names import METRICS
from sweep.study.reader import Reader
from sweep.study.sections import DEFAULT_MAX_REQUESTS, parse_run
from sweep.study.workload import Workload


@dataclass
class Result:
    metrics: pd.DataFrame  # one row per design x seed
    requests: pd.DataFrame  # one row per request of every simulation


def simulate(designs: Design | list[Design], workload: Workload, seeds: int | list[int] = 1,
             max_steps: int | None = None, model_error: bool = True,
             max_requests: int = DEFAULT_MAX_REQUESTS) -> Result:
    """Simulate every design with every seed (common random numbers: a seed's requests are the
    same for every design with the same context limit). ``seeds`` is a count (0..n-1) or a list.
    ``model_error`` draws the model's own error per seed, as ``[run] model_error`` does (seed 0
    is the central prediction). Simulation ``sim`` of the requests table is row ``sim`` of the
    metrics table.

    Every argument is checked as ``sweep run`` checks the config's key of the same name (its
    ``[run]`` keys, each design, the workload and its requests against ``max_requests``); a
    refusal, raised before anything is simulated, is a one-line ``ValueError``, or a
    ``TypeError`` for a value of the wrong type."""
    designs = _designs(designs)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload: must be a sweep.Workload, got {got(workload)}")
    r = _Arguments()
    run = {"seeds": _listed(seeds), "model_error": model_error, "max_requests": max_requests}
    if max_steps is not None:
        run["max_steps"] = max_steps
    seeds, _, _, _, max_steps, model_error, max_requests = parse_run(r, run, None, None)
    for d in designs:
        d.validate()
    _check_workload(r, workload, {}, [], max_requests)
    study = Study(name="simulate", path=None, text="",
                  points=[Point(d, workload, columns(d, workload)) for d in designs], axes=[],
                  skipped=[],
                  seeds=seeds, brief=[], chunk_size=None, per_request=True,
                  max_designs=len(designs), max_steps=max_steps, model_error=model_error)
    check_per_request(study, True)
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


class _Arguments(Reader):
    """The config's checks of ``[run]`` values, applied to ``simulate``'s arguments: a refusal
    names the argument (``seeds``, not ``run.seeds``)."""

    def __init__(self):
        super().__init__("", "sweep.simulate")

    def err(self, parts, what: str, index: int | None = None):
        parts = [parts] if isinstance(parts, str) else list(parts)
        return super().err(parts[1:] if parts[:1] == ["run"] and len(parts) > 1 else parts,
                           what, index)


def _designs(designs) -> list[Design]:
    if isinstance(designs, Design):
        return [designs]
    if not isinstance(designs, Iterable) or isinstance(designs, (str, bytes, dict)):
        raise TypeError(f"designs: must be a sweep.Design or a list of them, got {got(designs)}")
    designs = list(designs)
    if not designs:
        raise ValueError("designs: empty list; allowed: a sweep.Design or a non-empty list of "
                         "them")
    for i, d in enumerate(designs):
        if not isinstance(d, Design):
            raise TypeError(f"designs[{i}]: must be a sweep.Design, got {got(d)}")
    return designs


def _listed(seeds):
    """Seeds as a config gives them: a count, or a list (from any iterable); anything else is
    left for the config's check to refuse."""
    if isinstance(seeds, Iterable) and not isinstance(seeds, (str, bytes, dict)):
        return [_whole(s) for s in seeds]
    return _whole(seeds)


def _whole(v):
    """A NumPy integer as Python's, which the config's check takes."""
    return int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
