"""sweep calibrate: least-squares efficiency factors and overhead, the profile it writes, and
one-line refusals of bad measurements."""
from pathlib import Path

import numpy as np
import pytest

from sweep.cli import main
from sweep.physics.catalog import get_model
from sweep.physics.timing import pass_time
from sweep.study.config import ConfigError, load_study, parse_study
from sweep.study.profile import load_profile
from sweep.workflows.calibrate import fit, read_measurements, roofline

CAL = Path(__file__).parents[1] / "configs" / "calibration"
PASSES = CAL / "h100_llama3_8b_passes.csv"


def test_the_fit_recovers_the_factors_of_the_shipped_measurements():
    gpu, tp = roofline("H100-SXM", get_model("Llama-3-8B"))
    f = fit(tp, read_measurements(PASSES), gpu)  # made with 0.55, 0.75, 0.35 ms and 2% noise
    assert f.compute_efficiency == pytest.approx(0.55, rel=0.03)
    assert f.bandwidth_efficiency == pytest.approx(0.75, rel=0.03)
    assert f.overhead_ms == pytest.approx(0.35, rel=0.15)
    assert f.n == 80 and f.r2 > 0.99 and f.max_relative_error < 0.08
    assert len(f.identified) == 3


def test_request_latencies_on_two_gpus_are_fitted_exactly(tmp_path):
    """Noise-free TTFT and end-to-end times of requests served one at a time (a prefill, then
    o - 1 single-sequence decodes), with tensor-parallel all-reduces: the factors come back."""
    model = get_model("Mistral-7B")
    gpu, unit = roofline("A100-80GB", model, gpus=2, weight_bits=8)
    true = unit._replace(flops_per_s=unit.flops_per_s * 0.45,
                         bytes_per_s=unit.bytes_per_s * 0.7,
                         kv_bytes_per_s=unit.kv_bytes_per_s * 0.7, overhead_s=0.5e-3)
    rng = np.random.default_rng(1)
    lines = ["prompt_tokens,output_tokens,ttft_s,e2e_s"]
    for p, o in zip(rng.integers(16, 3000, 25), rng.integers(1, 60, 25)):
        ttft = pass_time(true, float(p), p * (p + 1) / 2, 0.0, 0.0)
        decode = pass_time(true, 0.0, 0.0, 1.0, p + np.arange(1, o, dtype=float)).sum()
        lines.append(f"{p},{o},{float(ttft)!r},{float(ttft + decode)!r}")
    csv = tmp_path / "req.csv"
    csv.write_text("\n".join(lines) + "\n")
    f = fit(unit, read_measurements(csv), gpu)
    assert (f.compute_efficiency, f.bandwidth_efficiency, f.overhead_ms) == pytest.approx(
        (0.45, 0.7, 0.5), rel=1e-6)
    assert f.r2 == pytest.approx(1.0) and f.max_relative_error < 1e-9


def test_decode_only_measurements_leave_compute_at_its_default(tmp_path):
    csv = tmp_path / "dec.csv"
    gpu, unit = roofline("H100-SXM", get_model("Llama-3-8B"))
    true = unit._replace(bytes_per_s=unit.bytes_per_s * 0.7,
                         kv_bytes_per_s=unit.kv_bytes_per_s * 0.7, overhead_s=1e-4)
    rows = [(0, s, s * 500) for s in (1, 4, 16, 64, 128)]
    csv.write_text("prefill_tokens,decode_seqs,context_tokens,seconds\n" + "".join(
        f"{p},{s},{c},{float(pass_time(true, p, 0, s, c))!r}\n" for p, s, c in rows))
    f = fit(unit, read_measurements(csv), gpu)
    assert f.identified == ("bandwidth_efficiency", "overhead_ms")
    assert f.compute_efficiency == pytest.approx(gpu.compute_efficiency)
    assert f.bandwidth_efficiency == pytest.approx(0.7)


def test_cli_writes_a_profile_that_a_config_names(tmp_path, capsys):
    out = tmp_path / "h100.toml"
    assert main(["calibrate", str(PASSES), "--gpu", "H100-SXM", "--model", "Llama-3-8B",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "R^2" in text and "RMSE" in text and "max relative error" in text and "80" in text
    prof = load_profile(out)
    assert prof["gpu"] == "H100-SXM"
    assert prof["compute_efficiency"] == pytest.approx(0.55, rel=0.03)
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "c"\n[hardware]\nprofile = "h100.toml"\nprice_per_gpu_hour = 3.0\n'
                   '[model]\nname = "Llama-3-8B"\n[workload]\nnum_requests = 10\n')
    point = load_study(cfg).points[0]
    assert point.design.gpu == "H100-SXM" and point.design.price_per_gpu_hour == 3.0
    assert point.columns["compute_efficiency"] == prof["compute_efficiency"]
    assert point.columns["overhead_ms"] == prof["overhead_ms"]
    # Writing over it needs --force.
    assert main(["calibrate", str(PASSES), "--gpu", "H100-SXM", "--model", "Llama-3-8B",
                 "--out", str(out)]) == 2
    assert main(["calibrate", str(PASSES), "--gpu", "H100-SXM", "--model", "Llama-3-8B",
                 "--out", str(out), "--force"]) == 0


@pytest.mark.parametrize("content, args, needle", [
    ("a,b\n1,2\n", [], "missing columns"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n1,1,10,x\n2,1,10,1\n3,1,1,1\n", [],
     "column seconds: row 0 is 'x'"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n1,1,10,0.1\n", [], "1 measurements"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n0,0,0,0.1\n1,1,1,1\n1,1,1,1\n", [],
     "no prefill and no decode"),
    ("prompt_tokens,output_tokens,ttft_s,e2e_s\n10,2,0.5,0.1\n", [], "e2e_s < ttft_s"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n1,1,1,1\n", ["--gpu", "Apple-M3-Max"],
     "--gpu: Apple-M3-Max uses a measured linear timing model"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n1,1,1,1\n", ["--gpus", "3"],
     "--gpus: 3 is not allowed"),
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n1,1,1,1\n", ["--model", "GPT-5"],
     "unknown model"),
    (None, [], "m.csv: no such file"),
    # An 8B model's decode pass reads 16 GB of weights: 1 us is 4,800x faster than an H100 can.
    ("prefill_tokens,decode_seqs,context_tokens,seconds\n0,1,100,0.02\n0,1,100,1e-6\n"
     "512,0,0,0.05\n0,8,800,0.02\n", [], "measurement 1 takes 1e-06 s, under the H100-SXM's "
     "roofline"),
])
def test_bad_measurements_exit_2_in_one_line(tmp_path, capsys, content, args, needle):
    csv = tmp_path / "m.csv"
    if content is not None:
        csv.write_text(content)
    out = tmp_path / "p.toml"
    base = {"--gpu": "H100-SXM", "--model": "Llama-3-8B"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = ["calibrate", str(csv), "--out", str(out)] + [x for kv in base.items() for x in kv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert not out.exists()


def test_profiles_that_conflict_or_are_bad_are_refused(tmp_path):
    good = CAL / "h100_llama3_8b.profile.toml"
    cfg = tmp_path / "c.toml"
    base = '[model]\nname = "Llama-3-8B"\n[workload]\nnum_requests = 10\n'
    cfg.write_text(f'name = "c"\n[hardware]\nprofile = "{good}"\noverhead_ms = 1.0\n' + base)
    with pytest.raises(ConfigError, match=r"c.toml:4: hardware.overhead_ms: also set by "
                                          r"hardware.profile"):
        load_study(cfg)
    bad = tmp_path / "bad.toml"
    bad.write_text('[hardware]\ngpu = "H100-SXM"\ncompute_efficiency = 1.5\n'
                   'bandwidth_efficiency = 0.8\noverhead_ms = 0.2\n')
    cfg.write_text('name = "c"\n[hardware]\nprofile = "bad.toml"\n' + base)
    with pytest.raises(ConfigError, match=r"c.toml:3: hardware.profile: .*compute_efficiency "
                                          r"= 1.5 is out of range; allowed: \(0, 1\]"):
        load_study(cfg)
    cfg.write_text('name = "c"\n[hardware]\nprofile = "none.toml"\n' + base)
    with pytest.raises(ConfigError, match=r"hardware.profile: .*none.toml: no such file"):
        load_study(cfg)


SPLITWISE = Path(__file__).parents[1] / "validation" / "data" / "splitwise" / "perf_model.csv"


def test_splitwise_pass_times_are_read_for_one_gpu_and_degree(tmp_path):
    """Splitwise's perf_model.csv: each row a prefill of batch x prompt tokens and a decode step
    of the batch; the rows are those of the GPU and degree asked for, and a model must be picked
    when several remain."""
    m = read_measurements(SPLITWISE, "H100-SXM", 4)
    assert len(m.seconds) == 2 * 105  # llama2-70b at TP4: 105 rows, two observations each
    prefills = m.prefill_tokens[m.prefill_tokens > 0]
    assert set(prefills) >= {128.0, 8192.0, 512.0 * 64}
    a100 = read_measurements(SPLITWISE, "A100-80GB", 4)
    assert np.median(a100.seconds / m.seconds) > 1.3  # the A100 is slower
    with pytest.raises(ValueError, match="--measured-model bloom-176b, llama2-70b"):
        read_measurements(SPLITWISE, "H100-SXM", 8)
    assert len(read_measurements(SPLITWISE, "H100-SXM", 8, "bloom-176b").seconds) == 210
    with pytest.raises(ValueError, match="allowed: --gpu"):
        read_measurements(SPLITWISE, "L40S", 1)
    gpu, tp = roofline("H100-SXM", get_model("Llama-3-70B"), gpus=4)
    f = fit(tp, m, gpu)
    assert f.r2 > 0.95 and 0 < f.compute_efficiency < 1 and 0 < f.bandwidth_efficiency < 1


#: Compute stated in the case, measured and fitted alike (the serving fit leaves it alone).
SERVING_CASE = """name = "{name}"
[hardware]
gpu = "H100-SXM"
compute_efficiency = 0.9
{hardware}
[model]
name = "{model}"
[workload]
arrival = "constant"
arrival_rate = 40.0
num_requests = 40
prompt_tokens = {{ dist = "uniform", low = 800, high = 1200 }}
output_tokens = 16
[levers]
max_batch = 8
max_num_batched_tokens = 1024
[run]
seeds = 2
"""
TRUE = dict(bandwidth_efficiency=0.7,
            overhead_ms=2.0, seq_overhead_us=0.0, request_overhead_ms=0.0, request_lag_passes=1.0)


@pytest.fixture(scope="module")
def serving_cases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serving")
    _measure(folder, SERVING_CASE, ("mean_e2e_s", "p50_e2e_s", "mean_ttft_s", "p50_ttft_s"))
    return folder


def _measure(folder, template: str, metrics) -> None:
    """Two cases (two model sizes: two decode speeds) of ``template`` into ``folder``, their
    ``metrics`` measured by the simulation under TRUE."""
    from sweep.execution.runner import run_study

    hw = "\n".join(f"{k} = {v!r}" for k, v in TRUE.items())
    for model in ("Llama-3.2-1B", "Llama-3-8B"):
        runs = run_study(parse_study(template.format(name=model, hardware=hw, model=model))).runs
        measured = "\n".join(f"{m} = {float(runs[m].mean())!r}" for m in metrics)
        (folder / f"{model}.toml").write_text(
            template.format(name=model, hardware="", model=model) + "[measured]\n" + measured)


@pytest.fixture(scope="module")
def serving_case(serving_cases):
    return serving_cases / "Llama-3.2-1B.toml"


def _fitted(folder):
    """The serving fit of bandwidth efficiency and pass overhead on ``folder``'s two cases."""
    from sweep.workflows.serving_fit import Param, fit_serving
    from sweep.workflows.validate import load_cases

    params = [Param("bandwidth_efficiency"), Param("overhead_ms")]
    f = fit_serving(load_cases([folder]), params, {params[0]: 0.85, params[1]: 1.0})
    assert f.cases == 2
    return f, params


def test_a_serving_fit_recovers_the_factors_that_made_the_measurements(serving_cases):
    f, params = _fitted(serving_cases)
    assert f.values[params[0]] == pytest.approx(TRUE["bandwidth_efficiency"], rel=0.02)
    assert f.values[params[1]] == pytest.approx(TRUE["overhead_ms"], rel=0.1)
    assert f.outside["request_lag_passes"] == pytest.approx(1.0, abs=0.1)
    assert f.outside["request_overhead_ms"] == pytest.approx(0.0, abs=0.3)
    assert f.rms_e2e_error < 0.005 and f.rms_ttft_error < 0.01


def test_sweep_calibrate_on_cases_writes_a_profile_a_config_can_name(serving_case, tmp_path,
                                                                      capsys):
    out = tmp_path / "served.profile.toml"
    assert main(["calibrate", str(serving_case), "--out", str(out), "--seeds", "1"]) == 0
    profile = load_profile(out)
    assert profile["gpu"] == "H100-SXM" and set(profile) >= {"request_lag_passes",
                                                             "seq_overhead_us"}
    assert "serving cases" in capsys.readouterr().out
    cfg = tmp_path / "use.toml"
    cfg.write_text(SERVING_CASE.format(name="use", hardware=f'profile = "{out.name}"',
                                       model="Llama-3.2-1B").replace('gpu = "H100-SXM"\n', "")
                   .replace("compute_efficiency = 0.9\n", ""))
    d = load_study(cfg).points[0].design
    assert d.request_lag_passes == profile["request_lag_passes"]


@pytest.mark.parametrize("args, what", [
    (["--gpu", "A100-80GB"], "allowed: cases of one GPU"),
    (["--duration", "0"], "--duration"),
])
def test_sweep_calibrate_on_cases_refuses_bad_input(serving_case, tmp_path, capsys, args, what):
    out = tmp_path / "p.toml"
    assert main(["calibrate", str(serving_case), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert what in err and "\n" not in err and not out.exists()


def test_sweep_calibrate_on_cases_needs_ttft_and_latency(tmp_path, capsys):
    case = tmp_path / "c.toml"
    case.write_text(SERVING_CASE.format(name="c", hardware="", model="Llama-3.2-1B")
                    + "[measured]\np50_e2e_s = 1.0\n")
    assert main(["calibrate", str(case), "--out", str(tmp_path / "p.toml")]) == 2
    assert "measured: lacks mean_e2e_s" in capsys.readouterr().err


#: The open cases' request rows (warm-up and measured: 40) and seeds: its simulations take the
#: same compiled shapes as theirs, so that only the closed loop's own engine is compiled anew.
CLOSED = SERVING_CASE.replace('arrival = "constant"\narrival_rate = 40.0\nnum_requests = 40',
                              'arrival = "closed"\nconcurrency = 4\nwarmup_requests = 4\n'
                              'num_requests = 36')


def test_a_closed_loop_benchmark_calibrates_on_mean_ttft_and_tpot(tmp_path):
    """A closed-loop benchmark measures mean TTFT and mean TPOT, no end-to-end latency: the
    fit reads TPOT in its place and recovers the factors that made the measurements."""
    _measure(tmp_path, CLOSED, ("mean_ttft_s", "mean_tpot_ms"))
    f, params = _fitted(tmp_path)
    assert f.values[params[0]] == pytest.approx(TRUE["bandwidth_efficiency"], rel=0.03)
    assert f.values[params[1]] == pytest.approx(TRUE["overhead_ms"], rel=0.15)
    assert f.rms_e2e_error < 0.01
