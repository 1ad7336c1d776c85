"""Mixed fleets: replicas of several designs behind one router that sends each server a share
of the load in proportion to its capacity (docs/model.md "Mixed fleets")."""
from __future__ import annotations

import dataclasses
from typing import Callable

from sweep.errors import FieldError
from sweep.study.design import Design


@dataclasses.dataclass(frozen=True)
class MixedFleet:
    """``members[j]`` is a design with its fleet's replicas (each a server); ``weights[j]``
    the requests/s one of its servers carries within the brief (its capacity per replica).
    The execution reads it as it reads a design: the properties below are the fleet's."""

    members: tuple
    weights: tuple

    def validate(self) -> None:
        if len(self.members) < 2 or len(self.weights) != len(self.members):
            raise FieldError("fleet", "a mixed fleet needs a weight for each of its designs",
                             "two or more designs", len(self.members))
        if any(not w > 0 for w in self.weights):
            raise FieldError("fleet", "a server's capacity weights its share of the load",
                             "positive weights", self.weights)
        for m in self.members:
            m.validate()
            if m.disaggregated:
                raise FieldError("fleet", "a member is one or more whole servers",
                                 "designs without prefill/decode pools", m)
        if len({m.context_limit for m in self.members}) > 1:
            raise FieldError("fleet", "one workload serves every member",
                             "designs of one context limit",
                             sorted({m.context_limit for m in self.members}))

    def replace(self, **changes) -> "MixedFleet":
        """Every member with ``changes`` (a seed's drawn factors, say)."""
        return self.each(lambda m: m.replace(**changes))

    def each(self, fn: Callable[[Design], Design]) -> "MixedFleet":
        return MixedFleet(tuple(fn(m) for m in self.members), self.weights)

    @property
    def replicas(self) -> int:
        return sum(m.replicas for m in self.members)

    @property
    def servers(self) -> int:
        return self.replicas

    @property
    def seats(self) -> int:
        return max(m.seats for m in self.members)

    @property
    def draft_tokens(self) -> int:
        return max(m.draft_tokens for m in self.members)

    @property
    def batching(self) -> str:
        return self.members[0].batching

    @property
    def context_limit(self) -> int:
        return self.members[0].context_limit

    @property
    def usd_per_hour(self) -> float:
        return sum(m.usd_per_hour for m in self.members)

    @property
    def total_gpus(self) -> int:
        return sum(m.total_gpus for m in self.members)


def members(design) -> list[Design]:
    """The designs a simulation runs: a mixed fleet's members, or the design itself."""
    return list(design.members) if isinstance(design, MixedFleet) else [design]


def each(design, fn: Callable[[Design], Design]):
    """``fn`` of a design, or of each member of a mixed fleet."""
    return design.each(fn) if isinstance(design, MixedFleet) else fn(design)
