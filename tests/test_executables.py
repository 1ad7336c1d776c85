"""Executables kept on disk: written once, loaded without tracing, keyed by what shapes them,
and a damaged file, a crashed compiler's lock or another process compiling the same key are
handled."""
import os
import socket
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest

from sweep.api import simulate
from sweep.engine import lanes
from sweep.runtime import executables
from sweep.study.design import Design
from sweep.study.workload import Lengths, Workload

lowered = []


class _Double:
    """A jitted function that counts its lowerings (jit caches traces, not this)."""

    fn = jax.jit(lambda x: 2 * x)

    def lower(self, *args, **kwargs):
        lowered.append(args[0].shape)
        return self.fn.lower(*args, **kwargs)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh directory and an empty memory: every ``get`` looks at the disk first."""
    monkeypatch.setattr(executables, "_loaded", {})
    before = executables.directory()
    executables.use(tmp_path)
    yield tmp_path
    executables.use(before)


def _get(x):
    return executables.get("double", _Double(), (x,), {}, {})


def test_an_executable_is_written_once_and_loaded_without_lowering(store, monkeypatch):
    x = jnp.arange(5.0)
    lowered.clear()
    assert np.array_equal(_get(x)(x), 2 * np.arange(5.0))
    assert len(lowered) == 1 and [p.suffix for p in store.iterdir()] == [".exe"]
    monkeypatch.setattr(executables, "_loaded", {})  # a new process, as far as it can tell
    assert np.array_equal(_get(x)(x), 2 * np.arange(5.0))
    assert len(lowered) == 1  # loaded, not lowered again


def test_the_key_follows_shapes_dtypes_static_arguments_and_the_code(monkeypatch):
    key = executables._key
    a = key("f", (jnp.zeros(3),), {}, {})
    assert a == key("f", (jnp.ones(3),), {}, {})  # values do not matter, shapes do
    others = [key("f", (jnp.zeros(4),), {}, {}), key("f", (jnp.zeros(3, jnp.int32),), {}, {}),
              key("f", (np.zeros(3),), {}, {}), key("f", (jnp.zeros(3),), {}, {"seats": 8}),
              key("g", (jnp.zeros(3),), {}, {}), key("f", (jnp.zeros(3),), {"m": 1}, {}),
              key("f", (jnp.zeros(3),), {"m": None}, {})]
    assert len({a, *others}) == 1 + len(others)
    assert key("f", (1,), {}, {}) == key("f", (2,), {}, {})  # a Python number is traced
    monkeypatch.setattr(executables, "_setting", "another version of the code")
    assert key("f", (jnp.zeros(3),), {}, {}) != a


def test_a_damaged_file_is_compiled_again_and_replaced(store, monkeypatch):
    x = jnp.arange(3.0)
    _get(x)
    (path,) = store.iterdir()
    path.write_bytes(b"not a pickle")
    monkeypatch.setattr(executables, "_loaded", {})
    _Double.fn.clear_cache()  # or XLA's compilation is reused from memory, and not written
    lowered.clear()
    assert np.array_equal(_get(x)(x), [0.0, 2.0, 4.0])
    assert len(lowered) == 1 and path.stat().st_size > 100


def _lock_for(store, x) -> os.PathLike:
    key = executables._key("double", (x,), {}, {})
    return store / f"double-{key}.lock"


def test_a_crashed_compilers_lock_does_not_hold_others(store):
    x = jnp.arange(4.0)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock_for(store, x).write_text(f"{socket.gethostname()} {dead.pid}")
    assert np.array_equal(_get(x)(x), 2 * np.arange(4.0))
    assert not _lock_for(store, x).exists()
    y = jnp.arange(12.0)  # a writer that died before naming itself
    _lock_for(store, y).write_text("")
    os.utime(_lock_for(store, y), (time.time() - 60, time.time() - 60))
    assert np.array_equal(_get(y)(y), 2 * np.arange(12.0))


def test_a_process_waits_for_another_compiling_the_same_executable(store, monkeypatch):
    """While a live process holds the lock, ``get`` waits, then loads what it wrote."""
    x = jnp.arange(6.0)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = _lock_for(store, x)
        lock.write_text(f"{socket.gethostname()} {other.pid}")
        got = []
        waiter = threading.Thread(target=lambda: got.append(_get(x)))
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not got  # waiting, not compiling
        # The other process finishes: its executable, then its lock gone.
        exe = _Double.fn.lower(x).compile()
        executables._save(store / lock.name.replace(".lock", ".exe"), exe)
        lowered.clear()
        lock.unlink()
        waiter.join(30)
        assert got and np.array_equal(got[0](x), 2 * np.arange(6.0)) and not lowered
    finally:
        other.kill()
        other.wait()


SCRIPT = """
import sys
import jax
import jax.numpy as jnp
from sweep.runtime import executables
jax.config.update("jax_compilation_cache_dir", sys.argv[1] + "/xla")
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
executables.use(sys.argv[1] + "/executables")
x = jnp.arange(11.0)
exe = executables.get("triple", jax.jit(lambda x: 3 * x), (x,), {}, {})
assert float(exe(x)[10]) == 30.0
"""


def test_an_executable_from_jaxs_own_cache_is_not_written(tmp_path):
    """Serialized again, an executable that JAX loaded from its persistent cache lacks its
    kernels (a later process failed with "Function ... not found"): only fresh ones are kept."""
    def run():
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr

    run()  # compiled by XLA: written to both caches
    assert len(list((tmp_path / "executables").glob("*.exe"))) == 1
    for path in (tmp_path / "executables").iterdir():
        path.unlink()
    run()  # loaded from JAX's cache: not written
    assert list((tmp_path / "executables").glob("*.exe")) == []


DEVICES_SCRIPT = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=3"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from sweep.runtime import executables
executables.use(sys.argv[1])
d = jax.devices()
fn = jax.jit(lambda x: 2 * x + jnp.cumsum(x))
one = jax.device_put(jnp.arange(4.0), d[1])
two = jax.device_put(jnp.arange(8.0), NamedSharding(Mesh(np.array([d[2], d[0]]), "x"),
                                                     PartitionSpec("x")))
for x in (one, two):
    y = executables.get("f", fn, (x,), {}, {})(x)
    assert y.sharding == fn(x).sharding, (y.sharding, fn(x).sharding)
    assert np.array_equal(np.asarray(y), np.asarray(fn(x)))
"""


def test_a_loaded_executable_runs_on_the_devices_it_was_compiled_for(tmp_path):
    """Loaded without its devices, an executable ran on all of them: a jax.distributed process
    then placed its inputs on another process's device too, and failed ("CopyArrays only
    supports destination device list of the same size")."""
    for _ in range(2):  # compiled and written, then loaded
        proc = subprocess.run([sys.executable, "-c", DEVICES_SCRIPT, str(tmp_path)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(list(tmp_path.glob("*.exe"))) == 2


def test_the_engine_loaded_from_disk_gives_the_same_bits(store, monkeypatch):
    designs = [Design(batching=b, max_batch=8, draft_tokens=k)
               for b in ("static", "continuous") for k in (0, 2)]
    workload = Workload(arrival_rate=20.0, duration_s=None, num_requests=40,
                        prompt_tokens=Lengths("exponential", 200.0),
                        output_tokens=Lengths("exponential", 20.0))
    first = simulate(designs, workload, seeds=2)
    assert any(p.name.startswith("engine") for p in store.iterdir())
    monkeypatch.setattr(executables, "_loaded", {})

    class Untraceable:
        def lower(self, *args, **kwargs):
            raise AssertionError("traced again")

    monkeypatch.setattr(lanes, "_SIMULATE_BATCH", {True: Untraceable(), False: Untraceable()})
    again = simulate(designs, workload, seeds=2)
    pd.testing.assert_frame_equal(first.metrics, again.metrics)
    pd.testing.assert_frame_equal(first.requests, again.requests)


def test_the_least_recently_used_executables_go_first_beyond_the_size_limit(store,
                                                                             monkeypatch):
    xs = [jnp.arange(float(n)) for n in (7, 8, 9)]
    paths = []
    for x, used in zip(xs, (1.3e9, 1.1e9, 1.2e9)):
        _get(x)
        (path,) = set(store.glob("*.exe")) - set(paths)
        os.utime(path, (used, used))
        paths.append(path)
    monkeypatch.setattr(executables, "MAX_BYTES", sum(p.stat().st_size for p in paths) - 1)
    executables._evict(store)
    assert [p.exists() for p in paths] == [True, False, True]
    monkeypatch.setattr(executables, "_loaded", {})
    _get(xs[2])  # loading one marks it used
    assert paths[2].stat().st_mtime > 1.3e9


def test_past_the_memory_bound_executables_are_forgotten(store, monkeypatch):
    """A long run of many shapes keeps at most ``MAX_LOADED`` in memory, and forgetting them
    clears jax's caches (which alone release their mapped memory); a forgotten one is read
    back or compiled again when next wanted, and gives the same answer."""
    monkeypatch.setattr(executables, "MAX_LOADED", 2)
    cleared = []
    monkeypatch.setattr(executables.jax, "clear_caches", lambda: cleared.append(True))
    xs = [jnp.arange(float(n)) for n in (3, 4, 5)]
    for x in xs:
        assert np.array_equal(_get(x)(x), 2 * np.asarray(x))
        assert len(executables._loaded) <= 2
    assert len(executables._loaded) == 1 and cleared == [True]
    assert np.array_equal(_get(xs[0])(xs[0]), 2 * np.asarray(xs[0]))
    assert len(executables._loaded) == 2 and cleared == [True]
