"""The JAX engine (a fixed-step ``lax.scan`` over pure rules) and its event-driven reference twin."""
from sweep.engine.core import (DEFAULT_LOOKAHEAD, DEFAULT_STATIC_LOOKAHEAD, simulate_batch,
                               smallest_chunk, step, uses_extensions)
from sweep.engine.state import (ITL_BINS, ITL_HI_S, ITL_LO_S, ITL_LOG_WIDTH, EngineOutput,
                                EngineState, itl_bin, needs_pass)

__all__ = ["DEFAULT_LOOKAHEAD", "DEFAULT_STATIC_LOOKAHEAD", "ITL_BINS", "ITL_HI_S", "ITL_LO_S",
           "ITL_LOG_WIDTH", "EngineOutput", "EngineState", "itl_bin", "needs_pass",
           "simulate_batch", "smallest_chunk", "step", "uses_extensions"]
