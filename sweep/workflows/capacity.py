"""Capacity: the most load each design carries within the brief, and the cheapest fleet for a
target load (docs/capacity.md).

A design's capacity is the largest arrival rate (for a closed loop: the most clients) at which
at least ``confidence`` of its seeds meet the brief's load-limited limits: the queue must not grow, and every metric limit that more
load can only break (latencies, memory, per-request attainment) must hold. Limits that more
load helps (cost per token, throughput, goodput, utilisation) are checked at capacity, where
the design is at its best on them; a design that misses them there misses them at every rate.

The search brackets every design at once. Each round is one batch of simulations (every
unresolved design x its candidate rates x seeds) through the runner. Common random numbers make
the bracket sound: a seed's arrival gaps are the same unit draws divided by the rate, and its
lengths the same draws, so whether a seed meets the brief is close to monotone in the rate;
the search takes it as monotone for each seed (``Rounds.verdict``). The tables are built in
``capacity_tables``.

1. Screening, on the first seed: the lowest rate, then rates spread geometrically up to the
   roofline rate (above it only if every rate up to it passes), then the bracket, which each
   round cuts into up to ``SCREEN_SPLITS`` parts until it is within ``SCREEN_TOLERANCES``.
2. Confirmation, on every seed: the screened bracket's two ends and rates 1, 3 and 9
   tolerances below it; where the seeds overturn an end, such steps away from it, then the
   bracket cut again until it is narrow again. A rate runs on a few seeds first: failures there
   can decide it, and only a rate that may pass needs every seed.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import pandas as pd

from sweep.execution.planning import Planned, request_slots
from sweep.physics.drafts import accepted_at_least
from sweep.physics.timing import pass_time, staged
from sweep.study.config import Limit, Point, Study
from sweep.study.metric_names import METRICS

#: Metrics that more load improves: checked at capacity, not during the search.
IMPROVES_WITH_LOAD = ("cost_per_mtok", "tokens_per_s", "goodput_rps", "utilization",
                      "requests_per_s")
#: Of those, the ones read from runs at capacity itself: a brief that limits them has every
#: seed run there. Cost and throughput at capacity are its rate times the tokens a request
#: generates, which a seed's runs share at every rate (the same length draws).
AT_CAPACITY_RUNS = ("goodput_rps", "utilization", "requests_per_s")
#: Default search range, as multiples of a design's roofline rate (``roofline_rate``).
RATE_MIN_FRACTION = 1 / 8
#: The fewest requests an open-loop probe is expected to send (rate x duration_s): its
#: percentiles are read from them. As many as a benchmark sends per client.
MIN_PROBE_REQUESTS = 10
RATE_MAX_FACTOR = 2.0
SCREEN_POINTS = 11  # rates of a screening round up to the roofline, the lowest included
SCREEN_SPLITS = 12  # parts each later screening round cuts a bracket into, at most
#: Screening stops once its bracket is within this many tolerances: the seeds' capacity lies
#: below the first seed's as often as not, so confirmation narrows it, on the seeds that decide.
SCREEN_TOLERANCES = 3
CONFIRM_SPLITS = 4  # parts a confirmation round cuts a bracket into, at most
STEPS = (1, 3, 9)  # tolerances a confirmation round steps from an end the seeds overturned
FIRST_SEEDS = 4  # seeds a confirmation tries first: failures there may decide a rate
#: Seats of a simulation's first try (``calls``): near its capacity a design holds more
#: requests at once than at a sweep's load, and the Serve a Model search ran faster with 128 than
#: with the sweep's 64 (benchmarks/README.md), which overflow more often into the costly full
#: seat array.
FIRST_TRY_SEATS = 128
MAX_ROUNDS = 40
QUEUEING = "queueing"
#: The columns a search varies: an open workload's rate, a closed loop's clients.
LOADS = ("arrival_rate", "concurrency")


class CapacityError(ValueError):
    """A capacity search the config cannot run (one line, naming the key)."""


@dataclasses.dataclass
class Search:
    """A design's bracket: ``low`` meets the brief (0: none does), ``high`` does not (inf:
    every rate searched does)."""

    point: Point
    rate_min: float
    rate_max: float
    low: float = 0.0
    high: float = math.inf
    guide: float = math.nan  # the roofline rate, within the range: where screening stops first
    done: bool = False
    tried: set = dataclasses.field(default_factory=set)  # rates run on every seed


def missed_lever(study: Study, point: Point) -> Limit | None:
    """The first of the brief's lever limits the design misses (no load changes those)."""
    return next((lim for lim in study.brief if lim.key not in METRICS
                 and not lim.ok(point.columns.get(lim.key))), None)


def load_limits(study: Study) -> list[Limit]:
    """The brief's limits that more load can only break: checked at every rate searched."""
    return [lim for lim in study.brief if lim.key in METRICS
            and lim.key not in IMPROVES_WITH_LOAD]


def designs(study: Study) -> list[Point]:
    """One point per design: every grid axis except the load, ``arrival_rate`` or
    ``concurrency`` (its first value kept)."""
    seen, out = set(), []
    for p in study.points:
        key = tuple((k, repr(v)) for k, v in p.columns.items() if k not in LOADS)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def _mean_tokens(lengths) -> float:
    if lengths.dist == "uniform":
        return (lengths.low + lengths.high) / 2
    return float(lengths.mean)


def _turns(wl) -> tuple[float, float, float]:
    """Requests per unit of load (a session's mean turns, else 1), their mean prompt, and the
    part of it new to each (a later turn's answer and new tokens; all of it but for sessions)."""
    prompt = _mean_tokens(wl.prompt_tokens) + wl.prefix_share * wl.prefix_tokens
    if wl.turns is None:
        return 1.0, prompt, prompt
    turns, grows = _mean_tokens(wl.turns), _mean_tokens(wl.output_tokens) + _mean_tokens(
        wl.turn_tokens)
    return turns, prompt + (turns - 1) / 2 * grows, grows


def roofline_clients(point: Point) -> float:
    """Clients a closed loop's design serves at once at most (its seats, or the sequences its
    KV cache holds): beyond them requests only queue."""
    d, wl = point.design, point.workload
    tokens = _turns(wl)[1] + _mean_tokens(wl.output_tokens)
    return float(max(1, min(d.seats, d.kv_tokens() // max(1, int(tokens)))))


def roofline_rate(point: Point) -> float:
    """Requests/s (sessions/s for a workload of sessions) a design's passes could carry at its
    full batch: each request's share of a full decode pass per generated token (through its
    pipeline stages), plus its prefill pass, of the new part of its prompt if prefixes are
    cached (no queueing, no latency limit: an upper guide for the search, not a result)."""
    d, wl = point.design, point.workload
    turns, prompt, new = _turns(wl)
    fill = new if d.prefix_cache else prompt
    out = _mean_tokens(wl.output_tokens)
    pre_d = d.prefill_pool() if d.disaggregated else d
    dec_d = d.decode_pool() if d.disaggregated else d
    seats = max(1, min(dec_d.seats, dec_d.kv_tokens() // max(1, int(prompt + out))))
    k, a = d.draft_tokens, d.acceptance
    if d.draft != "model":  # the draft's published table: 1 + the sum of P(A >= j)
        per_pass = 1.0 + float(accepted_at_least(d.draft, k).sum())
    else:
        per_pass = (1 - a ** (k + 1)) / (1 - a) if k and a < 1 else k + 1.0
    decode = float(staged(pass_time, dec_d.timing(), 0.0, 0.0, seats,
                          seats * (prompt + out / 2), seats, 0.0, 0.0))
    pairs = fill * (prompt - fill) + fill * (fill + 1) / 2
    prefill = float(staged(pass_time, pre_d.timing(), fill, pairs, 0.0, 0.0, 1.0, fill, pairs))
    per_request_decode = out / per_pass * decode / seats
    if d.disaggregated:  # the pools work at once, each over its servers
        return 1.0 / max(per_request_decode / d.decode_workers,
                         prefill / d.prefill_workers) / turns
    return d.replicas / (per_request_decode + prefill) / turns


def failures(row, limits: list[Limit]) -> list[str]:
    """The load-limited limits one run misses: ``queueing`` when its queue grows, then the
    metric limits' keys."""
    out = [QUEUEING] if bool(row["unstable"]) else []
    return out + [lim.key for lim in limits if not lim.ok(row[lim.key])]


class Runner:
    """Runs (design, rate) x seeds through the engine, remembering every row under its
    (design, fleet, rate, seed): ``fleet`` is 0 for the design itself, else the replicas of a
    fleet of it. A resumed search replays its rounds from ``saved`` without simulating them
    again. ``run(sub, skip, planned=...)`` simulates a sub-study's points x seeds less the
    (point, seed) pairs in ``skip`` and returns their rows (``runner.simulate_rows``), its
    calls shaped as ``planning.Planned`` says: for ``nominal`` simulations, first tries of
    ``FIRST_TRY_SEATS`` seats, and request slots that never shrink from batch to batch (each
    shape compiles once)."""

    def __init__(self, study: Study, run: Callable[..., pd.DataFrame],
                 saved: pd.DataFrame | None = None, on_round: Callable | None = None):
        self.study, self.run, self.on_round = study, run, on_round
        self.nominal = 0  # simulations every batch's call shapes are planned for
        self.slots = 0  # request slots of the batches so far
        self.k_max = max(p.design.draft_tokens for p in study.points)  # every batch's
        self.load = "concurrency" if study.points[0].closed else "arrival_rate"
        self.columns = ["design", "fleet", self.load, "seed", *METRICS]
        self.rows: dict = {}
        if saved is not None:
            for rec in saved.to_dict("records"):
                self.rows[(rec["design"], rec["fleet"], rec[self.load], rec["seed"])] = rec

    def __call__(self, jobs: list[tuple[int, int, Point, float]], seeds: list[int],
                 wanted: Callable[[int, float, int], bool] | None = None) -> None:
        """Simulate every (design, fleet, point, rate) job on ``seeds``, as one batch; only on
        the seeds ``wanted(design, rate, seed)`` asks for, when given."""
        def needs(i, f, r, s):
            return (i, f, r, s) not in self.rows and (wanted is None or wanted(i, r, s))

        todo = [(i, f, p, r) for i, f, p, r in jobs if any(needs(i, f, r, s) for s in seeds)]
        if not todo:
            return
        sub = dataclasses.replace(self.study, points=[p.at_load(r) for _, _, p, r in todo],
                                  seeds=list(seeds), brief=[],
                                  axes=[self.load])
        # A rate some seeds already ran (or need not run) runs only on the others.
        done = {(k, s) for k, (i, f, _, r) in enumerate(todo) for s in seeds
                if not needs(i, f, r, s)}
        planned = Planned(self.nominal, FIRST_TRY_SEATS, self.slots, self.k_max)
        self.slots = request_slots(sub, planned)[0]
        runs = self.run(sub, done, planned=planned)
        new = []
        for rec in runs.to_dict("records"):
            i, f, _, r = todo[rec["design"]]
            rec = {**rec, "design": i, "fleet": f, self.load: r}
            rec = {k: rec[k] for k in self.columns}
            self.rows[(i, f, r, rec["seed"])] = rec
            new.append(rec)
        if self.on_round is not None:
            self.on_round(pd.DataFrame(new, columns=self.columns))

    def rows_at(self, i: int, rate: float, seeds: list[int], fleet: int = 0) -> list[dict]:
        return [self.rows[(i, fleet, rate, s)] for s in seeds]

    def runs_of(self, i: int) -> list[tuple[float, int]]:
        """The (rate, seed) pairs simulated for design ``i`` itself (not its fleets)."""
        return [(r, s) for d, f, r, s in self.rows if d == i and f == 0]

    def rows_done(self, i: int, rate: float, seeds: list[int], fleet: int = 0) -> list[dict]:
        """The rows of ``seeds`` simulated so far."""
        return [self.rows[k] for s in seeds if (k := (i, fleet, rate, s)) in self.rows]

    def table(self) -> pd.DataFrame:
        """Every simulation of the search, in (design, fleet, rate, seed) order."""
        df = pd.DataFrame([self.rows[k] for k in sorted(self.rows)], columns=self.columns)
        return df.reset_index(drop=True)


def _geometric(lo: float, hi: float, parts: int) -> list[float]:
    return [float(x) for x in np.geomspace(lo, hi, parts + 1)[1:-1]]


def _parts(lo: float, hi: float, tolerance: float, most: int) -> int:
    """Parts to cut ``[lo, hi]`` into: enough to reach the tolerance, at most ``most``."""
    need = math.ceil(math.log(hi / lo) / math.log1p(tolerance))
    return max(2, min(most, need))


def brackets(study: Study) -> list[Search]:
    """Every design's search range (``[capacity]`` rate_min and rate_max, else from its
    roofline rate); a design a lever limit excludes is done before it starts."""
    cap = study.capacity
    out = []
    for p in designs(study):
        if missed_lever(study, p) is not None:
            out.append(Search(p, math.nan, math.nan, done=True))
            continue
        guide = roofline_clients(p) if p.closed else roofline_rate(p)
        lo = cap["rate_min"] or (1.0 if p.closed else guide * RATE_MIN_FRACTION)
        hi = cap["rate_max"] or guide * RATE_MAX_FACTOR
        wl = p.workload
        if not (p.closed or cap["rate_min"] or wl.duration_s is None or wl.num_requests):
            lo = max(lo, MIN_PROBE_REQUESTS / wl.duration_s)  # enough arrivals to judge
        if lo >= hi:  # a given rate_max below the guide's rate_min (or the reverse)
            lo, hi = (hi / 16, hi) if cap["rate_max"] else (lo, lo * 16)
        out.append(Search(p, lo, hi, guide=min(max(guide, lo), hi)))
    return out


def search(study: Study, runner: Runner, limits: list[Limit]) -> list[Search]:
    """Bracket every design's capacity (``[capacity]``: confidence, tolerance, rate range)."""
    out = brackets(study)
    # Calls shaped for the largest round (a screening round's rates on one seed, or a
    # confirmation's on every seed), so that each shape compiles once: padding is not simulated.
    widest = max(SCREEN_POINTS, SCREEN_SPLITS, CONFIRM_SPLITS * len(study.seeds))
    runner.nominal = max(runner.nominal, widest * sum(not s.done for s in out))
    Rounds(study, runner, limits, out).screen().confirm()
    return out


class Rounds:
    """The search's rounds over the designs still open: each round is one batch through the
    runner, every design's candidate rates at once.

    Whether a seed meets the brief is taken as monotone in the rate (common random numbers): a
    seed that passed at some rate passes below it, and one that failed fails above it. A seed
    runs at a rate only where its runs at other rates do not already say (or contradict each
    other), so that past the first rates a confirmation runs only the few seeds whose own
    capacity lies inside the bracket."""

    def __init__(self, study: Study, runner: Runner, limits: list[Limit], found: list[Search]):
        self.runner, self.limits, self.found = runner, limits, found
        self.tol, self.conf = study.capacity["tolerance"], study.capacity["confidence"]
        self.seeds = list(study.seeds)
        self.need = math.ceil(self.conf * len(self.seeds) - 1e-9)  # seeds a passing rate needs
        self.screened: dict[int, tuple[float, float]] = {}  # design -> first seed's bracket
        self.ran: dict[tuple[int, int], dict[float, bool]] = {}  # (design, seed) -> rate -> met
        self.fill = any(lim.key in AT_CAPACITY_RUNS for lim in study.brief)

    def run(self, rates: dict[int, list[float]], seeds: list[int]) -> None:
        """Each design's ``rates`` on those of ``seeds`` whose verdict is not known yet."""
        jobs = [(i, 0, self.found[i].point, float(r)) for i, rs in rates.items() for r in rs]
        self.runner(jobs, seeds, lambda i, r, s: self.verdict(i, r, s) is None)
        for i, _, _, r in jobs:
            for s in seeds:
                row = self.runner.rows.get((i, 0, r, s))
                if row is not None and not row["requests"]:  # no metric to judge
                    raise CapacityError(f"workload.duration_s: seed {s} sent no request at "
                                        f"{r:.3g}/s; allowed: a longer duration_s or a higher "
                                        "[capacity] rate_min")
                if row is not None:
                    self.ran.setdefault((i, s), {})[r] = not failures(row, self.limits)

    def verdict(self, i: int, rate: float, seed: int) -> bool | None:
        """Whether ``seed`` meets the brief at ``rate``: its run there, else what its runs at
        other rates imply (None: they do not say, or disagree)."""
        ran = self.ran.get((i, seed), {})
        if rate in ran:
            return ran[rate]
        passes = any(ok for r, ok in ran.items() if r > rate)
        fails = any(not ok for r, ok in ran.items() if r < rate)
        return passes if passes != fails else None

    def snap(self, i: int, rates) -> list[float]:
        """A closed loop's loads as whole clients within its range (others as they are), each
        once, in order."""
        s = self.found[i]
        if not s.point.closed:
            return sorted(set(rates))
        return sorted({float(min(max(round(r), s.rate_min), s.rate_max)) for r in rates})

    def narrow(self, i: int, lo: float, hi: float, ratio: float) -> bool:
        """Whether a bracket is within ``ratio`` (a closed loop's: or one client wide)."""
        return hi / lo <= ratio or (self.found[i].point.closed and hi - lo <= 1)

    def passes(self, i: int, rate: float, seeds: list[int]) -> bool:
        return sum(bool(self.verdict(i, rate, s)) for s in seeds) >= \
            self.conf * len(seeds) - 1e-9

    def screen(self) -> "Rounds":
        """Screening on the first seed: the lowest rate alone first (a design that fails there
        is spared the rest), then rates spread up to the roofline rate (overloaded simulations
        are the costliest, and capacity lies below the roofline), above it only where every
        rate up to it passes, then the bracket cut until it is within ``SCREEN_TOLERANCES``."""
        first = self.seeds[:1]
        cands = {i: self.snap(i, [s.rate_min]) for i, s in enumerate(self.found) if not s.done}
        tried: dict[int, list[float]] = {i: [] for i in cands}
        for _ in range(MAX_ROUNDS):
            if not cands:
                break
            self.run(cands, first)
            nxt = {}
            for i, rs in cands.items():
                s = self.found[i]
                tried[i] = sorted(tried[i] + rs)
                hi = min((r for r in tried[i] if not self.passes(i, r, first)), default=math.inf)
                lo = max((r for r in tried[i] if r < hi and self.passes(i, r, first)),
                         default=0.0)
                self.screened[i] = (lo, hi)
                if lo == 0:
                    continue
                if not math.isfinite(hi) and lo < s.rate_max:  # nothing failed yet: go up
                    top = s.guide if lo < s.guide else s.rate_max
                    nxt[i] = self.snap(i, np.geomspace(lo, top, SCREEN_POINTS)[1:])
                elif math.isfinite(hi) and not self.narrow(i, lo, hi,
                                                           (1 + self.tol) ** SCREEN_TOLERANCES):
                    step = (1 + self.tol) ** SCREEN_TOLERANCES - 1
                    nxt[i] = self.snap(i, _geometric(lo, hi, _parts(lo, hi, step, SCREEN_SPLITS)))
            cands = {i: new for i, rs in nxt.items() if (new := [r for r in rs
                                                                 if r not in tried[i]])}
        return self

    def decided(self, i: int, rate: float) -> bool | None:
        """A rate's verdict on every seed, once the seeds' verdicts so far decide it: enough
        failures fail it whatever the others do, and a pass needs enough passes."""
        verdicts = [self.verdict(i, rate, s) for s in self.seeds]
        if sum(v is True for v in verdicts) >= self.need:
            return True
        return False if sum(v is False for v in verdicts) > len(self.seeds) - self.need else None

    def confirm(self) -> None:
        """Confirmation on every seed: the screened ends and rates 1, 3 and 9 tolerances below
        (the seeds' quantile sits below the first seed's capacity as often as not), then a
        bracket search. Last, if the brief limits a figure read at capacity
        (``AT_CAPACITY_RUNS``), every seed runs there."""
        todo = {}
        for i, (lo, hi) in self.screened.items():
            s = self.found[i]
            todo[i] = {lo if lo > 0 else s.rate_min, hi if math.isfinite(hi) else s.rate_max}
            if lo > 0:
                todo[i] |= {max(s.rate_min, lo / (1 + self.tol) ** j) for j in STEPS}
            todo[i] = set(self.snap(i, todo[i]))
        for _ in range(MAX_ROUNDS):
            if not todo:
                break
            # A rate runs on the first FIRST_SEEDS seeds, then every seed runs only the highest
            # rate still open below the lowest failure: if it passes, the lower ones need not.
            self.run({i: [r for r in sorted(rs) if self.decided(i, r) is None]
                      for i, rs in todo.items()}, self.seeds[:FIRST_SEEDS])
            top = {}
            for i, rs in todo.items():
                failed = min((r for r in rs if self.decided(i, r) is False), default=math.inf)
                open_ = [r for r in rs if self.decided(i, r) is None and r < failed]
                if open_:
                    top[i] = [max(open_)]
            self.run(top, self.seeds)
            todo = {i: nxt for i, rates in todo.items() if (nxt := self.next_rates(i, rates))}
        if self.fill:
            self.runner([(i, 0, s.point, s.low) for i, s in enumerate(self.found)
                         if not math.isnan(s.rate_min) and s.low > 0], self.seeds)

    def next_rates(self, i: int, rates: set[float]) -> set[float]:
        """The design's bracket after a confirmation round, and the rates of its next one
        (none: done)."""
        s = self.found[i]
        s.tried.update(rates)
        verdicts = {r: self.decided(i, r) for r in s.tried}
        s.high = min((r for r, v in verdicts.items() if v is False), default=math.inf)
        s.low = max((r for r, v in verdicts.items() if v and r < s.high), default=0.0)
        waiting = {r for r, v in verdicts.items() if v is None and s.low < r < s.high}
        tol = self.tol
        if waiting:
            return waiting
        # The seeds overturn the screen's end: step away from it by growing steps.
        if s.low == 0 and s.high > s.rate_min:
            nxt = {max(s.rate_min, s.high / (1 + tol) ** j) for j in STEPS}
        elif not math.isfinite(s.high) and s.low < s.rate_max:
            nxt = {min(s.rate_max, s.low * (1 + tol) ** j) for j in STEPS}
        elif s.low > 0 and math.isfinite(s.high) and not self.narrow(i, s.low, s.high, 1 + tol):
            nxt = set(_geometric(s.low, s.high, _parts(s.low, s.high, tol, CONFIRM_SPLITS)))
        else:
            nxt = set()
        nxt = set(self.snap(i, nxt))
        if s.point.closed:  # whole clients: a bracket one wide has nothing new to try
            nxt -= s.tried
        s.done = not nxt
        return nxt
