"""SGLang's admission (docs/model.md, "SGLang's admission"): a waiting request is admitted only
where the KV blocks of its prompt and of its whole output (up to ``engines.CLIP_NEW_TOKENS``)
fit beside a reservation for the running requests' outputs still to come: their sum times
``engines.new_token_ratio`` of the passes since the start or the last preemption, which the
slot dates. The twin's rule is ``sweep.twin.reservation``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.arith import ceil_div
from sweep.engine.features.plain import Plain
from sweep.physics.engines import CLIP_NEW_TOKENS, new_token_ratio

NAME = "reservation"


class Since(NamedTuple):
    passes: jax.Array  # i32 the pass count at the last preemption (0: none yet)


def uses(p, r) -> bool:
    """Whether any design of a (concrete) batch is served by an engine that reserves."""
    return bool(np.any(np.asarray(p.reserves)))


def init(n: int, seats: int, nodes: int) -> Since:
    return Since(jnp.int32(0))


class Hooks(Plain):
    """Admission beside the room kept for the running outputs."""

    @staticmethod
    def reserved(c, prompt, output):
        p, s, seats = c.p, c.s, c.seats
        bt = p.block_tokens
        whole = ceil_div(prompt + jnp.minimum(output, CLIP_NEW_TOKENS), bt)
        extra = jnp.maximum(whole - ceil_div(prompt + 1, bt), 0)
        to_come = jnp.where(seats.running, s.seat_output - s.seat_gen, 0).sum(dtype=jnp.int32)
        ratio = new_token_ratio((s.passes - s.features[NAME].passes).astype(jnp.float64), jnp)
        held = jnp.ceil(ratio * to_come.astype(jnp.float64) / bt.astype(jnp.float64))
        # A server with nothing running admits as if it kept no room: SGLang's pool holds a
        # whole context, so a lone request always fits; a smaller cache here would never admit.
        return (jnp.where(p.reserves & seats.running.any(), extra, 0),
                jnp.where(p.reserves, held.astype(jnp.int32), 0))

    @staticmethod
    def preempted(p, features: dict, s, preempt) -> dict:
        return {**features, NAME: Since(jnp.where(preempt, s.passes, features[NAME].passes))}
