"""Prefix caching, chunked prefill and the token budget (docs/model.md: "Prefix caching",
"Chunked prefill", "Token budget"): how much of each prompt a pass prefills. A cache hit shortens
a prefill and a budget spreads it over passes, so the two share one slot of the state (each
seat's prompt tokens still to prefill, and the cached prefixes) and compile in together for a
batch in which some design uses either. They add O(S^2 + S x MAX_PREFIXES) per pass (who shares
whose prefix, who prefills first). The twin's rule: ``sweep.twin.prefills``.

The rules' results the hooks read (``ra``, ``ad``, ``ps``, ``tk``) are those of
``scheduling.readmission``, ``scheduling.admission``, ``passes.the_pass`` and
``passes.tokens``."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.engine.arith import ceil_div, exclusive_cumsum
from sweep.engine.features.plain import Lookup, Plain
from sweep.engine.params import EngineParams
from sweep.engine.state import EngineState, Seats, itl_bin
from sweep.study.workload import MAX_PREFIXES, Requests

NAME = "prefills"


class Prefills(NamedTuple):
    """The feature's slot of the state."""

    todo: jax.Array  # i32[S] prompt tokens still to prefill (0: decoding)
    cached: jax.Array  # bool[MAX_PREFIXES] the prefix's KV is cached
    stamp: jax.Array  # i32[MAX_PREFIXES] pass of the last prefill that referenced it
    lookups: jax.Array  # i32 prefills of a sequence with a prefix, under prefix caching
    hits: jax.Array  # i32 of which found it cached


def uses(p: EngineParams, r=None) -> bool:
    """Whether any design of a (concrete) batch caches prefixes, chunks prefills or has a
    token budget."""
    return bool(np.any(np.asarray(p.prefix_cache))
                or np.any(np.asarray(p.prefill_chunk_tokens) > 0)
                or np.any(np.asarray(p.max_num_batched_tokens) > 0))


def init(n: int, seats: int) -> Prefills:
    i32 = jnp.int32
    return Prefills(todo=jnp.zeros((seats,), i32), cached=jnp.zeros((MAX_PREFIXES,), bool),
                    stamp=jnp.zeros((MAX_PREFIXES,), i32), lookups=i32(0), hits=i32(0))


def _slot(s: EngineState) -> Prefills:
    return s.features[NAME]


#: Prefill budget per pass when chunking is off: more than any pass can hold.
NO_CHUNK = 2**30


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
                seats.running & (_slot(s).todo > 0))


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
                      _slot(s).todo[None, :], 0).sum(axis=1)
    mid_chunk = jnp.where(x.mid & work, jnp.clip(total - ahead, 0, _slot(s).todo), 0)
    return Budget(mid_chunk, total - mid_chunk.sum())


def readmission_lookup(r: Requests, s: EngineState, x: Held, index, length, need) -> Lookup:
    """The preempted seat ``index`` recomputing ``length`` tokens in ``need`` blocks."""
    pfx = x.pfx[index]
    slot = jnp.maximum(pfx, 0)
    hit = (pfx >= 0) & _slot(s).cached[slot]
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
    hit = (pfx >= 0) & _slot(s).cached[slot]
    earlier = ((pfx[None, :] == pfx[:, None]) & (index[None, :] < index[:, None])).any(1)
    own = need - jnp.where(pfx >= 0, x.pb, 0)
    # A transferred admission (a decode pool's) has nothing to prefill.
    todo = jnp.where(p.transferred, 0, prompt - jnp.where(hit, r.prefix_tokens, 0))
    return Lookup(jnp.where((pfx >= 0) & (x.refs[slot] | earlier), own, need), own, hit, todo)


def chunks(s: EngineState, seats: Seats, x: Held, b: Budget, ra, ad):
    """Rule 6's prefills: each seat's prompt tokens left before the pass, its chunk, and the
    chunk's query-key pairs, after the tokens already in its KV."""
    todo = jnp.where(ad.new, ad.todo, jnp.where(ra.seat, ra.todo,
                                                jnp.where(x.mid, _slot(s).todo, 0)))
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
    old = _slot(s)
    stamp = jnp.where((hot & starts[:, None]).any(axis=0), s.passes, old.stamp)
    cached = old.cached | (hot & filled[:, None]).any(axis=0)
    refs = (hot & ~c.done[:, None]).any(axis=0)
    evict = _evict(cached, refs, stamp,
                   p.total_blocks - c.blocks.sum() - x.pb * refs.sum(dtype=jnp.int32), x.pb)
    hits = (ad.new & ad.hit) | (ra.seat & ra.hit)
    slot = Prefills(todo=jnp.where(c.done | ~alive, 0, tk.todo).astype(jnp.int32),
                    cached=cached & ~evict, stamp=stamp,
                    lookups=old.lookups + starts.sum(dtype=jnp.int32),
                    hits=old.hits + (hits & starts).sum(dtype=jnp.int32))
    return slot, x.pb * hot.any(axis=0).sum(dtype=jnp.int32)


def run_prefix_blocks(pfx, pb, alive):
    """Blocks of the prefixes held at each pass of a decode run (``alive``: [S, passes]): each
    prefix held by a sequence alive at the pass counts once."""
    refs = jnp.einsum("sc,sj->cj", onehot(pfx).astype(jnp.float32),
                      alive.astype(jnp.float32)) > 0
    return pb * refs.sum(axis=0, dtype=jnp.int32)


class Hooks(Plain):
    """The hooks of prefix caching, chunked prefill and the token budget."""

    #: A decode run is never computed in closed form: its seats' prefixes are counted per pass.
    closed_form_runs = False

    @staticmethod
    def prefill_chunk(p):
        return smallest_chunk(p)

    @staticmethod
    def prefix_counts(s):
        return _slot(s).lookups, _slot(s).hits

    @staticmethod
    def view(p, r, s, seats) -> Held:
        return held(p, r, s, seats)

    @staticmethod
    def budget(c, decoding, work) -> Budget:
        return budget(c.p, c.s, c.x, decoding, work)

    @staticmethod
    def free(x, free):
        return free - x.blocks

    @staticmethod
    def growth(x, seats, need):
        return seats.running & ~x.mid, need - x.shared

    @staticmethod
    def readmission_lookup(c, index, length, need) -> Lookup:
        return readmission_lookup(c.r, c.s, c.x, index, length, need)

    @staticmethod
    def within_budget(b, ok):
        return ok & (b.left > 0)

    @staticmethod
    def take(b, ok, todo):
        chunk = jnp.minimum(todo, b.left)
        return chunk, b.left - jnp.where(ok, chunk, 0)

    @staticmethod
    def window_lookup(c, ra, need, prompt, ok):
        look = window_lookup(c.p, c.r, c.s, c.x, c.seats.index, need, prompt)
        ahead = exclusive_cumsum(look.todo)
        return look, ok & (ahead < ra.left), ahead

    @staticmethod
    def admitted(ra, admit, look, ahead, slot, ad):
        return ad._replace(overflow=ad.overflow & (jnp.where(admit, look.todo, 0).sum() < ra.left),
                           hit=look.hit[slot], todo=look.todo[slot],
                           chunk=jnp.clip(ra.left - ahead[slot], 0, look.todo[slot]))

    @staticmethod
    def prefills(c, b, ra, ad, load):
        return chunks(c.s, c.seats, c.x, b, ra, ad)

    @staticmethod
    def completes(c, g, ra, ad, ps, n_decode):
        todo, done = completes(c.x, g.work, ra, ad, ps)
        stalls = done & ~ad.new & (c.s.seat_gen > 0)
        gaps = jnp.concatenate([itl_bin(ps.dt)[None], itl_bin(ps.t_end - c.s.seat_last)])
        return todo, done, gaps, jnp.concatenate([n_decode[None], stalls.astype(jnp.int32)])

    @staticmethod
    def first_tokens(c, ad, ps, tk, seat_req):
        """A first token comes when a prefill completes, chunks later perhaps."""
        s, n, nseat = c.s, c.r.arrival.shape[0], c.seats.index.shape[0]
        gen = jnp.where(ad.new, 0, s.seat_gen) + tk.emitted
        first_tok = tk.completes & (jnp.where(ad.new, 0, s.seat_gen) == 0)
        return gen, s.first.at[jnp.where(first_tok, seat_req, n + nseat)].set(ps.t_end,
                                                                            mode="drop")

    @staticmethod
    def cache_after(c, ra, ad, tk, done):
        slot, prefixes = cache_after(c.p, c.r, c.s, c.seats, c.x, ra, ad, tk, done)
        return done._replace(features={**done.features, NAME: slot},
                             in_use=done.in_use + prefixes)

    @staticmethod
    def run_ok(s, ok):
        """No run starts while a seat is mid-prefill."""
        return ok & ~((_slot(s).todo > 0) & (s.seat_req >= 0)).any()

    @staticmethod
    def run_view(p, r, s, running):
        return prefix_of(p, r, s.seat_req, running), prefix_blocks(p, r)

    @staticmethod
    def run_need(v, need):
        pfx, pb = v
        return need - jnp.where(pfx >= 0, pb, 0)[:, None]

    @staticmethod
    def run_free(v, s, free):
        """Growth must fit beside every cached prefix, so a run never evicts one."""
        return free - v[1] * _slot(s).cached.sum(dtype=jnp.int32)

    @staticmethod
    def run_in_use(v, alive, in_use):
        return in_use + run_prefix_blocks(*v, alive)
