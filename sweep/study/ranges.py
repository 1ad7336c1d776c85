"""A config value's allowed range, and how a refusal words it."""
from __future__ import annotations

import math
from typing import NamedTuple


class Range(NamedTuple):
    """``lo <= v <= hi`` (``lo < v`` when ``lo_open``), finite; ``says`` words the requirement
    where the bounds alone would not (``a positive number of requests/s``)."""

    lo: float
    hi: float
    lo_open: bool = False
    says: str = ""

    def holds(self, v, kind: str) -> bool:
        if isinstance(v, bool):  # (True == 1)
            return False
        if kind == "int":
            return isinstance(v, int) and self.lo <= v <= self.hi
        return (isinstance(v, (int, float)) and math.isfinite(v)
                and (v > self.lo if self.lo_open else v >= self.lo) and v <= self.hi)

    def text(self, kind: str) -> str:
        if self.says:
            return self.says
        if kind == "int":
            return f"an integer in [{self.lo}, {self.hi}]"
        return f"a number in {'(' if self.lo_open else '['}{self.lo}, {self.hi}]"
