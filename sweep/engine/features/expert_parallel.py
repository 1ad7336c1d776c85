"""Expert parallelism's pass time (docs/model.md, "Expert parallelism"): routed experts sharded
over the GPUs, each pass's tokens sent to their experts and back. Only a batch with such a
design compiles this form of the pass time in (``timing.pass_time``); the plain hooks time a
pass without it (``timing.dense_pass_time``, the same figures to the bit for the others). The
twin times every pass with ``timing.pass_time``."""
from __future__ import annotations

import numpy as np

from sweep.engine.features.plain import Plain
from sweep.physics.timing import pass_time

NAME = "expert_parallel"


def uses(p, r) -> bool:
    """Whether any design of a (concrete) batch shards its experts."""
    return bool(np.any(np.asarray(p.timing.ep) > 0.5))


def init(n: int, seats: int, nodes: int) -> None:
    return None


class Hooks(Plain):
    """A pass timed with expert parallelism's form."""

    pass_time = staticmethod(pass_time)
