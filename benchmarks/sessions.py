"""A workload of sessions at scale: many users' chat sessions on replicas behind the session
router (or another), with prefix caching, in one ``sweep run``.

    python benchmarks/sessions.py                                # 10,000 sessions, 16 replicas
    python benchmarks/sessions.py --sessions 1000 --replicas 4   # a quicker look
    python benchmarks/sessions.py --designs 64                   # a sweep of 64 designs of it
    python benchmarks/sessions.py --sessions 100 --replicas 4 --router prefix_aware

Writes the config it runs (beside its results, under a temporary folder), then prints the
requests (turns) simulated, the wall time of the run (compilation included), the peak host
memory (RSS) and the peak device memory where the device reports it. Run by hand; never a timed
test.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import resource
import tempfile
import time
from pathlib import Path

import jax
import pandas as pd

from sweep.cli import main as sweep_main

CONFIG = """name = "sessions_scale"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.1-8B"
[workload]
arrival = "closed"
concurrency = {users}
num_requests = {sessions}
think_time_s = 5.0
turns = {{ dist = "uniform", low = 1, high = {turns} }}
prompt_tokens = {{ dist = "uniform", low = 200, high = 2000 }}
turn_tokens = {{ dist = "uniform", low = 20, high = 400 }}
output_tokens = {{ dist = "uniform", low = 20, high = 300 }}
[levers]
{levers}
prefix_cache = true
replicas = {replicas}
router = "{router}"
[run]
seeds = 1
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--users", type=int, default=None, help="default: 32 per replica")
    ap.add_argument("--turns", type=int, default=8, help="most turns per session")
    ap.add_argument("--designs", type=int, choices=(1, 64), default=1,
                    help="64: seats, token budget and CPU tier as axes, 4 values each")
    ap.add_argument("--router", default="session",
                    choices=("session", "round_robin", "least_outstanding", "prefix_aware"),
                    help="the others route each turn as it arrives, found in rounds")
    args = ap.parse_args()
    levers = ("max_batch = 128\nmax_num_batched_tokens = 8192" if args.designs == 1 else
              "max_batch = [32, 64, 128, 256]\nmax_num_batched_tokens = [2048, 4096, 8192, 16384]"
              "\nkv_offload_gib = [0.0, 64.0, 256.0, 1024.0]")
    users = args.users or 32 * args.replicas
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "sessions_scale.toml"
        cfg.write_text(CONFIG.format(users=users, sessions=args.sessions, turns=args.turns,
                                     replicas=args.replicas, levers=levers,
                                     router=args.router))
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):  # the verdict: not a figure here
            code = sweep_main(["run", str(cfg), "--out", str(Path(tmp) / "out"), "--quiet"])
        wall = time.perf_counter() - start
        runs = pd.read_parquet(Path(tmp) / "out" / "runs.parquet") if code == 0 else None
    stats = getattr(jax.devices()[0], "memory_stats", lambda: None)() or {}
    print(f"device {jax.devices()[0].device_kind}; {args.designs} design(s) of {args.sessions} "
          f"sessions (at most {args.turns} turns), {users} users, {args.replicas} replicas, "
          f"router {args.router}: "
          f"exit {code}")
    if runs is not None:
        r = runs.iloc[0]
        print(f"  {len(runs)} runs; the first: {int(r['requests'])} requests, "
              f"{int(r['completed'])} completed, prefix_token_hit_rate "
              f"{r['prefix_token_hit_rate']:.3f}, p95 TTFT {r['p95_ttft_s']:.3f} s, "
              f"{r['tokens_per_s']:.0f} tokens/s")
    print(f"  wall {wall:.1f} s; peak host memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB"
          + (f"; peak device memory {stats['peak_bytes_in_use'] / 1e9:.2f} GB"
             if "peak_bytes_in_use" in stats else ""))


if __name__ == "__main__":
    main()
