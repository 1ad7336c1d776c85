"""servesweep: Monte Carlo sweeps of LLM-serving designs on a vectorised JAX engine."""
import jax

# Simulated time runs in float64: a float32 clock loses sub-millisecond resolution after minutes.
jax.config.update("jax_enable_x64", True)

__version__ = "0.1.0"
