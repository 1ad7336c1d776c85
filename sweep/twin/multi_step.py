"""The twin's multi-step scheduling (docs/model.md, "Multi-step scheduling"; the engine's:
``sweep.engine.features.multi_step``): vLLM V0 schedules once per block of ``num_scheduler_steps``
passes. Only a block's first pass admits or readmits, and only it spends the pass's fixed host
time; a server with no seat running (none occupied, or every one preempted) schedules at
once."""
from __future__ import annotations

import numpy as np

from sweep.twin.state import Twin


def schedules(tw: Twin) -> bool:
    """Whether this step's pass may admit and readmit requests."""
    return tw.block == 0 or all(s.preempted for s in tw.occupied.values())


def pass_time(tw: Twin, duration: np.float64, sched: bool) -> np.float64:
    """A pass that does not schedule spends no fixed host time."""
    if tw.design.num_scheduler_steps <= 1:
        return duration
    return duration - (np.float64(0.0) if sched else tw.design.timing.overhead_s)


def passed(tw: Twin, sched: bool) -> None:
    """After a pass: the next one's place in its block."""
    tw.block = ((0 if sched else tw.block) + 1) % tw.design.num_scheduler_steps
