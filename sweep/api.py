"""One call from Python: designs x seeds on a workload -> per-request results and metrics."""
from __future__ import annotations

from dataclasses import dataclass, fields

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from sweep.analysis.metrics import METRICS, summarize
from sweep.engine import EngineOutput, simulate_batch
from sweep.execution import executables, topology
from sweep.study.design import Design, EngineParams
from sweep.study.workload import Requests, Workload, sample


@dataclass
class Result:
    metrics: pd.DataFrame  # one row per design x seed
    requests: pd.DataFrame  # one row per request of every simulation
    outputs: EngineOutput  # raw engine arrays, leading axis = simulation


def stack(trees):
    """Stack a list of identical pytrees along a new leading axis."""
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


_summarize_batch = jax.jit(jax.vmap(summarize))


def summarize_batch(out: EngineOutput, reqs: Requests, system, compile_only: bool = False):
    """The metrics of a batch of simulations (``summarize`` vmapped); ``compile_only``
    returns the compiled executable without running it."""
    exe = executables.get("summaries", _summarize_batch, (out, reqs, system), {}, {})
    return exe if compile_only else exe(out, reqs, system)


def run_batch(params: EngineParams, reqs: Requests, seats: int, k_max: int, max_steps=None,
              lanes: int | None = None):
    """Engine + metrics for a stacked batch; returns (EngineOutput, dict of metric arrays)."""
    out = simulate_batch(params, reqs, seats=seats, k_max=k_max, lanes=lanes,
                         max_steps=max_steps)
    return out, {k: np.asarray(v) for k, v in summarize_batch(out, reqs, params).items()}


def simulate(designs: Design | list[Design], workload: Workload, seeds: int | list[int] = 1,
             max_steps: int | None = None) -> Result:
    """Simulate every design with every seed (common random numbers: a seed's requests are the
    same for every design with the same context limit). ``seeds`` is a count (0..n-1) or a list."""
    designs = [designs] if isinstance(designs, Design) else list(designs)
    seeds = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    workload.validate()
    cache: dict[tuple[int, int], Requests] = {}
    plist, rlist, rows = [], [], []
    for d_idx, d in enumerate(designs):
        p = topology.plan(d)
        ctx = d.context_limit
        for seed in seeds:
            if (ctx, seed) not in cache:
                cache[(ctx, seed)] = sample(workload, seed, ctx)
            plist.append(p)
            rlist.append(cache[(ctx, seed)])
            rows.append({"design": d_idx, **_lever_columns(d), "seed": seed})
    seats = max(d.seats for d in designs)
    k_max = max(d.draft_tokens for d in designs)
    reqs = stack(rlist)
    steps = None if max_steps is None else jnp.int32(max_steps)
    out = topology.run(plist, reqs, lambda pp, rr: simulate_batch(
        stack(pp), rr, seats=seats, k_max=k_max, max_steps=steps),
        len(plist) * max(d.replicas for d in designs))
    mets = {k: np.asarray(v) for k, v in
            summarize_batch(out, reqs, stack([p.system for p in plist])).items()}
    metrics = pd.DataFrame(rows)
    for name in METRICS:
        metrics[name] = mets[name]
    n = reqs.arrival.shape[1]
    real = np.isfinite(np.asarray(reqs.arrival))
    sim = np.repeat(np.arange(len(rows)), n).reshape(len(rows), n)
    requests = pd.DataFrame({
        "sim": sim[real], "request": np.tile(np.arange(n), (len(rows), 1))[real],
        "arrival_s": np.asarray(reqs.arrival)[real],
        "prompt_tokens": np.asarray(reqs.prompt)[real],
        "output_tokens": np.asarray(reqs.output)[real],
        "first_token_s": np.asarray(out.first)[real], "finish_s": np.asarray(out.finish)[real],
        "generated": np.asarray(out.generated)[real],
    })
    return Result(metrics, requests, out)


def _lever_columns(d: Design) -> dict:
    cols = {}
    for f in fields(d):
        v = getattr(d, f.name)
        cols[f.name] = getattr(v, "name", v)
    return cols
