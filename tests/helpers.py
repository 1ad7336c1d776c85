"""What tests need and the package does not: the engine and its metrics on a stacked batch in
one call, a capacity config's refusal checked, and the teaching simulator's arithmetic-intensity
analysis."""
from __future__ import annotations

import numpy as np

from sweep.engine import simulate_batch
from sweep.execution.batch import stack, summarize_batch
from sweep.physics.hardware import GPU
from sweep.physics.models import Model
from sweep.physics.numerics import float64
from sweep.physics.timing import pass_work, timing_params

_UNIT_GPU = GPU("unit", 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0)
#: Lanes of the tests' engine calls: with a lane per simulation, every step of a batch is as
#: long as its longest simulation (one random design may take 100 times the median's steps);
#: with a few, finished lanes take the next simulations. Rows do not depend on lanes.
LANES = 8


@float64()
def run_batch(params, reqs, seats: int, k_max: int, max_steps=None, lanes: int | None = LANES,
              features: tuple[str, ...] | None = None):
    """Engine + metrics for a stacked batch (compiled with ``features``, default those it
    uses); returns (EngineOutput, dict of metric arrays)."""
    out = simulate_batch(params, reqs, seats=seats, k_max=k_max, lanes=lanes,
                         max_steps=max_steps, features=features)
    return out, {k: np.asarray(v) for k, v in summarize_batch(out, reqs, params).items()}


def run_cases(cases: list, seats: int, k_max: int):
    """(designs, params, requests, EngineOutput, metrics) of ``(design, params, requests)``
    cases, run in one engine call."""
    designs, params, reqs = zip(*cases)
    out, mets = run_batch(stack(params), stack(reqs), seats, k_max)
    return designs, params, reqs, out, mets


def in_two_processes(fn, calls: list) -> list:
    """``[fn(*args) for args in calls]``, every other call made in a second (spawned) process
    while this one makes the rest: the twin is Python, a core's work, and the suite's machines
    have two. ``fn`` (a module's function) and the arguments must pickle; they and the
    results cross as float64 (a JAX array unpickled outside ``float64()`` turns float32).
    The second process is started once and serves every call of the test run (a fresh one
    per call spent ~2 s importing the package each time)."""
    import os
    import pickle

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if len(calls) < 4 or (cores or 1) < 2:
        return [fn(*args) for args in calls]
    theirs = _second_process().submit(_each, fn, pickle.dumps(calls[1::2]))
    mine = [fn(*args) for args in calls[0::2]]
    with float64():
        theirs = pickle.loads(theirs.result())
    out = [None] * len(calls)
    out[0::2], out[1::2] = mine, theirs
    return out


_pool = None


def _second_process():
    """The spawned process of ``in_two_processes``, started on first use (a new one if the
    last one died) and shut down when the test run's process exits."""
    global _pool
    import atexit
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if _pool is None or getattr(_pool, "_broken", False):
        _pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        atexit.register(_pool.shutdown)
    return _pool


def _each(fn, calls: bytes) -> bytes:
    import pickle

    with float64():
        calls = pickle.loads(calls)
    return pickle.dumps([fn(*args) for args in calls])


def twins(runs) -> list:
    """The twin's result of each simulation of ``run_cases``' results (``in_two_processes``)."""
    from sweep.twin import simulate_reference

    _, params, reqs, _, _ = runs
    return in_two_processes(simulate_reference, list(zip(params, reqs)))


def against_the_twin(runs, b: int, ref=None):
    """Simulation ``b`` of ``run_cases``' results, run by the twin (or its result ``ref``
    from ``twins``), agrees with the engine request by request (``agrees_per_request``): the
    twin's result, its summary, and the case's name."""
    from sweep.twin import simulate_reference, summarize_reference

    designs, params, reqs, out, _ = runs
    if ref is None:
        ref = simulate_reference(params[b], reqs[b])
    msg = f"case {b}: {designs[b]}"
    agrees_per_request(out, b, ref, msg)
    return ref, summarize_reference(ref, reqs[b], params[b]), msg


def agrees_per_request(out, b: int, ref, msg: str) -> None:
    """Simulation ``b`` of an engine call agrees with the twin's result ``ref``: every
    request's arrival, first token and finish (to 1e-9), its tokens, and the run's counts."""
    for eng, twin in [(out.arrival[b], ref.arrival), (out.first[b], ref.first_token),
                      (out.finish[b], ref.finish)]:
        eng, twin = np.asarray(eng), np.asarray(twin)
        assert np.array_equal(~np.isfinite(eng), ~np.isfinite(twin)), msg
        ok = np.isfinite(twin)
        np.testing.assert_allclose(eng[ok], twin[ok], rtol=1e-9, atol=0, err_msg=msg)
    np.testing.assert_array_equal(np.asarray(out.generated[b]), ref.generated, err_msg=msg)
    for name in ("tokens", "preemptions", "max_queue", "peak_blocks", "passes"):
        assert int(getattr(out, name)[b]) == int(getattr(ref, name)), (name, msg)


def capacity_refused(tmp_path, capsys, text: str, key: str, args=()) -> None:
    """``sweep capacity`` of the config ``text`` exits 2 with one line naming ``key``, and
    writes nothing."""
    from sweep.cli import main

    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    out = tmp_path / "out"
    assert main(["capacity", str(cfg), "--out", str(out), "--quiet", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert key in err and "\n" not in err, err
    assert not out.exists()


def ops_per_byte(model: Model, tokens: int, context_read: int = 0, weight_bits: int = 16,
                 kv_bits: int = 16) -> float:
    """Arithmetic intensity (FLOPs per byte moved) of a pass processing ``tokens`` tokens.
    The teaching simulator's analysis ignores attention and KV traffic: pass ``context_read=0``."""
    p = timing_params(model, _UNIT_GPU, weight_bits=weight_bits, kv_bits=kv_bits,
                      compute_efficiency=1.0, bandwidth_efficiency=1.0, overhead_ms=0.0)
    pairs = 0 if context_read == 0 else tokens * context_read
    flops, weights, kv = pass_work(p, tokens, pairs, context_read)
    return flops / (weights + kv)


def crossover_ops_per_byte(gpu: GPU, activation_bits: int = 16) -> float:
    """Ops:byte at which a pass turns from bandwidth- to compute-bound (peak FLOP/s / bytes/s)."""
    return gpu.tflops(activation_bits) / gpu.bandwidth_tbs
