"""Measured values are finite, positive and plausible, or refused in one line naming the file and
the key before anything is simulated or written; ``sweep validate`` writes its report whole or
not at all, and replays trace cases beside sampled ones."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweep.cli import main
from sweep.study import vllm_bench
from sweep.study.config import ConfigError
from sweep.workflows.validate import load_cases

REPO = Path(__file__).parents[1]
EXAMPLE = REPO / "configs" / "vllm_bench"
BENCH = json.loads((EXAMPLE / "bench.json").read_text())
MODEL = REPO / "validation" / "data" / "vllm-h100" / "models" / "Llama-2-7b-hf.json"
#: The longest refusal a user should read.
LONGEST = 300


def _case(tmp_path: Path, bench_text: str) -> Path:
    """The shipped vLLM benchmark case beside ``bench_text`` as its bench.json."""
    case = tmp_path / "c" / "case.toml"
    case.parent.mkdir()
    text = re.sub(r'config_json = ".*"', f'config_json = "{MODEL}"',
                  (EXAMPLE / "case.toml").read_text())
    case.write_text(text)
    (case.parent / "bench.json").write_text(bench_text)
    return case


def _one_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0].removeprefix("sweep validate: error: ").removeprefix(
        "sweep calibrate: error: ")
    assert len(line) <= LONGEST and all(n in line for n in needles), line
    return line


def _with(key: str, literal: str) -> str:
    """The example's JSON with ``key``'s value written as ``literal`` (JSON text)."""
    return json.dumps({**BENCH, key: "@"}).replace('"@"', literal)


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("text, key", [
    (_with("mean_ttft_ms", "1e308"), "mean_ttft_ms"),
    (_with("p99_e2el_ms", "Infinity"), "p99_e2el_ms"),
    (_with("median_ttft_ms", "NaN"), "median_ttft_ms"),
    (_with("mean_tpot_ms", "0"), "mean_tpot_ms"),
    (_with("p90_ttft_ms", "-3.5"), "p90_ttft_ms"),
    (_with("mean_e2el_ms", "1" + "0" * 399), "mean_e2el_ms"),
    (_with("mean_ttft_ms", '"25.0"'), "mean_ttft_ms"),
    (_with("mean_ttft_ms", "true"), "mean_ttft_ms"),
    (_with("output_throughput", "1e12"), "output_throughput"),
    (_with("request_rate", "1" + "0" * 399), "request_rate"),
    (_with("mean_ttft_ms", DEEP), "nested too deeply"),
    (DEEP, "nested too deeply"),
])
def test_a_hostile_benchmark_value_is_refused_naming_file_and_key(tmp_path, capsys, text, key):
    case = _case(tmp_path, text)
    out = tmp_path / "out"
    assert main(["validate", str(case), "--out", str(out), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, str(case), "measured.vllm_bench", "bench.json", key)
    assert not out.exists()


def test_every_latency_zero_is_refused_by_validate_and_calibrate(tmp_path, capsys):
    zeros = {k: (0 if k.endswith("_ms") else v) for k, v in BENCH.items()}
    case = _case(tmp_path, json.dumps(zeros))
    assert main(["validate", str(case), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, "bench.json", "mean_ttft_ms is 0")
    profile = tmp_path / "p.toml"
    assert main(["calibrate", str(case), "--out", str(profile)]) == 2
    _one_line(capsys.readouterr().err, "bench.json", "mean_ttft_ms is 0")
    assert not profile.exists() and not (tmp_path / "out").exists()


CASE = """name = "c"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3-8B"
[workload]
arrival = "constant"
arrival_rate = 5.0
num_requests = 6
drain_s = 30.0
prompt_tokens = 100
output_tokens = 8
[levers]
max_batch = 8
[run]
seeds = 1
[measured]
"""


@pytest.mark.parametrize("measured, says", [
    ("mean_ttft_s = 1e308", "not a latency above 0 and at most one day"),
    ("mean_e2e_s = 0.0", "not a latency above 0"),
    ("p95_tpot_ms = -1.0", "not a latency above 0"),
    ("tokens_per_s = 1e10", "not a rate above 0 and at most 1e+09/s"),
    ("tokens_per_s = 5e7", "what 1 x H100-SXM compute at their peak"),
    ("utilization = 1.5", "not a share in [0, 1]"),
    ("requests = 1e300", "not a number in [0, 1e+15]"),
])
def test_an_implausible_stated_value_is_refused_before_simulating(tmp_path, capsys, measured,
                                                                   says):
    case = tmp_path / "c.toml"
    case.write_text(CASE + measured + "\n")
    out = tmp_path / "out"
    assert main(["validate", str(case), "--out", str(out), "--quiet"]) == 2
    key = "measured." + measured.split()[0]
    _one_line(capsys.readouterr().err, str(case), key, says)
    assert not out.exists()
    profile = tmp_path / "p.toml"
    assert main(["calibrate", str(case), "--out", str(profile)]) == 2
    _one_line(capsys.readouterr().err, str(case), key)
    assert not profile.exists()


def test_a_silicon_row_beyond_a_day_is_refused(tmp_path):
    source = REPO / "validation" / "closed-loop" / "holdout" / (
        "aic-h200-gpt-oss-120b-v0.18.0-tp2-1024x1024-c16.toml")
    text = source.read_text()
    row = text.splitlines()[2].lstrip("# ").strip()
    text = text[:text.index("[measured]")] + (
        f'[measured]\nsilicon = {{ csv = "rows.csv", id = "{row}" }}\n')
    csv = (REPO / "validation" / "data" / "aic-silicon" / "silicon_vllm_fit.csv").read_text()
    line = next(ln for ln in csv.splitlines() if ln.startswith(row + ","))
    (tmp_path / "rows.csv").write_text(csv.replace(line, line.rsplit(",", 1)[0] + ",1e100"))
    case = tmp_path / "case.toml"
    case.write_text(text.replace("../../data", str(REPO / "validation" / "data")))
    with pytest.raises(ConfigError) as err:
        load_cases([case])
    _one_line(str(err.value), str(case), "rows.csv: column silicon_tpot_ms", "not a time")


@pytest.mark.parametrize("row, says", [
    ("1,1,10,1e308", "column seconds: row 0 is '1e+308'"),
    ("1e300,1,10,0.1", "column prefill_tokens: row 0 is '1e+300'"),
    ("1,1," + "9" * 400 + ",0.1", "column context_tokens: row 0"),
])
def test_calibrate_refuses_an_implausible_measurement(tmp_path, capsys, row, says):
    csv = tmp_path / "m.csv"
    csv.write_text(f"prefill_tokens,decode_seqs,context_tokens,seconds\n{row}\n"
                   "200,1,10,0.1\n300,1,1,0.1\n50,4,100,0.01\n")
    out = tmp_path / "p.toml"
    assert main(["calibrate", str(csv), "--gpu", "H100-SXM", "--model", "Llama-3-8B", "--out",
                 str(out)]) == 2
    _one_line(capsys.readouterr().err, str(csv), says)
    assert not out.exists()


# --- the reader under every mutation of a real file's numbers -----------------------------------

NUMERIC = sorted(k for k, v in BENCH.items() if isinstance(v, (int, float)) or v is None)
HOSTILE = st.one_of(
    st.floats(min_value=1e-3, max_value=1e5), st.integers(1, 10**5),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**500, 10**500),
    st.sampled_from([0, -1, 10**400, 1e308, 5e-324, "inf", "25", "", None, True, False]),
    st.text(max_size=20), st.lists(st.floats(), max_size=3), st.dictionaries(
        st.text(max_size=3), st.integers(), max_size=2), st.just(json.loads("[" * 50 + "]" * 50)))


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(NUMERIC), HOSTILE, min_size=1, max_size=4))
def test_a_mutated_benchmark_file_is_read_whole_or_refused_in_one_line(bench_dir, mutation):
    path = bench_dir / "bench.json"
    path.write_text(json.dumps({**BENCH, **mutation}))
    try:
        values = vllm_bench.read(path, BENCH["request_rate"])
    except vllm_bench.BenchRefused as exc:
        assert "\n" not in exc.reason and len(exc.reason) <= 200, exc.reason
        assert any(k in exc.reason for k in mutation), (mutation, exc.reason)
        return
    assert values and all(math.isfinite(v) and v > 0 and vllm_bench.plausible(m, v) is None
                          for m, v in values.items()), values


# --- the report: whole or nothing, and trace cases beside sampled ones --------------------------

def _fake_simulate(cases, runs=None, progress=None, parts=None, resume=False):
    from sweep.workflows.validate import Simulated

    return [Simulated(pd.DataFrame({"unstable": [False], "unfinished": [0], "truncated": [False],
                                    **{m: [0.02] for m in c.study.measured}})) for c in cases]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   ValueError("Image size too large")])
@pytest.mark.parametrize("fresh", [True, False])
def test_a_failed_report_file_leaves_none_of_them(tmp_path, capsys, monkeypatch, error, fresh):
    from sweep.workflows import validate

    def failing_plot(table, png, svg=None):
        Path(png).write_bytes(b"half a png")
        raise error

    monkeypatch.setattr(validate, "simulate", _fake_simulate)
    monkeypatch.setattr(validate, "plot", failing_plot)
    case = tmp_path / "c.toml"
    case.write_text(CASE + "mean_ttft_s = 0.03\n")
    out = tmp_path / "report"
    if not fresh:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    assert main(["validate", str(case), "--out", str(out), "--quiet"]) == 2
    _one_line(capsys.readouterr().err, str(out), type(error).__name__, "nothing written")
    if fresh:
        assert not out.exists()
    else:
        assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_trace_cases_validate_beside_sampled_ones(tmp_path, capsys):
    shutil.copy(REPO / "configs" / "traces" / "azure_sample.csv", tmp_path / "azure.csv")
    (tmp_path / "sampled.toml").write_text(CASE.replace('"c"', '"sampled"')
                                           + "mean_ttft_s = 0.03\n")
    traced = re.sub(r'arrival = "constant"\narrival_rate = 5.0\n', 'trace = "azure.csv"\n', CASE)
    traced = re.sub(r"prompt_tokens = 100\noutput_tokens = 8\n", "", traced)
    (tmp_path / "traced.toml").write_text(traced.replace('"c"', '"traced"')
                                          + "mean_ttft_s = 0.03\n")
    out = tmp_path / "out"
    assert main(["validate", str(tmp_path), "--out", str(out), "--quiet"]) == 0, \
        capsys.readouterr().err
    table = pd.read_parquet(out / "validation.parquet")
    assert list(table["case"]) == ["sampled", "traced"] and table["predicted"].gt(0).all()
    assert all((out / f).stat().st_size > 1000 for f in ("validation.png", "validation.svg"))
