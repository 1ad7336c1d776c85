"""The plain hooks: every hook of the rules (``scheduling``, ``passes``, ``decode``, ``lanes``)
as the engine is with no feature compiled in. Each adds nothing: a prefill is its whole prompt,
found in no cache and within no budget; requests arrive when ``Requests.arrival`` says; a pass
is timed without expert parallelism's form. A feature's ``Hooks`` subclasses ``Plain`` and
replaces what it changes (``features.compose``)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from sweep.engine.state import Aux, EngineState, arrived, itl_bin
from sweep.physics.timing import dense_pass_time, unstaged
from sweep.study.workload import Requests


class Lookup(NamedTuple):
    """A prefill's blocks and tokens as the admission and readmission rules (4 and 5) see them;
    the last three are prefix caching's (None in the plain form)."""

    need: jax.Array  # i32 blocks it must find free: its own, and its path's not yet held
    own: jax.Array  # i32 blocks it holds itself
    hit: jax.Array | None  # i32 tokens of its path cached at the start of the pass (0: a miss)
    todo: jax.Array | None  # i32 tokens to prefill: less those found cached
    loaded: jax.Array | None = None  # i32 of the cached ones, those loaded from another tier


class Plain:
    """The hooks with no feature compiled in."""

    #: Times a pass (``timing.dense_pass_time``: without expert parallelism's form, the same
    #: figures to the bit for a design without it).
    pass_time = staticmethod(dense_pass_time)
    #: Times a pass of ``pass_time``'s form through pipeline stages (``timing.unstaged``: on
    #: one stage, the same figures to the bit for a design without stages).
    staged = staticmethod(unstaged)
    #: Whether a decode run may be computed in closed form when no lane speculates
    #: (``decode.plain_run``).
    closed_form_runs = True
    #: Whether a closed loop's sends are merged in time order, not appended (``pauses``).
    merges_sends = False

    # -- the step's bound and results ---------------------------------------------------------

    @staticmethod
    def prefill_chunk(p):
        """The fewest prompt tokens a prefilling pass may prefill, for the step bound (None:
        every prefill is whole)."""
        return None

    @staticmethod
    def prefix_counts(s: EngineState):
        """Prefills that looked a path up, of which hit, the tokens they found cached, and
        each request's tokens found cached at its admission."""
        return jnp.int32(0), jnp.int32(0), jnp.int64(0), jnp.zeros(s.finish.shape, jnp.int32)

    # -- arrivals -----------------------------------------------------------------------------

    @staticmethod
    def arrival_of(r: Requests, s: EngineState, i):
        """Arrival of request ``i`` (+inf past the last)."""
        n = r.arrival.shape[0]
        return jnp.where(i < n, r.arrival[jnp.minimum(i, n - 1)], jnp.inf)

    @staticmethod
    def arrived(r: Requests, aux: Aux, features: dict, t):
        """Requests arrived by ``t``, as the features' slots ``features`` leave it."""
        return arrived(aux, t, r.arrival.shape[0])

    @staticmethod
    def spawned(p, r: Requests, s: EngineState, done, t_end) -> dict:
        """The features' slots after a pass that finishes the seats ``done`` at ``t_end``."""
        return s.features

    @staticmethod
    def spawned_run(p, r: Requests, s: EngineState, done, at, ends) -> dict:
        """The features' slots after a decode run whose pass j ends at ``ends[j]``, in which
        the seats ``done`` finish, each at its pass ``at``."""
        return s.features

    @staticmethod
    def run_arrival(p, r: Requests, s: EngineState, next_arrival, finishes, ends):
        """The next arrival a decode run must stop at (``finishes``: bool[L], some seat
        finishes at pass j)."""
        return next_arrival

    @staticmethod
    def arrivals(r: Requests, features: dict):
        """Every request's arrival, as the simulation set them."""
        return r.arrival

    @staticmethod
    def sending(r: Requests, s: EngineState, done, key):
        """Of the seats ``done`` finishing (in the order of ``key``), those whose client sends
        its next request, and the features' slots after it: every one."""
        return done, s.features

    # -- the requests in the order they are sent ----------------------------------------------

    @staticmethod
    def begin(r: Requests, features: dict, seats: int) -> dict:
        """The features' slots at the start of a simulation of ``r`` on ``seats`` seats."""
        return features

    @staticmethod
    def requests(r: Requests, features: dict) -> Requests:
        """The requests by the index the engine gives them (the order they are sent)."""
        return r

    @staticmethod
    def window(aux: Aux, features: dict):
        """i32[2, N + S] prompt and output lengths by that index, 0-padded."""
        return aux.window

    @staticmethod
    def in_table_order(out, features: dict):
        """A simulation's results (by the engine's index) in the order of its requests."""
        return out

    # -- the rules' prefills ------------------------------------------------------------------

    @staticmethod
    def view(p, r, s, seats) -> None:
        """What the other hooks of a pass read (``scheduling.Step.x``)."""
        return None

    @staticmethod
    def budget(c, decoding, work) -> None:
        return None

    @staticmethod
    def free(x, free):
        return free

    @staticmethod
    def growth(x, seats, need):
        """The seats that decode, and the blocks each needs of its own."""
        return seats.running, need

    @staticmethod
    def readmission_lookup(c, index, length, need) -> Lookup:
        return Lookup(need, need, None, None)

    @staticmethod
    def within_budget(b, ok):
        return ok

    @staticmethod
    def take(b, ok, todo):
        """The readmission's chunk and the prefill budget left after it."""
        return None, None

    @staticmethod
    def window_lookup(c, ra, need, prompt, ok):
        """The admission window's lookups, which of them may start, and the prefill tokens
        ahead of each (None: no budget)."""
        return Lookup(need, need, None, None), ok, None

    @staticmethod
    def admitted(ra, admit, look, ahead, slot, ad):
        return ad

    @staticmethod
    def prefills(c, b, ra, ad, load):
        """Each seat's prompt tokens left before the pass (None: all), its prefill in the pass,
        and the prefill's query-key pairs."""
        prefill = jnp.where(ad.new & ~load, ad.prompt, 0) + jnp.where(ra.seat, ra.length, 0)
        return None, prefill, prefill.astype(jnp.int64) * (prefill + 1) // 2

    @staticmethod
    def completes(c, g, ra, ad, ps, n_decode):
        """Prompt tokens left after the pass, the seats whose prefill completes, and the pass's
        inter-token gaps (histogram bins and counts): every decode's, and a recompute's."""
        done = ad.new | ra.seat
        gaps = jnp.stack([itl_bin(ps.dt), itl_bin(ps.t_end - c.s.seat_last[ra.index])])
        return None, done, gaps, jnp.stack([n_decode, ra.ok.astype(jnp.int32)])

    @staticmethod
    def first_tokens(c, ad, ps, tk, seat_req):
        """Each seat's tokens after the pass, and the first-token times: every admission's
        first token comes at the end of its pass (the admitted requests are the contiguous
        window head..head+m-1: a slice update, no scatter)."""
        s, nseat = c.s, c.seats.index.shape[0]
        gen = jnp.where(ad.new, 1, s.seat_gen + tk.emitted)
        window_first = lax.dynamic_slice(s.first, (s.head,), (nseat,))
        return gen, lax.dynamic_update_slice(
            s.first, jnp.where(c.seats.index < ad.count, ps.t_end, window_first), (s.head,))

    @staticmethod
    def cache_after(c, ra, ad, tk, done):
        """Rule 8's completion, with what the features keep after the pass."""
        return done

    # -- a second tier of the prefix cache ----------------------------------------------------

    @staticmethod
    def tiers(s: EngineState, cached):
        """The cache nodes a lookup finds (``cached``: those in GPU memory), and which of them
        it must load from another tier (None: no other)."""
        return cached, None

    @staticmethod
    def load_time(c, ra, ad):
        """Seconds the pass's loads from another tier take (None: none)."""
        return None

    @staticmethod
    def tier_after(c, order, computed, done):
        """Rule 8's completion with the other tier after the pass (``computed``: the nodes
        cached in GPU memory before its eviction; ``order``: the nodes, least recently used
        first)."""
        return done

    # -- room kept for the running outputs ----------------------------------------------------

    @staticmethod
    def reserved(c, prompt, output):
        """Blocks each waiting request of the window must find free beyond its own, and blocks
        kept back for the running requests' outputs (None: none)."""
        return None

    @staticmethod
    def preempted(p, features: dict, s: EngineState, preempt) -> dict:
        """The features' slots after a step that preempted (``preempt``) or not."""
        return features

    # -- scheduling once per several passes ---------------------------------------------------

    @staticmethod
    def schedules(p, s: EngineState, seats):
        """Whether the pass may admit and readmit requests: every pass does."""
        return True

    @staticmethod
    def unscheduled(p, dt, sched):
        """The time of a pass of ``dt`` that schedules (``sched``) or not: the same."""
        return dt

    @staticmethod
    def scheduled(p, features: dict, sched, work) -> dict:
        """The features' slots after a step that scheduled (``sched``) and ran a pass
        (``work``)."""
        return features

    @staticmethod
    def run_schedules(p, s: EngineState, j):
        """Whether pass ``j`` of a decode run would schedule: every one."""
        return True

    @staticmethod
    def ran(p, features: dict, m) -> dict:
        """The features' slots after a decode run of ``m`` passes."""
        return features

    # -- decode runs --------------------------------------------------------------------------

    @staticmethod
    def run_ok(s, ok):
        """Whether a decode run may start."""
        return ok

    @staticmethod
    def run_view(p, r, s, running) -> None:
        """What a decode run's hooks read."""
        return None

    @staticmethod
    def run_need(v, need):
        """Blocks each seat needs of its own at each pass of a decode run."""
        return need

    @staticmethod
    def run_free(v, s, free):
        return free

    @staticmethod
    def run_in_use(v, alive, in_use):
        return in_use
