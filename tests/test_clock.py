"""Simulated time runs in float64: a float32 clock would lose sub-millisecond resolution."""
import jax
import numpy as np
import pytest

from sweep.engine.arith import ceil_div
from sweep.engine.params import engine_params
from sweep.execution.batch import stack
from sweep.physics.numerics import float64, running_sum
from sweep.physics.timing import pass_time
from sweep.study.design import Design
from sweep.study.workload import requests
from tests.helpers import run_batch

LATE = 7200.0  # a request arriving two hours into a run


def _one_request(arrival, prompt=512, output=200):
    return requests([arrival], [prompt], [output])


PROMPT, OUTPUT = 512, 200


@pytest.fixture(scope="module")
def early_and_late():
    design = Design()
    reqs = [_one_request(1.0, PROMPT, OUTPUT), _one_request(LATE, PROMPT, OUTPUT)]
    out, _ = run_batch(stack([engine_params(design)] * 2), stack(reqs), 1, 0)
    return design, out


def test_engine_state_clock_is_float64(early_and_late):
    _, out = early_and_late
    for arr in (out.t_stop, out.first, out.finish, out.area, out.busy):
        assert arr.dtype == np.float64


def test_late_request_keeps_microsecond_resolution(early_and_late):
    """Two hours in, each decode pass (~6 ms) still lands exactly: the engine's time per token
    equals an exact float64 sum of the pass times, whereas a float32 clock drifts by over a
    millisecond over the same 200 passes."""
    design, out = early_and_late
    tp = design.timing()
    prompt, output = PROMPT, OUTPUT
    durations = [float(pass_time(tp, 0.0, 0.0, 1.0, float(prompt + g))) for g in range(1, output)]
    decode_time = float(np.sum(durations))
    early, late = (float(out.finish[i, 0] - out.first[i, 0]) for i in range(2))
    assert abs(early - decode_time) < 1e-9
    assert abs(late - decode_time) < 1e-9  # float64 at t = 7200 s: ulp ~ 1e-12 s

    clock32 = np.float32(float(out.first[1, 0]))
    for d in durations:
        clock32 = np.float32(clock32 + np.float32(d))
    drift = abs(float(clock32) - float(out.first[1, 0]) - decode_time)
    assert drift > 1e-3, drift  # float32 spacing at 7200 s is 0.49 ms: rounding every pass


def test_block_counts_are_exact_integer_ceilings():
    """The engine counts KV blocks as ceil(tokens / block_tokens) with a float multiply by the
    reciprocal, not a division: it must equal the integer ceiling everywhere, at multiples of
    the block and one either side, for paged blocks and whole-context contiguous ones."""
    blocks = np.concatenate([np.arange(1, 1001), [4096, 8192, 131072, 999983, 2**24]]
                            ).astype(np.int32)
    k = np.arange(0, 400, dtype=np.int64)
    a = (k[None, :] * blocks[:, None])[..., None] + np.array([-1, 0, 1])
    a = np.clip(a, 0, 2**31 - 2**25).astype(np.int32)
    a = np.concatenate([a.reshape(len(blocks), -1),
                        np.broadcast_to(np.array([0, 1, 2**31 - 2**25], np.int32),
                                        (len(blocks), 3))], axis=1)
    b = np.broadcast_to(blocks[:, None], a.shape)
    with float64():  # as in the engine
        got = np.asarray(jax.jit(ceil_div)(a, b))
    np.testing.assert_array_equal(got, -(-a.astype(np.int64) // b))


def test_unrolled_running_sum_of_token_counts_stays_exact_integers():
    """A decode run counts each seat's tokens by pass with the unrolled running sum: on integers
    it must stay integer (no float promotion) and equal the exact prefix sums, also past 2**24
    where a float32 sum would round."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, size=(3, 64, 16)).astype(np.int32)
    x[0, 0, 0] = 2**24 + 1
    got = jax.jit(lambda v: running_sum(v, 0, unroll=True))(x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(x, axis=-1))
