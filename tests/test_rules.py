"""The JAX engine's rules one at a time (docs/model.md, "One step"), each on a hand-made state:
what each rule decides, apart from the others and from the scan around them. Fast (eager, a few
seats and requests)."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sweep.engine import features
from sweep.engine.features import compose, slots
from sweep.engine.features.plain import Plain
from sweep.engine.params import engine_params
from sweep.engine.passes import completion, the_pass, tokens
from sweep.engine.scheduling import Step, admission, growth, idle_jump, readmission, stop
from sweep.engine.state import initial_state, make_aux, seats_of
from sweep.physics.numerics import float64
from sweep.physics.timing import pass_time
from sweep.study.design import Design
from sweep.study.workload import requests

SEATS = 4
BLOCK = 16  # tokens per KV block


@pytest.fixture(autouse=True)
def _float64():
    with float64():
        yield


def params(total_blocks: int, **levers):
    p = engine_params(Design(max_batch=SEATS, block_size=BLOCK, max_seq_len=64, kv_blocks=64,
                             **levers))
    return p._replace(total_blocks=np.int32(total_blocks))


def step(p, arrival, prompt, output, end_time=math.inf, **state) -> Step:
    """The step of a simulation whose requests and state are given; a seat field given as a
    list is the seats' values (the rest of the ``SEATS`` free or zero)."""
    n = len(arrival)
    r = jax.tree_util.tree_map(jnp.asarray, requests(arrival, prompt, output, end_time))
    s = initial_state(n, SEATS, slots(("prefills",), n, SEATS, r.node_end.shape[0]))
    for k, v in state.items():
        old = getattr(s, k)
        if old.ndim:
            v = list(v) + [-1 if k == "seat_req" else 0] * (SEATS - len(v))
        s = s._replace(**{k: jnp.asarray(v, old.dtype)})
    return Step(p, r, make_aux(r, SEATS, None), s, seats_of(s), Plain, None)


def test_idle_jump_takes_an_idle_server_to_the_next_arrival():
    c = step(params(8), [2.0, 3.0], [8, 8], [4, 4])
    t, tail = idle_jump(c, jnp.bool_(True))
    assert (float(t), int(tail)) == (2.0, 1)
    assert float(idle_jump(c, jnp.bool_(False))[0]) == 0.0  # a finished lane stays put
    busy = step(params(8), [2.0, 3.0], [8, 8], [4, 4], head=1, seat_req=[0],
                seat_prompt=[8], seat_output=[4], seat_blocks=[1])
    assert float(idle_jump(busy, jnp.bool_(True))[0]) == 0.0  # an occupied server does not jump


def test_stop_when_nothing_is_left_or_at_the_end_time():
    empty = step(params(8), [math.inf], [8], [4])
    assert bool(stop(empty, empty.s.t))
    waiting = step(params(8), [1.0], [8], [4])
    assert not bool(stop(waiting, waiting.s.t))
    late = step(params(8), [1.0], [8], [4], end_time=0.5)
    assert bool(stop(late, jnp.float64(0.5)))


def _two_running(p, prompt: int):
    """Two running seats (requests 0 and 1) with ``prompt`` tokens and one generated each,
    holding two blocks each."""
    return step(p, [0.0, 0.0], [prompt, prompt], [10, 10], head=2, tail=2, seat_req=[0, 1],
                seat_prompt=[prompt, prompt], seat_output=[10, 10], seat_gen=[1, 1],
                seat_blocks=[2, 2])


def test_growth_takes_the_blocks_a_pass_needs_or_preempts_the_latest_arrival():
    fits = growth(_two_running(params(4), 16), jnp.bool_(True))  # context 17 + 1 in 2 blocks
    assert bool(fits.work) and not bool(fits.preempt) and int(fits.free) == 0
    short = growth(_two_running(params(5), 31), jnp.bool_(True))  # each needs a third block
    assert bool(short.preempt) and not bool(short.work)
    assert short.seat_pre.tolist()[:2] == [False, True] and short.blocks.tolist()[:2] == [2, 0]
    grows = growth(_two_running(params(6), 31), jnp.bool_(True))
    assert bool(grows.work) and grows.blocks.tolist()[:2] == [3, 3] and int(grows.free) == 0


@pytest.mark.parametrize("total,readmitted", [(6, True), (5, False)])
def test_readmission_recomputes_the_earliest_preempted_when_its_blocks_are_free(total,
                                                                               readmitted):
    c = step(params(total), [0.0, 0.0], [31, 31], [10, 10], head=2, tail=2, seat_req=[0, 1],
             seat_prompt=[31, 31], seat_output=[10, 10], seat_gen=[1, 1], seat_blocks=[2, 0],
             seat_pre=[False, True])
    g = growth(c, jnp.bool_(True))  # seat 0 grows to 3 blocks: context 32 + 1
    assert bool(g.work) and int(g.free) == total - 3
    ra = readmission(c, g, None)
    # Context 32, plus the token it emits: ceil(33 / 16) = 3 blocks.
    assert bool(ra.ok) == readmitted and int(ra.index) == 1 and int(ra.length) == 32
    assert int(ra.free) == total - 3 - (3 if readmitted else 0)
    assert bool(admission(c, 2, g, ra).count == 0)  # no admission while a seat is preempted


@pytest.mark.parametrize("prompts,admitted", [([40, 10], 1), ([10, 40], 1), ([10, 10], 2),
                                              ([40, 40, 10], 1)])
def test_admission_is_first_come_first_served_without_skipping(prompts, admitted):
    n = len(prompts)
    c = step(params(3), [0.0] * n, prompts, [4] * n)
    g = growth(c, jnp.bool_(True))
    ad = admission(c, n, g, readmission(c, g, None))
    assert int(ad.count) == admitted
    assert ad.new.tolist() == [True] * admitted + [False] * (SEATS - admitted)
    assert ad.own.tolist()[:admitted] == [-(-(q + 1) // BLOCK) for q in prompts[:admitted]]


@pytest.mark.parametrize("batching,admitted", [("continuous", 1), ("static", 0),
                                               ("one_at_a_time", 0)])
def test_only_continuous_batching_admits_beside_a_running_seat(batching, admitted):
    c = step(params(8, batching=batching), [0.0, 0.0], [8, 8], [4, 4], head=1, tail=2,
             seat_req=[0], seat_prompt=[8], seat_output=[4], seat_gen=[1], seat_blocks=[1])
    g = growth(c, jnp.bool_(True))
    assert int(admission(c, 2, g, readmission(c, g, None)).count) == admitted


def test_a_pass_is_timed_by_its_prefills_and_decodes_and_emits_and_completes():
    """Seat 0 decodes its last token, request 1 is admitted and prefilled: the pass takes
    pass_time of that work, seat 0 finishes and frees its blocks at its end, and request 1
    has its first token then."""
    p = params(8)
    c = step(p, [0.0, 0.0], [20, 8], [3, 4], head=1, tail=2, seat_req=[0], seat_prompt=[20],
             seat_output=[3], seat_gen=[2], seat_blocks=[2], t=1.0)
    g = growth(c, jnp.bool_(True))
    ra = readmission(c, g, None)
    ad = admission(c, 2, g, ra)
    ps = the_pass(c, c.s.t, g, ra, ad, None)
    expect = pass_time(p.timing, 8.0, 8 * 9 / 2, 1.0, 22.0, xp=np)
    assert float(ps.dt) == pytest.approx(float(expect), rel=1e-12)
    tk = tokens(c, g, ra, ad, ps, jnp.zeros(SEATS, jnp.int32))
    assert tk.emitted.tolist() == [1, 1, 0, 0]
    done = completion(c, g, ra, ad, ps, tk)
    assert done.done.tolist() == [True, False, False, False]
    assert done.blocks.tolist() == [0, 1, 0, 0]
    assert float(done.finish[0]) == float(done.first[1]) == 1.0 + float(ps.dt)


def test_the_plain_hooks_add_nothing():
    """Every hook of the plain form returns what it is given (or nothing to add), so the rules
    with it are the plain rules; the features' form changes what it must."""
    c = step(params(8), [0.0], [8], [4])
    need = jnp.arange(SEATS, dtype=jnp.int32)
    assert Plain.free(None, 7) == 7 and Plain.within_budget(None, True) is True
    assert Plain.growth(None, c.seats, need)[1] is need
    assert Plain.take(None, True, None) == (None, None)
    assert Plain.view(c.p, c.r, c.s, c.seats) is None and Plain.budget(c, None, None) is None
    cached = compose(("prefills",))
    held = cached.view(c.p, c.r, c.s, c.seats)
    assert int(cached.free(held, 7)) == 7  # no prefix held: nothing to take


def test_features_compose_by_a_list(monkeypatch):
    """Each hook comes from the one feature that replaces it, else the plain form; a batch's
    state carries the slots of its features and no other; two features replacing one hook are
    refused."""
    replaced = {name for f in features.FEATURES for name in getattr(f, "REPLACES", ())}
    every = tuple(f.NAME for f in features.FEATURES if f.NAME not in replaced)
    hooks = compose(every)
    for f in (f for f in features.FEATURES if f.NAME in every):
        for name, value in vars(f.Hooks).items():
            if not name.startswith("__"):
                found = next(vars(k)[name] for k in hooks.__mro__ if name in vars(k))
                assert found is value, (f.NAME, name)
    plain = compose(())
    assert all(getattr(plain, h) is getattr(Plain, h) for h in vars(Plain) if h[0] != "_")
    # Sessions stand for the closed loop (its hooks extend it; compiled together they clash)
    # and make their slots, and its, as a simulation begins; expert parallelism carries nothing.
    assert "closed_loop" in replaced and issubclass(hooks, features.closed_loop.Hooks)
    with pytest.raises(TypeError, match="replaced by both"):
        compose(("closed_loop", "sessions"))
    assert set(slots(every, 3, SEATS, 4)) == {"prefills", "kv_offload", "multi_step",
                                               "reservation"}
    assert slots(("expert_parallel",), 3, SEATS, 4) == {}

    class Clash(Plain):
        pass_time = staticmethod(lambda *a, **k: 0.0)

    clash = type("clash", (), {"NAME": "clash", "Hooks": Clash})
    monkeypatch.setitem(features._BY_NAME, "clash", clash)
    with pytest.raises(TypeError, match="pass_time"):
        compose(("expert_parallel", "clash"))


def test_a_batch_compiles_only_the_features_it_uses():
    """The compile gates: a plain batch has none; each lever turns on its feature alone."""
    r = step(params(8), [0.0], [8], [4]).r._replace(clients=jnp.int32(0))
    assert features.active(params(8), r) == ()
    assert features.active(params(8, prefix_cache=True), r) == ("prefills",)
    assert features.active(params(8, max_num_batched_tokens=256), r) == ("prefills",)
    assert features.active(params(8), r._replace(clients=jnp.int32(2))) == ("closed_loop",)
    # Sessions, open or closed, stand for the closed loop.
    turns = r._replace(clients=jnp.int32(2), turn=jnp.ones(r.arrival.shape, jnp.int32))
    assert features.active(params(8), turns) == ("sessions",)
    # Sessions pause for different times only where their turns do: padding rows (turn 0,
    # never sent) pausing otherwise compile nothing more.
    two = step(params(8), [0.0, 0.0, 0.0], [8, 8, 8], [4, 4, 4]).r._replace(
        clients=jnp.int32(0), turn=jnp.asarray([1, 2, 0], jnp.int32),
        think=jnp.asarray([0.5, 0.5, 0.0]))
    assert features.active(params(8), two) == ("sessions",)
    varied = two._replace(think=jnp.asarray([0.5, 0.2, 0.0]))
    assert features.active(params(8), varied) == ("sessions", "pauses")
    # A CPU tier comes with the prefix cache it serves.
    assert features.active(params(8, prefix_cache=True, kv_offload_gib=8.0), r) == (
        "prefills", "kv_offload")
    assert features.active(params(8, engine_version="0.6", num_scheduler_steps=4), r) == (
        "multi_step",)
