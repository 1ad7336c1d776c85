"""The twin's prefix caching and chunked prefill (docs/model.md: "Prefix caching", "Chunked
prefill", "Token budget"; the engine's: ``sweep.engine.features.prefills``): KV blocks with
paths of cache nodes shared, the cache and its eviction, and each pass's prefill budget, as the rules of
``rules`` read them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from sweep.twin.kv_offload import offload
from sweep.twin.state import Seat, Twin, ceil_div, lru_dropped


@dataclass
class Pass:
    """What the step's pass does, built up by rules 3 to 5."""

    decoding: list[Seat]  # running seats past their prefill: each decodes
    left: float  # prefill tokens the pass may still take (chunked prefill, token budget)
    # (seat, chunk c, tokens L already in its KV) per prefill
    prefills: list[tuple[Seat, int, int]] = field(default_factory=list)
    loads: list[Seat] = field(default_factory=list)  # transferred: one decode over the context
    loaded: int = 0  # tokens its prefills load from host memory (a CPU KV tier)
    schedules: bool = True  # it may admit and readmit (multi-step: a block's first pass)


# KV blocks and prefix caching.

def held(tw: Twin) -> set[int]:
    """Nodes on the paths of running (not preempted) sequences."""
    return {k for s in tw.occupied.values() if not s.preempted for k in s.path}


def used(tw: Twin) -> int:
    """Blocks in use: each sequence's own, and each held node's once."""
    return sum(s.b for s in tw.occupied.values()) + sum(tw.node_blocks[k] for k in held(tw))


def free(tw: Twin) -> int:
    return tw.design.total_blocks - used(tw)


def path_tokens(tw: Twin, path: tuple) -> int:
    """The prompt tokens a path covers: its last node's end."""
    return tw.node_end[path[-1]] if path else 0


def own_blocks(tw: Twin, path: tuple, tokens: int) -> int:
    """A sequence's own blocks for a context of ``tokens``: its path's blocks are shared."""
    b = tw.design.block_tokens
    return ceil_div(tokens, b) + tw.design.seq_blocks - ceil_div(path_tokens(tw, path), b)


def cost(tw: Twin, path: tuple, tokens: int) -> tuple[int, int]:
    """(own blocks, blocks taken from the free ones) of a sequence starting a prefill whose
    context will need ``tokens``: the nodes of its path that no running sequence holds too."""
    own = own_blocks(tw, path, tokens)
    holding = held(tw)
    return own, own + sum(tw.node_blocks[k] for k in path if k not in holding)


def look_up(tw: Twin, s: Seat) -> tuple[int, int]:
    """A prefill starts: its path (if any) is looked up and stamped with the passes before
    this one; returns the tokens of its longest start whose nodes are all cached, in GPU or
    host memory, and of them those in host memory only, which it loads."""
    hit = loaded = 0
    for k in s.path:
        if k not in tw.cached and k not in tw.host:
            break
        hit = tw.node_end[k]
        if k not in tw.cached:
            loaded += tw.node_end[k] - tw.node_start[k]
    if s.path:
        tw.lookups += 1
        tw.hits += hit > 0
        tw.saved += hit
        for k in s.path:
            tw.stamps[k] = tw.passes
    return hit, loaded


def evict(tw: Twin) -> None:
    """At the end of a step: unreferenced cached nodes live in free blocks, so the least
    recently used (stamp, then the deeper node, then the id) are evicted while they do not
    fit: a node stays if it and every younger one fit."""
    offload(tw, tw.cached)
    holding = held(tw)
    tw.cached.difference_update(lru_dropped(tw, [c for c in tw.cached if c not in holding],
                                            free(tw)))


def budget(tw: Twin, decoding: list[Seat]) -> float:
    """The prefill tokens a pass may take: C (unlimited at 0), and no more than a token budget
    leaves after its decodes, k + 1 tokens each."""
    d = tw.design
    left = d.prefill_chunk_tokens if d.prefill_chunk_tokens > 0 else math.inf
    if d.max_num_batched_tokens > 0:
        left = min(left, d.max_num_batched_tokens - len(decoding) * (d.draft_tokens + 1))
    return left


def take_chunk(ps: Pass, s: Seat) -> None:
    """The seat prefills what it still has to, as far as the pass's budget is left."""
    c = min(s.todo, ps.left)
    ps.prefills.append((s, c, s.p + s.g - s.todo))
    ps.left -= c


def continue_prefills(tw: Twin, ps: Pass) -> None:
    """Sequences mid-prefill take the pass's budget first, in request order."""
    for s in sorted((s for s in tw.occupied.values() if not s.preempted and s.todo > 0),
                    key=lambda s: s.req):
        take_chunk(ps, s)


def start_prefill(tw: Twin, ps: Pass, s: Seat) -> int:
    """A prefill of the seat's whole context (its prompt, or ``p + g`` on readmission) starts;
    the cached start of its path is not redone. Returns the tokens found cached."""
    hit, loaded = look_up(tw, s)
    ps.loaded += loaded
    s.todo = s.p + s.g - hit
    take_chunk(ps, s)
    return hit
