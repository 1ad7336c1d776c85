"""The Python API refuses a bad argument as the CLI does: one line of at most 300 characters
naming the argument or key, a ``ValueError`` (a ``TypeError`` for a wrong type), raised before
anything is simulated or written."""
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sweep
from sweep.study.config import parse_study
from sweep.study.fields import DESIGN_FIELDS, WORKLOAD_FIELDS
from sweep.study.lengths import Lengths

CONFIG = """name = "guards"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 4
[levers]
max_batch = 4
"""
D = sweep.Design(model="Llama-3.2-1B")
W = sweep.Workload(num_requests=4)


def _simulate(*args, **kw):
    return lambda cfg: sweep.simulate(*args, **kw)


def _make(cls, **kw):
    return lambda cfg: cls(**kw).validate()


def _run(**kw):
    return lambda cfg: sweep.run(kw.pop("config", cfg), **kw)


HOSTILE = {  # id: (call, exception, what the message names)
    "designs-empty": (_simulate([], W), ValueError, "designs"),
    "designs-str": (_simulate("H100", W), TypeError, "designs"),
    "designs-item": (_simulate([D, 5], W), TypeError, "designs[1]"),
    "workload-str": (_simulate(D, "poisson"), TypeError, "workload"),
    "ten-million": (_simulate(D, sweep.Workload(num_requests=10_000_000)), ValueError,
                    "max_requests"),
    "rate-x-duration": (_simulate(D, sweep.Workload(arrival_rate=1e6, duration_s=100.0)),
                        ValueError, "max_requests"),
    "max_requests-0": (_simulate(D, W, max_requests=0), ValueError, "max_requests"),
    "max_steps-0": (_simulate(D, W, max_steps=0), ValueError, "max_steps"),
    "max_steps-str": (_simulate(D, W, max_steps="5"), ValueError, "max_steps"),
    "model_error-str": (_simulate(D, W, model_error="no"), ValueError, "model_error"),
    "seeds-negative": (_simulate(D, W, seeds=-1), ValueError, "seeds"),
    "seeds-zero": (_simulate(D, W, seeds=0), ValueError, "seeds"),
    "seeds-huge-count": (_simulate(D, W, seeds=10**9), ValueError, "seeds"),
    "seeds-float": (_simulate(D, W, seeds=1.5), ValueError, "seeds"),
    "seeds-str": (_simulate(D, W, seeds="3"), ValueError, "seeds"),
    "seeds-empty": (_simulate(D, W, seeds=[]), ValueError, "seeds"),
    "seeds-negative-seed": (_simulate(D, W, seeds=[-1]), ValueError, "seeds"),
    "seeds-beyond-uint32": (_simulate(D, W, seeds=[2**32]), ValueError, "seeds"),
    "seeds-float-seed": (_simulate(D, W, seeds=[1.0]), ValueError, "seeds"),
    "seeds-twice": (_simulate(D, W, seeds=[3, 3]), ValueError, "seeds"),
    # A value outside its key's choices is refused when the design is made.
    "gpus-3": (_make(sweep.Design, gpus=3), ValueError, "levers.gpus"),
    "gpu-unknown": (_make(sweep.Design, gpu="H100"), ValueError, "hardware.gpu"),
    "batching-typo": (_make(sweep.Design, batching="continous"), ValueError, "levers.batching"),
    "kv_bits-5": (_make(sweep.Design, kv_bits=5), ValueError, "levers.kv_bits"),
    "model-unknown": (_make(sweep.Design, model="llama"), ValueError, "model.name"),
    "does-not-fit": (_simulate(sweep.Design(model="Llama-3-70B", gpu="L40S"), W), ValueError,
                     "does not fit"),
    "workload-rate": (_make(sweep.Workload, arrival_rate=-1.0), ValueError,
                      "workload.arrival_rate"),
    "arrival-typo": (_make(sweep.Workload, arrival="poison"), ValueError, "workload.arrival"),
    "workload-both": (_simulate(D, sweep.Workload(duration_s=5.0, num_requests=5)), ValueError,
                      "num_requests"),
    "gpu-list": (_make(sweep.Design, gpu=["H100-SXM"]), TypeError, "hardware.gpu"),
    "gpu-none": (_make(sweep.Design, gpu=None), TypeError, "hardware.gpu"),
    "model-int": (_make(sweep.Design, model=8), TypeError, "model.name"),
    "max_batch-str": (_make(sweep.Design, max_batch="5"), TypeError, "levers.max_batch"),
    "gpus-float": (_make(sweep.Design, gpus=2.0), TypeError, "levers.gpus"),
    "gpus-bool": (_make(sweep.Design, gpus=True), TypeError, "levers.gpus"),
    "prefix_cache-str": (_make(sweep.Design, prefix_cache="yes"), TypeError,
                         "levers.prefix_cache"),
    "acceptance-huge": (_make(sweep.Design, acceptance=10**400), TypeError, "levers.acceptance"),
    "max_batch-huge": (_make(sweep.Design, max_batch=10**400), TypeError, "levers.max_batch"),
    "rate-str": (_make(sweep.Workload, arrival_rate="16"), TypeError, "workload.arrival_rate"),
    "num_requests-float": (_make(sweep.Workload, num_requests=2.5), TypeError,
                           "workload.num_requests"),
    "lengths-int": (_make(sweep.Workload, prompt_tokens=512), TypeError,
                    "workload.prompt_tokens"),
    "lengths-mean-str": (_make(sweep.Workload, prompt_tokens=Lengths(mean="a")), TypeError,
                         "workload.prompt_tokens.mean"),
    "trace-path": (_make(sweep.Workload, arrival="trace", trace="t.csv"), TypeError,
                   "workload.trace"),
    "run-processes-negative": (_run(processes=-1), ValueError, "processes"),
    "run-processes-zero": (_run(processes=0), ValueError, "processes"),
    "run-processes-float": (_run(processes=1.5), ValueError, "processes"),
    "run-chunk_size-negative": (_run(chunk_size=-5), ValueError, "chunk_size"),
    "run-chunk_size-zero": (_run(chunk_size=0), ValueError, "chunk_size"),
    "run-chunk_size-str": (_run(chunk_size="5"), ValueError, "chunk_size"),
    "run-seeds-negative": (_run(seeds=-1), ValueError, "seeds"),
    "run-seeds-float": (_run(seeds=1.5), ValueError, "seeds"),
    "run-seeds-empty": (_run(seeds=[]), ValueError, "seeds"),
    "run-max_designs-zero": (_run(max_designs=0), ValueError, "max_designs"),
    "run-per_request-str": (_run(per_request="yes"), ValueError, "per_request"),
    "run-config-int": (_run(config=5), TypeError, "config"),
    "run-out-int": (_run(out=5), TypeError, "out"),
    "run-resume-str": (_run(resume="yes"), TypeError, "resume"),
    "capacity-target-str": (lambda cfg: sweep.capacity(cfg, target_rate="8"), TypeError,
                            "target_rate"),
    "validate-int": (lambda cfg: sweep.validate(5), TypeError, "cases"),
    "calibrate-int": (lambda cfg: sweep.calibrate(5), TypeError, "measurements"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_bad_argument_is_refused_in_one_line_before_anything_runs(case, tmp_path,
                                                                    monkeypatch):
    call, error, named = HOSTILE[case]
    cfg = tmp_path / "guards.toml"
    cfg.write_text(CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(error) as exc:
        call(cfg)
    message = str(exc.value)
    assert "\n" not in message and len(message) <= 300, message
    assert named in message, message
    assert list(work.iterdir()) == [] and sorted(tmp_path.iterdir()) == [cfg, work]


def test_workload_defaults_are_the_configs():
    assert sweep.Workload().duration_s == 60.0  # the brief's: 16 requests/s for 60 s
    for kw in (dict(num_requests=4), dict(arrival="closed", concurrency=2, num_requests=4)):
        wl = sweep.Workload(**kw)
        wl.validate()
        assert wl.duration_s is None
    with pytest.raises(ValueError, match="exactly one of duration_s or num_requests"):
        sweep.Workload(duration_s=60.0, num_requests=4).validate()
    # A config's workload of the same keys (drain_s given: the Workload's is the brief's 60 s).
    study = parse_study(CONFIG.replace("num_requests = 4", "num_requests = 4\ndrain_s = 60.0"),
                        "<guards>")
    assert study.points[0].workload == W


def test_a_workload_of_a_few_requests_simulates():
    r = sweep.simulate(sweep.Design(model="Llama-3.2-1B", max_batch=4), W, seeds=[7])
    assert len(r.metrics) == 1 and r.metrics["seed"].tolist() == [7]
    assert r.requests["request"].tolist() == [0, 1, 2, 3]


#: A refusal's message starts with the key it names (a combination: its table).
_KEYED = re.compile(r"^(hardware|model|workload|levers|design)[.:]")
_VALUES = st.one_of(
    st.integers(-2**70, 2**70), st.just(10**400), st.floats(), st.text(max_size=40), st.none(),
    st.lists(st.integers(-5, 5), max_size=3),
    st.sampled_from([1, 2, 4, 8, 16, 0, 0.5, 1.0, True, False, "paged", "static", "closed",
                     "gamma", "trace", "H100-SXM", "A100-80GB", "Llama-3.2-1B", "Mixtral-8x7B"]))


def _constructs_or_refuses_in_one_line(cls, kw):
    try:
        cls(**kw).validate()
    except (ValueError, TypeError) as exc:
        message = str(exc)
        assert "\n" not in message and len(message) <= 300, message
        assert _KEYED.match(message), message


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(DESIGN_FIELDS)), _VALUES, max_size=4))
def test_any_design_keywords_construct_or_are_refused_in_one_line(kw):
    _constructs_or_refuses_in_one_line(sweep.Design, kw)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(sorted(WORKLOAD_FIELDS)), _VALUES, max_size=4))
def test_any_workload_keywords_construct_or_are_refused_in_one_line(kw):
    _constructs_or_refuses_in_one_line(sweep.Workload, kw)


def test_a_refusal_at_a_long_path_stays_within_a_line(tmp_path):
    """A config refused from a deep folder: the line names the file and the key, within 300
    characters (the folders give way first)."""
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name"] * 12))
    deep.mkdir(parents=True)
    cfg = deep / "study.toml"
    cfg.write_text(CONFIG.replace("max_batch = 4", 'batching = "continous"'))
    with pytest.raises(ValueError) as err:
        sweep.run(cfg, out=tmp_path / "out")
    line = str(err.value)
    assert len(str(cfg)) > 300 and len(line) <= 300 and "\n" not in line, line
    assert "study.toml" in line and "levers.batching" in line, line
    assert not (tmp_path / "out").exists()
