"""Prefix caching and chunked prefill (docs/model.md: "Prefix caching", "Chunked prefill",
"Token budget"): their part of each rule, and their state (``EngineState.ext``). The engine
compiles them in only for a batch in which some design uses them (``uses_extensions``); without
them every rule is exactly the plain one. They add O(S^2 + S x MAX_PREFIXES) per pass (who
shares whose prefix, who prefills first).

The rules' results they read (``ra``, ``ad``, ``ps``, ``tk``) are those of
``scheduling.readmission``, ``scheduling.admission``, ``passes.the_pass`` and
``passes.tokens``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.arith import ceil_div
from sweep.engine.params import EngineParams
from sweep.engine.state import EngineState, Extensions, Seats
from sweep.study.workload import MAX_PREFIXES, Requests

#: Prefill budget per pass when chunking is off: more than any pass can hold.
NO_CHUNK = 2**30


def uses_extensions(p: EngineParams) -> bool:
    """Whether any design of a (concrete) batch caches prefixes or chunks prefills: only then
    is the engine compiled with them, so a batch without either runs the plain rules' code."""
    return bool(np.any(np.asarray(p.prefix_cache))
                or np.any(np.asarray(p.prefill_chunk_tokens) > 0)
                or np.any(np.asarray(p.max_num_batched_tokens) > 0))


def smallest_chunk(p: EngineParams):
    """The fewest prompt tokens a pass that prefills at all may prefill (0: no limit). Under a
    token budget a seat is free or holds a prefill whenever one is due, so at most
    ``max_batch - 1`` seats decode beside it."""
    chunk, budget = p.prefill_chunk_tokens, p.max_num_batched_tokens
    left = budget - (p.max_batch - 1) * (p.draft_tokens + 1)
    return jnp.where(budget > 0, jnp.where(chunk > 0, jnp.minimum(chunk, left), left), chunk)


def onehot(pfx):
    """[S, MAX_PREFIXES]: seat s holds prefix c (pfx -1: none)."""
    return pfx[:, None] == jnp.arange(MAX_PREFIXES, dtype=jnp.int32)[None, :]


def prefix_of(p: EngineParams, r: Requests, seat_req, mask):
    """Each seat's prefix under prefix caching, for the seats of ``mask`` (-1: none)."""
    return jnp.where(p.prefix_cache & mask, r.prefix[jnp.maximum(seat_req, 0)], -1)


def prefix_blocks(p: EngineParams, r: Requests):
    """KV blocks of a prefix (``pb``)."""
    return ceil_div(r.prefix_tokens, p.block_tokens)


class Held(NamedTuple):
    """Prefixes and prefills as a pass finds them."""

    pfx: jax.Array  # i32[S] each occupied seat's prefix (-1: none)
    pb: jax.Array  # i32 blocks of a prefix
    refs: jax.Array  # bool[MAX_PREFIXES] the prefix is held by a running seat
    mid: jax.Array  # bool[S] mid-prefill: running, holds its blocks, does not decode

    @property
    def shared(self):
        """Each seat's blocks of its prefix, shared with the prefix's other holders."""
        return jnp.where(self.pfx >= 0, self.pb, 0)

    @property
    def blocks(self):
        """Blocks of the held prefixes, each counted once."""
        return self.pb * self.refs.sum(dtype=jnp.int32)


def held(p: EngineParams, r: Requests, s: EngineState, seats: Seats) -> Held:
    pfx = prefix_of(p, r, s.seat_req, seats.occupied)
    return Held(pfx, prefix_blocks(p, r), (onehot(pfx) & seats.running[:, None]).any(axis=0),
                seats.running & (s.ext.todo > 0))


class Budget(NamedTuple):
    """A pass's prefill budget, as the mid-prefill seats leave it."""

    mid_chunk: jax.Array  # i32[S] prompt tokens each mid-prefill seat prefills in the pass
    left: jax.Array  # i32 budget left for a readmission and admissions


def budget(p: EngineParams, s: EngineState, x: Held, decoding, work) -> Budget:
    """A token budget covers the ``decoding`` seats first; mid-prefill seats then take the
    pass's prefill budget, in request order (if a pass ``work``s at all)."""
    chunk, budget = p.prefill_chunk_tokens, p.max_num_batched_tokens
    total = jnp.where(chunk > 0, chunk, jnp.int32(NO_CHUNK))
    after_decodes = budget - decoding.sum(dtype=jnp.int32) * (p.draft_tokens + 1)
    total = jnp.where(budget > 0, jnp.minimum(total, after_decodes), total)
    ahead = jnp.where(x.mid[None, :] & (s.seat_req[None, :] < s.seat_req[:, None]),
                      s.ext.todo[None, :], 0).sum(axis=1)
    mid_chunk = jnp.where(x.mid & work, jnp.clip(total - ahead, 0, s.ext.todo), 0)
    return Budget(mid_chunk, total - mid_chunk.sum())


class Lookup(NamedTuple):
    """A prefill's prefix under prefix caching (rules 4 and 5)."""

    need: jax.Array  # i32 blocks it must find free: its own, and its prefix's unless held
    own: jax.Array  # i32 blocks it holds itself
    hit: jax.Array  # bool its prefix was cached at the start of the pass
    todo: jax.Array  # i32 tokens to prefill: less the prefix on a hit


def readmission_lookup(r: Requests, s: EngineState, x: Held, index, length, need) -> Lookup:
    """The preempted seat ``index`` recomputing ``length`` tokens in ``need`` blocks."""
    pfx = x.pfx[index]
    slot = jnp.maximum(pfx, 0)
    hit = (pfx >= 0) & s.ext.cached[slot]
    own = need - x.shared[index]
    return Lookup(jnp.where((pfx >= 0) & x.refs[slot], own, need), own, hit,
                  length - jnp.where(hit, r.prefix_tokens, 0))


def window_lookup(p: EngineParams, r: Requests, s: EngineState, x: Held, index, need,
                  prompt) -> Lookup:
    """The admission window's requests (``index`` 0..S-1 after ``head``), of ``prompt`` tokens
    in ``need`` blocks. Blocks of a prefix already held (by a running seat or one admitted
    before it in this pass) are shared; only a prefix cached before the pass saves its
    prefill."""
    n = r.arrival.shape[0]
    pfx = jnp.where(p.prefix_cache, r.prefix[jnp.minimum(s.head + index, n - 1)], -1)
    slot = jnp.maximum(pfx, 0)
    hit = (pfx >= 0) & s.ext.cached[slot]
    earlier = ((pfx[None, :] == pfx[:, None]) & (index[None, :] < index[:, None])).any(1)
    own = need - jnp.where(pfx >= 0, x.pb, 0)
    # A transferred admission (a decode pool's) has nothing to prefill.
    todo = jnp.where(p.transferred, 0, prompt - jnp.where(hit, r.prefix_tokens, 0))
    return Lookup(jnp.where((pfx >= 0) & (x.refs[slot] | earlier), own, need), own, hit, todo)


def chunks(s: EngineState, seats: Seats, x: Held, b: Budget, ra, ad):
    """Rule 6's prefills: each seat's prompt tokens left before the pass, its chunk, and the
    chunk's query-key pairs, after the tokens already in its KV."""
    todo = jnp.where(ad.new, ad.todo, jnp.where(ra.seat, ra.todo,
                                                jnp.where(x.mid, s.ext.todo, 0)))
    chunk = jnp.where(ad.new, ad.chunk, jnp.where(ra.seat, ra.chunk, b.mid_chunk))
    cached = jnp.where(ad.new, ad.prompt, seats.ctx) - todo
    c64 = chunk.astype(jnp.int64)
    return todo, chunk, c64 * cached + c64 * (c64 + 1) // 2


def completes(x: Held, work, ra, ad, ps):
    """Rule 7's prefills: the prompt tokens each seat has left after the pass, and whether its
    prefill completes in it (then it emits a token)."""
    todo = ps.todo - ps.prefill
    return todo, (ad.new | ra.seat | x.mid) & work & (todo == 0)


def _evict(cached, held_now, stamp, free, pb):
    """Cached prefixes that no seat holds live in free blocks: while they do not fit, the one
    with the oldest stamp (then the lowest id) is evicted."""
    evictable = cached & ~held_now
    keep = jnp.where(pb > 0, free // jnp.maximum(pb, 1), MAX_PREFIXES)
    ids = jnp.arange(MAX_PREFIXES, dtype=jnp.int32)
    older = (stamp[None, :] < stamp[:, None]) | ((stamp[None, :] == stamp[:, None])
                                                 & (ids[None, :] < ids[:, None]))
    age_rank = (evictable[None, :] & older).sum(axis=1)
    return evictable & (age_rank < evictable.sum() - keep)


def cache_after(p: EngineParams, r: Requests, s: EngineState, seats: Seats, x: Held, ra, ad,
                tk, c):
    """The state after the pass (``c``: rule 8's completion), and the blocks of the prefixes
    held then. A prefix is cached once a sequence holding it has prefilled it; its stamp is the
    pass of the last prefill that looked it up."""
    alive = (c.seat_req >= 0) & ~c.seat_pre
    pfx = prefix_of(p, r, c.seat_req, alive)
    hot = onehot(pfx)
    filled = jnp.where(ad.new, ad.prompt, seats.ctx) - tk.todo >= r.prefix_tokens
    starts = (ad.new | ra.seat) & (pfx >= 0)
    stamp = jnp.where((hot & starts[:, None]).any(axis=0), s.passes, s.ext.stamp)
    cached = s.ext.cached | (hot & filled[:, None]).any(axis=0)
    refs = (hot & ~c.done[:, None]).any(axis=0)
    evict = _evict(cached, refs, stamp,
                   p.total_blocks - c.blocks.sum() - x.pb * refs.sum(dtype=jnp.int32), x.pb)
    hits = (ad.new & ad.hit) | (ra.seat & ra.hit)
    ext = Extensions(todo=jnp.where(c.done | ~alive, 0, tk.todo).astype(jnp.int32),
                     cached=cached & ~evict, stamp=stamp,
                     lookups=s.ext.lookups + starts.sum(dtype=jnp.int32),
                     hits=s.ext.hits + (hits & starts).sum(dtype=jnp.int32))
    return ext, x.pb * hot.any(axis=0).sum(dtype=jnp.int32)


def run_prefix_blocks(pfx, pb, alive):
    """Blocks of the prefixes held at each pass of a decode run (``alive``: [S, passes]): each
    prefix held by a sequence alive at the pass counts once."""
    refs = jnp.einsum("sc,sj->cj", onehot(pfx).astype(jnp.float32),
                      alive.astype(jnp.float32)) > 0
    return pb * refs.sum(axis=0, dtype=jnp.int32)
