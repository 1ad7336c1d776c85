"""``sweep validate`` end to end on tiny cases, its refusals, and the committed vLLM cases."""
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweep.analysis.tables import Z90
from sweep.cli import main
from sweep.study.config import ConfigError, parse_study
from sweep.workflows.validate import (COLUMNS, Case, Simulated, compare, false_alarms,
                                     interval, load, load_cases, overloaded, render)
from sweep.workflows.validation_report import by_load

ROOT = Path(__file__).resolve().parents[1]

# Both cases share seeds and seat count: one compiled call simulates them together.
BASE = """
name = "{name}"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3-8B"
[workload]
arrival = "constant"
arrival_rate = {rate}
num_requests = 20
drain_s = {drain}
prompt_tokens = {{ dist = "uniform", low = 100, high = 200 }}
output_tokens = 32
[levers]
max_batch = 8
[run]
seeds = 2
"""
TINY = BASE.format(name="tiny", rate=5.0, drain=60.0) + """
[measured]
p50_ttft_s = 0.02
mean_ttft_s = 0.03
p95_e2e_s = 0.5
p50_tpot_ms = 7.0
"""
# 2,000 requests/s into 8 seats, 0.2 s to drain: hopelessly overloaded.
OVERLOADED = BASE.format(name="overloaded", rate=2000.0, drain=0.2) + """
[measured]
unstable = true
p50_ttft_s = 0.1
"""


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    (root / "fit").mkdir()
    (root / "holdout").mkdir()
    (root / "fit" / "tiny.toml").write_text(TINY)
    (root / "holdout" / "overloaded.toml").write_text(OVERLOADED)
    out = root / "out"
    return root, out


def run(args, capsys):
    rc = main(["validate", *map(str, args)])
    return rc, capsys.readouterr()


def test_validate_end_to_end(validated, capsys):
    root, out = validated
    rc, io = run([root / "fit", root / "holdout", "--out", out, "--quiet"], capsys)
    assert rc == 0, io.err
    table = pd.read_parquet(out / "validation.parquet")
    assert list(table.columns) == list(COLUMNS)
    assert len(table) == 4 + 2
    assert list(table["case"]) == ["tiny"] * 4 + ["overloaded"] * 2
    assert list(table["group"]) == ["fit"] * 4 + ["holdout"] * 2
    assert list(table["metric"][:4]) == ["p50_ttft_s", "mean_ttft_s", "p95_e2e_s", "p50_tpot_ms"]
    assert (table["seeds"] == 2).all()
    num = table[table["metric"] != "unstable"]
    assert (num["predicted"] > 0).all() and num["flagged_share"].isna().all()
    assert (table["gpu"] == "H100-SXM").all() and (table["gpus"] == 1).all()
    # The 90% interval holds the prediction; the H100's model error widens it beyond the seeds'
    # own noise, and a slower draw of the GPU lengthens every latency.
    tiny = num[num["case"] == "tiny"]
    assert (tiny["predicted_lo"] < tiny["predicted"]).all()
    assert (tiny["predicted"] < tiny["predicted_hi"]).all()
    assert "coverage of the predicted 90% intervals:" in io.out
    assert num["passed"].isna().all()
    err = (num["predicted"] - num["measured"]) / num["measured"] * 100
    assert (err - num["error_pct"]).abs().max() < 1e-9
    flag = table[table["metric"] == "unstable"].iloc[0]
    assert flag["measured"] == 1.0 and math.isnan(flag["error_pct"])
    assert flag["flagged_share"] == 1.0 and bool(flag["passed"])
    for name in ("validation.png", "validation.svg"):
        assert (out / name).stat().st_size > 1000
    assert "median |error| % per metric" in io.out
    assert "flagged in 2/2 seeds" in io.out and "PASS" in io.out
    assert "flag checks: 1 of 1 passed" in io.out
    assert io.out.splitlines()[0].split() == ["case", "metric", "measured", "predicted", "error"]

    # A report folder: a rerun replaces the validation files and keeps the rest; same numbers.
    (out / "notes.txt").write_text("mine")
    rc, io = run([root / "fit", root / "holdout", "--out", out, "--quiet"], capsys)
    assert rc == 0, io.err
    pd.testing.assert_frame_equal(pd.read_parquet(out / "validation.parquet"), table)
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("measured, what", [
    (None, "measured: missing; a validation case needs a [measured] table"),
    ("p50_latency_s = 1.0", "measured.p50_latency_s: not a metric; allowed: mean_ttft_s"),
    ('p50_ttft_s = "fast"', "measured.p50_ttft_s: must be a number, got a string"),
    ("p50_ttft_s = true", "measured.p50_ttft_s: must be a number"),
    ("unstable = 1", "measured.unstable: must be true or false"),
    ("p50_ttft_s = nan", "measured.p50_ttft_s: must be a finite number"),
    ("grid", "grid: 2 design points; allowed: one design"),
])
def test_bad_cases_are_refused_before_anything_runs(tmp_path, capsys, measured, what):
    good = tmp_path / "good.toml"
    good.write_text(TINY)
    text = BASE.format(name="bad", rate=5.0, drain=60.0)
    if measured == "grid":
        text = text.replace("max_batch = 8", "max_batch = [8, 16]")
        text += "[measured]\np50_ttft_s = 1.0\n"
    elif measured is not None:
        text += f"[measured]\n{measured}\n"
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    out = tmp_path / "out"
    rc, io = run([good, bad, "--out", out], capsys)
    assert rc == 2
    lines = io.err.splitlines()
    assert len(lines) == 1, io.err
    assert lines[0].startswith("sweep validate: error: ") and len(lines[0]) <= 300, lines[0]
    assert bad.name in lines[0] and what in lines[0], lines[0]
    assert not out.exists()
    assert io.out == ""


def test_refusals_of_paths(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    rc, io = run([tmp_path / "empty"], capsys)
    assert rc == 2 and "no *.toml case files" in io.err
    rc, io = run([tmp_path / "missing.toml"], capsys)
    assert rc == 2 and "no such file or folder" in io.err
    (tmp_path / "a.toml").write_text(TINY)
    (tmp_path / "b.toml").write_text(TINY)
    rc, io = run([tmp_path / "a.toml", tmp_path / "b.toml"], capsys)
    assert rc == 2 and "also names" in io.err
    (tmp_path / "out").write_text("a file")
    rc, io = run([tmp_path / "a.toml", "--out", tmp_path / "out"], capsys)
    assert rc == 2 and "not a folder" in io.err and len(io.err.splitlines()) == 1


def test_measured_table_parses():
    study = parse_study(BASE.format(name="x", rate=5.0, drain=60.0)
                        + "[measured]\nrequests = 20\nunstable = false\np95_e2e_s = 2\n")
    assert study.measured == {"requests": 20.0, "unstable": False, "p95_e2e_s": 2.0}
    assert type(study.measured["p95_e2e_s"]) is float
    assert parse_study(BASE.format(name="x", rate=5.0, drain=60.0)).measured == {}
    with pytest.raises(ConfigError, match=r"measured: empty table"):
        parse_study(BASE.format(name="x", rate=5.0, drain=60.0) + "[measured]\n")
    with pytest.raises(ConfigError, match=r"measured: must be a table"):
        parse_study('measured = 1.0\n' + BASE.format(name="x", rate=5.0, drain=60.0))


def test_flags_and_notes_without_simulating():
    study = parse_study(TINY)
    case = Case(Path("fit/tiny.toml"), "fit", study)
    flag = Case(Path("holdout/x.toml"), "holdout",
                replace(study, name="x", measured={"unstable": False, "truncated": True}))
    runs = pd.DataFrame({"unstable": [False, False], "unfinished": [0, 3],
                         "truncated": [False, False], "p50_ttft_s": [0.01, 0.03],
                         "mean_ttft_s": [0.02, np.nan], "p95_e2e_s": [1.0, 1.0],
                         "p50_tpot_ms": [7.0, 7.0]})
    table = compare([case, flag], [Simulated(runs), Simulated(runs)])
    row = table.set_index(["case", "metric"])
    assert row.loc[("tiny", "p50_ttft_s"), "predicted"] == pytest.approx(0.02)
    assert row.loc[("tiny", "p50_ttft_s"), "error_pct"] == pytest.approx(0.0)
    assert row.loc[("tiny", "mean_ttft_s"), "predicted"] == pytest.approx(0.02)  # NaN skipped
    # Flagged: unstable, or unfinished requests, or truncated (1 of 2 seeds here).
    assert row.loc[("x", "unstable"), "flagged_share"] == 0.5
    assert not row.loc[("x", "unstable"), "passed"]  # false wants fewer than half
    assert row.loc[("x", "truncated"), "flagged_share"] == 0.0
    assert not row.loc[("x", "truncated"), "passed"]
    assert row.loc[("tiny", "p50_ttft_s"), "predicted_lo"] == pytest.approx(
        0.02 - Z90 * np.std([0.01, 0.03], ddof=1))  # no model error: the seeds' noise alone
    text = render(table, overloaded([case, flag], [Simulated(runs), Simulated(runs)]))
    assert "note: tiny: simulated as overloaded" in text and "in 1/2 seeds" in text
    assert "note: x" not in text  # it states a flag: checked, not noted
    assert "flag checks: 0 of 2 passed (failed: x unstable, x truncated)" in text


def test_load_bands_and_false_alarms_without_simulating():
    """A case's load is its real server's seats in use by Little's law on the measured mean
    latency; the report splits open-loop cases at half, and counts as false alarms the cases
    the real server kept up with that most seeds flag as overloaded."""
    study = parse_study(TINY)  # 5 requests/s into 8 seats
    light = Case(Path("a.toml"), "holdout", replace(study, name="light",
                                                    measured={"mean_e2e_s": 0.4}))
    heavy = Case(Path("b.toml"), "holdout", replace(study, name="heavy",
                                                    measured={"mean_e2e_s": 1.2}))
    assert load(light) == pytest.approx(5 * 0.4 / 8) and load(heavy) == pytest.approx(5 * 1.2 / 8)
    assert math.isnan(load(Case(Path("c.toml"), "fit", study)))  # no mean latency measured
    calm = pd.DataFrame({"unstable": [False, False], "unfinished": [0, 0],
                         "truncated": [False, False], "mean_e2e_s": [0.5, 0.5]})
    queued = calm.assign(unstable=[True, True])
    sims = [Simulated(calm), Simulated(queued)]
    table = compare([light, heavy], sims)
    bands = by_load(table).set_index("band")
    assert list(bands.index) == ["heavy", "light"] and (bands["cases"] == 1).all()
    assert bands.loc["light", "e2e_bias_pct"] == pytest.approx(25.0)
    assert bands.loc["heavy", "e2e_bias_pct"] == pytest.approx(100 * (0.5 / 1.2 - 1))
    assert false_alarms([light, heavy], sims) == [
        "false alarms: 1 of 2 open-loop cases the real server kept up with are simulated as "
        "overloaded (heavy)"]
    lines = render(table).splitlines()
    assert [ln.split()[2:5] for ln in lines if ln.startswith("H100-SXM  1   ")] == [
        ["heavy", "1", "0.75"], ["light", "1", "0.25"]]


def test_a_tail_metric_interval_carries_the_engines_tail_error(monkeypatch):
    """A p99 metric's interval is the model error's ends widened by the engine's own tail
    error, in quadrature on a log scale; every other metric's is the ends alone."""
    from sweep.study import model_error

    monkeypatch.setattr(model_error, "tail_sd", lambda m: 0.2 if m == "p99_e2e_s" else 0.0)
    runs = pd.DataFrame({"p99_e2e_s": [2.0], "mean_e2e_s": [1.0]})
    spread = pd.DataFrame({"p99_e2e_s": [1.8, 2.4], "mean_e2e_s": [0.9, 1.2]})
    sim = Simulated(runs, spread)
    lo, hi = interval(sim, "p99_e2e_s", 2.0)
    w = Z90 * 0.2
    assert lo == pytest.approx(2.0 * math.exp(-math.hypot(math.log(2.0 / 1.8), w)))
    assert hi == pytest.approx(2.0 * math.exp(math.hypot(math.log(2.4 / 2.0), w)))
    assert interval(sim, "mean_e2e_s", 1.0) == pytest.approx((0.9, 1.2))
    assert interval(Simulated(runs), "p99_e2e_s", 2.0) == (2.0, 2.0)  # no model error, no tail


@pytest.mark.parametrize("script", ["make_cases.py", "make_closed_cases.py",
                                    "make_engine_cases.py", "make_disagg_cases.py"])
def test_committed_cases_are_up_to_date(script):
    done = subprocess.run([sys.executable, str(ROOT / "validation" / script), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_prefill_check_reports_the_shipped_compute_efficiencies():
    """Splitwise's prefills check the shipped efficiencies (fitted on vLLM runs only): the
    script states each GPU's as shipped and its errors at every tensor-parallel degree."""
    from sweep.physics.hardware import get_gpu

    done = subprocess.run([sys.executable, str(ROOT / "validation" / "check_prefill.py")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for gpu in ("H100-SXM", "A100-80GB"):
        lines = done.stdout.splitlines()
        at = next(i for i, x in enumerate(lines) if x.startswith(f"{gpu}:"))
        shipped = float(lines[at].split("shipped compute_efficiency ")[1].split()[0])
        assert shipped == pytest.approx(get_gpu(gpu).compute_efficiency, abs=5e-4), lines[at]
        assert [x.split(":")[0].strip() for x in lines[at + 1:at + 4]] == ["TP 2", "TP 4", "TP 8"]


def test_make_cases_check_notices_a_change(tmp_path):
    copy = tmp_path / "validation"
    shutil.copytree(ROOT / "validation", copy, ignore=shutil.ignore_patterns("__pycache__"))
    case = copy / "fit" / "llama-2-7b-tp1-general-stage0.toml"
    case.write_text(case.read_text().replace("seeds = 3", "seeds = 4"))
    (copy / "holdout" / "stale.toml").write_text("# Written by validation/make_cases.py\n")
    script = [sys.executable, str(copy / "make_cases.py")]
    done = subprocess.run(script + ["--check"], capture_output=True, text=True)
    assert done.returncode == 1
    assert "llama-2-7b-tp1-general-stage0.toml: out of date" in done.stderr
    assert "stale.toml: stale" in done.stderr
    assert subprocess.run(script, capture_output=True).returncode == 0
    assert subprocess.run(script + ["--check"], capture_output=True).returncode == 0
    assert not (copy / "holdout" / "stale.toml").exists()
    for p in (ROOT / "validation").rglob("*.toml"):
        assert (copy / p.relative_to(ROOT / "validation")).read_text() == p.read_text()


def test_committed_cases_parse():
    cases = load_cases([ROOT / "validation" / "fit", ROOT / "validation" / "holdout"])
    assert len(cases) == 37
    groups = {c.name: c.group for c in cases}
    assert sum(g == "fit" for g in groups.values()) == 16
    split = {"60": "fit", "62": "fit", "65": "fit", "67": "fit", "40": "fit"}
    for c in cases:
        blis = c.name.split("-")[0].isdigit()
        if not blis:
            assert ("-general-" in c.name) == (c.group == "fit")
        elif c.name.startswith("54-"):  # the L40S's one run: its first stage is fitted
            assert (c.group == "fit") == c.name.endswith("stage0")
        else:
            assert c.group == split.get(c.name.split("-")[0], "holdout"), c.name
        if "-reasoning-stage" in c.name:  # the vLLM runs that overloaded the server
            assert c.study.measured == {"unstable": True}
        elif blis:
            assert set(c.study.measured) == {"mean_ttft_s", "p90_ttft_s", "p99_ttft_s",
                                             "mean_e2e_s", "p90_e2e_s", "p99_e2e_s",
                                             "mean_tpot_ms"}
        else:
            assert len(c.study.measured) == 11 and "mean_tpot_ms" in c.study.measured
        assert len(c.study.points) == 1 and c.study.seeds == [0, 1, 2]
    gpus = {c.study.points[0].design.gpu_spec.name for c in cases}
    assert gpus == {"H100-SXM", "A100-80GB", "L40S"}


def test_make_cases_reads_a_measured_csv_without_specs(tmp_path):
    """Runs in the blis-vllm layout whose specs are not public take the workload their folder
    names, as the shipped runs with specs ran it."""
    data = tmp_path / "runs"
    data.mkdir()
    shutil.copy(ROOT / "validation" / "data" / "blis-vllm" / "measured.csv", data)
    shutil.copytree(ROOT / "validation" / "data" / "blis-vllm" / "models", data / "models")
    out = tmp_path / "cases"
    done = subprocess.run([sys.executable, str(ROOT / "validation" / "make_cases.py"), "--data",
                           str(data), "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    cases = load_cases([out])
    assert len(cases) == 19
    tp4 = next(c for c in cases if c.name == "61-llama-3-1-70b-tp4-codegen-4-1-stage1")
    assert tp4.study.points[0].workload.arrival_rate == 10.0  # the codegen runs' second stage
    assert tp4.study.points[0].design.gpus == 4
    assert tp4.study.points[0].design.kv_blocks is None  # no log to read: vLLM's sizing
