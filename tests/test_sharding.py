"""The design axis sharded over several devices (a 1-D mesh of two XLA host devices, in a
subprocess: the device count is fixed when JAX starts) gives byte-identical rows to one device."""
import os
import subprocess
import sys
from pathlib import Path

import jax
import pandas as pd
import pytest

from sweep.execution import workers as local_workers
from sweep.execution import planning, runner
from sweep.execution.runner import run_study
from sweep.execution.workers import check as check_processes
from sweep.runtime import executables
from sweep.study.config import parse_study

REPO = Path(__file__).parents[1]
STUDY = """
name = "sharded"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = [10.0, 25.0, 40.0]
num_requests = 50
prompt_tokens = { dist = "exponential", mean = 256 }
output_tokens = { dist = "lognormal", mean = 16, sigma = 1.0 }
[levers]
batching = ["static", "continuous"]
max_batch = 8
[run]
seeds = 3
"""
SCRIPT = """
import sys
import jax
from sweep.execution.runner import run_study
from sweep.study.config import parse_study
assert len(jax.local_devices()) == 2, jax.local_devices()
res = run_study(parse_study(sys.stdin.read()), chunk_size=2, per_request=True)
res.runs.to_pickle(sys.argv[1] + "/runs.pkl")
res.requests.to_pickle(sys.argv[1] + "/requests.pkl")
"""


def test_two_devices_give_the_rows_of_one(tmp_path):
    # Each device compiles its own executable: JAX's persistent cache spares later runs.
    cache = os.environ.get("SERVESWEEP_CACHE", str(Path.home() / ".cache" / "servesweep"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_COMPILATION_CACHE_DIR": cache + "/xla",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], input=STUDY, env=env,
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    one = run_study(parse_study(STUDY), chunk_size=2, per_request=True)
    # 18 simulations, in calls of 12 (6 a device), some holding 9: their second shard is half
    # padding.
    assert len(one.runs) == 18
    pd.testing.assert_frame_equal(one.runs, pd.read_pickle(tmp_path / "runs.pkl"))
    pd.testing.assert_frame_equal(one.requests, pd.read_pickle(tmp_path / "requests.pkl"))


def test_calls_in_flight_at_once_give_the_same_rows(monkeypatch):
    """One engine call at a time or three at once (on worker threads, chunks coming back in
    any order): the same rows, to the bit."""
    rows = []
    for workers in (1, 3):
        monkeypatch.setattr(planning, "calls_in_flight", lambda w=workers: w)
        chunks = list(runner.iter_chunks(parse_study(STUDY), chunk_size=2, per_request=True))
        assert len(chunks) >= workers  # three calls, when three run at once
        rows.append([pd.concat([getattr(c, t) for c in chunks]).sort_values(
            keys, ignore_index=True) for t, keys in (("metrics", ["design", "seed"]),
                                                     ("requests", ["design", "seed", "request"]))])
    assert len(rows[0][0]) == 18
    pd.testing.assert_frame_equal(rows[0][0], rows[1][0])
    pd.testing.assert_frame_equal(rows[0][1], rows[1][1])


def test_worker_processes_give_the_same_rows(tmp_path):
    """Two worker processes, each pinned to one core and given every other simulation: the
    rows of one process, to the bit, with progress counted over both. They share a directory
    of executables (each compiled by one of them, loaded by the other)."""
    study = parse_study(STUDY)
    one = run_study(study, chunk_size=2, per_request=True)
    seen = []
    before = executables.directory()
    executables.use(tmp_path)
    try:
        two = run_study(study, chunk_size=2, per_request=True, processes=2,
                        progress=lambda done, total, designs, of, t: seen.append(
                            (done, total, designs, of)))
    finally:
        executables.use(before)
    pd.testing.assert_frame_equal(one.runs, two.runs)
    pd.testing.assert_frame_equal(one.requests, two.requests)
    assert seen[-1] == (18, 18, 6, 6) and len(seen) >= 2
    written = sorted(p.name.split("-")[0] for p in tmp_path.iterdir())
    assert written == ["engine", "sampler", "summaries"]  # and no lock left behind


def test_worker_processes_by_default_for_large_cpu_runs_and_refused_on_an_accelerator(
        monkeypatch):
    big = local_workers.AUTO_FROM_SIMULATIONS
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    assert (local_workers.default_processes(big - 1), local_workers.default_processes(big)) == (
        1, local_workers.AUTO_MAX)  # large studies on a CPU split over cores by default
    check_processes(16)
    with pytest.raises(ValueError, match="--processes: 64; allowed: 1 to 16"):
        check_processes(64)  # more workers than cores only share them
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with pytest.raises(ValueError, match="--processes: 2; allowed: 1 on a gpu"):
        check_processes(2)
    check_processes(1)
    assert local_workers.default_processes(big) == 1


def test_a_cpu_call_takes_fewer_lanes_in_a_wider_tier():
    """By default a CPU call's lanes x seats stay within ``CPU_SEAT_LANES`` (its decode run's
    arrays in a core's cache); a chunk size the user sets is every tier's lanes."""
    study = parse_study(STUDY)
    plan = planning.plan_chunks(study)
    for seats in (1, 8, 64, 256, 4096):
        assert 1 <= plan.lanes(seats) <= planning.CPU_LANES_MAX
        assert plan.lanes(seats) * seats <= max(planning.CPU_SEAT_LANES, seats)
    assert plan.lanes(256) < plan.lanes(64)
    chosen = planning.plan_chunks(study, chunk_size=5)
    assert [chosen.lanes(seats) for seats in (8, 64, 256)] == [5, 5, 5]
