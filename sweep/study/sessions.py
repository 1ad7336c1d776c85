"""Sessions (docs/model.md "Sessions"): each a sequence of turns whose prompt is the session's
context so far (earlier prompts and answers) plus its new tokens. A session's turns are rows of
the requests table, in session order and turn order, packed at its start (padding after); each
turn is one cache node covering its new part of the context, and its path is its session's nodes
up to its own, so the next turn finds the earlier turns' prompts cached (while they are kept).
Every turn's arrival here is its session's start (at a rate; 0 in a closed loop), a bound: when
the later turns are sent is the engine's, ``sweep.engine.features.sessions``."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from sweep.errors import FieldError

#: Distributions a session's turn count may take: the requests table is sized by its largest.
TURN_DISTS = ("fixed", "uniform")


def max_turns(turns) -> int:
    """The most turns a session of the length table ``turns`` may have."""
    return int(turns.high) if turns.dist == "uniform" else max(1, int(round(turns.mean)))


def check(wl) -> None:
    """A workload of sessions' own combinations (``Workload.validate``)."""
    if (wl.turns is None) != (wl.turn_tokens is None):
        raise FieldError("workload.turns", "turns and turn_tokens make a workload of sessions "
                         "together", "both, or neither")
    if wl.turns is None:
        return
    if wl.trace is not None:
        raise FieldError("workload.turns", "a trace's requests are replayed as they are",
                         "unset with a trace")
    if wl.turns.dist not in TURN_DISTS:
        raise FieldError("workload.turns.dist", "a session's turns need a bound",
                         ", ".join(TURN_DISTS), wl.turns.dist)
    for key, bad in (("warmup_requests", wl.warmup_requests > 0),
                     ("prefix_share", wl.prefix_share > 0)):
        if bad:
            raise FieldError(f"workload.{key}", "not with sessions (a session's context is its "
                             "own prefix)", "0 with turns", getattr(wl, key))


def table(n: int, length: int, nodes: int, starts, turns, first_prompt, new_tokens, output,
          sessions, t_max, limit):
    """The rows of ``sessions`` sessions of at most ``t_max`` turns (traced; 0: none) in ``n``
    slots: each session's slots are ``t_max`` in a row before packing. ``turns``: i32[n] turn
    counts (session m's is ``turns[m]``), ``first_prompt`` i32[n] its first prompt,
    ``new_tokens`` and ``output`` i32[n] each slot's new user tokens and answer. Turn k's
    prompt is P_k = P_(k-1) + O_(k-1) + U_k; a session ends before the first turn whose prompt
    passes ``limit`` (the context less one output token). Returns the packed rows' (real,
    prompt, output, turn (1-based; 0: padding), path [n, length], node start and end
    [nodes], arrival: the session's, ``starts[m]`` (f64[n]; +inf: no such session))."""
    t = jnp.maximum(t_max, 1)
    q = jnp.arange(n, dtype=jnp.int32)
    m, k = q // t, q % t
    head = m * t  # the session's first slot
    inc = jnp.where(k == 0, first_prompt[jnp.minimum(m, n - 1)].astype(jnp.int64),
                    output[jnp.maximum(q - 1, 0)].astype(jnp.int64) + new_tokens)
    total = jnp.cumsum(inc)
    prompt = total - total[head] + inc[head]
    begins = starts[jnp.minimum(m, n - 1)]
    real = ((t_max > 0) & (m < sessions) & jnp.isfinite(begins)
            & (k < turns[jnp.minimum(m, n - 1)]) & (prompt <= limit))
    # A turn is real only after every earlier one of its session (prompts only grow).
    dest = jnp.cumsum(real, dtype=jnp.int32) - 1
    at = jnp.where(real, dest, n)
    j = jnp.arange(length, dtype=jnp.int32)
    slot = jnp.minimum(head[:, None] + j[None, :], n - 1)
    path = jnp.where((j[None, :] <= k[:, None]) & real[:, None], dest[slot], -1)

    def packed(x, fill):
        return jnp.full((n,) + x.shape[1:], fill, x.dtype).at[at].set(x, mode="drop")

    node_at = jnp.where(real, dest, nodes)
    start = jnp.zeros((nodes,), jnp.int32).at[node_at].set((prompt - inc).astype(jnp.int32),
                                                            mode="drop")
    end = jnp.zeros((nodes,), jnp.int32).at[node_at].set(prompt.astype(jnp.int32), mode="drop")
    out = jnp.minimum(output, limit + 1 - prompt).astype(jnp.int32)
    return (packed(real, False), packed(prompt.astype(jnp.int32), 1), packed(out, 1),
            packed(k + 1, 0), packed(path, -1), start, end, packed(begins, jnp.inf))


def draw_keys(seed):
    """The sessions' own draws' keys (turn counts, new tokens), folded in apart from the
    requests' so that every other draw keeps its bits."""
    base = jax.random.fold_in(jax.random.PRNGKey(seed), 5)
    return jax.random.split(base, 2)


def shape(wl) -> tuple[int, int]:
    """The (path length, nodes) a workload of sessions needs: its longest session's turns, and a
    node per row (a power of two: few compiled shapes)."""
    if wl.turns is None:
        return 0, 0
    return max_turns(wl.turns), 1 << max(int(wl.capacity) - 1, 1).bit_length()


def params(wl, par) -> tuple:
    """The sampler's arguments of a workload's sessions (``par``: a length table's array form):
    turn counts, new tokens, most turns (0: no sessions) and the sessions."""
    if wl.turns is None:
        dummy = par(type(wl.prompt_tokens)("fixed", 1.0))
        return dummy, dummy, np.int32(0), np.int32(0)
    count = wl.num_requests if wl.num_requests is not None else np.iinfo(np.int32).max
    return (par(wl.turns), par(wl.turn_tokens), np.int32(max_turns(wl.turns)), np.int32(count))

