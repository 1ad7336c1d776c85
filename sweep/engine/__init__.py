"""The JAX engine, by the rules of docs/model.md (its event-driven twin is ``sweep.twin``).

The engine is pure rules over a fixed-shape state, ``lax.scan`` over steps and ``vmap`` over a
batch of designs x workloads x seeds. A step is one general pass (the rules as written) followed
by a decode run: up to ``lookahead`` further passes in which nothing but decoding can happen,
taken at once. Its modules, in the order a step uses them:

- ``state``: the state, per-simulation constants and outputs; ``seats_of``, ``needs_pass``;
- ``scheduling``: rules 1-5 (the clock; growth and preemption, readmission, admission);
- ``passes``: rules 6-9 (the pass, tokens, completion) and ``general_pass``, their composition;
- ``features``: one module per feature (prefix caching and chunked prefill, closed-loop
  arrivals, expert parallelism's pass time), each with its compile gate, its slot of the state
  and its hooks into the rules; ``features.plain`` holds the hooks that add nothing;
- ``decode``: the decode runs;
- ``lanes``: ``step``, and ``simulate_batch``, the entry, over a pool of lanes;
- ``topology``: what replicas and disaggregated pools are, as servers the engine runs.
"""
from sweep.engine.features import active as active_features
from sweep.engine.lanes import DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD, simulate_batch, step
from sweep.engine.state import (ITL_BINS, ITL_HI_S, ITL_LO_S, ITL_LOG_WIDTH, EngineOutput,
                                EngineState, itl_bin, needs_pass)

__all__ = ["DEFAULT_LOOKAHEAD", "DEFAULT_STATIC_LOOKAHEAD", "ITL_BINS", "ITL_HI_S", "ITL_LO_S",
           "ITL_LOG_WIDTH", "EngineOutput", "EngineState", "active_features", "itl_bin",
           "needs_pass", "simulate_batch", "step"]
