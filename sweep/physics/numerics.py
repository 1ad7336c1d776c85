"""Floating-point sums in a fixed order.

XLA may reorder a reduction (``sum``, ``cumsum``) differently for different batch shapes, device
counts or fusion decisions, which changes results in the last bits. Results must be
byte-identical however a sweep is chunked or sharded, so every floating-point sum that reaches
an output goes through these: log2(n) shifted adds, or one add after another, in an order that
depends only on the length.
(Integer sums are exact in any order and need none of this.)
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def prefix_sum(x, axis: int = -1):
    """Inclusive prefix sums along ``axis`` (Hillis-Steele: log2(n) shifted adds). Also avoids
    XLA's CPU ``cumsum``, an O(n^2) reduce-window."""
    axis = axis % x.ndim
    n = x.shape[axis]
    shift = 1
    while shift < n:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (shift, 0)
        x = x + lax.slice_in_dim(jnp.pad(x, pad), 0, n, axis=axis)
        shift *= 2
    return x


def running_sum(x, start=0.0, unroll: bool = False):
    """Inclusive prefix sums along the last axis, from ``start``, one term after another in
    order: monotone for non-negative terms (a + b >= a in floating point), and a loop that
    compiles in a fraction of the time of a log-step sum. ``unroll`` (for a short axis inside
    a loop body) writes the additions out instead of looping. Integers too (exact in any
    order)."""
    x = jnp.moveaxis(x, -1, 0)
    init = jnp.broadcast_to(jnp.asarray(start, x.dtype), x.shape[1:])
    if unroll:
        # Element j adds the terms after j as zeros (x + 0.0 == x): one elementwise kernel for
        # the whole axis, where an unrolled scan was one kernel per element.
        n = x.shape[0]
        j = jnp.arange(n)
        zero = jnp.zeros((), x.dtype)
        sums = jnp.broadcast_to(init[..., None], init.shape + (n,))
        for i in range(n):
            sums = sums + jnp.where(j >= i, x[i][..., None], zero)
        return sums
    sums = lax.scan(lambda c, v: (c + v, c + v), init, x)[1]
    return jnp.moveaxis(sums, 0, -1)


def fixed_sum(x, axis: int = -1):
    """The sum along ``axis``, in an order that depends only on its length."""
    return lax.index_in_dim(prefix_sum(x, axis), x.shape[axis % x.ndim] - 1, axis % x.ndim,
                            keepdims=False)


def float64():
    """A context in which this thread's JAX code runs in float64 (simulated time needs it: a
    float32 clock loses sub-millisecond resolution after minutes). Thread-local, so the caller's
    own JAX setting is left as it was; every thread that builds or runs engine arrays enters
    it."""
    return jax.enable_x64(True)
