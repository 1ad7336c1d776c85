"""Token-length distributions of a workload's prompts and outputs, and the same tables as pauses
in seconds (``think_time_s``), with their samplers."""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp

from sweep.errors import FieldError

DISTS = ("fixed", "exponential", "uniform", "lognormal")
#: A length table's keys; each distribution uses some of them (the others are refused).
LENGTH_KEYS = ("dist", "mean", "low", "high", "sigma")
LENGTH_USES = {"fixed": ("mean",), "exponential": ("mean",), "uniform": ("low", "high"),
               "lognormal": ("mean", "sigma")}
MAX_SIGMA = 5.0  # lognormal log-space standard deviation: beyond it the tail is all clipping
#: A pause table's columns beside the key's own (its mean pause), after every other column.
PAUSE_KEYS = ("dist", "low", "high", "sigma")


def _dist_and_sigma(x, key: str) -> None:
    """The checks a length table and a pause table share: a known distribution, and a
    lognormal's sigma."""
    if x.dist not in DISTS:
        raise FieldError(f"{key}.dist", f"unknown distribution {x.dist!r}", ", ".join(DISTS),
                         x.dist)
    if x.dist == "lognormal" and not (math.isfinite(x.sigma) and 0 < x.sigma <= MAX_SIGMA):
        raise FieldError(f"{key}.sigma", f"must be in (0, {MAX_SIGMA:g}], got {x.sigma}",
                         value=x.sigma)


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
        """``FieldError`` naming ``key`` (e.g. ``workload.prompt_tokens``) or a key under it."""
        _dist_and_sigma(self, key)
        if self.dist == "uniform":
            if not (1 <= self.low <= self.high):
                raise FieldError(key, f"uniform needs integers 1 <= low <= high, got "
                                      f"low={self.low}, high={self.high}")
        elif not (math.isfinite(self.mean) and self.mean >= 1):
            raise FieldError(f"{key}.mean", f"must be a finite number >= 1, got {self.mean}",
                             value=self.mean)


@dataclass(frozen=True)
class Pauses:
    """A distribution of pauses in seconds: a length table's distributions and keys, but real
    numbers >= 0 drawn as they are (``uniform``: any value in [``low``, ``high``]), never
    rounded, since a pause is not a count of tokens."""

    dist: str = "exponential"
    mean: float = 0.0
    low: float = 0.0
    high: float = 0.0
    sigma: float = 1.0

    def validate(self, key: str) -> None:
        """``FieldError`` naming ``key`` (``workload.think_time_s``) or a key under it."""
        _dist_and_sigma(self, key)
        if self.dist == "uniform":
            if not (math.isfinite(self.high) and 0 <= self.low <= self.high):
                raise FieldError(key, f"uniform needs 0 <= low <= high seconds, got "
                                      f"low={self.low}, high={self.high}")
        elif not (math.isfinite(self.mean) and self.mean >= 0):
            raise FieldError(f"{key}.mean", f"must be a finite number >= 0 seconds, got "
                                            f"{self.mean}", value=self.mean)

    @property
    def average(self) -> float:
        """The mean pause (a uniform's midpoint)."""
        return (self.low + self.high) / 2 if self.dist == "uniform" else float(self.mean)


def length_columns(key: str, x: Lengths) -> dict:
    """The results columns of ``x`` as the length key ``key`` (``prompt_tokens``): every table
    key, None where its distribution does not use it (all None where ``x`` is unset)."""
    if x is None:
        return dict.fromkeys(f"{key}_{k}" for k in LENGTH_KEYS)
    uses = LENGTH_USES[x.dist]
    cols = {f"{key}_{k}": (getattr(x, k) if k == "dist" or k in uses else None)
            for k in LENGTH_KEYS}
    for k in ("mean", "sigma"):
        if cols[f"{key}_{k}"] is not None:
            cols[f"{key}_{k}"] = float(cols[f"{key}_{k}"])
    return cols


def pause_columns(key: str, x: float | Pauses | None) -> dict:
    """The results columns of the pause key ``key`` (``think_time_s``) set to ``x``: the mean
    pause under the key, and a table's other keys under ``key_dist`` and so on (None for a
    number, or where its distribution does not use them)."""
    cols = dict.fromkeys([key] + [f"{key}_{k}" for k in PAUSE_KEYS])
    if isinstance(x, Pauses):
        cols[key] = x.average
        cols.update({f"{key}_{k}": (x.dist if k == "dist" else float(getattr(x, k)))
                     for k in PAUSE_KEYS if k == "dist" or k in LENGTH_USES[x.dist]})
    elif x is not None:
        cols[key] = float(x)
    return cols


def draws(key, par, n: int, uniform):
    """``n`` draws of the distribution ``par`` (its array form: kind, mean, low, high, sigma),
    ``uniform(u, low, high)`` turning a uniform draw into a ``uniform`` one. Every distribution
    is drawn and one is selected, so the kind is data, not a compile-time constant (a draw
    costs far less than a recompilation)."""
    kind, mean, low, high, sigma = par
    e = jax.random.exponential(key, (n,), jnp.float64)
    u = jax.random.uniform(key, (n,), jnp.float64)
    z = jax.random.normal(key, (n,), jnp.float64)
    return jnp.select([kind == 0, kind == 1, kind == 2],
                      [jnp.full((n,), mean), e * mean, uniform(u, low, high)],
                      jnp.exp(jnp.log(mean) - 0.5 * sigma**2 + sigma * z))


def lengths(key, par, n: int, limit):
    """Token lengths: integers, ``uniform`` on low..high inclusive, in [1, ``limit``]."""
    x = draws(key, par, n, lambda u, low, high: low + jnp.floor(u * (high - low + 1)))
    return jnp.clip(jnp.round(x), 1, limit).astype(jnp.int32)


def pauses(key, par, n: int):
    """Pauses in seconds (``Pauses``): real numbers >= 0 as drawn."""
    return draws(key, par, n, lambda u, low, high: low + u * (high - low))
