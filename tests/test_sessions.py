"""Sessions: a turn's prompt is its session's context so far plus its new tokens, up to the
context; each turn is sent when the last one's answer is back plus its gap (one think time, or
its own pause drawn from a table); the engine and the twin agree request by request (prefix
caching, caches small enough to evict, a CPU tier, chunked prefill, speculation); the next turn
finds the last one's prompt cached where memory is ample; Little's law holds; the keys and the
`turn` column. One engine call (one compiled shape) serves every case."""
import functools
import math

import numpy as np
import pandas as pd
import pytest

import sweep
from sweep.cli import main
from sweep.engine import topology
from sweep.engine.params import engine_params
from sweep.study.design import Design
from sweep.study.lengths import Pauses
from sweep.study.workload import Lengths, Workload, sample, sample_n
from sweep.twin import simulate_disaggregated_reference, simulate_replicas_reference
from tests.helpers import against_the_twin, run_cases
from tests.test_twin_agreement import K_MAX, _random_design

CONTEXT = 512
SEATS = 12
SLOTS = 96  # request rows per simulation
N_RANDOM = 24
#: Little's law cases: (users, think time s) x seeds, on one design.
LITTLE = [(c, z) for c in (2, 5) for z in (0.0, 0.05)]
LITTLE_SEEDS = 3
TIERED = ("H100-SXM", "H200", "A100-80GB", "B200")  # GPUs with a host link for a CPU tier
PATHS = (8, 128)  # every case's paths: at most 8 turns, a node per row
#: Random cases whose every turn pauses its own draw, after the Little's law cases.
N_DRAWN = 12
PAUSES = [Pauses("exponential", 0.05), Pauses("uniform", low=0.0, high=0.3),
          Pauses("lognormal", 0.02, sigma=1.5)]


def _sessions(rng, users: int, sessions: int, think, rate: float = 0.0) -> Workload:
    """Sessions of a closed loop of ``users``, or (``rate`` > 0) arriving at ``rate`` per s."""
    arrival = dict(arrival="closed", concurrency=users) if rate == 0 else dict(
        arrival=str(rng.choice(["poisson", "constant", "gamma"])), arrival_rate=rate,
        arrival_cv=2.0)
    if arrival["arrival"] != "gamma":
        arrival.pop("arrival_cv", None)
    return Workload(**arrival, num_requests=sessions, duration_s=None, think_time_s=think,
                    turns=Lengths("uniform", 0, 1, int(rng.integers(2, 9))),
                    turn_tokens=Lengths("uniform", 0, 1, 60),
                    prompt_tokens=Lengths("uniform", 0, 20, 200),
                    output_tokens=Lengths("uniform", 0, 1, 30))


def _random_case(rng: np.random.Generator, i: int, pauses: Pauses | None = None):
    """A random design (some caching prefixes, with a budget or a CPU tier, some with a cache
    small enough to evict) on random sessions (pausing as ``pauses`` draws, if given)."""
    while True:
        d, _, small = _random_design(rng, i, experts=False)
        if d.batching == "continuous" and d.kv_cache == "paged" and rng.random() < 0.8:
            extra = dict(prefix_cache=True)
            if rng.random() < 0.3:
                extra["max_num_batched_tokens"] = int(rng.choice([64, 256]))
            if d.gpu in TIERED and rng.random() < 0.4:
                extra["kv_offload_gib"] = 1.0
            d = d.replace(**extra)
        try:
            p = engine_params(d)
        except ValueError:
            continue
        if small:
            one_seq = math.ceil(CONTEXT / int(p.block_tokens)) + int(p.seq_blocks)
            p = p._replace(total_blocks=np.int32(rng.integers(one_seq, one_seq + 8)))
        rate = float(rng.choice([2.0, 20.0, 200.0])) if i % 2 else 0.0  # every other: open
        users, sessions = int(rng.choice([1, 3, 8, 20])), int(rng.integers(3, 13))
        think = float(rng.choice([0.0, 0.01, 0.2]))
        wl = _sessions(rng, users, sessions, think if pauses is None else pauses, rate)
        return d, p, sample_n(wl, int(rng.integers(0, 2**31)), CONTEXT, SLOTS, PATHS)


def _little(users: int, think: float, seed: int):
    d = Design(model="Llama-3-8B", max_batch=8, max_seq_len=CONTEXT, prefix_cache=True)
    wl = Workload(arrival="closed", concurrency=users, num_requests=24, duration_s=None,
                  think_time_s=think, turns=Lengths("fixed", 4.0),
                  turn_tokens=Lengths("uniform", 0, 10, 40),
                  prompt_tokens=Lengths("uniform", 0, 50, 150),
                  output_tokens=Lengths("uniform", 0, 5, 40))
    return d, engine_params(d), sample_n(wl, seed, CONTEXT, SLOTS, PATHS)


@pytest.fixture(scope="module")
def runs():
    """The random cases (every other one open), then Little's law's, then random ones of drawn
    pauses, in one engine call."""
    rng = np.random.default_rng(20261204)
    little = [_little(c, z, s) for c, z in LITTLE for s in range(LITTLE_SEEDS)]
    drawn = np.random.default_rng(20261207)
    return run_cases([_random_case(rng, i) for i in range(N_RANDOM)] + little
                     + [_random_case(drawn, i, PAUSES[i % len(PAUSES)]) for i in range(N_DRAWN)],
                     SEATS, K_MAX)


def _gap(r, params, rows) -> np.ndarray:
    """Rows ``rows``' gaps: their pauses and the request overhead."""
    return np.asarray(r.think)[rows] + float(params.summary.request_overhead_s)


def test_a_turn_is_the_context_so_far_plus_its_new_tokens():
    """Turn k's prompt is turn k-1's prompt and answer plus at least one new token; a session
    ends before the first turn its context cannot hold; turns are consecutive rows."""
    rng = np.random.default_rng(7)
    wl = _sessions(rng, 3, 40, 0.0)
    r = sample_n(wl, 11, CONTEXT, 40 * 8)
    turn, prompt, output = (np.asarray(x) for x in (r.turn, r.prompt, r.output))
    real = np.isfinite(np.asarray(r.arrival))
    assert (turn[real] >= 1).all() and (turn[~real] == 0).all()
    assert (turn == 1).sum() == 40  # every session has a first turn
    later = np.flatnonzero(turn[1:] > 1) + 1
    assert (turn[later] == turn[later - 1] + 1).all()
    grown = prompt[later] - prompt[later - 1] - output[later - 1]
    assert grown.min() >= 1 and grown.max() <= 60
    assert (prompt[real] + output[real] <= CONTEXT).all()
    # Cut by the context: the longest sessions stop short of their turn count's bound.
    assert prompt[real].max() > CONTEXT / 2
    # Each turn's path is its session's turns so far, ending at its own prompt.
    path, end = np.asarray(r.path), np.asarray(r.node_end)
    for q in later[:50]:
        nodes = path[q][path[q] >= 0]
        assert len(nodes) == turn[q] and end[nodes[-1]] == prompt[q]
        assert end[nodes[-2]] == prompt[q - 1]


def test_sessions_agree_with_the_twin_request_by_request(runs):
    designs, params, reqs, out, mets = runs
    cached = 0
    for b in range(len(designs)):
        ref, twin, msg = against_the_twin(runs, b)
        np.testing.assert_array_equal(np.asarray(out.cached_tokens[b]), ref.cached_tokens,
                                      err_msg=msg)
        for key in ("mean_ttft_s", "mean_e2e_s", "tokens_per_s", "completed",
                    "prefix_token_hit_rate"):
            assert mets[key][b] == pytest.approx(twin[key], rel=1e-9, nan_ok=True), (key, msg)
        cached += int(np.asarray(out.cached_tokens[b]).sum() > 0)
    assert cached >= 10
    assert (mets["preemptions"][:N_RANDOM] > 0).sum() >= 2
    closed = np.array([int(r.clients) > 0 for r in reqs])
    assert not mets["truncated"].any() and not mets["unstable"][closed].any()


def test_open_sessions_start_at_their_arrivals_and_turns_follow_their_answers(runs):
    """Arriving at a rate, a session's first turn comes at its arrival (the process's draw, as
    a request's would be), each later turn the gap after its predecessor's finish; requests are
    indexed in the order they arrive."""
    designs, params, reqs, out, _ = runs
    drawn = range(N_RANDOM + len(LITTLE) * LITTLE_SEEDS, len(designs))
    for b in [*range(1, N_RANDOM, 2), *drawn[1::2]]:
        r = reqs[b]
        turn = np.asarray(r.turn)
        arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
        first = turn == 1
        np.testing.assert_array_equal(arrival[first], np.asarray(r.arrival)[first])
        assert (np.diff(arrival[first]) >= 0).all()
        later = np.flatnonzero(turn[1:] > 1) + 1
        np.testing.assert_allclose(arrival[later],
                                   finish[later - 1] + _gap(r, params[b], later), rtol=1e-12)


def test_drawn_pauses_send_each_turn_its_own_pause_after_the_last_answer(runs):
    """With pauses drawn per turn, each turn (and in a closed loop each user's next session)
    is sent its own pause after the answer before it, so a turn sent later may arrive first:
    the requests are indexed in the order they arrive."""
    designs, params, reqs, out, _ = runs
    overtaken = 0
    for b in range(N_RANDOM + len(LITTLE) * LITTLE_SEEDS, len(designs)):
        r = reqs[b]
        turn = np.asarray(r.turn)
        arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
        later = np.flatnonzero(turn[1:] > 1) + 1
        assert np.ptp(np.asarray(r.think)[later]) > 0
        np.testing.assert_allclose(arrival[later],
                                   finish[later - 1] + _gap(r, params[b], later), rtol=1e-12)
        sent = finish[later - 1]
        overtaken += bool(np.any(np.diff(arrival[later][np.argsort(sent, kind="stable")]) < 0))
    assert overtaken >= N_DRAWN // 2


def test_each_turn_follows_the_last_answer_and_finds_its_prompt_cached(runs):
    """Every session's turns are all served, each sent the loop's gap after its predecessor's
    finish; under prefix caching with memory to spare it finds that turn's prompt cached."""
    designs, params, reqs, out, _ = runs
    for b in range(N_RANDOM, N_RANDOM + len(LITTLE) * LITTLE_SEEDS):
        r = reqs[b]
        turn, prompt = np.asarray(r.turn), np.asarray(r.prompt)
        arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
        real = turn > 0
        assert np.isfinite(finish[real]).all()
        later = np.flatnonzero(turn[1:] > 1) + 1
        np.testing.assert_allclose(arrival[later],
                                   finish[later - 1] + _gap(r, params[b], later), rtol=1e-12)
        np.testing.assert_array_equal(np.asarray(out.cached_tokens[b])[later], prompt[later - 1])


def test_littles_law_for_sessions_within_the_monte_carlo_interval(runs):
    """Users = throughput x (mean E2E + the gap) while every user is busy: from time 0 to the
    start of the last session."""
    _, params, reqs, out, _ = runs
    for k, (users, think) in enumerate(LITTLE):
        ratios = []
        for s in range(LITTLE_SEEDS):
            b = N_RANDOM + k * LITTLE_SEEDS + s
            turn = np.asarray(reqs[b].turn)
            arrival, finish = np.asarray(out.arrival[b]), np.asarray(out.finish[b])
            hi = arrival[turn == 1].max()
            inside = (turn > 0) & (finish <= hi)
            w = (np.mean(finish[inside] - arrival[inside]) + think
                 + float(params[b].summary.request_overhead_s))
            ratios.append(inside.sum() / hi * w / users)
        mean, se = np.mean(ratios), np.std(ratios, ddof=1) / math.sqrt(LITTLE_SEEDS)
        edge = users / (turn > 0).sum()  # the window cuts one cycle per user
        assert abs(mean - 1) <= 3 * se + edge, (users, think, ratios)


SESSIONS_TOML = """
name = "sessions"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3-8B"
[workload]
arrival = "closed"
concurrency = 4
num_requests = 6
think_time_s = 1.0
turns = { dist = "uniform", low = 2, high = 5 }
turn_tokens = 200
prompt_tokens = { dist = "uniform", low = 500, high = 1500 }
output_tokens = 64
[levers]
max_batch = 8
prefix_cache = [false, true]
[run]
seeds = 1
per_request = true
"""


def test_a_config_of_sessions_writes_each_turn(tmp_path):
    """``sweep run`` of sessions: `requests.parquet` holds each turn's position, its TTFT by
    turn can be read from it, and prefix caching finds the earlier turns' prompts."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(SESSIONS_TOML)
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    req = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert set(req["turn"]) == set(range(1, int(req["turn"].max()) + 1))
    assert (req.groupby("design")["turn"].apply(lambda t: (t == 1).sum()) == 6).all()
    later = req[req["turn"] > 1]
    assert (later.loc[later["design"] == 0, "cached_tokens"] == 0).all()
    assert (later.loc[later["design"] == 1, "cached_tokens"] > 0).all()
    ttft = (req["first_token_s"] - req["arrival_s"]).groupby([req["design"], req["turn"]]).mean()
    assert ttft.loc[1].iloc[1:].mean() < ttft.loc[0].iloc[1:].mean()
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(runs["turns_dist"]) == ["uniform"] * 2
    assert list(runs["turn_tokens_mean"]) == [200.0] * 2


TURNS = 'turns = { dist = "uniform", low = 2, high = 5 }\n'


@pytest.mark.parametrize("old,new,key", [
    ("turn_tokens = 200\n", "", "workload.turns"),
    (TURNS, 'turns = { dist = "exponential", mean = 3 }\n', "workload.turns.dist"),
    (TURNS, TURNS + "warmup_requests = 2\n", "workload.warmup_requests"),
])
def test_sessions_refused_in_one_line(tmp_path, capsys, old, new, key):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(SESSIONS_TOML.replace(old, new))
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()


def test_sessions_arriving_at_a_rate_from_a_config(tmp_path):
    """Open sessions: `arrival_rate` sessions/s for `duration_s`, each turn after the last
    one's answer and the think time; the later turns find the earlier prompts cached, on one
    server or two behind the session router (one grid: the two kinds of fleet in one call)."""
    cfg = tmp_path / "open.toml"
    cfg.write_text(SESSIONS_TOML.replace('arrival = "closed"\nconcurrency = 4\nnum_requests = 6\n',
                                         'arrival = "poisson"\narrival_rate = 0.5\n'
                                         'duration_s = 20.0\n').replace(
        "max_batch = 8", 'max_batch = 8\nreplicas = [1, 2]\nrouter = "session"'))
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    req = pd.read_parquet(tmp_path / "out" / "requests.parquet")
    assert (runs["completed"] == runs["requests"]).all()
    for design in runs.loc[runs["prefix_cache"], "design"]:
        mine = req[req["design"] == design]
        first = mine[mine["turn"] == 1]
        assert 2 <= len(first) <= 30 and (first["arrival_s"] <= 20.0).all()
        later = mine[mine["turn"] > 1]
        assert len(later) > 0 and (later["cached_tokens"] > 0).all()
        prev = mine.set_index("request").loc[later["request"] - 1]
        assert (later["arrival_s"].to_numpy() > prev["finish_s"].to_numpy() + 1.0).all()


#: Every topology a workload of sessions runs on beside one server: replicas behind the routers
#: that take turns one by one and behind the session router, data-parallel ranks, pools (two
#: servers each, the prefill pool's behind the session router). Every server holds 8 seats (two
#: ranks of 4): one seat tier, whose calls share their compiled shapes.
FLEETS = [dict(replicas=3, router="round_robin"), dict(replicas=3, router="least_outstanding"),
          dict(replicas=3, router="prefix_aware"), dict(replicas=3, router="session"),
          dict(prefill_gpus=1, decode_gpus=1, prefill_workers=2, decode_workers=2,
               router="session"),
          dict(model="Qwen3-30B-A3B", expert_parallel=True, data_parallel=2, max_batch=4)]
SESSION = 3  # the session router's fleet


def _twin(d: Design, reqs):
    p = topology.plan(d)
    if d.disaggregated:
        return simulate_disaggregated_reference(p.first[0], p.decode, reqs,
                                                p.kv_bytes_per_token, p.link_bytes_per_s,
                                                d.prefill_workers, d.decode_workers, d.router)
    return simulate_replicas_reference(p.first[0], reqs, d.replicas, d.router)


@functools.cache
def _on_fleets(rate: float, think=0.5):
    """Sessions of a closed loop (``rate`` 0) or arriving at ``rate`` per s on every fleet,
    pausing ``think``, in one simulation call (its compiled programs serve the tests of both):
    (designs, result, requests)."""
    wl = Workload(**(dict(arrival="closed", concurrency=5) if rate == 0 else
                     dict(arrival="poisson", arrival_rate=rate)),
                  num_requests=9, duration_s=None, think_time_s=think,
                  turns=Lengths("uniform", 0, 1, 5), turn_tokens=Lengths("uniform", 0, 20, 200),
                  prompt_tokens=Lengths("uniform", 0, 200, 1500),
                  output_tokens=Lengths("uniform", 0, 5, 60))
    base = Design(gpu="H200", model="Llama-3.1-8B", max_batch=8, prefix_cache=True)
    designs = [base.replace(**f) for f in FLEETS]
    res = sweep.simulate(designs, wl, seeds=1, model_error=False)
    return designs, res, sample(wl, 0, base.context_limit)


@pytest.mark.parametrize("rate, think", [(0.0, 0.5), (3.0, 0.5),
                                         (0.0, Pauses("exponential", 0.5))])
def test_sessions_on_every_topology_agree_with_the_twin(rate, think):
    """Sessions, closed and open, pausing alike or each turn its own draw, behind every
    router, on data-parallel ranks and on disaggregated pools: each turn reaches the servers
    as an open request when the last one's answer is back plus its gap, and the engine and
    the twin agree request by request, arrivals included. Round robin spreads a session's turns
    (its cache finds fewer of them) where the prefix-aware router follows them."""
    designs, res, reqs = _on_fleets(rate, think)
    real = np.isfinite(np.asarray(reqs.arrival))
    turn = np.asarray(reqs.turn)[real]
    later = np.flatnonzero(turn[1:] > 1) + 1
    cached = {}
    for i, d in enumerate(designs):
        ref, mine = _twin(d, reqs), res.requests[res.requests["sim"] == i]
        assert not ref.truncated and len(mine) == real.sum(), d
        for col, twin in (("arrival_s", ref.arrival), ("first_token_s", ref.first_token),
                          ("finish_s", ref.finish)):
            np.testing.assert_allclose(mine[col], twin[real], rtol=1e-12, err_msg=str(d))
        np.testing.assert_array_equal(mine["cached_tokens"], ref.cached_tokens[real])
        gap = _gap(reqs, topology.plan(d).system, np.flatnonzero(real)[later])
        np.testing.assert_allclose(mine["arrival_s"].to_numpy()[later],
                                   mine["finish_s"].to_numpy()[later - 1] + gap, rtol=1e-12)
        cached[d.router if d.replicas > 1 else i] = int(mine["cached_tokens"].sum())
    assert cached["round_robin"] < cached["prefix_aware"]


def test_sessions_behind_the_session_router_stay_on_their_replica():
    """Replicas behind the session router (the twin agrees: the test above): each session, and
    each user, stays on one replica, whose cache finds each turn's predecessor's prompt."""
    designs, res, reqs = _on_fleets(0.0)
    d = designs[SESSION]
    assert d.router == "session" and d.replicas == 3
    ref = simulate_replicas_reference(topology.plan(d).first[0], reqs, 3, "session")
    mine = res.requests[res.requests["sim"] == SESSION]
    real = np.isfinite(ref.arrival)
    turn = np.asarray(reqs.turn)[real]
    session = np.cumsum(turn == 1) - 1
    assert (ref.replica[real] == session % 3).all()
    prompt = np.asarray(reqs.prompt)[real]
    later = np.flatnonzero(turn[1:] > 1) + 1
    np.testing.assert_array_equal(mine["cached_tokens"].to_numpy()[later], prompt[later - 1])
    # Users: 2, 2 and 1 on the three replicas, each turn sent the gap after the last answer.
    gap = 0.5 + float(topology.plan(d).first[0].summary.request_overhead_s)
    np.testing.assert_allclose(ref.arrival[real][later], ref.finish[real][later - 1] + gap,
                               rtol=1e-12)
    assert (mine["arrival_s"] == 0).sum() == 5
