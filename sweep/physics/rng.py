"""Counter-based integer hash RNG for speculative acceptance, shared by the engine and the twin.

A draw is a pure function of (seed, request, the request's decode-pass count), so a request sees
the same acceptance sequence in every design with the same seed (common random numbers), both
simulators get bit-identical draws, and the draws of many future passes can be taken at once
(the engine's multi-pass steps). The hash is Chris Wellons' ``lowbias32``;
it is far cheaper inside a scan step than threefry, and only needs to be well mixed, not secure.
"""
from __future__ import annotations

import numpy as np

#: Draws are 24-bit integers so an acceptance probability becomes an exact integer threshold.
UNIFORM_BITS = 24
UNIFORM_RANGE = 1 << UNIFORM_BITS


def _lowbias32(x, xp):
    x = x ^ (x >> 16)
    x = x * xp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * xp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def uniform_bits(seed, request, counter, xp=np):
    """24-bit uniform integers; arguments broadcast and wrap to uint32. The (seed, request)
    part of the hash is taken before broadcasting against ``counter``, so a seat's many future
    passes cost one hash round each."""
    u32 = xp.uint32

    def word(a):  # at least 1-d: numpy warns on wrapping scalar arithmetic, not on arrays
        return xp.atleast_1d(xp.asarray(a)).astype(u32)

    x = _lowbias32(word(seed) ^ u32(0x9E3779B9), xp)
    x = _lowbias32(x ^ word(request), xp)
    x = _lowbias32(x ^ (word(counter) * u32(0x85EBCA6B)), xp)
    return (x >> (32 - UNIFORM_BITS)).astype(xp.int32)


def table_thresholds(at_least) -> np.ndarray:
    """Integer thresholds T_j = round(P(A >= j) x 2**24) of a per-position table of the chance
    that at least j drafted tokens are accepted (non-increasing in j): one draw u accepts the
    first A drafted tokens, A = #{j <= k : u < T_j}."""
    return np.array([int(round(float(p) * UNIFORM_RANGE)) for p in at_least], dtype=np.int32)


def acceptance_thresholds(probability: float, k_max: int) -> np.ndarray:
    """``table_thresholds`` of P(A >= j) = p**j, j = 1..k_max: a geometric count truncated at k
    (the leading run of independent acceptances, from a single draw)."""
    return table_thresholds([float(probability) ** j for j in range(1, k_max + 1)])
