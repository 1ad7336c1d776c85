"""The twin's prefix caching and chunked prefill (docs/model.md: "Prefix caching", "Chunked
prefill", "Token budget"; the engine's: ``sweep.engine.features.prefills``): KV blocks with
shared prefixes, the cache and its eviction, and each pass's prefill budget, as the rules of
``rules`` read them."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from sweep.twin.state import Seat, Twin, ceil_div


@dataclass
class Pass:
    """What the step's pass does, built up by rules 3 to 5."""

    decoding: list[Seat]  # running seats past their prefill: each decodes
    left: float  # prefill tokens the pass may still take (chunked prefill, token budget)
    # (seat, chunk c, tokens L already in its KV) per prefill
    prefills: list[tuple[Seat, int, int]] = field(default_factory=list)
    loads: list[Seat] = field(default_factory=list)  # transferred: one decode over the context


# KV blocks and prefix caching.

def held(tw: Twin) -> set[int]:
    """Prefixes held by running (not preempted) sequences."""
    return {s.pfx for s in tw.occupied.values() if not s.preempted and s.pfx >= 0}


def used(tw: Twin) -> int:
    """Blocks in use: each sequence's own, and each held prefix's once."""
    return sum(s.b for s in tw.occupied.values()) + tw.prefix_blocks * len(held(tw))


def free(tw: Twin) -> int:
    return tw.design.total_blocks - used(tw)


def own_blocks(tw: Twin, pfx: int, tokens: int) -> int:
    """A sequence's own blocks for a context of ``tokens``: a prefix's blocks are shared."""
    return (ceil_div(tokens, tw.design.block_tokens) + tw.design.seq_blocks
            - (tw.prefix_blocks if pfx >= 0 else 0))


def cost(tw: Twin, pfx: int, tokens: int) -> tuple[int, int]:
    """(own blocks, blocks taken from the free ones) of a sequence starting a prefill whose
    context will need ``tokens``: its prefix's too, unless a running sequence holds it."""
    own = own_blocks(tw, pfx, tokens)
    return own, (own if pfx < 0 or pfx in held(tw) else own + tw.prefix_blocks)


def look_up(tw: Twin, s: Seat) -> bool:
    """A prefill starts: its prefix (if any) is looked up, a hit if cached, and stamped with
    the passes before this one."""
    hit = s.pfx >= 0 and s.pfx in tw.cached
    if s.pfx >= 0:
        tw.lookups += 1
        tw.hits += hit
        tw.stamps[s.pfx] = tw.passes
    return hit


def evict(tw: Twin) -> None:
    """At the end of a step: unreferenced cached prefixes live in free blocks, so the oldest
    (stamp, then id) are evicted while they do not fit."""
    holding = held(tw)
    idle = sorted((tw.stamps[c], c) for c in tw.cached if c not in holding)
    if tw.prefix_blocks == 0 or not idle:
        return
    keep = free(tw) // tw.prefix_blocks
    for _, c in idle[:max(0, len(idle) - keep)]:
        tw.cached.discard(c)


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


def start_prefill(tw: Twin, ps: Pass, s: Seat) -> None:
    """A prefill of the seat's whole context (its prompt, or ``p + g`` on readmission) starts;
    a cached prefix is not redone."""
    hit = look_up(tw, s)
    s.todo = s.p + s.g - (tw.prefix_tokens if hit else 0)
    take_chunk(ps, s)
