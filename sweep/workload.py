"""Workloads: request arrivals and lengths, sampled from a JAX PRNG key.

Every design that shares a workload and a seed sees exactly the same requests (common random
numbers), so differences between designs are not sampling noise.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .numerics import prefix_sum

ARRIVALS = ("poisson", "constant")
DISTS = ("fixed", "exponential", "uniform", "lognormal")


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution. ``exponential``/``lognormal`` take ``mean`` (lognormal also
    ``sigma``, the log-space standard deviation); ``uniform`` takes integer ``low``..``high``
    inclusive; ``fixed`` takes ``mean`` as the value. Samples are rounded and clipped to
    [1, context limit]."""

    dist: str = "exponential"
    mean: float = 256.0
    low: int = 1
    high: int = 1
    sigma: float = 1.0

    def validate(self, key: str) -> None:
        if self.dist not in DISTS:
            raise ValueError(f"{key}.dist: unknown distribution {self.dist!r}; allowed: "
                             f"{', '.join(DISTS)}")
        if self.dist == "uniform":
            if not (1 <= self.low <= self.high):
                raise ValueError(f"{key}: uniform needs integers 1 <= low <= high, got "
                                 f"low={self.low}, high={self.high}")
        elif not (math.isfinite(self.mean) and self.mean >= 1):
            raise ValueError(f"{key}.mean: must be a finite number >= 1, got {self.mean}")
        if self.dist == "lognormal" and not (math.isfinite(self.sigma) and 0 < self.sigma <= 5):
            raise ValueError(f"{key}.sigma: must be in (0, 5], got {self.sigma}")


@dataclass(frozen=True)
class Workload:
    """Arrivals at ``arrival_rate`` requests/s, either for ``duration_s`` seconds or for a fixed
    ``num_requests``. The run ends ``drain_s`` after the last arrival (unserved requests are
    censored), or, with ``drain_s=None``, when every request is done."""

    arrival_rate: float = 16.0
    duration_s: float | None = 60.0
    num_requests: int | None = None
    drain_s: float | None = 60.0
    arrival: str = "poisson"
    prompt_tokens: Lengths = Lengths("exponential", 1024.0)
    output_tokens: Lengths = Lengths("exponential", 256.0)

    def validate(self) -> None:
        if self.arrival not in ARRIVALS:
            raise ValueError(f"workload.arrival: unknown arrival process {self.arrival!r}; "
                             f"allowed: {', '.join(ARRIVALS)}")
        if not (isinstance(self.arrival_rate, (int, float)) and math.isfinite(self.arrival_rate)
                and self.arrival_rate > 0):
            raise ValueError(f"workload.arrival_rate: must be a positive number of requests/s, "
                             f"got {self.arrival_rate}")
        if (self.duration_s is None) == (self.num_requests is None):
            raise ValueError("workload: give exactly one of duration_s or num_requests")
        if self.duration_s is not None and not (math.isfinite(self.duration_s)
                                                and self.duration_s > 0):
            raise ValueError(f"workload.duration_s: must be positive, got {self.duration_s}")
        if self.num_requests is not None and not (isinstance(self.num_requests, int)
                                                  and 1 <= self.num_requests <= 10_000_000):
            raise ValueError(f"workload.num_requests: must be an integer in [1, 10000000], got "
                             f"{self.num_requests}")
        if self.drain_s is not None and not (math.isfinite(self.drain_s) and self.drain_s >= 0):
            raise ValueError(f"workload.drain_s: must be >= 0 seconds, got {self.drain_s}")
        self.prompt_tokens.validate("workload.prompt_tokens")
        self.output_tokens.validate("workload.output_tokens")

    @property
    def capacity(self) -> int:
        """Static request count per simulation: a fixed count, or a Poisson count's bound
        (mean + 6 standard deviations + 16; beyond it arrivals are dropped, p < 1e-9)."""
        if self.num_requests is not None:
            return self.num_requests
        mean = self.arrival_rate * self.duration_s
        if self.arrival == "constant":
            return int(math.floor(mean)) + 1
        return int(math.ceil(mean + 6.0 * math.sqrt(mean) + 16))


class Requests(NamedTuple):
    """One simulation's requests, sorted by arrival. Padding has arrival = +inf."""

    arrival: jax.Array  # float64 [N], seconds
    prompt: jax.Array  # int32 [N], tokens
    output: jax.Array  # int32 [N], tokens (>= 1)
    end_time: jax.Array  # float64 [], when the run stops (inf: when all are done)
    seed: jax.Array  # uint32 [], for the speculative-acceptance draws


def _lengths(key, par, n: int, limit):
    """Every distribution is drawn and one is selected, so the kind is data, not a compile-time
    constant (a draw costs far less than a recompilation)."""
    kind, mean, low, high, sigma = par
    e = jax.random.exponential(key, (n,), jnp.float64)
    u = jax.random.uniform(key, (n,), jnp.float64)
    z = jax.random.normal(key, (n,), jnp.float64)
    x = jnp.select(
        [kind == 0, kind == 1, kind == 2],
        [jnp.full((n,), mean), e * mean, low + jnp.floor(u * (high - low + 1))],
        jnp.exp(jnp.log(mean) - 0.5 * sigma**2 + sigma * z))
    return jnp.clip(jnp.round(x), 1, limit).astype(jnp.int32)


def _sample(n: int, seed, poisson, rate, count, duration, drain, prompt_par, output_par,
            max_context) -> Requests:
    """Only the slot count ``n`` is static: one compilation serves every workload of that size."""
    k_arr, k_in, k_out = jax.random.split(jax.random.PRNGKey(seed), 3)
    gaps = jnp.where(poisson, jax.random.exponential(k_arr, (n,), jnp.float64), 1.0) / rate
    arrival = prefix_sum(gaps)
    arrival = jnp.where((arrival <= duration) & (jnp.arange(n) < count), arrival, jnp.inf)
    prompt = _lengths(k_in, prompt_par, n, max_context - 1)
    output = jnp.minimum(_lengths(k_out, output_par, n, max_context - 1), max_context - prompt)
    last = jnp.max(jnp.where(jnp.isfinite(arrival), arrival, 0.0))
    return Requests(arrival, prompt, output, last + drain, jnp.asarray(seed, jnp.uint32))


def _par(x: Lengths):
    return (np.int32(DISTS.index(x.dist)),) + tuple(
        np.float64(v) for v in (x.mean, x.low, x.high, x.sigma))


def sample(wl: Workload, seed: int, max_context: int) -> Requests:
    """The requests of one seed; lengths are clipped so prompt + output <= ``max_context``."""
    wl.validate()
    return sample_n(wl, seed, max_context, wl.capacity)


def sample_args(wl: Workload, seed, max_context, n: int) -> tuple:
    """The traced arguments of one workload's sampler (stack them to sample a batch)."""
    inf = np.float64(np.inf)
    return (np.uint32(seed), np.bool_(wl.arrival == "poisson"), np.float64(wl.arrival_rate),
            np.int32(wl.num_requests if wl.num_requests is not None else n),
            inf if wl.duration_s is None else np.float64(wl.duration_s),
            inf if wl.drain_s is None else np.float64(wl.drain_s),
            _par(wl.prompt_tokens), _par(wl.output_tokens), np.int32(max_context))


_sample_one = jax.jit(_sample, static_argnums=0)


@partial(jax.jit, static_argnums=0)
def sample_batch(n: int, args: tuple) -> Requests:
    """Requests of many (workload, seed) pairs at once: ``args`` is a stack of ``sample_args``."""
    return jax.vmap(partial(_sample, n))(*args)


def sample_n(wl: Workload, seed, max_context, n: int) -> Requests:
    """``sample`` into exactly ``n >= wl.capacity`` slots (the rest never arrive)."""
    return _sample_one(n, *sample_args(wl, seed, max_context, n))
