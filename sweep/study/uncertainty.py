"""Timing-model uncertainty: efficiency factors and acceptance drawn per seed.

A factor given as a distribution is drawn once per seed, and every design of the sweep gets the
same draw for that seed (common random numbers), so seeds vary the model's error as well as the
arrivals, and the confidence intervals and ``p_pass`` over seeds include both. A draw is the
distribution's quantile at a uniform number hashed from (seed, factor) with ``rng.uniform_bits``:
it depends on nothing else (not on the other factors, the designs or the chunking).
"""
from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

from sweep.physics.rng import UNIFORM_BITS, uniform_bits
from sweep.study.fields import UNCERTAIN

#: Factors that may be uncertain (declared with a ``draw`` stream): key -> (config section,
#: lowest, highest, lowest excluded), their declared ranges.
FACTORS = {f.key: (f.section, f.range.lo, f.range.hi, f.range.lo_open) for f in UNCERTAIN}
#: Each factor's draws' stream.
_STREAMS = {f.key: f.draw for f in UNCERTAIN}
DISTS = ("uniform", "normal")
#: The table keys each distribution takes (all required).
USES = {"uniform": ("low", "high"), "normal": ("mean", "sd", "low", "high")}
#: ``uniform_bits`` request index of the draws (far above any real request's, so the stream
#: never meets the speculative-acceptance draws); the counter picks the factor.
_STREAM = 0xFFFF_FF00


@dataclass(frozen=True)
class Uncertain:
    """``uniform`` on [low, high], or ``normal`` (mean, sd) truncated to [low, high]: drawn by
    the inverse CDF restricted to the bounds, so the bounds are never exceeded and no mass
    piles up on them."""

    dist: str
    low: float
    high: float
    mean: float | None = None
    sd: float | None = None

    def validate(self, key: str) -> None:
        """One-line ``ValueError`` naming ``key`` (e.g. ``hardware.compute_efficiency``)."""
        _, lo, hi, lo_open = FACTORS[key.split(".")[-1]]
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        for name in ("low", "high"):
            v = getattr(self, name)
            if not ((v > lo if lo_open else v >= lo) and v <= hi):
                raise ValueError(f"{key}.{name}: must be in {rng}, got {v!r}")
        if self.low > self.high:
            raise ValueError(f"{key}: low {self.low:g} > high {self.high:g}; allowed: low <= high")
        if self.dist == "normal":
            if not self.sd >= 0:
                raise ValueError(f"{key}.sd: must be >= 0, got {self.sd!r}")
            if not self.low <= self.mean <= self.high:
                raise ValueError(f"{key}.mean: {self.mean:g} is outside [low, high] = "
                                 f"[{self.low:g}, {self.high:g}]; allowed: low <= mean <= high")

    @property
    def nominal(self) -> float:
        """The value a design is validated and shown with outside the sweep: the centre."""
        return 0.5 * (self.low + self.high) if self.dist == "uniform" else self.mean

    def quantile(self, u: float) -> float:
        """The value at probability ``u`` in (0, 1)."""
        if self.dist == "uniform" or self.low == self.high:
            return self.low + u * (self.high - self.low)
        if self.sd == 0:
            return self.mean
        nd = NormalDist(self.mean, self.sd)
        a, b = nd.cdf(self.low), nd.cdf(self.high)
        return min(max(nd.inv_cdf(a + u * (b - a)), self.low), self.high)


def unit_draw(seed: int, factor: str) -> float:
    """A uniform number in (0, 1) of 48 bits from two 24-bit hash draws."""
    i = 2 * _STREAMS[factor]
    hi, lo = (int(uniform_bits(seed, _STREAM, i + j)[0]) for j in (0, 1))
    return ((hi << UNIFORM_BITS) + lo + 0.5) / 2.0 ** (2 * UNIFORM_BITS)


def draws(uncertain: dict[str, Uncertain], seed: int) -> dict[str, float]:
    """Every uncertain factor's value for ``seed``."""
    return {k: float(d.quantile(unit_draw(seed, k))) for k, d in uncertain.items()}
