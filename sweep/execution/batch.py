"""A batch of simulations as stacked arrays: the engine on it, and its metrics."""
from __future__ import annotations

import jax
import numpy as np

from sweep.analysis.metrics import summarize
from sweep.engine import EngineOutput
from sweep.physics.numerics import float64
from sweep.runtime import chunks, executables
from sweep.study.workload import Requests


def stack(trees):
    """Stack a list of identical pytrees along a new leading axis."""
    return jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)


_summarize_batch = jax.jit(jax.vmap(summarize))


@float64()
def summarize_batch(out: EngineOutput, reqs: Requests, system, compile_only: bool = False):
    """The metrics of a batch of simulations (``summarize`` vmapped, ``chunks.SIZE`` at a
    time: one program for every batch size), as host arrays; ``compile_only`` returns the
    compiled executable without running it."""
    m = np.shape(out.t_stop)[0]
    parts = chunks.split((out, reqs, system))
    exe = executables.get("summaries", _summarize_batch, parts[0], {}, {})
    return exe if compile_only else chunks.join_on_host([exe(*part) for part in parts], m)
