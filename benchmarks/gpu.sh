#!/usr/bin/env bash
# One short run on a GPU machine that prints every figure of benchmarks/README.md's GPU table
# and keeps the log under benchmarks/results/ (or $OUT when set) with the date and the device.
# Needs jax with its CUDA plugin, numpy, pandas, pyarrow and pytest; nothing is installed.
# Each stage has a time limit (seconds: STAGE_S, default 170), so that one slow stage still
# leaves the others their figures; the whole script stays under ~15 minutes.
set -u -o pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1
stage="${STAGE_S:-170}"
dest="${OUT:-benchmarks/results}"
mkdir -p "$dest"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' '-')
log="$dest/gpu-$(date -u +%Y-%m-%d)-${gpu:-unknown}.txt"
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  # Without a GPU the stages below would run the CPU path for many minutes: stop at once.
  python3 -c "import jax; print('jax', jax.__version__, jax.devices()); \
assert jax.default_backend() == 'gpu', 'no GPU backend: ' + jax.default_backend()" || exit 1
  echo "== the brief, 72 designs x 16 seeds"
  timeout "$stage" python3 benchmarks/throughput.py --seeds 16 --chunk-size 1152 --twin-sims 4
  echo "== a 100,000-simulation study (72 designs x 1389 seeds)"
  timeout "$stage" python3 benchmarks/throughput.py --seeds 1389 --chunk-size 16384 --twin-sims 0
  echo "== engine vs twin on the GPU"
  timeout "$stage" python3 -m pytest -q -x -p no:cacheprovider tests/test_twin_agreement.py
  echo "== 10,000 sessions on 16 replicas, and 64 designs of it"
  timeout "$stage" python3 benchmarks/sessions.py
  timeout "$stage" python3 benchmarks/sessions.py --designs 64
} 2>&1 | tee "$log"
