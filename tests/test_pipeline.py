"""Pipeline parallelism: the pass through the stages (the bubble, micro-batches, an unsplit
prefill, the sends within and between nodes), the memory and price of every stage, the launch
flags and the one-line refusals. Fast: no engine is compiled here (the engine and the twin
agree on staged designs in tests/test_twin_agreement.py)."""
from __future__ import annotations

import numpy as np
import pytest

from sweep.analysis.launch import launch_sglang, launch_vllm
from sweep.errors import FieldError
from sweep.physics.hardware import get_gpu
from sweep.physics.models import Model
from sweep.physics.timing import pass_time, stage_hops, staged
from sweep.study.config import ConfigError, parse_study
from sweep.study.design import Design

#: Llama-3.2-1B's shape on 8 layers: fewer layers than 12 stages.
EIGHT_LAYERS = Model.gqa("eight-layers", 0.9e9, 0.9e9, 8, 2048, 32, 8, 64, 8192, 128256, 131072)


def _design(**kw) -> Design:
    d = Design(**{"gpu": "H100-SXM", "model": "Llama-3.1-405B", "gpus": 8, "weight_bits": 16,
                  "pipeline_parallel": 2, **kw})
    d.validate()
    return d


def _staged(p, prefill=0.0, pairs=0.0, seqs=0.0, context=0.0, longest=0.0, longest_pairs=0.0):
    n = seqs + (1.0 if prefill else 0.0)
    return float(staged(pass_time, p, prefill, pairs, seqs, context, n, longest, longest_pairs))


def test_one_stage_is_the_pass_time_to_the_bit():
    p = _design(weight_bits=8, pipeline_parallel=1).timing()
    rng = np.random.default_rng(3)
    for _ in range(50):
        prefill, seqs = float(rng.integers(0, 4000)), float(rng.integers(0, 200))
        args = (prefill, prefill * (prefill + 1) / 2, seqs, seqs * float(rng.integers(1, 3000)))
        assert _staged(p, *args, longest=prefill, longest_pairs=args[1]) == \
            float(pass_time(p, *args))


def test_a_lone_sequence_waits_for_every_stage_and_a_full_pipeline_shares_them():
    """One decoding sequence goes through both stages alone (the bubble): the whole model's
    time on one stage's GPUs, plus a send. Two hundred go as two micro-batches of a hundred,
    each the whole model's time on its share: the weights are read once per micro-batch."""
    p = _design().timing()
    sends = p.pp_send_s + p.pp_send_s_per_token
    assert _staged(p, seqs=1, context=1000) == pytest.approx(
        float(pass_time(p, 0.0, 0.0, 1.0, 1000.0)) + sends, rel=1e-12)
    full = _staged(p, seqs=200, context=200 * 1000)
    assert full == pytest.approx(float(pass_time(p, 0.0, 0.0, 100.0, 100 * 1000.0))
                                 + p.pp_send_s + 100 * p.pp_send_s_per_token, rel=1e-12)
    one_stage = float(pass_time(p, 0.0, 0.0, 200.0, 200 * 1000.0))
    assert full < one_stage < 2 * full  # weights read twice, KV once


def test_a_prefill_is_not_split_between_micro_batches():
    p = _design().timing()
    split = _staged(p, prefill=4000, pairs=4000 * 4001 / 2, seqs=3, context=3000,
                    longest=1000, longest_pairs=1000 * 1001 / 2)
    lone = _staged(p, prefill=4000, pairs=4000 * 4001 / 2, seqs=3, context=3000,
                   longest=4000, longest_pairs=4000 * 4001 / 2)
    assert lone > split
    assert lone == pytest.approx(float(pass_time(p, 4000.0, 4000 * 4001 / 2, 0.0, 0.0))
                                 + p.pp_send_s + 4000 * p.pp_send_s_per_token, rel=1e-12)


def test_stages_send_within_a_node_or_over_its_network():
    h100 = get_gpu("H100-SXM")
    assert stage_hops(h100, 8, 2) == (0, 1) and stage_hops(h100, 2, 4) == (3, 0)
    assert stage_hops(h100, 4, 4) == (2, 1) and stage_hops(get_gpu("GB200"), 8, 4) == (3, 0)
    two_nodes = _design().timing()
    assert two_nodes.pp_send_s == pytest.approx(10e-6)
    # 4 x hidden bytes a token, over 8 GPUs' 400 Gb/s links at 90%
    assert two_nodes.pp_send_s_per_token == pytest.approx(4 * 16384 / 8 / (50e9 * 0.9))
    slow = _design(internode_gbps=100.0).timing()
    assert slow.pp_send_s_per_token == pytest.approx(4 * two_nodes.pp_send_s_per_token)
    one_node = _design(model="Llama-3-70B", gpus=4, weight_bits=8).timing()
    assert one_node.pp_send_s == pytest.approx(5e-6)
    assert one_node.pp_send_s_per_token < two_nodes.pp_send_s_per_token


def test_stages_hold_the_layers_in_every_stage_s_memory_at_every_gpu_s_price():
    two = _design()
    fp8 = _design(weight_bits=8, pipeline_parallel=1)
    assert (two.server_gpus, two.total_gpus, fp8.server_gpus) == (16, 16, 8)
    assert two.usd_per_hour == pytest.approx(2 * fp8.usd_per_hour)
    assert two.budget().weights_gib == pytest.approx(2 * fp8.budget().weights_gib)
    assert two.budget().total_gib == pytest.approx(2 * fp8.budget().total_gib)
    assert two.replace(replicas=3).total_gpus == 48
    tier = dict(weight_bits=8, prefix_cache=True, kv_offload_gib=256.0)
    _, one_stage = _design(pipeline_parallel=1, **tier).host_tier()
    _, two_stages = _design(**tier).host_tier()
    assert two_stages == pytest.approx(one_stage / 2)  # every stage's GPUs load their share
    pools = Design(gpu="H100-SXM", model="Llama-3.1-405B", weight_bits=16, prefill_gpus=8,
                   decode_gpus=8, pipeline_parallel=2)
    pools.validate()
    assert pools.total_gpus == 32


def test_launch_commands_name_the_stages_and_the_nodes():
    row = {"gpu": "H100-SXM", "model": "Llama-3.1-405B", "gpus": 8, "pipeline_parallel": 2,
           "weight_bits": 16, "batching": "continuous", "kv_cache": "paged", "max_batch": 256,
           "block_size": 16}
    vllm, sglang = launch_vllm(row), launch_sglang(row)
    assert "--tensor-parallel-size 8" in vllm and "--pipeline-parallel-size 2" in vllm
    assert "--pp-size 2" in sglang
    assert "on 16 x H100-SXM (2 nodes of 8)" in vllm
    assert "pipeline" not in launch_vllm({**row, "pipeline_parallel": 1})


@pytest.mark.parametrize("kw,key", [
    (dict(model="gpt-oss-120b", gpus=2, data_parallel=2, expert_parallel=True),
     "levers.pipeline_parallel"),
    (dict(model=EIGHT_LAYERS, pipeline_parallel=12, gpus=1), "levers.pipeline_parallel"),
    (dict(gpu="Apple-M3-Max", model="Llama-3.2-1B", gpus=1), "levers.pipeline_parallel"),
    (dict(pipeline_parallel=17), "levers.pipeline_parallel"),
    (dict(internode_gbps=0.0), "hardware.internode_gbps"),
])
def test_refusals_name_the_lever_in_one_line(kw, key):
    kw = {"gpu": "H100-SXM", "model": "Llama-3.1-405B", "gpus": 8, "weight_bits": 16,
          "pipeline_parallel": 2, **kw}
    with pytest.raises(FieldError) as info:
        Design(**kw).validate()
    assert info.value.key == key and "\n" not in str(info.value)
    assert ("allowed:" in str(info.value) or "must be" in str(info.value))
    assert len(str(info.value)) <= 300


def test_a_config_refuses_a_link_between_nodes_without_stages():
    text = ('name = "x"\n[hardware]\ngpu = "H100-SXM"\ninternode_gbps = 200\n'
            '[model]\nname = "Llama-3-8B"\n[workload]\nduration_s = 1.0\n')
    with pytest.raises(ConfigError, match="internode_gbps"):
        parse_study(text)
    staged_text = text.replace("[workload]", "[levers]\npipeline_parallel = 2\n[workload]")
    assert parse_study(staged_text).points[0].design.resolved("internode_gbps") == 200
