"""Several processes share a sweep (jax.distributed, a loopback coordinator, CPU): each writes its
own parts into the same folder, the last to finish joins them, and the tables equal a
single-process run. Also: which process this is, from flags or a launcher's environment."""
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweep.analysis.results import load_results
from sweep.cli import main
from sweep.execution.cluster import Cluster, resolve

REPO = Path(__file__).parents[1]
STUDY = """
name = "shared"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = [10.0, 40.0]
num_requests = 40
prompt_tokens = { dist = "exponential", mean = 256 }
output_tokens = { dist = "exponential", mean = 16 }
[levers]
batching = ["static", "continuous"]
max_batch = 8
[run]
seeds = 5
"""
ARGS = ["--chunk-size", "2", "--per-request", "--quiet"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_write_one_dataset(tmp_path):
    cfg = tmp_path / "study.toml"
    cfg.write_text(STUDY)
    out = tmp_path / "shared"
    # The second pair loads the executables the first one wrote.
    for folder in (tmp_path / "compiled", out):
        env = {**os.environ, "PYTHONPATH": str(REPO), "SERVESWEEP_CACHE": str(tmp_path / "cache"),
               "SERVESWEEP_COORDINATOR": f"127.0.0.1:{_free_port()}",
               "SERVESWEEP_NUM_PROCESSES": "2"}
        procs = [subprocess.Popen([sys.executable, "-m", "sweep.cli", "run", str(cfg), "--out",
                                   str(folder), *ARGS, "--process-id", str(i)], env=env,
                                  cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
                 for i in range(2)]
        for p in procs:
            _, err = p.communicate(timeout=600)
            assert p.returncode == 0, err
    assert list((tmp_path / "cache" / "executables").glob("*.exe"))
    parts = sorted(p.name for p in (out / "parts").glob("runs-*.parquet"))
    assert any("-p00000-" in p for p in parts) and any("-p00001-" in p for p in parts)
    shared = load_results(out)
    assert shared.meta["processes"] == 2
    assert main(["run", str(cfg), "--out", str(tmp_path / "alone"), *ARGS]) == 0
    alone = load_results(tmp_path / "alone")
    pd.testing.assert_frame_equal(shared.runs, alone.runs)
    pd.testing.assert_frame_equal(shared.designs, alone.designs)
    pd.testing.assert_frame_equal(shared.requests, alone.requests)
    # 'sweep merge' joins the same parts into the same tables.
    (out / "runs.parquet").unlink()
    assert main(["merge", str(out)]) == 0
    pd.testing.assert_frame_equal(load_results(out).runs, alone.runs)


@pytest.mark.parametrize("env, flags, want", [
    ({}, (None, None, None), None),
    ({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, (None, None, None), None),
    ({}, ("host:1234", 4, 2), Cluster("host:1234", 4, 2)),
    ({"SERVESWEEP_COORDINATOR": "10.0.0.1:7777", "SERVESWEEP_NUM_PROCESSES": "3",
      "SERVESWEEP_PROCESS_ID": "1"}, (None, None, None), Cluster("10.0.0.1:7777", 3, 1)),
    # srun: count and rank from SLURM, the coordinator found by JAX from the step's nodes.
    ({"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_STEP_NODELIST": "node[01-04]"},
     (None, None, None), Cluster(None, 8, 5)),
    # A Kubernetes Indexed Job: the pod's index is the process id.
    ({"JOB_COMPLETION_INDEX": "2", "SERVESWEEP_COORDINATOR": "sweep-0.sweep:1234"},
     (None, 4, None), Cluster("sweep-0.sweep:1234", 4, 2)),
    ({"SLURM_PROCID": "3"}, ("h:1", 4, 0), Cluster("h:1", 4, 0)),  # flags win
])
def test_which_process_this_is(env, flags, want):
    assert resolve(*flags, env) == want


@pytest.mark.parametrize("env, flags, needle", [
    ({}, ("h:1", 2, None), "--process-id"),
    ({}, ("h:1", 2, 2), "allowed: 0 to 1"),
    ({}, (None, 2, 0), "--coordinator"),
    ({}, ("no-port", 2, 0), "HOST:PORT"),
    ({"SLURM_NTASKS": "four"}, (None, None, None), "SLURM_NTASKS"),
])
def test_bad_cluster_settings_are_one_line_usage_errors(env, flags, needle, tmp_path, capsys,
                                                        monkeypatch):
    with pytest.raises(ValueError, match=needle):
        resolve(*flags, env)
    cfg = tmp_path / "study.toml"
    cfg.write_text(STUDY)
    coordinator, n, pid = flags
    argv = ["run", str(cfg), "--out", str(tmp_path / "o")]
    argv += ["--coordinator", coordinator] if coordinator else []
    argv += ["--num-processes", str(n)] if n else []
    argv += ["--process-id", str(pid)] if pid is not None else []
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle.split()[0] in err[0]
    assert not (tmp_path / "o").exists()
