"""Expert parallelism and data-parallel attention: the busiest GPU's load, the all-to-all, the
memory of ranks sharing experts, the price of every GPU, and the one-line refusals. Fast."""
from __future__ import annotations

import numpy as np
import pytest

from sweep.errors import FieldError
from sweep.physics.timing import pass_time
from sweep.study.design import Design


def _design(**kw) -> Design:
    d = Design(gpu="H200", model="gpt-oss-120b", **kw)
    d.validate()
    return d


def test_the_busiest_gpu_load_is_the_expected_maximum_of_routed_tokens():
    """128 experts, top-4, over 8 GPUs: the formula's busiest-GPU load against routing drawn at
    random (each token picks 4 distinct experts)."""
    p = _design(gpus=8, expert_parallel=True).timing()
    rng = np.random.default_rng(0)
    for tokens in (16, 256):
        draws = rng.random((1000, tokens, 128), dtype=np.float32)
        picks = np.argsort(draws, axis=2)[:, :, :4]  # each token's top-4 of 128
        per_gpu = np.stack([(picks // 16 == g).sum(axis=(1, 2)) for g in range(8)], axis=1)
        drawn = per_gpu.max(axis=1).mean()
        mean = tokens * p.expert_k / p.ep_gpus
        formula = min(mean + p.ep_load_z * np.sqrt(tokens * p.ep_load_var),
                      tokens * p.ep_load_cap)
        assert formula == pytest.approx(drawn, rel=0.05)
        assert formula > mean


def test_experts_sharded_cost_their_imbalance_and_ranks_their_all_to_all():
    tp = _design(gpus=8).timing()
    ep = _design(gpus=8, expert_parallel=True).timing()
    dp = _design(gpus=2, data_parallel=4, expert_parallel=True).timing()
    assert (tp.ep, ep.ep, ep.dp, dp.dp, dp.ep_gpus) == (0.0, 1.0, 1.0, 4.0, 8.0)
    # Within one rank every GPU has every token: no all-to-all; across ranks there is one.
    assert ep.a2a_latency_s == ep.a2a_s_per_token == 0.0
    assert dp.a2a_latency_s > 0 and dp.a2a_s_per_token > 0
    prefill = (8192.0, 8192.0 * 8193 / 2, 0.0, 0.0)  # compute-bound: the busiest GPU shows
    assert pass_time(ep, *prefill) > pass_time(tp, *prefill)
    decode = (0.0, 0.0, 64.0, 64 * 1000.0)
    assert pass_time(ep, *decode) == pytest.approx(pass_time(tp, *decode), rel=0.05)
    # Four ranks each attend to a quarter of the batch over a quarter of the GPUs.
    assert pass_time(dp, *decode) != pass_time(tp, *decode)


def test_ranks_share_the_experts_and_hold_their_own_kv_and_seats():
    one = _design(gpus=2, expert_parallel=True)
    four = _design(gpus=2, data_parallel=4, expert_parallel=True, max_batch=64)
    m = one.model_spec
    dense = m.weight_bytes(None) - m.expert_bytes(None)
    gib = 1024**3
    assert four.budget().weights_gib == pytest.approx((m.weight_bytes(None) + 3 * dense) / gib)
    assert four.budget().kv_tokens > 4 * one.budget().kv_tokens  # the experts are shared
    assert (four.seats, four.server_gpus, four.total_gpus) == (256, 8, 8)
    assert four.replace(replicas=3).total_gpus == 24
    from sweep.engine.params import engine_params
    assert float(engine_params(four).summary.gpus) == 8.0  # the price counts every GPU


def test_ranks_spanning_nodes_send_their_all_to_all_over_the_network():
    """16 GPUs on two 8-GPU nodes: half of each GPU's all-to-all bytes cross a 400 Gb/s NIC, far
    slower than NVLink, so the network's share sets a phase's time, and its latency."""
    one = _design(gpus=1, data_parallel=8, expert_parallel=True).timing()
    two = _design(gpus=1, data_parallel=16, expert_parallel=True, max_batch=64).timing()
    m = _design().model_spec
    phases = 2.0 * m.moe_layers * m.experts_per_token * m.hidden * 2.0
    assert two.a2a_s_per_token == pytest.approx(phases / 16 * 8 / 16 / (50e9 * 0.9))
    assert two.a2a_s_per_token < one.a2a_s_per_token  # each GPU's tokens halve
    assert two.a2a_latency_s == pytest.approx(2 * m.moe_layers * max(21.8, 10.0) * 1e-6)
    slow = _design(gpus=1, data_parallel=16, expert_parallel=True, max_batch=64,
                   internode_gbps=100.0).timing()
    assert slow.a2a_s_per_token == pytest.approx(4 * two.a2a_s_per_token)
    assert slow.a2a_s_per_token > 2 * one.a2a_s_per_token
    assert _design(gpus=1, data_parallel=16, expert_parallel=True, max_batch=64).server_gpus == 16


def test_mla_kv_is_replicated_so_data_parallel_attention_holds_more():
    tp8 = Design(gpu="H200", model="DeepSeek-V3", gpus=8)
    dp8 = Design(gpu="H200", model="DeepSeek-V3", gpus=1, data_parallel=8, expert_parallel=True)
    assert dp8.kv_tokens() > 4 * tp8.kv_tokens()


@pytest.mark.parametrize("kw,key", [
    (dict(model="Llama-3-8B", expert_parallel=True), "levers.expert_parallel"),
    (dict(data_parallel=2), "levers.data_parallel"),
    (dict(data_parallel=2, expert_parallel=True, batching="static"), "levers.data_parallel"),
    (dict(gpu="Apple-M3-Max", model="gpt-oss-20b", data_parallel=2, expert_parallel=True),
     "levers.data_parallel"),
    (dict(gpu="RTX-PRO-4500", model="gpt-oss-20b", gpus=8, data_parallel=2,
          expert_parallel=True), "levers.gpus"),
    # a token budget is each rank's: it must hold a pass decoding every seat of one rank
    (dict(data_parallel=2, expert_parallel=True, max_num_batched_tokens=200),
     "levers.max_num_batched_tokens"),
    # a pool's own ranks, named by its key
    (dict(prefill_gpus=2, decode_gpus=2, decode_data_parallel=2), "levers.decode_data_parallel"),
    (dict(prefill_gpus=2, decode_gpus=2, prefill_data_parallel=2, expert_parallel=True,
          batching="static"), "levers.prefill_data_parallel"),
])
def test_refusals_name_the_lever_in_one_line(kw, key):
    kw = {"gpu": "H200", "model": "gpt-oss-120b", **kw}
    with pytest.raises(FieldError) as info:
        Design(**kw).validate()
    assert info.value.key == key and "\n" not in str(info.value)
    assert "allowed:" in str(info.value) and len(str(info.value)) <= 300
