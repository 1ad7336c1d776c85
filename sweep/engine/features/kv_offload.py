"""A CPU KV tier (docs/model.md, "CPU KV tier"): ``kv_offload_gib`` of host memory per server
below the prefix cache (``prefills``). Every node the GPUs cache is stored in host memory too
(as vLLM's offloading connector stores each computed block), which drops its least recently
used nodes (the prefix cache's order) while they do not fit; a lookup finds a node in either
tier, and a pass loads its prefills' host-only nodes over the GPUs' host links while it
computes, taking the longer of the two. Its state is a flag per cache node; a pass reuses
the GPU eviction's order of the K nodes. The twin's rule: ``sweep.twin.kv_offload``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.features.plain import Plain
from sweep.engine.features.prefills import evict_lru
from sweep.engine.params import EngineParams

NAME = "kv_offload"


class Host(NamedTuple):
    """The feature's slot of the state."""

    held: jax.Array  # bool[K] the node's KV is in host memory


def uses(p: EngineParams, r=None) -> bool:
    """Whether any design of a (concrete) batch has a CPU KV tier."""
    return bool(np.any(np.asarray(p.host_blocks) > 0))


def init(n: int, seats: int, nodes: int) -> Host:
    return Host(held=jnp.zeros((nodes,), bool))


class Hooks(Plain):
    """The hooks of a CPU KV tier."""

    @staticmethod
    def tiers(s, cached):
        host = s.features[NAME].held
        return cached | host, host & ~cached

    @staticmethod
    def load_time(c, ra, ad):
        """Every prefill starting in the pass loads its host-only nodes (two prefills of one
        node in a pass load it twice), over the links at once."""
        tokens = (jnp.where(ad.new, ad.loaded, 0).sum(dtype=jnp.int64)
                  + jnp.where(ra.ok, ra.loaded, 0).astype(jnp.int64))
        return tokens.astype(jnp.float64) * c.p.load_s_per_token

    @staticmethod
    def tier_after(c, order, computed, done):
        host = c.s.features[NAME].held | computed
        drop = evict_lru(order, host, c.p.host_blocks, c.x.nb)
        return done._replace(features={**done.features, NAME: Host(host & ~drop)})
