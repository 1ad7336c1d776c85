"""Token-length distributions of a workload's prompts and outputs."""
from __future__ import annotations

import math
from dataclasses import dataclass

from sweep.errors import FieldError

DISTS = ("fixed", "exponential", "uniform", "lognormal")
#: A length table's keys; each distribution uses some of them (the others are refused).
LENGTH_KEYS = ("dist", "mean", "low", "high", "sigma")
LENGTH_USES = {"fixed": ("mean",), "exponential": ("mean",), "uniform": ("low", "high"),
               "lognormal": ("mean", "sigma")}
MAX_SIGMA = 5.0  # lognormal log-space standard deviation: beyond it the tail is all clipping


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
        if self.dist not in DISTS:
            raise FieldError(f"{key}.dist", f"unknown distribution {self.dist!r}",
                             ", ".join(DISTS), self.dist)
        if self.dist == "uniform":
            if not (1 <= self.low <= self.high):
                raise FieldError(key, f"uniform needs integers 1 <= low <= high, got "
                                      f"low={self.low}, high={self.high}")
        elif not (math.isfinite(self.mean) and self.mean >= 1):
            raise FieldError(f"{key}.mean", f"must be a finite number >= 1, got {self.mean}",
                             value=self.mean)
        if self.dist == "lognormal" and not (math.isfinite(self.sigma)
                                             and 0 < self.sigma <= MAX_SIGMA):
            raise FieldError(f"{key}.sigma", f"must be in (0, {MAX_SIGMA:g}], got {self.sigma}",
                             value=self.sigma)


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

