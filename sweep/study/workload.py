"""Workloads: request arrivals and lengths, sampled from a JAX PRNG key or replayed from a trace.

Every design that shares a workload and a seed sees exactly the same requests (common random
numbers), so differences between designs are not sampling noise. A trace is the same for every
seed.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sweep.errors import FieldError
from sweep.physics.numerics import float64, running_sum
from sweep.runtime import chunks, executables
from sweep.study.design import KINDS, check_kind
from sweep.study.declarations import check
from sweep.study.fields import ARRIVALS, WORKLOAD_FIELDS, declared, declared_class
from sweep.study import sessions
from sweep.study.lengths import DISTS, Lengths, Pauses, lengths, pauses
from sweep.study.trace import MAX_TOKENS, Trace

_KINDS = ARRIVALS + ("trace",)
POISSON, CONSTANT, GAMMA, CLOSED, TRACE = range(5)
#: The fewest cache nodes a batch's paths index (more for many prefixes or a trace's hash ids):
#: one compiled shape for every workload of up to this many shared prefixes.
MAX_PREFIXES = 128
#: The Python types of a workload's values, by kind (``design.KINDS`` and its own two).
_KIND_TYPES = {**KINDS, "lengths": ((Lengths,), "a Lengths (sweep.study.lengths)"),
               "pauses": ((int, float, Pauses), "a number or a Pauses (sweep.study.lengths)"),
               "trace": ((Trace,), "a Trace (sweep.study.trace.load_trace)")}
#: A length distribution's attributes: their kinds (a pause table's are all numbers).
_LENGTH_KINDS = {"dist": "str", "mean": "num", "low": "int", "high": "int", "sigma": "num"}


class _Workload:
    """Arrivals at ``arrival_rate`` requests/s, either for ``duration_s`` seconds or for a fixed
    ``num_requests``. The run ends ``drain_s`` after the last arrival (unserved requests are
    censored), or, with ``drain_s=None``, when every request is done.

    ``gamma`` arrivals have Gamma-distributed gaps with coefficient of variation ``arrival_cv``
    (bursty above 1). A ``trace`` replaces arrivals and lengths (``arrival`` must be "trace");
    its times are multiplied by ``trace_time_scale``, and ``duration_s`` or ``num_requests``,
    if given, cut it short.

    Shared prefixes (system prompts): each request independently uses one with probability
    ``prefix_share``, uniformly one of ``prefix_count``; its prompt is then ``prefix_tokens``
    plus the sampled length (clipped to the context like any prompt). A request whose clipped
    prompt is not longer than the prefix uses none.

    ``closed`` arrivals: ``concurrency`` clients send ``warmup_requests`` then ``num_requests``
    requests in turn, each its next one ``think_time_s`` after its last one finished (the
    engine times them: docs/model.md "Closed loop"); the run ends when every one is done. Open
    arrivals with ``num_requests`` send ``warmup_requests`` first too, at the same rate. A
    ``Pauses`` table for ``think_time_s`` draws each pause on its own (``Requests.think``).

    ``duration_s`` left out is 60 s, or unset where ``num_requests``, a closed loop or a trace
    sets the length of the run, as a config needs. A value of the wrong type is refused when
    the workload is made (``KindError``), every other in ``validate``."""

    def __post_init__(self):
        if self.duration_s is _DURATION:
            length_set = (self.num_requests is not None or self.trace is not None
                          or self.arrival in ("closed", "trace"))
            object.__setattr__(self, "duration_s",
                               None if length_set else WORKLOAD_FIELDS["duration_s"].default)
        for attr, f in WORKLOAD_FIELDS.items():
            value = getattr(self, attr)
            check_kind(f, value, *_KIND_TYPES[f.kind])
            if isinstance(value, (Lengths, Pauses)):
                for k, kind in _LENGTH_KINDS.items():
                    types, what = KINDS["num" if f.kind == "pauses" and k != "dist" else kind]
                    part = f._replace(key=f"{f.key}.{k}", kind=kind,
                                      choices=DISTS if k == "dist" else ())
                    check_kind(part, getattr(value, k), types, what)
        # Each value against its declaration now, as the config's reader checks it.
        for f in WORKLOAD_FIELDS.values():
            if isinstance(getattr(self, f.attr), (Lengths, Pauses)):
                getattr(self, f.attr).validate(f"workload.{f.attr}")
            elif not (f.attr == "arrival" and self.trace is not None):
                check(f, getattr(self, f.attr), "workload")

    def validate(self) -> None:
        """The combinations of the values (each alone was checked when the workload was made);
        a ``FieldError`` names the key."""
        if (self.arrival == "trace") != (self.trace is not None):
            raise FieldError("workload.trace", "arrival = \"trace\" goes with a trace and only "
                             "with one", "a trace file, or arrival = "
                             f"{', '.join(ARRIVALS)} without one")
        if self.trace is not None:
            if self.duration_s is not None and self.num_requests is not None:
                raise FieldError("workload", "give at most one of duration_s or num_requests "
                                             "with a trace")
        elif self.arrival == "closed":
            if self.concurrency is None or self.num_requests is None:
                raise FieldError("workload.arrival", "a closed loop needs concurrency and "
                                 "num_requests", "closed with both, or an open arrival process",
                                 self.arrival)
            if self.duration_s is not None:
                raise FieldError("workload.duration_s", "a closed loop runs num_requests to "
                                 "the end", "unset with arrival = \"closed\"", self.duration_s)
        elif (self.duration_s is None) == (self.num_requests is None):
            raise FieldError("workload", "give exactly one of duration_s or num_requests")
        if self.warmup_requests > 0 and self.arrival != "closed" and (
                self.trace is not None or self.num_requests is None):
            raise FieldError("workload.warmup_requests", "open arrivals warm up before a count "
                             "of measured requests", "0 with duration_s or a trace",
                             self.warmup_requests)
        if self.prefix_share > 0 and (self.prefix_count < 1 or self.prefix_tokens < 1):
            raise FieldError("workload.prefix_share", "requests share prefixes only with "
                             "prefix_count >= 1 and prefix_tokens >= 1", "0 otherwise",
                             self.prefix_share)
        sessions.check(self)
        if self.prefix_share > 0 and self.trace is not None:
            raise FieldError("workload.prefix_share", "a trace's prompts are replayed as they "
                             "are", "0 with a trace", self.prefix_share)

    @property
    def capacity(self) -> int:
        """Static request count per simulation: a fixed count, the trace's replayed rows, or a
        random count's bound (mean + 6 standard deviations + 16; beyond it arrivals are
        dropped, p < 1e-9). A Gamma renewal count over a long window has standard deviation
        ~ cv x sqrt(mean), so bursty arrivals widen the bound by cv."""
        if self.trace is not None:
            return self.trace.count(self.trace_time_scale, self.duration_s, self.num_requests)
        turns = 1 if self.turns is None else sessions.max_turns(self.turns)
        if self.num_requests is not None:
            return (self.warmup_requests + self.num_requests) * turns
        mean = self.arrival_rate * self.duration_s
        if self.arrival == "constant":
            return (int(math.floor(mean)) + 1) * turns
        spread = max(1.0, self.arrival_cv) if self.arrival == "gamma" else 1.0
        return int(math.ceil(mean + 6.0 * spread * math.sqrt(mean) + 16)) * turns


class _Duration:
    """``duration_s`` left out (``_Workload.__post_init__`` resolves it)."""

    def __repr__(self) -> str:
        return (f"{WORKLOAD_FIELDS['duration_s'].default} unless num_requests, a closed loop "
                "or a trace")


_DURATION = _Duration()


@dataclasses.dataclass(frozen=True)
class Workload(declared_class("Workload", WORKLOAD_FIELDS, _Workload, __name__)):
    __doc__ = _Workload.__doc__
    duration_s: float | None = dataclasses.field(default=_DURATION,
                                                 metadata=declared("duration_s").metadata)


class Requests(NamedTuple):
    """One simulation's requests, sorted by arrival. Padding has arrival = +inf."""

    arrival: jax.Array  # float64 [N], seconds
    prompt: jax.Array  # int32 [N], tokens
    output: jax.Array  # int32 [N], tokens (>= 1)
    end_time: jax.Array  # float64 [], when the run stops (inf: when all are done)
    seed: jax.Array  # uint32 [], for the speculative-acceptance draws
    prefix: jax.Array  # int32 [N], shared prefix in [0, prefix_count), -1 for none (the
    # routers' key)
    # The cacheable start of each prompt as a path of nodes (docs/model.md "Prefix caching"):
    # a shared prefix is one node, a trace's hash ids one node per block.
    path: jax.Array  # int32 [N, L], the nodes in prompt order, -1 after the last
    node_start: jax.Array  # int32 [K], prompt tokens before each node (the same on every path)
    node_end: jax.Array  # int32 [K], prompt tokens up to its end
    # A closed loop (docs/model.md "Closed loop"): request i >= clients arrives at a finish
    # plus a client's pause; ``arrival`` (0) is only a lower bound there. 0 clients: open.
    clients: jax.Array = np.int32(0)  # int32 []
    # Each row's pause, seconds: a session's turn is sent its own after the last turn's answer;
    # a closed loop's j-th finish pauses request clients + j's (one value: every row's).
    think: jax.Array = np.float64(0.0)  # float64 [N] (or [])
    warmup: jax.Array = np.int32(0)  # int32 [], the first requests, excluded from every metric
    # Sessions (docs/model.md "Sessions"): each row's turn in its session, 1 first (0: not a
    # session's); a session's turns are consecutive rows. The engine sends them in its own order.
    turn: jax.Array = np.int32(0)  # int32 [N]


def shared_paths(prefix, prefix_tokens, nodes: int = MAX_PREFIXES) -> dict:
    """The paths of requests sharing prefixes: request i's is its prefix ``prefix[i]`` (-1:
    none), each prefix one node of ``prefix_tokens`` tokens (numpy; ``Requests``' path
    fields)."""
    prefix = np.asarray(prefix, np.int32).reshape(-1)
    return dict(prefix=prefix, path=prefix[:, None].copy(), node_start=np.zeros(nodes, np.int32),
                node_end=np.full(nodes, prefix_tokens, np.int32))


def requests(arrival, prompt, output, end_time=np.inf, seed=0, prefix=None, prefix_tokens=0,
             **loop) -> Requests:
    """Requests given as they are (numpy), with shared prefixes (``shared_paths``) and a closed
    loop's ``clients``, ``think`` and ``warmup``."""
    n = len(arrival)
    return Requests(arrival=np.asarray(arrival, np.float64), prompt=np.asarray(prompt, np.int32),
                    output=np.asarray(output, np.int32), end_time=np.float64(end_time),
                    seed=np.uint32(seed), **shared_paths(
                        np.full(n, -1) if prefix is None else prefix, prefix_tokens), **loop)


#: Candidates per Gamma draw; all are rejected with probability < 0.05**8 ~ 4e-11 per draw.
GAMMA_CANDIDATES = 8


def _gamma(key, shape, n: int):
    """Gamma(shape, 1) by Marsaglia and Tsang's method (ACM TOMS 26(3), 2000) with a fixed
    number of candidates, the first accepted one taken: unlike ``jax.random.gamma``'s rejection
    loop this is plain elementwise arithmetic, so a seed gives the same bits batched or not.
    Shapes below 1 use Gamma(a) = Gamma(a + 1) x U^(1/a). If every candidate is rejected (far
    rarer than the request-count bound's 1e-9) the draw is the mean, ``shape``."""
    draws = jax.random.uniform(jax.random.fold_in(key, 1), (2 * GAMMA_CANDIDATES + 1, n),
                               jnp.float64, minval=jnp.finfo(jnp.float64).tiny)
    u, boost = draws[:GAMMA_CANDIDATES], draws[-1]
    z = jnp.sqrt(2.0) * jax.scipy.special.erfinv(2.0 * draws[GAMMA_CANDIDATES:-1] - 1.0)
    a = jnp.where(shape < 1.0, shape + 1.0, shape)
    d = a - 1.0 / 3.0
    c = 1.0 / jnp.sqrt(9.0 * d)
    v = (1.0 + c * z) ** 3
    ok = (v > 0) & (jnp.log(u) < 0.5 * z**2 + d - d * v + d * jnp.log(jnp.where(v > 0, v, 1.0)))
    first = jnp.argmax(ok, axis=0)
    x = jnp.where(ok.any(axis=0), d * jnp.take_along_axis(v, first[None], axis=0)[0], shape)
    return jnp.where(shape < 1.0, x * boost ** (1.0 / shape), x)


class WorkloadParams(NamedTuple):
    """A workload in the sampler's array form, for one seed (a pytree: stacked, a batch)."""

    seed: jax.Array  # u32
    kind: jax.Array  # i32: the arrival process (``_KINDS``)
    cv: jax.Array  # f64: Gamma gaps' coefficient of variation (1 otherwise)
    rate: jax.Array  # f64: requests/s
    count: jax.Array  # i32: requests at most
    duration: jax.Array  # f64: arrivals until then (inf: none cut)
    drain: jax.Array  # f64: simulated after the last arrival (inf: until all finish)
    prompt: tuple  # the prompt lengths' distribution (``_par``)
    output: tuple  # the output lengths'
    max_context: jax.Array  # i32: prompt + output at most
    trace: tuple  # a trace's rows (arrival, prompt, output, path) and nodes (start, end),
    # padded; else unused
    prefix: tuple  # shared prefixes: count, tokens, share of requests using one
    loop: tuple  # a closed loop's clients (0: open), pauses (``_par``), warm-up requests
    session: tuple  # sessions' turn counts and new tokens (length tables), most turns (0: none)


def _sample(n: int, gamma: bool, turns: bool, a: WorkloadParams) -> Requests:
    """Only the slot count ``n``, whether Gamma gaps are drawn at all (a rejection sampler,
    costlier than the others) and whether any workload has sessions (their table is a third of
    the program) are static: one compilation serves every workload of that size.
    A trace's rows (``a.trace``: arrival, prompt, output, padded to ``n``) replace the draws and
    are clipped to the context limit like them."""
    limit = a.max_context - 1
    k_arr, k_in, k_out = jax.random.split(jax.random.PRNGKey(a.seed), 3)
    expo = jax.random.exponential(k_arr, (n,), jnp.float64)
    # Gamma gaps of shape 1/cv^2, scaled to mean 1, have coefficient of variation cv.
    bursty = _gamma(k_arr, 1.0 / a.cv**2, n) * a.cv**2 if gamma else expo
    gaps = jnp.select([a.kind == POISSON, a.kind == GAMMA], [expo, bursty], 1.0) / a.rate
    t_arr, t_prompt, t_out, t_path, t_start, t_end = a.trace
    is_trace = a.kind == TRACE
    # A running sum keeps arrivals sorted even when gaps are tiny (bursts).
    arrival = jnp.where(is_trace, t_arr, running_sum(gaps))
    # A closed loop's arrivals are the engine's; 0 is their lower bound.
    arrival = jnp.where(a.kind == CLOSED, 0.0, arrival)
    arrival = jnp.where((arrival <= a.duration) & (jnp.arange(n) < a.count), arrival, jnp.inf)
    # Prefix draws come from their own key (folded in), so the other draws keep their bits.
    p_count, p_tokens, p_share = a.prefix
    u_use, u_id = jax.random.uniform(jax.random.fold_in(jax.random.PRNGKey(a.seed), 3), (2, n),
                                     jnp.float64)
    uses = u_use < p_share
    sampled = lengths(k_in, a.prompt, n, limit)
    prompt = jnp.where(is_trace, jnp.clip(t_prompt, 1, limit),
                       jnp.where(uses, jnp.minimum(sampled + p_tokens, limit), sampled))
    prefix = jnp.where(uses & (prompt > p_tokens),
                       jnp.minimum(jnp.floor(u_id * p_count), p_count - 1), -1).astype(jnp.int32)
    drawn = lengths(k_out, a.output, n, limit)
    output = jnp.minimum(jnp.where(is_trace, jnp.clip(t_out, 1, limit), drawn),
                         a.max_context - prompt)
    last = jnp.max(jnp.where(jnp.isfinite(arrival), arrival, 0.0))
    clients, think, warmup = a.loop
    # Pauses from their own key (folded in), so the other draws keep their bits.
    think = pauses(jax.random.fold_in(jax.random.PRNGKey(a.seed), 7), think, n)
    # A shared prefix is a path of one node, prefix c's; a trace's paths come as they are.
    shared = jnp.full(t_path.shape, -1, jnp.int32).at[:, 0].set(prefix)
    r = Requests(arrival, prompt, output, last + a.drain, jnp.asarray(a.seed, jnp.uint32),
                 jnp.where(is_trace, -1, prefix), jnp.where(is_trace, t_path, shared),
                 jnp.where(is_trace, t_start, 0),
                 jnp.where(is_trace, t_end, jnp.asarray(p_tokens, jnp.int32)),
                 clients, think, warmup, jnp.zeros((n,), jnp.int32))
    return _sessions(r, a, n, sampled, drawn, limit) if turns else r


def _sessions(r: Requests, a: WorkloadParams, n: int, first_prompt, output, limit) -> Requests:
    """The requests as a workload of sessions' turns where it is one (``sessions.table``): the
    first turn's prompt is the prompt draw, each turn's answer the output draw."""
    turns_par, new_par, t_max, count = a.session
    k_turns, k_new = sessions.draw_keys(a.seed)
    rows = sessions.table(n, r.path.shape[1], r.node_end.shape[0], r.arrival,
                          lengths(k_turns, turns_par, n, 2**30), first_prompt,
                          lengths(k_new, new_par, n, limit), output, count, t_max, limit)
    real, prompt, out, turn, path, start, end, arrival = rows
    on = t_max > 0
    # Each turn's arrival is its session's: a bound (the engine sends the later turns).
    return r._replace(arrival=jnp.where(on, arrival, r.arrival),
                      prompt=jnp.where(on, prompt, r.prompt), output=jnp.where(on, out, r.output),
                      prefix=jnp.where(on, -1, r.prefix), path=jnp.where(on, path, r.path),
                      node_start=jnp.where(on, start, r.node_start),
                      node_end=jnp.where(on, end, r.node_end), turn=jnp.where(on, turn, 0))


def _par(x: Lengths | Pauses):
    return (np.int32(DISTS.index(x.dist)),) + tuple(
        np.float64(v) for v in (x.mean, x.low, x.high, x.sigma))


def _pauses(wl: Workload) -> Pauses:
    """The pauses of a closed loop or of sessions (a number: all alike), else none."""
    if wl.arrival != "closed" and wl.turns is None:
        return Pauses("fixed", 0.0)
    think = wl.think_time_s
    return think if isinstance(think, Pauses) else Pauses("fixed", float(think))


def sample(wl: Workload, seed: int, max_context: int) -> Requests:
    """The requests of one seed; lengths are clipped so prompt + output <= ``max_context``."""
    wl.validate()
    return sample_n(wl, seed, max_context, wl.capacity)


#: The shape (L, K) of the paths of a workload with no trace of block hashes: one node per
#: request, one of MAX_PREFIXES prefixes.
SHARED_PATHS = (1, MAX_PREFIXES)


def path_shape(workloads) -> tuple[int, int]:
    """The path shape (L, K) that holds every one of ``workloads``' requests (stacked in one
    batch, they share it): the longest path of a trace, its distinct hash ids or the shared
    prefixes, and never less than ``SHARED_PATHS``."""
    length, nodes = SHARED_PATHS
    for wl in workloads:
        if wl.prefix_share > 0 and wl.prefix_count > nodes:  # a power of two: few shapes
            nodes = 1 << (wl.prefix_count - 1).bit_length()
        length, nodes = (max(x, y) for x, y in zip((length, nodes), sessions.shape(wl)))
        if wl.trace is not None and wl.trace.hash_flat is not None:
            ids, _ = trace_nodes(wl.trace)
            length = max(length, int(np.diff(wl.trace.hash_offsets).max(initial=0)))
            nodes = max(nodes, int(ids.max(initial=-1)) + 1)
    return length, nodes


@functools.lru_cache(maxsize=8)
def trace_nodes(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """A trace's hash ids renumbered 0..K-1 in the order first seen (int32, flat as
    ``hash_flat``), and each node's block position. An id names its block and everything
    before it, so it sits at one position in every row that holds it; a trace where it does
    not is refused."""
    offsets = trace.hash_offsets
    pos = np.arange(offsets[-1]) - np.repeat(offsets[:-1], np.diff(offsets))
    _, first, ids = np.unique(trace.hash_flat, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    ids = rank[ids].astype(np.int32)
    depth = np.zeros(order.size, np.int64)
    depth[ids] = pos
    bad = depth[ids] != pos
    if bad.any():
        j = int(np.argmax(bad))
        raise FieldError("workload.trace", f"{trace.name}: hash id {int(trace.hash_flat[j])} is "
                         f"block {int(pos[j])} of one row and block {int(depth[ids[j]])} of "
                         "another", "ids that each name one block and every block before it")
    return ids, depth


def _trace_paths(wl: Workload, max_context: int, n: int, shape) -> tuple:
    """The first ``n`` rows' paths (int32 [n, L]) and the nodes' starts and ends (int32 [K]):
    a row's path is its hash ids up to the last whole block before its last prompt token
    (a prefill computes at least that token), its prompt clipped to the context as sampled."""
    length, nodes = shape
    path = np.full((n, length), -1, np.int32)
    start, end = np.zeros(nodes, np.int32), np.zeros(nodes, np.int32)
    trace, hb = wl.trace, wl.hash_block_tokens
    if trace is None or trace.hash_flat is None:
        return path, start, end
    ids, depth = trace_nodes(trace)
    start[:depth.size] = np.minimum(depth * hb, MAX_TOKENS)
    end[:depth.size] = np.minimum((depth + 1) * hb, MAX_TOKENS)
    k = min(n, len(trace.arrival))
    offsets = trace.hash_offsets[:k + 1]
    row = np.repeat(np.arange(k), np.diff(offsets))
    pos = np.arange(offsets[-1]) - offsets[row]
    prompt = np.clip(trace.prompt[:k].astype(np.int64), 1, max_context - 1)
    keep = (pos < (prompt[row] - 1) // hb) & (pos < length)
    path[row[keep], pos[keep]] = ids[:offsets[-1]][keep]
    return path, start, end


@float64()
def workload_params(wl: Workload, seed, max_context, n: int,
                    paths: tuple[int, int] | None = None) -> WorkloadParams:
    """The traced arguments of one workload's sampler (stack them to sample a batch), its
    paths of shape ``paths`` (default: the workload's own, ``path_shape``)."""
    inf = np.float64(np.inf)
    closed = wl.arrival == "closed"
    shape = path_shape([wl]) if paths is None else paths
    if wl.trace is not None:
        rows = wl.trace.rows(wl.trace_time_scale, n) + _trace_paths(wl, max_context, n, shape)
    else:
        rows = (np.full(n, np.inf), np.ones(n, np.int32), np.ones(n, np.int32),
                np.full((n, shape[0]), -1, np.int32), np.zeros(shape[1], np.int32),
                np.zeros(shape[1], np.int32))
    return WorkloadParams(
        seed=np.uint32(seed), kind=np.int32(_KINDS.index(wl.arrival)),
        cv=np.float64(wl.arrival_cv if wl.arrival == "gamma" else 1.0),
        rate=np.float64(wl.arrival_rate),
        count=np.int32(wl.capacity if wl.num_requests is not None else n),
        duration=inf if wl.duration_s is None else np.float64(wl.duration_s),
        drain=inf if wl.drain_s is None or closed else np.float64(wl.drain_s),
        prompt=_par(wl.prompt_tokens), output=_par(wl.output_tokens),
        max_context=np.int32(max_context), trace=rows,
        prefix=(np.int32(wl.prefix_count), np.int32(wl.prefix_tokens),
                np.float64(wl.prefix_share)),
        loop=(np.int32(_clients(wl)), _par(_pauses(wl)), np.int32(wl.warmup_requests)),
        session=sessions.params(wl, _par))


def _clients(wl: Workload) -> int:
    """A closed loop's clients (0: open); users beyond the sessions have none to run."""
    if wl.arrival != "closed":
        return 0
    return min(wl.concurrency, wl.num_requests) if wl.turns is not None else wl.concurrency


@partial(jax.jit, static_argnames=("n", "gamma", "turns"))
def _sample_batch(args: WorkloadParams, *, n: int, gamma: bool, turns: bool) -> Requests:
    return jax.vmap(partial(_sample, n, gamma, turns))(args)


def _static(args: WorkloadParams) -> dict:
    """The sampler's static arguments besides ``n``: whether any workload of the batch has
    Gamma gaps, or sessions (a session's most turns, ``args.session[2]``, above 0)."""
    return dict(gamma=bool(np.any(np.asarray(args.kind) == GAMMA)),
                turns=bool(np.any(np.asarray(args.session[2]) > 0)))


@float64()
def sample_batch(n: int, args: WorkloadParams) -> Requests:
    """Requests of many (workload, seed) pairs at once: ``args`` stacks ``workload_params``.
    They are sampled ``chunks.SIZE`` at a time, so that one program serves every batch size
    (a simulation's draws depend on its own arguments alone)."""
    parts = [executables.get("sampler", _sample_batch, (part,), {},
                             dict(n=n, **_static(part)))(part)
             for part in chunks.split(args)]
    return chunks.join(parts, args.kind.shape[0])


@float64()
def sample_batch_shape(n: int, args: WorkloadParams) -> Requests:
    """The shapes and dtypes of ``sample_batch(n, args)``, without sampling."""
    return jax.eval_shape(partial(_sample_batch, n=n, gamma=False, turns=False), args)


@float64()
def sample_n(wl: Workload, seed, max_context, n: int,
             paths: tuple[int, int] | None = None) -> Requests:
    """``sample`` into exactly ``n >= wl.capacity`` slots (the rest never arrive), its paths of
    shape ``paths`` (default: its own, ``path_shape``)."""
    args = workload_params(wl, seed, max_context, n, paths)
    return _first(sample_batch(n, jax.tree_util.tree_map(lambda x: np.asarray(x)[None], args)))


#: The first simulation's requests of a batch: one sampler program (``sample_batch``'s, kept
#: with the compiled executables) serves a workload alone and in batches, with the same bits.
_first = jax.jit(lambda batch: jax.tree_util.tree_map(lambda x: x[0], batch))
