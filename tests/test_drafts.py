"""Speculative drafts (``levers.draft``): a separate draft model as before, MTP layers and
EAGLE-3 heads costed from the target's layers, their per-position acceptance tables, memory,
refusals and agreement of the engine with the twin."""
import numpy as np
import pytest

from sweep.engine.params import engine_params
from sweep.errors import FieldError
from sweep.physics.catalog import get_model
from sweep.physics.drafts import CONDITIONAL, accepted_at_least, cost_share
from sweep.physics.hardware import get_gpu
from sweep.physics.hf_config import load_hf_config
from sweep.physics.rng import UNIFORM_RANGE, acceptance_thresholds
from sweep.physics.timing import timing_params
from sweep.study.design import Design
from sweep.study.fields import MAX_DRAFT_TOKENS
from sweep.study.workload import Lengths, Workload, sample_n
from tests.helpers import against_the_twin, run_cases

DEEPSEEK = "tests/data/hf_configs/deepseek-ai--DeepSeek-V3_config.json"


def test_a_separate_draft_model_is_as_before():
    d = Design(draft_tokens=3, acceptance=0.6, draft_cost=0.2)
    p = engine_params(d)
    expected = np.where(np.arange(MAX_DRAFT_TOKENS) < 3,
                        acceptance_thresholds(0.6, MAX_DRAFT_TOKENS), 0)
    np.testing.assert_array_equal(p.accept_thresholds, expected)
    assert p.timing.draft_cost == 0.2
    # Its weights and KV are not counted: the memory is the design's without speculation.
    assert d.kv_tokens() == d.replace(draft_tokens=0).kv_tokens()
    m, g = get_model("Llama-3-8B"), get_gpu("H100-SXM")
    assert timing_params(m, g, draft_cost=0.2) == timing_params(m, g, draft_cost=0.2,
                                                                draft="model")


def test_deepseek_mtp_costs_one_of_its_layers():
    """The MTP module by hand from config.json: a MoE decoder layer (latent attention, 8 routed
    and 1 shared expert of 2048, the router, two norms), eh_proj and three norms, and the LM
    head each drafted token runs; the target's mean layer the rule uses is within 2% of it."""
    m = load_hf_config(DEEPSEEK)
    assert m.mtp_layers == 1 and get_model("DeepSeek-V3").mtp_layers == 1
    h, v, heads = 7168, 129280, 128
    attention = (h * 1536 + 1536 * heads * 192 + h * (512 + 64) + 512 * heads * (128 + 128)
                 + heads * 128 * h + 1536 + 512)
    experts = (8 + 1) * 3 * h * 2048 + h * 256
    module = attention + experts + 2 * h + 2 * h * h + 3 * h + v * h
    assert module == 1_614_779_392
    share = cost_share(m, "mtp", 0.1)
    assert share == pytest.approx(module / m.active_params, rel=0.02)
    assert 0.04 < share < 0.05  # of 37.6B active: one of 61 layers and the LM head
    d = Design(gpu="H200", model=m, gpus=8, draft="mtp", draft_tokens=3)
    assert engine_params(d).timing.draft_cost == share
    plain = d.replace(draft_tokens=0)
    # The module's 11.6B weights at the checkpoint's fp8, and its KV, take memory.
    grown = d.budget().weights_gib - plain.budget().weights_gib
    assert 10.0 < grown < 11.5
    assert d.budget().kv_bytes_per_token == pytest.approx(
        plain.budget().kv_bytes_per_token * (61 + 1) / 61)
    assert d.kv_tokens() < plain.kv_tokens()


def test_eagle_head_costs_its_layer_and_reduced_head():
    """An EAGLE-3 head on Llama-3.1-8B by hand (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's shapes):
    fc over three layers' features, a Llama layer whose q, k, v read twice the width, four
    norms, and a 32000-token LM head."""
    m, h = get_model("Llama-3.1-8B"), 4096
    head = (3 * h * h + 2 * h * (h + 2 * 1024) + h * h + 3 * h * 14336 + 4 * h
            + 32000 * h)
    assert head == 424_689_664
    assert cost_share(m, "eagle", 0.1) == pytest.approx(head / m.active_params, rel=1e-4)
    d = Design(gpu="H100-SXM", model="Llama-3.1-8B", draft="eagle", draft_tokens=2)
    assert d.budget().weights_gib - d.replace(draft_tokens=0).budget().weights_gib == \
        pytest.approx(head * 2 / 2**30, rel=1e-4)  # 16-bit


@pytest.mark.parametrize("draft", ["mtp", "eagle"])
def test_acceptance_is_the_published_table(draft):
    d = Design(gpu="H200", model="DeepSeek-V3", gpus=8, draft=draft, draft_tokens=4,
               acceptance=0.1)
    at_least = np.cumprod([CONDITIONAL[draft][min(j, len(CONDITIONAL[draft]) - 1)]
                           for j in range(4)])
    t = engine_params(d).accept_thresholds
    np.testing.assert_array_equal(t[:4], np.round(at_least * UNIFORM_RANGE).astype(np.int32))
    assert not t[4:].any()
    assert np.all(np.diff(accepted_at_least(draft, MAX_DRAFT_TOKENS)) <= 0)
    if draft == "eagle":  # vLLM's EAGLE-3 baseline, P(A >= j) for j = 1..3
        np.testing.assert_allclose(t[:3] / UNIFORM_RANGE, [0.7296, 0.5208, 0.3545], atol=1e-6)


def test_mtp_without_mtp_layers_is_refused():
    with pytest.raises(FieldError) as e:
        engine_params(Design(model="Llama-3-8B", draft="mtp", draft_tokens=2))
    text = str(e.value)
    assert text.startswith("levers.draft: Llama-3-8B has no multi-token-prediction layers")
    assert "allowed: \"model\" or \"eagle\"" in text and "\n" not in text


def test_mtp_and_eagle_agree_with_the_twin():
    wl = Workload(arrival="closed", concurrency=8, duration_s=None, num_requests=24,
                  prompt_tokens=Lengths("uniform", 0, 16, 200),
                  output_tokens=Lengths("uniform", 0, 20, 60))
    reqs = sample_n(wl, 11, 512, 24)
    designs = [Design(gpu="H200", model="DeepSeek-V3", gpus=8, draft="mtp", draft_tokens=3,
                      max_batch=6, max_seq_len=512),
               Design(gpu="H100-SXM", model="Llama-3.1-8B", draft="eagle", draft_tokens=3,
                      max_batch=6, max_seq_len=512)]
    runs = run_cases([(d, engine_params(d), reqs) for d in designs], seats=6, k_max=3)
    for b in range(len(designs)):
        against_the_twin(runs, b)
    out = runs[3]
    for b in range(len(designs)):  # drafts were accepted: fewer passes than tokens
        assert 0 < int(out.passes[b]) < int(out.tokens[b])
