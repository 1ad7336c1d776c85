"""Fixtures shared by the test files: a small study, and sweeps run once per test run (a
sweep's compiled engine and its results folder serve every test that asks for them)."""
import pytest
from hypothesis import settings

from sweep.cli import main
from sweep.commands.common import use_executable_cache

# The engines tests call from Python keep their executables where the commands do: the
# processes running the suite load what another compiled (the agreement tests share one).
use_executable_cache()

# Property-based tests draw the same examples on every run (a suite that passes passes again)
# and keep no example database on disk.
settings.register_profile("servesweep", derandomize=True, database=None)
settings.load_profile("servesweep")

#: 16 designs (2 rates x 2 batchings x 1-2 GPUs x 0/2 draft tokens) x 3 seeds, 40 short requests
#: each into 8 seats: a sweep of a few seconds with every kind of lever column.
SMALL_STUDY = """
name = "small"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = [20.0, 40.0]
num_requests = 40
prompt_tokens = { dist = "exponential", mean = 256 }
output_tokens = { dist = "exponential", mean = 16 }
[levers]
batching = ["static", "continuous"]
gpus = [1, 2]
weight_bits = 16
draft_tokens = [0, 2]
max_batch = 8
[run]
seeds = 3
[brief]
p95_ttft_s = { max = 0.5 }
p95_itl_ms = { max = 15 }
cost_per_mtok = { max = 1.0 }
"""


@pytest.fixture(scope="session")
def small_study() -> str:
    """The small study's config text."""
    return SMALL_STUDY


@pytest.fixture(scope="session")
def swept(tmp_path_factory):
    """``swept(text, *flags)``: (config file, results folder) of ``sweep run`` on ``text``
    with ``flags``, run once per test run for each text and flags."""
    done = {}

    def run(text: str, *flags: str):
        if (text, flags) not in done:
            root = tmp_path_factory.mktemp("swept")
            cfg, out = root / "study.toml", root / "out"
            cfg.write_text(text)
            assert main(["run", str(cfg), "--out", str(out), *flags]) == 0
            done[text, flags] = cfg, out
        return done[text, flags]

    return run


@pytest.fixture(scope="session")
def small_run(swept, small_study):
    """(config file, results folder) of the small study's sweep, with per-request rows."""
    return swept(small_study, "--per-request", "--quiet")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Each test file's compiled programs are released after it. A process that held the whole
    suite's at once crashed inside XLA's CPU compiler (or its executable loader) late in the
    run, on a 2-core machine; released file by file, the suite runs through. Every CPU
    executable holds memory mappings, which the kernel limits per process."""
    yield
    import gc

    import jax

    from sweep.runtime import executables
    executables._loaded.clear()
    jax.clear_caches()
    gc.collect()
