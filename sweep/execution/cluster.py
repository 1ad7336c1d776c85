"""Which process of a multi-machine sweep this is: from flags, else from the launcher's
environment (SLURM's srun, a Kubernetes Indexed Job, or servesweep's own variables).

Every process runs the same command; process ``i`` of ``n`` simulates every n-th simulation
starting at the i-th and writes its own parts into the shared results folder.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

#: Environment variables read when the flags are not given, in order of precedence.
COORDINATOR_ENV = ("SERVESWEEP_COORDINATOR",)
NUM_PROCESSES_ENV = ("SERVESWEEP_NUM_PROCESSES", "SLURM_NTASKS")
PROCESS_ID_ENV = ("SERVESWEEP_PROCESS_ID", "SLURM_PROCID", "JOB_COMPLETION_INDEX")


@dataclass(frozen=True)
class Cluster:
    coordinator: str | None  # HOST:PORT of process 0; None: JAX finds it (inside srun)
    num_processes: int
    process_id: int


def _from_env(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    return next(((n, env[n]) for n in names if env.get(n, "").strip()), None)


def _count(flag: str, value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{flag}: expected an integer, got {value!r}") from None


def resolve(coordinator: str | None, num_processes: int | None, process_id: int | None,
            env: Mapping[str, str]) -> Cluster | None:
    """The cluster this process belongs to, or None for a single-process sweep."""
    if num_processes is None:
        found = _from_env(env, NUM_PROCESSES_ENV)
        num_processes = _count(f"{found[0]} (--num-processes)", found[1]) if found else 1
    if num_processes < 1:
        raise ValueError(f"--num-processes: {num_processes}; allowed: an integer >= 1")
    if num_processes == 1:
        return None
    if process_id is None:
        found = _from_env(env, PROCESS_ID_ENV)
        if found is None:
            raise ValueError(f"--process-id: missing with {num_processes} processes; allowed: "
                             f"the flag or one of {', '.join(PROCESS_ID_ENV)}")
        process_id = _count(f"{found[0]} (--process-id)", found[1])
    if not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id: {process_id}; allowed: 0 to {num_processes - 1}")
    if coordinator is None:
        found = _from_env(env, COORDINATOR_ENV)
        coordinator = found[1] if found else None
    if coordinator is None and "SLURM_STEP_NODELIST" not in env:
        raise ValueError(f"--coordinator: missing with {num_processes} processes; allowed: "
                         f"HOST:PORT of process 0 (or {COORDINATOR_ENV[0]}; found by itself "
                         "inside srun)")
    if coordinator is not None and not _host_port(coordinator):
        raise ValueError(f"--coordinator: {coordinator!r}; allowed: HOST:PORT")
    return Cluster(coordinator, num_processes, process_id)


def _host_port(text: str) -> bool:
    host, _, port = text.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def initialize(cluster: Cluster) -> None:
    """Join the cluster (before JAX touches a device); blocks until every process has joined."""
    import jax

    jax.distributed.initialize(cluster.coordinator, cluster.num_processes, cluster.process_id)


def barrier(name: str) -> None:
    """Wait until every process of the cluster gets here (no-op for one process)."""
    import jax

    if jax.process_count() > 1:
        from jax.experimental.multihost_utils import sync_global_devices

        sync_global_devices(name)
