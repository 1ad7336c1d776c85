"""Integer arithmetic shaped for XLA on a CPU, shared by the rules and the decode runs."""
from __future__ import annotations

import jax.numpy as jnp


def ceil_div(a, b):
    """ceil(a / b) for int32 a >= 0, b >= 1: floor(x / b) for x = a + b - 1, taken as
    floor((x + 1/2) x (1/b)) in float64. The product is within a relative 2**-52 of
    (x + 1/2) / b, which is at least 1/(2b) from any integer, so the floor is exact while
    x < 2**51. x86 has no vector integer division, and a vector float division costs several
    multiplies (the decode runs take two of these per seat and pass)."""
    b = jnp.asarray(b, jnp.float64)
    return jnp.floor((jnp.asarray(a, jnp.float64) + (b - 0.5)) * (1.0 / b)).astype(jnp.int32)


def exclusive_cumsum(x):
    return jnp.cumsum(x) - x
