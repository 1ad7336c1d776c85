"""The capacity search against one sweep of the same config: wall time as a ratio, measured in
one run (the first of each command compiles or loads its executables; the later ones are timed).

    python benchmarks/capacity.py [--config configs/serve_a_model.toml] [--repeats 2]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweep.cli", *args], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/serve_a_model.toml")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs of each (after a warm-up)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        run = ["run", args.config, "--out", f"{tmp}/run", "--force", "--quiet"]
        cap = ["capacity", args.config, "--out", f"{tmp}/cap", "--force", "--quiet"]
        cold = {"run": timed(run), "capacity": timed(cap)}
        warm = {"run": [], "capacity": []}
        for _ in range(args.repeats):  # alternating, so drift affects both alike
            warm["run"].append(timed(run))
            warm["capacity"].append(timed(cap))
    med = {k: statistics.median(v) for k, v in warm.items()}
    print(f"first runs: sweep run {cold['run']:.1f} s, sweep capacity {cold['capacity']:.1f} s "
          f"(ratio {cold['capacity'] / cold['run']:.2f})")
    print(f"later runs (median of {args.repeats}): sweep run {med['run']:.1f} s, sweep capacity "
          f"{med['capacity']:.1f} s (ratio {med['capacity'] / med['run']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
