"""An open loop's warm-up: ``warmup_requests`` sent first at the same rate, then the
``num_requests`` measured ones, the warm-up's excluded from every metric (as a closed loop's);
refused where no count of measured requests follows it."""
import pytest

import sweep
from sweep.engine.params import engine_params
from sweep.study.design import Design
from sweep.study.workload import Workload, sample_n
from sweep.twin import simulate_reference, summarize_reference

SHARED = dict(arrival_rate=8.0, prefix_count=4, prefix_tokens=1024, prefix_share=1.0)


def test_an_open_loop_measures_only_what_follows_its_warm_up():
    design = Design(model="Llama-3-8B", prefix_cache=True)
    wl = Workload(num_requests=30, warmup_requests=20, **SHARED)
    res = sweep.simulate([design], wl, seeds=1, model_error=False)
    m, req = res.metrics.iloc[0], res.requests
    assert len(req) == 50 and m["requests"] == 30 and m["completed"] == 30
    # The twin measures the same requests, to the bit's tolerance.
    r = sample_n(wl, 0, design.context_limit, wl.capacity)
    p = engine_params(design)
    twin = summarize_reference(simulate_reference(p, r), r, p)
    assert twin["completed"] == 30
    for key in ("mean_ttft_s", "p95_ttft_s", "mean_tpot_ms", "mean_e2e_s", "tokens_per_s",
                "prefix_token_hit_rate"):
        assert m[key] == pytest.approx(float(twin[key]), rel=1e-9), key
    # Warmed up: the measured requests find their prefix cached more often than the first.
    first, measured = req[req["request"] < 20], req[req["request"] >= 20]
    assert (measured["cached_tokens"] > 0).mean() > (first["cached_tokens"] > 0).mean()
    # Without the warm-up the same 30 measured requests' count holds, over other arrivals.
    cold = sweep.simulate([design], Workload(num_requests=30, **SHARED), seeds=1,
                          model_error=False).metrics.iloc[0]
    assert cold["requests"] == 30 and cold["prefix_token_hit_rate"] < m["prefix_token_hit_rate"]


def test_an_open_warm_up_without_a_count_is_refused():
    with pytest.raises(ValueError, match="workload.warmup_requests"):
        Workload(arrival_rate=8.0, duration_s=10.0, warmup_requests=5).validate()
