"""Bad designs and workloads: one clear ValueError naming the field and the allowed values; good
ones validate."""
import pytest

from sweep.physics.hardware import get_gpu
from sweep.physics.catalog import get_model
from sweep.study.design import Design
from sweep.study.workload import Workload


def test_unknown_gpu():
    with pytest.raises(ValueError, match=r"hardware\.gpu") as exc:
        get_gpu("H100")
    assert "H100-SXM" in str(exc.value) and "A100-80GB" in str(exc.value)
    with pytest.raises(ValueError, match=r"hardware\.gpu.*H100-SXM"):
        Design(gpu="TPU-v5").validate()


def test_unknown_model():
    with pytest.raises(ValueError, match=r"model\.name") as exc:
        get_model("Llama-4")
    assert "Llama-3-8B" in str(exc.value)
    with pytest.raises(ValueError, match=r"model\.name"):
        Design(model="gpt-5").validate()


@pytest.mark.parametrize("model,gpu,gpus,bits", [("Llama-3-70B", "A100-80GB", 1, 16),
                                                 ("Llama-3-405B", "H100-SXM", 8, 16),
                                                 ("GPT-4-est", "H100-SXM", 8, 4),
                                                 ("Llama-3-70B", "L40S", 1, 8)])
def test_model_that_does_not_fit(model, gpu, gpus, bits):
    with pytest.raises(ValueError, match="does not fit"):
        Design(model=model, gpu=gpu, gpus=gpus, weight_bits=bits).validate()


@pytest.mark.parametrize("model,gpu,gpus,bits", [("Llama-3-70B", "A100-80GB", 2, 16),
                                                 ("Llama-3-70B", "A100-80GB", 1, 8),
                                                 ("Llama-3-70B", "H100-SXM", 1, 4),
                                                 ("Llama-3-8B", "Apple-M3-Max", 1, 16),
                                                 ("Llama-3-405B", "H200", 8, 16)])
def test_designs_that_fit_validate(model, gpu, gpus, bits):
    Design(model=model, gpu=gpu, gpus=gpus, weight_bits=bits).validate()


BAD_LEVERS = [
    (dict(weight_bits=3), r"levers\.weight_bits", "16, 8, 4"),
    (dict(kv_bits=4), r"levers\.kv_bits", "16, 8"),
    (dict(gpus=3), r"levers\.gpus", "1, 2, 4, 8"),
    (dict(gpus=16), r"levers\.gpus", "1, 2, 4, 8"),
    (dict(draft_tokens=-1), r"levers\.draft_tokens", "[0, 16]"),
    (dict(draft_tokens=2.5), r"levers\.draft_tokens", "[0, 16]"),
    (dict(acceptance=1.5), r"levers\.acceptance", "[0.0, 1.0]"),
    (dict(acceptance=-0.1), r"levers\.acceptance", "[0.0, 1.0]"),
    (dict(acceptance=float("nan")), r"levers\.acceptance", "[0.0, 1.0]"),
    (dict(batching="dynamic"), r"levers\.batching", "continuous"),
    (dict(kv_cache="blocks"), r"levers\.kv_cache", "paged"),
    (dict(max_batch=0), r"levers\.max_batch", "[1, 4096]"),
    (dict(compute_efficiency=0.0), r"hardware\.compute_efficiency", "(0.0, 1.0]"),
    (dict(max_seq_len=100_000), r"levers\.max_seq_len", "8192"),
]


@pytest.mark.parametrize("changes,field,allowed", BAD_LEVERS,
                         ids=[f"{k}={v}" for c, _, _ in BAD_LEVERS for k, v in
                              list(c.items())[-1:]])
def test_bad_lever_raises(changes, field, allowed):
    with pytest.raises(ValueError, match=field) as exc:
        Design(**changes).validate()
    assert allowed in str(exc.value)
    assert repr(list(changes.values())[-1]) in str(exc.value) or "nan" in str(exc.value)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_laptop_gpu_has_no_tensor_parallelism(gpus):
    with pytest.raises(ValueError, match=r"levers\.gpus.*allowed: 1"):
        Design(gpu="Apple-M3-Max", gpus=gpus).validate()


def test_batching_message_lists_every_option():
    with pytest.raises(ValueError, match=r"levers\.batching") as exc:
        Design(batching="dynamic").validate()
    for option in ("one_at_a_time", "static", "continuous"):
        assert option in str(exc.value)


@pytest.mark.parametrize("rate", [0, 0.0, -1.0, -16, float("nan"), float("inf")])
def test_bad_arrival_rate(rate):
    with pytest.raises(ValueError, match=r"workload\.arrival_rate"):
        Workload(arrival_rate=rate).validate()


@pytest.mark.parametrize("duration_s,num_requests", [(60.0, 100), (None, None)])
def test_workload_needs_exactly_one_of_duration_and_count(duration_s, num_requests):
    with pytest.raises(ValueError, match="exactly one of duration_s or num_requests"):
        Workload(duration_s=duration_s, num_requests=num_requests).validate()


@pytest.mark.parametrize("wl", [Workload(), Workload(duration_s=None, num_requests=500),
                                Workload(arrival_rate=0.5, duration_s=10.0)])
def test_good_workloads_validate(wl):
    wl.validate()
