"""What a capacity search refuses before it starts, in one line naming the key: a brief it
cannot judge, a load it cannot vary, a range whose top asks for too many requests or whose
bottom sends too few to judge."""
from __future__ import annotations

import math

from sweep.errors import show
from sweep.study.config import Study
from sweep.study.grid import closed_requests
from sweep.study.metric_names import METRICS
from sweep.workflows.capacity import MIN_PROBE_REQUESTS, CapacityError, Search, brackets


def check(study: Study, target_rate: float | None) -> None:
    """Refuse what the search cannot answer, before anything is written."""
    metric = [lim for lim in study.brief if lim.key in METRICS]
    if not study.brief and not study.slo:
        raise CapacityError("brief: a capacity search needs a [brief] with at least one metric "
                            "limit; allowed: limits such as p95_ttft_s = { max = 0.5 }")
    if not metric and not study.slo:
        raise CapacityError("brief: has only lever limits, which no load changes; allowed: at "
                            "least one metric limit such as p95_ttft_s = { max = 0.5 }")
    if any(p.workload.trace is not None for p in study.points):
        raise CapacityError("workload.trace: a trace sets its own arrivals; allowed: poisson, "
                            "constant or gamma arrivals for a capacity search")
    if len({p.closed for p in study.points}) > 1:
        raise CapacityError("workload.arrival: a capacity search varies one kind of load; "
                            "allowed: closed loops only, or open arrivals only")
    if target_rate is not None and any(p.closed for p in study.points):
        raise CapacityError("--target-rate: a closed loop's rate is its clients', not a "
                            "target; allowed: poisson, constant or gamma arrivals for a fleet")
    if study.capacity["mixed_fleets"] and target_rate is None:
        raise CapacityError("capacity.mixed_fleets: mixes designs into fleets for a target "
                            "load; allowed: with [capacity] target_rate or --target-rate, of "
                            "open arrivals")
    if target_rate is not None and not (math.isfinite(target_rate) and target_rate > 0):
        raise CapacityError(f"--target-rate: {target_rate!r} is out of range; allowed: a "
                            "positive number of requests/s")
    _check_requests(study)


def _check_requests(study: Study) -> None:
    """Refuse a rate range whose top asks for more requests per simulation than [run]
    max_requests: one zero too many would otherwise run for hours or exhaust memory."""
    cap = study.capacity
    for s in brackets(study):
        wl = s.point.workload
        if s.done:
            continue
        _check_low_end(study, s)
        if s.point.closed:
            _check_clients(study, s)
            continue
        if wl.duration_s is None or wl.num_requests is not None:
            continue
        n = s.rate_max * wl.duration_s
        if n <= study.max_requests:
            continue
        if cap["rate_max"]:
            key, what = "capacity.rate_max", f"rate_max = {show(cap['rate_max'])}"
        elif cap["rate_min"] and s.rate_max == cap["rate_min"] * 16:
            key, what = "capacity.rate_min", f"rate_min = {show(cap['rate_min'])} (x16)"
        else:
            key, what = "workload.duration_s", f"the roofline's top rate {s.rate_max:.3g}/s"
        raise CapacityError(f"{key}: {what} over duration_s = {show(wl.duration_s)} asks for "
                            f"about {n:.3g} requests per simulation; allowed: at most "
                            f"{study.max_requests} (lower the rate or duration_s, or raise "
                            "[run] max_requests)")


def _check_low_end(study: Study, s: Search) -> None:
    """Refuse a search whose lowest probe would send nothing to judge: below one client, or
    fewer than ``MIN_PROBE_REQUESTS`` expected arrivals over ``duration_s``."""
    cap, wl = study.capacity, s.point.workload
    key = "capacity.rate_min" if cap["rate_min"] else "capacity.rate_max"
    if s.point.closed and s.rate_min < 1:
        raise CapacityError(f"{key}: the search would start at {s.rate_min:.3g} clients; "
                            "allowed: a range from at least 1 client")
    timed = wl.duration_s is not None and wl.num_requests is None
    if not s.point.closed and timed and s.rate_min * wl.duration_s < MIN_PROBE_REQUESTS - 1e-9:
        key = key if cap["rate_min"] or cap["rate_max"] else "workload.duration_s"
        raise CapacityError(f"{key}: the search would start at {s.rate_min:.3g} requests/s, "
                            f"about {s.rate_min * wl.duration_s:.3g} requests over duration_s = "
                            f"{show(wl.duration_s)}; allowed: a range whose lowest rate sends at "
                            f"least {MIN_PROBE_REQUESTS} (raise the rate or duration_s)")


def _check_clients(study: Study, s: Search) -> None:
    """Refuse a closed loop whose clients outnumber its measured requests (each probe would be
    one burst, not a loop), or whose top probe sends more than [run] max_requests."""
    wl = s.point.workload
    if wl.num_requests < wl.concurrency:
        raise CapacityError(f"workload.num_requests: {wl.num_requests} measured requests for "
                            f"{wl.concurrency} clients send one burst, not a loop; allowed: at "
                            "least concurrency (each probe sends the configured requests per "
                            "client; benchmarks send 10)")
    top = closed_requests(wl, math.ceil(s.rate_max))
    n = top["num_requests"] + top["warmup_requests"]
    if n > study.max_requests:
        key = "capacity.rate_max" if study.capacity["rate_max"] else "workload.num_requests"
        raise CapacityError(f"{key}: {math.ceil(s.rate_max)} clients sending the configured "
                            f"requests per client ask for {n} requests per simulation; allowed: "
                            f"at most {study.max_requests} (fewer clients or requests, or raise "
                            "[run] max_requests)")
