"""Compiled executables, kept in memory and (with a directory set) on disk, so that a later
process skips tracing and lowering as well as XLA.

JAX's persistent compilation cache skips only XLA: to find its key a process still traces and
lowers the function, which for the engine costs seconds of CPU per seat tier, in every process
and every worker (benchmarks/README.md). Here an executable's key is computed without tracing,
from everything that shapes the program: this package's source, the jax and jaxlib versions,
jax's settings, ``XLA_FLAGS``, the host's CPU, and the call's static arguments and its other
arguments' tree, shapes, dtypes and placements. A process that finds no file compiles and
writes one; while it compiles, a lock file tells other processes wanting the same executable to
wait for it rather than compile it again.

Loading runs code from the file (a pickle): the directory must be the user's own, as JAX's
cache is.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import platform
import socket
import threading
import time
from pathlib import Path

import jax
import jaxlib
import numpy as np
from jax.experimental.serialize_executable import deserialize_and_load, serialize

#: A process waits at most this long for another one compiling the same executable, seconds
#: (the engine compiles in ~10-30 s; a process on another host cannot be asked if it lives).
WAIT_S = 600.0
#: A lock file still without its owner after this many seconds is a crashed writer's.
LOCK_UNWRITTEN_S = 10.0
#: The directory's executables are kept within this many bytes, the least recently used
#: removed first (the Serve a Model study's four are a few MB on a CPU).
MAX_BYTES = 2e9
#: Executables kept in memory at most. Each maps its code in hundreds of memory regions (about
#: 600 for the engine on a CPU, measured), which only ``jax.clear_caches`` releases, and Linux
#: lets a process map 65,530 by default (``vm.max_map_count``): a validation of 49 cases of
#: different shapes, compiling about 145 programs, ended in "LLVM ERROR: Unable to allocate
#: section memory". Past this many, all are forgotten at once (read back from the directory,
#: or compiled again, when next wanted).
MAX_LOADED = 64
#: jax settings that do not change a compiled program (caches, logging).
_NEUTRAL = ("jax_compilation_cache", "jax_enable_compilation_cache", "jax_persistent_cache",
            "jax_log_compiles", "jax_explain_cache_misses", "jax_raise_persistent_cache_errors",
            "jax_logging_level", "jax_debug_log_modules")

#: jax's monitoring events: a compilation (XLA's, or a load from JAX's persistent cache), and
#: a load from that cache.
_COMPILED = "/jax/core/compile/backend_compile_duration"
_CACHE_HIT = "/jax/compilation_cache/cache_hits"

_directory: Path | None = None
_loaded: dict[str, jax.stages.Compiled] = {}
_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()
_setting: str | None = None
_seen = threading.local()  # this thread's count of each event


def _count(event: str, *args, **kwargs) -> None:
    if event in (_COMPILED, _CACHE_HIT):
        setattr(_seen, event, getattr(_seen, event, 0) + 1)


jax.monitoring.register_event_listener(_count)
jax.monitoring.register_event_duration_secs_listener(_count)


def use(directory: str | os.PathLike | None) -> None:
    """Keep executables in ``directory`` (created when first written); None keeps them in
    memory only."""
    global _directory
    _directory = None if directory is None else Path(directory)


def directory() -> Path | None:
    return _directory


def get(name: str, fn, args: tuple, kwargs: dict, static: dict) -> jax.stages.Compiled:
    """``fn`` (a jitted function) compiled for ``fn(*args, **kwargs, **static)``: from memory,
    from the directory, or compiled now (and written there). Call it as
    ``exe(*args, **kwargs)``."""
    key = _key(name, args, kwargs, static)
    with _guard:
        lock = _locks.setdefault(key, threading.Lock())
    with lock:  # one compilation per key, whichever thread asks first
        exe = _loaded.get(key)
        if exe is None:
            with _guard:
                if len(_loaded) >= MAX_LOADED:  # calls under way keep theirs
                    _loaded.clear()
                    jax.clear_caches()
            exe = _loaded[key] = _load_or_compile(name, key,
                                                  lambda: _compile(fn, args, kwargs, static))
        return exe


def _compile(fn, args, kwargs, static) -> tuple[jax.stages.Compiled, bool]:
    """The executable, and whether XLA compiled it now. One that JAX loaded from its own
    persistent cache, or kept from an earlier compilation in this process (which may have been
    such a load), is not written: serialized again, it lacks its kernels."""
    before = [getattr(_seen, e, 0) for e in (_COMPILED, _CACHE_HIT)]
    exe = fn.lower(*args, **kwargs, **static).compile()
    compiled, hit = (getattr(_seen, e, 0) - b for e, b in zip((_COMPILED, _CACHE_HIT), before))
    return exe, compiled > 0 and hit == 0


def _key(name: str, args: tuple, kwargs: dict, static: dict) -> str:
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
    parts = [_environment(), name, str(tree), repr(sorted(static.items()))]
    parts += [_describe(x) for x in leaves]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _describe(x) -> str:
    if isinstance(x, jax.Array):
        return (f"array {x.shape} {x.dtype} weak={x.weak_type} "
                f"committed={getattr(x, 'committed', None)} {x.sharding}")
    if isinstance(x, (np.ndarray, np.generic)):
        return f"numpy {x.shape} {x.dtype}"
    return f"weak {type(x).__name__}"  # a Python number, traced by its type alone


def _environment() -> str:
    """What executables depend on besides the call: the process's fixed part (computed once)
    and jax's settings now."""
    global _setting
    if _setting is None:
        code = hashlib.sha256()
        package = Path(__file__).parents[1]  # every module of sweep: any may shape a trace
        for path in sorted(package.rglob("*.py")):
            code.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
        _setting = "\n".join([
            code.hexdigest(), jax.__version__, jaxlib.__version__,
            os.environ.get("XLA_FLAGS", ""), _host_cpu(),
            repr([(d.platform, d.device_kind, d.id, d.client.platform_version)
                  for d in jax.devices()]),
            # Arguments without a placement (numpy) run on this process's first device.
            f"process {jax.process_index()} local {[d.id for d in jax.local_devices()]}"])
    settings = sorted((k, repr(v)) for k, v in getattr(jax.config, "values", {}).items()
                      if not k.startswith(_NEUTRAL))
    return f"{_setting}\n{settings!r}"


def _host_cpu() -> str:
    """The CPU's model and instruction-set flags: XLA compiles a CPU program for the host's."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU part")
    seen = {}
    for line in lines:
        field, _, value = line.partition(":")
        if field.strip() in wanted:
            seen.setdefault(field.strip(), value.strip())
    return f"{platform.machine()} {sorted(seen.items())}"


def _load_or_compile(name: str, key: str, compile_now) -> jax.stages.Compiled:
    if _directory is None:
        return compile_now()[0]
    path = _directory / f"{name}-{key}.exe"
    lock = path.with_suffix(".lock")
    deadline = time.monotonic() + WAIT_S
    while True:
        exe = _load(path)
        if exe is not None:
            return exe
        try:
            _directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if _owner_gone(lock) or time.monotonic() > deadline:
                _remove(lock)
            else:
                time.sleep(0.05)
            continue
        except OSError:  # a directory that cannot be written: compile for this process only
            return compile_now()[0]
        with os.fdopen(fd, "w") as f:
            f.write(f"{socket.gethostname()} {os.getpid()}")
        try:
            exe = _load(path)  # finished by another process between the look and the lock
            if exe is None:
                exe, fresh = compile_now()
                if fresh:
                    _save(path, exe)
            return exe
        finally:
            _remove(lock)


def _load(path: Path) -> jax.stages.Compiled | None:
    try:
        with open(path, "rb") as f:
            blob, ids = pickle.load(f)
        # Left to itself, the loader would run the program on all of jax.devices(), which in
        # a jax.distributed process includes other processes' devices.
        by_id = {d.id: d for d in jax.devices()}
        exe = deserialize_and_load(*blob, execution_devices=[by_id[i] for i in ids])
        os.utime(path)  # recently used: evicted last
        return exe
    except FileNotFoundError:
        return None
    except Exception:  # a damaged or foreign file: compile again and replace it
        _remove(path)
        return None


def _save(path: Path, exe: jax.stages.Compiled) -> None:
    try:
        ids = [d.id for d in exe.runtime_executable().local_devices()]
        blob = pickle.dumps((serialize(exe), ids))
    except Exception:  # a backend that cannot serialize: kept in memory only
        return
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    except OSError:
        _remove(tmp)
        return
    _evict(path.parent)


def _evict(folder: Path) -> None:
    """Remove the least recently used executables while they hold more than ``MAX_BYTES``
    (every code change and every new shape writes new ones)."""
    files = []
    for f in folder.glob("*.exe"):
        try:
            st = f.stat()
        except OSError:
            continue
        files.append((st.st_mtime, st.st_size, f))
    total = sum(size for _, size, _ in files)
    for _, size, f in sorted(files):
        if total <= MAX_BYTES:
            break
        _remove(f)
        total -= size


def _owner_gone(lock: Path) -> bool:
    """Whether the process that wrote ``lock`` on this host has ended (a crashed compilation
    must not keep others waiting)."""
    try:
        host, pid = lock.read_text().split()
        pid = int(pid)
    except (OSError, ValueError):  # gone, not written yet, or its writer died before writing
        try:
            return time.time() - lock.stat().st_mtime > LOCK_UNWRITTEN_S
        except OSError:
            return True
    if host != socket.gethostname():
        return False
    if pid == os.getpid():  # a dead process's lock, its number reused by this one
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
