"""Prefix caching, chunked prefill and the token budget (docs/model.md: "Prefix caching",
"Chunked prefill", "Token budget"): how much of each prompt a pass prefills. A cache hit shortens
a prefill and a budget spreads it over passes, so the two share one slot of the state (each
seat's prompt tokens still to prefill, and the cache) and compile in together for a batch in
which some design uses either.

The cache holds nodes: the cacheable start of a prompt is a path of them (``Requests.path``),
one node for a shared prefix, one per block for a trace's hash ids. A node is cached once
prefilled, kept while free blocks hold it and evicted least recently used first. Its state is
a flag and a stamp per node, touched by scatters and gathers of the seats' paths; a pass adds
O(S^2 + S x L + K log K) (who prefills first; the paths; the eviction order). The twin's rule:
``sweep.twin.prefills``.

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
from sweep.study.workload import Requests

NAME = "prefills"


class Prefills(NamedTuple):
    """The feature's slot of the state."""

    todo: jax.Array  # i32[S] prompt tokens still to prefill (0: decoding)
    cached: jax.Array  # bool[K] the node's KV is cached
    stamp: jax.Array  # i32[K] pass of the last prefill whose path holds it
    lookups: jax.Array  # i32 prefills of a sequence with a path, under prefix caching
    hits: jax.Array  # i32 of which found some of it cached
    saved: jax.Array  # i64 prompt tokens those hits found cached
    got: jax.Array  # i32[N+S] tokens each request's admission found cached (S spare slots)


def uses(p: EngineParams, r=None) -> bool:
    """Whether any design of a (concrete) batch caches prefixes, chunks prefills or has a
    token budget."""
    return bool(np.any(np.asarray(p.prefix_cache))
                or np.any(np.asarray(p.prefill_chunk_tokens) > 0)
                or np.any(np.asarray(p.max_num_batched_tokens) > 0))


def init(n: int, seats: int, nodes: int) -> Prefills:
    i32 = jnp.int32
    return Prefills(todo=jnp.zeros((seats,), i32), cached=jnp.zeros((nodes,), bool),
                    stamp=jnp.zeros((nodes,), i32), lookups=i32(0), hits=i32(0),
                    saved=jnp.int64(0), got=jnp.zeros((n + seats,), i32))


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


def path_of(p: EngineParams, r: Requests, req, mask):
    """[..., L] the path of each request ``req`` under prefix caching where ``mask`` (-1:
    none)."""
    return jnp.where((p.prefix_cache & mask)[..., None], r.path[jnp.maximum(req, 0)], -1)


def node_blocks(p: EngineParams, r: Requests):
    """i32[K] each node's KV blocks: those its tokens end in, counted from the prompt's start,
    so that a path's blocks add up to those of its tokens."""
    return (ceil_div(r.node_end, p.block_tokens)
            - ceil_div(r.node_start, p.block_tokens)).astype(jnp.int32)


def _index(path):
    """A path's nodes as scatter indices: -1 becomes an index past every array, which
    ``mode="drop"`` drops."""
    return jnp.where(path >= 0, path, jnp.iinfo(jnp.int32).max)


def _mark(path, where, nodes: int):
    """bool[K] the nodes of the paths (``[..., L]``) of the rows ``where``."""
    return jnp.zeros((nodes,), bool).at[_index(jnp.where(where[..., None], path, -1))].set(
        True, mode="drop")


def path_tokens(r: Requests, path):
    """[...] the prompt tokens a path covers (0: none): its last node's end."""
    return jnp.where(path >= 0, r.node_end[jnp.maximum(path, 0)], 0).max(axis=-1)


class Held(NamedTuple):
    """Paths and prefills as a pass finds them."""

    path: jax.Array  # i32[S, L] each occupied seat's path (-1: none)
    nb: jax.Array  # i32[K] blocks of each node
    refs: jax.Array  # bool[K] the node is on a running seat's path
    mid: jax.Array  # bool[S] mid-prefill: running, holds its blocks, does not decode
    shared: jax.Array  # i32[S] each seat's blocks of its path, shared with the path's holders

    @property
    def blocks(self):
        """Blocks of the held nodes, each counted once."""
        return jnp.where(self.refs, self.nb, 0).sum(dtype=jnp.int32)


def held(p: EngineParams, r: Requests, s: EngineState, seats: Seats) -> Held:
    path = path_of(p, r, s.seat_req, seats.occupied)
    nb = node_blocks(p, r)
    return Held(path, nb, _mark(path, seats.running, nb.shape[0]),
                seats.running & (_slot(s).todo > 0),
                ceil_div(path_tokens(r, path), p.block_tokens).astype(jnp.int32))


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


def hit_tokens(c, path):
    """[...] the tokens of a path's longest start whose nodes are all found in the cache (0: a
    miss), and of them those to load from another tier (``c.f.tiers``; None: none)."""
    found, load = c.f.tiers(c.s, _slot(c.s).cached)
    at = jnp.maximum(path, 0)
    lead = jnp.cumprod(jnp.where(path >= 0, found[at], False), axis=-1, dtype=jnp.int32) > 0
    hit = jnp.where(lead, c.r.node_end[at], 0).max(axis=-1)
    if load is None:
        return hit, None
    return hit, jnp.where(lead & load[at], c.r.node_end[at] - c.r.node_start[at], 0).sum(
        axis=-1, dtype=jnp.int32)


def readmission_lookup(c, index, length, need) -> Lookup:
    """The preempted seat ``index`` recomputing ``length`` tokens in ``need`` blocks: it
    allocates its path's nodes that no running seat holds."""
    x = c.x
    path = x.path[index]
    own = need - x.shared[index]
    unheld = jnp.where((path >= 0) & ~x.refs[jnp.maximum(path, 0)], x.nb[jnp.maximum(path, 0)],
                       0).sum(dtype=jnp.int32)
    hit, loaded = hit_tokens(c, path)
    return Lookup(own + unheld, own, hit, length - hit, loaded)


def window_lookup(c, need, prompt) -> Lookup:
    """The admission window's requests (seats' ``index`` 0..S-1 after ``head``), of ``prompt``
    tokens in ``need`` blocks. Nodes already held (by a running seat or one admitted before it
    in this pass) are shared; only nodes cached before the pass save their prefill."""
    p, r, s, x, index = c.p, c.r, c.s, c.x, c.seats.index
    n = r.arrival.shape[0]
    path = path_of(p, r, jnp.minimum(s.head + index, n - 1), jnp.bool_(True))
    nodes = x.nb.shape[0]
    first = jnp.full((nodes,), index.shape[0], jnp.int32).at[_index(path)].min(
        jnp.broadcast_to(index[:, None], path.shape), mode="drop")
    at = jnp.maximum(path, 0)
    alone = (path >= 0) & ~x.refs[at] & ~(first[at] < index[:, None])
    own = need - ceil_div(path_tokens(r, path), p.block_tokens).astype(jnp.int32)
    hit, loaded = hit_tokens(c, path)
    # A transferred admission (a decode pool's) has nothing to prefill or load.
    todo = jnp.where(p.transferred, 0, prompt - hit)
    return Lookup(own + jnp.where(alone, x.nb[at], 0).sum(axis=1, dtype=jnp.int32), own, hit,
                  todo, None if loaded is None else jnp.where(p.transferred, 0, loaded))


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


def lru_order(r: Requests, stamp):
    """i32[K] the nodes, least recently used first: the oldest stamp; then the deeper node, a
    path's tail before its head, as vLLM frees a sequence's blocks; then the lowest id."""
    return jnp.lexsort((jnp.arange(stamp.shape[0], dtype=jnp.int32), -r.node_start, stamp))


def evict_lru(order, evictable, free, nb):
    """Of the ``evictable`` nodes, those evicted from ``free`` blocks: while they do not fit,
    the least recently used (``order``)."""
    size = jnp.where(evictable, nb, 0)[order]
    # A node stays if it and every younger one fit.
    younger = jnp.cumsum(size[::-1], dtype=jnp.int32)[::-1]
    return evictable & jnp.zeros_like(evictable).at[order].set(younger > free)


def cache_after(p: EngineParams, r: Requests, s: EngineState, seats: Seats, x: Held, ra, ad,
                tk, c):
    """The state after the pass (``c``: rule 8's completion), the blocks of the nodes held then,
    the nodes cached before the eviction and their least-recently-used order. A node is cached
    once a sequence holding it has prefilled past its end; its stamp is the pass of the last
    prefill that looked its path up. Cached nodes that no seat holds live in free blocks,
    evicted least recently used first while they do not fit."""
    alive = (c.seat_req >= 0) & ~c.seat_pre
    path = path_of(p, r, c.seat_req, alive)
    nodes = x.nb.shape[0]
    computed = jnp.where(ad.new, ad.prompt, seats.ctx) - tk.todo
    filled = (path >= 0) & (computed[:, None] >= r.node_end[jnp.maximum(path, 0)])
    has = (path >= 0).any(axis=1)
    starts = (ad.new | ra.seat) & has
    old = _slot(s)
    stamp = old.stamp.at[_index(jnp.where(starts[:, None], path, -1))].set(s.passes,
                                                                          mode="drop")
    cached = old.cached.at[_index(jnp.where(filled, path, -1))].set(True, mode="drop")
    refs = _mark(path, ~c.done, nodes)
    order = lru_order(r, stamp)
    evict = evict_lru(order, cached & ~refs,
                      p.total_blocks - c.blocks.sum() - jnp.where(refs, x.nb, 0).sum(), x.nb)
    hit = jnp.where(ad.new, ad.hit, 0) + jnp.where(ra.seat, ra.hit, 0)
    got = old.got.at[jnp.where(ad.new, ad.req, old.got.shape[0])].set(ad.hit, mode="drop")
    slot = Prefills(todo=jnp.where(c.done | ~alive, 0, tk.todo).astype(jnp.int32),
                    cached=cached & ~evict, stamp=stamp,
                    lookups=old.lookups + starts.sum(dtype=jnp.int32),
                    hits=old.hits + (starts & (hit > 0)).sum(dtype=jnp.int32),
                    saved=old.saved + jnp.where(starts, hit, 0).sum(dtype=jnp.int64), got=got)
    return (slot, jnp.where(_mark(path, alive, nodes), x.nb, 0).sum(dtype=jnp.int32), cached,
            order)


def run_prefix_blocks(path, nb, alive):
    """Blocks of the nodes held at each pass of a decode run (``alive``: [S, passes], each
    seat alive for its first passes): a node counts at every pass some seat holding it is
    alive."""
    passes = alive.shape[1]
    last = jnp.zeros(nb.shape, jnp.int32).at[_index(path)].max(
        jnp.broadcast_to(alive.sum(axis=1, dtype=jnp.int32)[:, None], path.shape), mode="drop")
    by_last = jnp.zeros((passes + 1,), jnp.int32).at[last].add(nb)
    return jnp.cumsum(by_last[::-1], dtype=jnp.int32)[::-1][1:]


class Hooks(Plain):
    """The hooks of prefix caching, chunked prefill and the token budget."""

    #: A decode run is never computed in closed form: its seats' prefixes are counted per pass.
    closed_form_runs = False

    @staticmethod
    def prefill_chunk(p):
        return smallest_chunk(p)

    @staticmethod
    def prefix_counts(s):
        old = _slot(s)
        return old.lookups, old.hits, old.saved, old.got

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
        return readmission_lookup(c, index, length, need)

    @staticmethod
    def within_budget(b, ok):
        return ok & (b.left > 0)

    @staticmethod
    def take(b, ok, todo):
        chunk = jnp.minimum(todo, b.left)
        return chunk, b.left - jnp.where(ok, chunk, 0)

    @staticmethod
    def window_lookup(c, ra, need, prompt, ok):
        look = window_lookup(c, need, prompt)
        ahead = exclusive_cumsum(look.todo)
        return look, ok & (ahead < ra.left), ahead

    @staticmethod
    def admitted(ra, admit, look, ahead, slot, ad):
        return ad._replace(overflow=ad.overflow & (jnp.where(admit, look.todo, 0).sum() < ra.left),
                           hit=look.hit[slot], todo=look.todo[slot],
                           chunk=jnp.clip(ra.left - ahead[slot], 0, look.todo[slot]),
                           loaded=None if look.loaded is None else look.loaded[slot])

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
        slot, prefixes, computed, order = cache_after(c.p, c.r, c.s, c.seats, c.x, ra, ad, tk,
                                                      done)
        return c.f.tier_after(c, order, computed, done._replace(
            features={**done.features, NAME: slot}, in_use=done.in_use + prefixes))

    @staticmethod
    def run_ok(s, ok):
        """No run starts while a seat is mid-prefill."""
        return ok & ~((_slot(s).todo > 0) & (s.seat_req >= 0)).any()

    @staticmethod
    def run_view(p, r, s, running):
        path = path_of(p, r, s.seat_req, running)
        return path, node_blocks(p, r), ceil_div(path_tokens(r, path), p.block_tokens)

    @staticmethod
    def run_need(v, need):
        return need - v[2][:, None].astype(need.dtype)

    @staticmethod
    def run_free(v, s, free):
        """Growth must fit beside every cached node, so a run never evicts one."""
        return free - jnp.where(_slot(s).cached, v[1], 0).sum(dtype=jnp.int32)

    @staticmethod
    def run_in_use(v, alive, in_use):
        return in_use + run_prefix_blocks(v[0], v[1], alive)
