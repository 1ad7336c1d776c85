"""Counter-based integer hash RNG for speculative acceptance, shared by the engine and the twin.

A draw is a pure function of (seed, request, tokens already generated, draft position), so a
request sees the same acceptance sequence in every design with the same seed (common random
numbers), and both simulators get bit-identical draws. The hash is Chris Wellons' ``lowbias32``;
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


def uniform_bits(seed, request, generated, position, xp=np):
    """24-bit uniform integers (at least 1-d); arguments broadcast and wrap to uint32."""
    u32 = xp.uint32
    s, r, g, p = xp.broadcast_arrays(
        *(xp.atleast_1d(xp.asarray(a)).astype(u32) for a in (seed, request, generated, position)))
    x = _lowbias32(s ^ u32(0x9E3779B9), xp)
    x = _lowbias32(x ^ r, xp)
    x = _lowbias32(x ^ (g * u32(0x85EBCA6B)), xp)
    x = _lowbias32(x ^ (p * u32(0xC2B2AE35)), xp)
    return (x >> (32 - UNIFORM_BITS)).astype(xp.int32)


def acceptance_threshold(probability: float) -> int:
    """Integer threshold t with P(draw < t) = probability (to 2**-24)."""
    return int(round(float(probability) * UNIFORM_RANGE))
