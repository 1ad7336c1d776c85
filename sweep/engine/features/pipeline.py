"""Pipeline parallelism's pass time (docs/model.md, "Pipeline parallelism"): stages holding
shares of the layers, a pass's sequences going through them in micro-batches. Only a batch with
such a design compiles this form in (``timing.staged``); the plain hooks time a pass on one
stage (``timing.unstaged``, the same figures to the bit for the others). The twin times every
pass with ``timing.staged``."""
from __future__ import annotations

import numpy as np

from sweep.engine.features.plain import Plain
from sweep.physics.timing import staged

NAME = "pipeline"


def uses(p, r) -> bool:
    """Whether any design of a (concrete) batch has pipeline stages."""
    return bool(np.any(np.asarray(p.timing.pp) > 1.5))


def init(n: int, seats: int, nodes: int) -> None:
    return None


class Hooks(Plain):
    """A pass timed through the stages."""

    staged = staticmethod(staged)
