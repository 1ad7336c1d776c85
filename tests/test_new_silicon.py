"""The GPUs added beside the fitted ones: their datasheet figures, the links they all-reduce
over, whose fitted factors each takes, and a tiny sweep on each. The sweep runs every GPU as
one grid axis of one study (same shapes: one compile)."""
from __future__ import annotations

import math

import pytest

from sweep.execution.runner import run_study
from sweep.physics.hardware import CATALOG, get_gpu
from sweep.study.config import parse_study

#: name: (memory GiB, bandwidth TB/s, dense 16/8/4-bit TFLOP/s, link, per-direction GB/s,
#: the fitted GPU whose factors it takes). Sources: sweep/physics/gpu_catalog.py.
NEW = {
    "A100-40GB": (40, 1.555, (312.0, 624.0, 1248.0), "nvlink", 300, "A100-80GB"),
    "H100-PCIe": (80, 2.0, (756.5, 1513.0, 1513.0), "pcie", 64, "H100-SXM"),
    "H20": (96, 4.0, (148.0, 296.0, 296.0), "nvlink", 450, "H100-SXM"),
    "L4": (23034 / 1024, 0.3, (121.0, 242.5, 242.5), "pcie", 32, "L40S"),
    "GH200": (96, 4.0, (989.4, 1978.9, 1978.9), "nvlink", 450, "H100-SXM"),
    "RTX-PRO-6000": (97887 / 1024, 1.597, (500.0, 1000.0, 2000.0), "pcie", 64, "B200"),
    "RTX-PRO-4500": (32623 / 1024, 0.896, (219.7, 439.5, 879.0), "pcie", 64, "B200"),
    "RTX-4090": (24564 / 1024, 1.008, (165.2, 330.3, 330.3), "pcie", 32, "L40S"),
}


@pytest.mark.parametrize("name", sorted(NEW))
def test_each_new_gpu_has_its_datasheet_and_takes_its_generations_fit(name):
    """The transfer rule: a fitted GPU of its generation, the nearest in bandwidth (H20 and
    GH200, 4.0 TB/s, are nearer the H100's 3.35 than the H200's 4.8 on a log scale)."""
    g = get_gpu(name)
    memory, bandwidth, peaks, link, gbs, donor = NEW[name]
    assert (g.memory_gib, g.bandwidth_tbs) == (pytest.approx(memory), bandwidth)
    assert (g.tflops_16bit, g.tflops_8bit, g.tflops_4bit) == peaks
    assert g.interconnect_gbs == gbs and g.price_per_gpu_hour > 0 and g.source.strip()
    pcie, nvlink = get_gpu("L40S"), get_gpu("H100-SXM")  # the two kinds of link
    assert g.allreduce_latency_us == (pcie if link == "pcie" else nvlink).allreduce_latency_us
    assert g.calibration == f"transferred:{donor}"
    assert g.bandwidth_efficiency == CATALOG[donor].bandwidth_efficiency
    assert g.model_error.speed_sd >= CATALOG[donor].model_error.speed_sd


def test_the_new_precisions_run_where_the_chip_has_them():
    """FP8 on Ada, Hopper and Blackwell (not the A100's INT8 path); FP4 on Blackwell only."""
    from sweep.physics.catalog import get_model
    fp8 = get_model("DeepSeek-V3")
    assert [fp8.activation_bits(get_gpu(n), None) for n in ("A100-40GB", "L4", "RTX-4090",
                                                            "H20", "RTX-PRO-4500")] == [
        16, 8, 8, 8, 8]
    assert [get_gpu(n).has_activation_bits(4) for n in sorted(NEW)] == [
        n in ("A100-40GB", "RTX-PRO-4500", "RTX-PRO-6000") for n in sorted(NEW)]


TINY = """name = "new-silicon"
[hardware]
gpu = [{gpus}]
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 8
prompt_tokens = {{ dist = "fixed", mean = 64 }}
output_tokens = {{ dist = "fixed", mean = 8 }}
[levers]
max_batch = 4
[run]
seeds = 1
"""


@pytest.fixture(scope="module")
def runs():
    gpus = ", ".join(f'"{n}"' for n in NEW)
    return run_study(parse_study(TINY.format(gpus=gpus))).runs


@pytest.mark.parametrize("name", sorted(NEW))
def test_a_tiny_sweep_runs_on_each_new_gpu(runs, name):
    rows = runs[runs["gpu"] == name]
    assert len(rows) == 1
    for metric in ("mean_ttft_s", "p95_ttft_s", "mean_e2e_s", "p95_e2e_s", "mean_tpot_ms"):
        v = float(rows[metric].iloc[0])
        assert math.isfinite(v) and v > 0, metric
