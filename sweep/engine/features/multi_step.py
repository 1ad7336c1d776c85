"""Multi-step scheduling (docs/model.md, "Multi-step scheduling"): vLLM V0's
``--num-scheduler-steps k`` (``num_scheduler_steps``) schedules once per block of ``k`` passes.
Only a block's first pass admits or readmits a request, and only it spends the pass's fixed host
time (``overhead_ms``: the scheduler and the inputs' preparation run once per block; vLLM's RFC
#6854). A server with no seat running (none occupied, or every one preempted) schedules at
once, starting a block. The slot holds the next pass's place in its block. The twin's rule is
``sweep.twin.multi_step``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.features.plain import Plain

NAME = "multi_step"


class Block(NamedTuple):
    place: jax.Array  # i32 the next pass's place in its block (0: it schedules)


def uses(p, r) -> bool:
    """Whether any design of a (concrete) batch schedules once per several passes."""
    return bool(np.any(np.asarray(p.num_scheduler_steps) > 1))


def init(n: int, seats: int, nodes: int) -> Block:
    return Block(jnp.int32(0))


class Hooks(Plain):
    """Admissions and the fixed host time on a block's first pass only."""

    @staticmethod
    def schedules(p, s, seats):
        return (s.features[NAME].place == 0) | ~seats.running.any()

    @staticmethod
    def unscheduled(p, dt, sched):
        return dt - jnp.where(sched, 0.0, p.timing.overhead_s)

    @staticmethod
    def scheduled(p, features: dict, sched, work) -> dict:
        place = jnp.where(sched, 0, features[NAME].place)
        nxt = jnp.where(work, (place + 1) % p.num_scheduler_steps, features[NAME].place)
        return {**features, NAME: Block(nxt)}

    @staticmethod
    def run_schedules(p, s, j):
        return (s.features[NAME].place + j) % p.num_scheduler_steps == 0

    @staticmethod
    def ran(p, features: dict, m) -> dict:
        return {**features, NAME: Block((features[NAME].place + m) % p.num_scheduler_steps)}
