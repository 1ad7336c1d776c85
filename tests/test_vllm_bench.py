"""A vLLM benchmark result file as a validation case's measurements: the shipped example
validates end to end, and a file it cannot read is refused in one line, nothing written."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sweep.cli import main
from sweep.study.config import load_study

REPO = Path(__file__).parents[1]
EXAMPLE = REPO / "configs" / "vllm_bench"
SOURCE = REPO / "validation" / "holdout" / "llama-2-7b-tp1-codegen-stage0.toml"


def test_the_example_measures_what_its_real_run_measured():
    got, real = load_study(EXAMPLE / "case.toml").measured, load_study(SOURCE).measured
    assert set(got) == set(real) and all(got[k] == pytest.approx(real[k], rel=1e-12) for k in got)


def _copy(tmp_path: Path, bench: dict | None = None, extra: str = "") -> Path:
    """The example, shortened to 20 s, beside its model file (and another result file)."""
    case = tmp_path / "case" / "case.toml"
    case.parent.mkdir()
    model = tmp_path / "Llama-2-7b-hf.json"
    shutil.copy(REPO / "validation" / "data" / "vllm-h100" / "models" / model.name, model)
    text = (EXAMPLE / "case.toml").read_text()
    text = re.sub(r'config_json = ".*"', f'config_json = "{model}"', text)
    text = text.replace("duration_s = 600.0", "duration_s = 20.0").replace("seeds = 3", "seeds = 1")
    case.write_text(text + extra)
    doc = json.loads((EXAMPLE / "bench.json").read_text())
    (case.parent / "bench.json").write_text(json.dumps(doc if bench is None else bench))
    return case


def test_a_vllm_benchmark_file_validates_end_to_end(tmp_path):
    case = _copy(tmp_path)
    out = tmp_path / "out"
    assert main(["validate", str(case.parent), "--out", str(out), "--quiet"]) == 0
    table = pd.read_parquet(out / "validation.parquet").set_index("metric")
    bench = json.loads((EXAMPLE / "bench.json").read_text())
    assert table.loc["mean_ttft_s", "measured"] == pytest.approx(bench["mean_ttft_ms"] / 1000)
    assert table.loc["p99_e2e_s", "measured"] == pytest.approx(bench["p99_e2el_ms"] / 1000)
    assert table.loc["mean_tpot_ms", "measured"] == bench["mean_tpot_ms"]
    assert table["predicted"].notna().all()


@pytest.mark.parametrize("change,says", [
    (lambda d: d.pop("mean_tpot_ms"), "mean_tpot_ms is missing"),
    (lambda d: d.update(mean_ttft_ms="fast"), "mean_ttft_ms is 'fast'"),
    (lambda d: d.update(p99_e2el_ms=None), "p99_e2el_ms is None"),
    (lambda d: d.update(max_concurrency=64), "closed loop, which an open-loop case cannot"),
    (lambda d: d.update(request_rate=float("inf")), "every request at once"),
    (lambda d: d.update(request_rate=4.0), "workload.arrival_rate = 5"),
    (lambda d: d.clear() or d.update(x=1), "request_rate is missing"),
])
def test_a_file_it_cannot_read_is_refused_in_one_line(tmp_path, capsys, change, says):
    bench = json.loads((EXAMPLE / "bench.json").read_text())
    change(bench)
    case = _copy(tmp_path, bench)
    out = tmp_path / "out"
    assert main(["validate", str(case), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "measured.vllm_bench" in err and says in err
    assert not out.exists()


def test_a_metric_stated_beside_the_file_must_agree(tmp_path, capsys):
    case = _copy(tmp_path, extra="mean_tpot_ms = 9.0\n")
    assert main(["validate", str(case), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "measured.mean_tpot_ms: 9 here, 7.25726 in vllm_bench" in capsys.readouterr().err


CLOSED = EXAMPLE / "closed"
CLOSED_SOURCE = (REPO / "validation" / "closed-loop" / "holdout"
                 / "aic-h200-gpt-oss-120b-v0.18.0-tp2-1024x1024-c16.toml")


def test_the_closed_loop_example_measures_what_its_shared_row_measured():
    """A closed loop's file (max_concurrency = the case's clients, request_rate inf) gives the
    measured values of the shared row it was written from."""
    got, real = load_study(CLOSED / "case.toml").measured, load_study(CLOSED_SOURCE).measured
    assert set(got) == set(real) and all(got[k] == pytest.approx(real[k], rel=1e-12) for k in got)
    assert load_study(CLOSED / "case.toml").points[0].workload.concurrency == 16


OPEN_CASE = {'arrival = "closed"': 'arrival = "poisson"\narrival_rate = 2.0',
             "concurrency = 16\n": "", "warmup_requests = 32\n": ""}


@pytest.mark.parametrize("bench_edit, text_edit, says", [
    ({"max_concurrency": 8}, {}, "max_concurrency = 8, but workload.concurrency = 16"),
    ({"request_rate": 4.0}, {}, "clients held to a rate besides"),
    ({"max_concurrency": None}, {}, "no max_concurrency: an open-loop run"),
    ({}, OPEN_CASE, 'a case with arrival = "closed" and concurrency = 16 can'),
])
def test_a_closed_loop_file_the_case_does_not_replay_is_refused(tmp_path, bench_edit,
                                                                 text_edit, says):
    from sweep.study.config import ConfigError

    bench = {**json.loads((CLOSED / "bench.json").read_text()), **bench_edit}
    text = (CLOSED / "case.toml").read_text().replace(
        "../../../validation", str(REPO / "validation"))
    for old, new in text_edit.items():
        text = text.replace(old, new)
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    (tmp_path / "case.toml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_study(tmp_path / "case.toml")
    msg = str(err.value)
    assert "\n" not in msg and "measured.vllm_bench" in msg and says in msg, msg


SILICON = REPO / "validation" / "data" / "aic-silicon" / "silicon_vllm_fit.csv"


def _silicon_case(tmp_path: Path, edits: dict, csv_text: str | None = None) -> Path:
    """CLOSED_SOURCE with its measurements taken from its row of the shared silicon sample."""
    text = CLOSED_SOURCE.read_text()
    row = text.splitlines()[2].lstrip("# ").strip()  # the row's id, as the case names it
    text = text[:text.index("[measured]")] + (
        f'[measured]\nsilicon = {{ csv = "rows.csv", id = "{row}" }}\n')
    text = text.replace("../../data", str(REPO / "validation" / "data"))
    for old, new in edits.items():
        text = text.replace(old, new)
    (tmp_path / "rows.csv").write_text(csv_text or SILICON.read_text())
    (tmp_path / "case.toml").write_text(text)
    return tmp_path / "case.toml"


def test_a_row_of_the_shared_silicon_sample_is_a_case_s_measurements(tmp_path):
    got = load_study(_silicon_case(tmp_path, {})).measured
    real = load_study(CLOSED_SOURCE).measured  # the same row, written to 6 digits
    assert set(got) == set(real) and all(got[k] == pytest.approx(real[k], rel=1e-5) for k in got)


@pytest.mark.parametrize("edits, csv_edit, says", [
    ({"concurrency = 16": "concurrency = 8"}, None, "batch_size (clients) = 16, but workload"),
    ({"gpus = 2\n": "gpus = 4\n"}, None, "tp_size = 2, but levers.gpus = 4"),
    ({'id = "2026': 'id = "x2026'}, None, "no row with id x2026"),
    ({'arrival = "closed"': 'arrival = "poisson"\narrival_rate = 2.0'}, None,
     "which an open-loop case cannot replay"),
    ({}, lambda t: t.replace("silicon_tpot_ms", "tpot"), "no column silicon_tpot_ms"),
    ({}, lambda t: t.replace(",7.88445", ",fast"), "column silicon_tpot_ms of row"),
    ({'id = "': 'ids = "'}, None, "must be a table of csv and id"),
])
def test_a_silicon_row_the_case_does_not_replay_is_refused(tmp_path, edits, csv_edit, says):
    from sweep.study.config import ConfigError

    csv_text = SILICON.read_text()
    case = _silicon_case(tmp_path, edits, csv_edit(csv_text) if csv_edit else None)
    with pytest.raises(ConfigError) as err:
        load_study(case)
    msg = str(err.value)
    assert "\n" not in msg and "measured.silicon" in msg and says in msg, msg
