"""``sweep import``: real benchmark result files (tests/data/bench, README there) become
validation cases that load and validate; a file, flag or field it cannot use is refused in one
line, exit 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sweep.cli import main
from sweep.study.config import load_study
from sweep.workflows.importing import catalog_name, import_cases

BENCH = Path(__file__).parent / "data" / "bench"
LLAMA = BENCH / "vllm_serving_llama3_8b_inf_10prompts.json"  # old benchmark_serving.py
CLOSED = BENCH / "vllm_bench_sweep_opt125m_c2_run0.json"  # vllm bench sweep's run file
CLOSED2 = BENCH / "vllm_bench_serve_opt125m_c2.json"  # vllm bench serve --save-result
SGLANG = BENCH / "sglang_llama33_70b_online.jsonl"  # 7 runs, one a line
AT_ONCE = BENCH / "sglang_deepseek_inf.jsonl"  # request_rate Infinity
CONFIG_JSON = Path(__file__).parent / "data" / "llama3_8b_config.json"


def _import(tmp_path, kind, *args) -> tuple[int, Path]:
    out = tmp_path / "cases"
    return main(["import", kind, *map(str, args), "--out", str(out)]), out


def _studies(out: Path) -> dict:
    return {p.stem: load_study(p) for p in sorted(out.glob("*.toml"))}


def _workload(study):
    return study.points[0].workload


def test_samples_are_small_and_documented():
    readme = (BENCH / "README.md").read_text()
    for p in BENCH.iterdir():
        # GuideLLM's report is bigger: four breakdowns (by status) of some forty distributions.
        assert p.stat().st_size < (90_000 if p.name.startswith("guidellm") else 20_000), p
        assert p.name == "README.md" or p.name in readme, p


def test_the_file_s_model_names_a_catalog_model():
    assert catalog_name("meta-llama/Meta-Llama-3-8B-Instruct") == "Llama-3-8B"
    assert catalog_name("meta-llama/Llama-3.1-70B-Instruct") == "Llama-3.1-70B"
    assert catalog_name("/models/Qwen3-8B/") == "Qwen3-8B"
    assert catalog_name("openai/gpt-oss-120b") == "gpt-oss-120b"
    assert catalog_name("facebook/opt-125m") is None


def test_every_request_at_once_with_lengths_is_a_trace_at_time_zero(tmp_path, capsys):
    rc, out = _import(tmp_path, "vllm", LLAMA, "--gpu", "H100-SXM")
    assert rc == 0 and "1 case ->" in capsys.readouterr().out
    doc = json.loads(LLAMA.read_text())
    (study,) = _studies(out).values()
    trace = pd.read_csv(out / f"{LLAMA.stem}.trace.csv")
    assert list(trace.columns) == ["arrival_s", "prompt_tokens", "output_tokens"]
    assert (trace["arrival_s"] == 0).all()
    assert trace["prompt_tokens"].tolist() == doc["input_lens"]
    assert trace["output_tokens"].tolist() == doc["output_lens"]
    design = study.points[0].design
    assert (design.gpu, design.model, design.gpus) == ("H100-SXM", "Llama-3-8B", 1)
    assert design.gpu_memory_utilization == 0.9
    assert _workload(study).arrival == "trace"
    assert study.measured == pytest.approx({
        "mean_ttft_s": doc["mean_ttft_ms"] / 1000, "p50_ttft_s": doc["median_ttft_ms"] / 1000,
        "p99_ttft_s": doc["p99_ttft_ms"] / 1000, "mean_tpot_ms": doc["mean_tpot_ms"],
        "p50_tpot_ms": doc["median_tpot_ms"], "p99_tpot_ms": doc["p99_tpot_ms"],
        "p99_itl_ms": doc["p99_itl_ms"], "tokens_per_s": doc["output_throughput"]})


def test_an_imported_vllm_case_validates_end_to_end(tmp_path):
    rc, out = _import(tmp_path, "vllm", LLAMA, "--gpu", "H100-SXM")
    report = tmp_path / "report"
    assert rc == 0
    assert main(["validate", str(out), "--seeds", "1", "--out", str(report), "--quiet"]) == 0
    table = pd.read_parquet(report / "validation.parquet").set_index("metric")
    assert table.loc["mean_ttft_s", "measured"] == pytest.approx(
        json.loads(LLAMA.read_text())["mean_ttft_ms"] / 1000)
    assert table["predicted"].notna().all() and len(table) == 8


def test_a_closed_loop_file_is_named_by_vllm_bench_as_it_was_written(tmp_path):
    rc, out = _import(tmp_path, "vllm", CLOSED, "--gpu", "H100-SXM", "--model",
                      "Llama-3.2-1B", "--set", "max_batch=4", "--set", "prefix_cache=true")
    assert rc == 0
    (study,) = _studies(out).values()
    copy = out / f"{CLOSED.stem}.bench.json"
    assert copy.read_bytes() == CLOSED.read_bytes()
    assert f'vllm_bench = "{copy.name}"' in (out / f"{CLOSED.stem}.toml").read_text()
    wl, design = _workload(study), study.points[0].design
    assert (wl.arrival, wl.concurrency, wl.num_requests) == ("closed", 2, 8)
    assert (wl.prompt_tokens.dist, wl.prompt_tokens.mean, wl.output_tokens.mean) == \
        ("fixed", 32.0, 16.0)
    assert (design.model, design.max_batch, design.prefix_cache) == ("Llama-3.2-1B", 4, True)
    doc = json.loads(CLOSED.read_text())
    assert study.measured["mean_e2e_s"] == pytest.approx(doc["mean_e2el_ms"] / 1000)
    assert study.measured["mean_tpot_ms"] == doc["mean_tpot_ms"]


def test_runs_appended_one_a_line_are_a_case_each_measuring_the_same(tmp_path):
    lines = tmp_path / "appended.jsonl"
    lines.write_text("".join(json.dumps(json.loads(p.read_text())) + "\n"
                             for p in (CLOSED, CLOSED2)))
    rc, out = _import(tmp_path, "vllm", lines, CLOSED, "--gpu", "H100-SXM", "--model",
                      str(CONFIG_JSON))
    assert rc == 0
    studies = _studies(out)
    assert set(studies) == {"appended-1", "appended-2", CLOSED.stem}
    text = (out / "appended-1.toml").read_text()
    assert "vllm_bench" not in text and f'config_json = "{CONFIG_JSON.resolve()}"' in text
    got, ref = studies["appended-1"].measured, studies[CLOSED.stem].measured
    assert got == pytest.approx(ref) and set(got) == set(ref)
    assert studies["appended-2"].measured["mean_ttft_s"] == pytest.approx(
        json.loads(CLOSED2.read_text())["mean_ttft_ms"] / 1000)


def test_sglang_runs_are_open_loops_at_their_rates(tmp_path):
    rc, out = _import(tmp_path, "sglang", SGLANG, "--gpu", "H200", "--model",
                      "Llama-3.1-70B", "--gpus", "2")
    assert rc == 0
    studies = _studies(out)
    docs = [json.loads(line) for line in SGLANG.read_text().splitlines()]
    assert len(studies) == len(docs) == 7
    for i, doc in enumerate(docs, 1):
        study = studies[f"{SGLANG.stem}-{i}"]
        wl = _workload(study)
        assert (wl.arrival, wl.arrival_rate, wl.num_requests) == \
            ("poisson", doc["request_rate"], doc["completed"])
        assert wl.prompt_tokens.mean == pytest.approx(
            doc["total_input_tokens"] / doc["completed"], abs=1e-3)
        assert study.points[0].design.gpus == 2
        assert study.measured == pytest.approx({
            "p50_ttft_s": doc["median_ttft_ms"] / 1000,
            "mean_e2e_s": doc["mean_e2e_latency_ms"] / 1000,
            "p50_e2e_s": doc["median_e2e_latency_ms"] / 1000,
            "tokens_per_s": doc["output_throughput"]})


def test_every_request_at_once_without_lengths_is_a_client_each(tmp_path):
    rc, out = _import(tmp_path, "sglang", AT_ONCE, "--gpu", "H200", "--model", "DeepSeek-V3",
                      "--gpus", "8")
    assert rc == 0
    wl = _workload(next(iter(_studies(out).values())))
    assert (wl.arrival, wl.concurrency, wl.num_requests) == ("closed", 10000, 10000)
    assert wl.output_tokens.mean == 512.0


@pytest.mark.parametrize("edit,workload", [
    (dict(max_concurrency=None, request_rate=2.5), ("poisson", 2.5, 1.0)),
    (dict(max_concurrency=None, request_rate=2.5, burstiness=0.25), ("gamma", 2.5, 2.0)),
    (dict(max_concurrency=None, request_rate=2.5, burstiness=float("inf")),
     ("constant", 2.5, 1.0)),
])
def test_vllm_s_arrival_process_is_its_burstiness(tmp_path, edit, workload):
    doc = {**json.loads(CLOSED.read_text()), **edit}
    path = tmp_path / "open.json"
    path.write_text(json.dumps(doc))
    res = import_cases("vllm", [path], "H100-SXM", model="Llama-3.2-1B")
    (text,) = res.cases.values()
    case = tmp_path / "open.toml"
    case.write_text(text)
    for name, data in res.files.items():
        (tmp_path / name).write_bytes(data)
    wl = _workload(load_study(case))
    assert (wl.arrival, wl.arrival_rate, wl.arrival_cv) == workload
    assert wl.num_requests == doc["num_prompts"]


def test_recorded_send_times_of_an_open_loop_make_a_trace(tmp_path):
    doc = {**json.loads(LLAMA.read_text()), "request_rate": 2.0}
    plain = import_cases("vllm", [_write(tmp_path / "plain.json", doc)], "H100-SXM")
    assert "no arrival times" in plain.cases["plain.toml"]
    assert list(plain.files) == ["plain.bench.json"]  # no trace: lengths fixed at the means
    doc["start_times"] = [100.0 + 0.5 * i for i in range(10)]
    timed = import_cases("vllm", [_write(tmp_path / "timed.json", doc)], "H100-SXM")
    trace = timed.files["timed.trace.csv"].decode().splitlines()
    assert trace[1] == "0.0,13,120" and trace[-1] == "4.5,205,31"
    assert "timed.bench.json" in timed.files  # vllm_bench reads an open loop of any rate
    rc, out = _import(tmp_path, "vllm", tmp_path / "timed.json", "--gpu", "H100-SXM")
    wl = _workload(_studies(out)["timed"])
    assert rc == 0 and wl.arrival == "trace" and wl.trace.arrival.tolist() == \
        [0.5 * i for i in range(10)]


def _write(path: Path, doc: dict | str) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _edited(tmp_path, edit) -> Path:
    doc = json.loads(CLOSED.read_text())
    edit(doc)
    return _write(tmp_path / "bad.json", doc)


@pytest.mark.parametrize("make,flags,says", [
    (lambda t: _write(t / "x.jsonl", CLOSED.read_text().replace("\n", "") + "\n{oops\n"), [],
     "x.jsonl: line 2: not JSON"),
    (lambda t: _edited(t, lambda d: d.pop("mean_ttft_ms")), [], "field mean_ttft_ms: missing"),
    (lambda t: _edited(t, lambda d: d.update(mean_tpot_ms="8.2")), [],
     "field mean_tpot_ms: a string '8.2', not a finite number > 0"),
    (lambda t: _edited(t, lambda d: d.update(completed=0)), [], "field completed: an integer 0"),
    (lambda t: _edited(t, lambda d: d.update(request_rate=4.0)), [],
     "field max_concurrency: 2 clients held to request_rate 4"),
    (lambda t: _edited(t, lambda d: d.update(input_lens=[1, 2], output_lens=[3])), [],
     "field output_lens: 1 entries"),
    (lambda t: _edited(t, lambda d: d.update(mean_ttft_ms=0)), [],
     "field mean_ttft_ms: an integer 0"),
    (lambda t: _write(t / "empty.json", "\n"), [], "empty.json: no run in it"),
    (lambda t: t / "missing.json", [], "missing.json: no such file"),
    (lambda t: CLOSED, ["--model", "Llama-3.2-1B", "--set", "max_batch=many"],
     "--set max_batch=many: must be an integer"),
    (lambda t: CLOSED, ["--model", "Llama-3.2-1B", "--set", "maxbatch=4"],
     "--set maxbatch=4: unknown key; allowed: max_batch"),
    (lambda t: CLOSED, ["--model", "Llama-3.2-1B", "--set", "gpus=2"], "set by --gpus"),
    (lambda t: CLOSED, ["--model", "Llama-3.2-1B", "--set", "max_batch=[4, 8]"],
     "not one value"),
    (lambda t: CLOSED, ["--model", "Llama-3.2-1B", "--gpus", "3"], "--gpus: 3 is not allowed"),
    (lambda t: CLOSED, ["--model", "Llama-9"], "--model: "),
    (lambda t: CLOSED, [], "field model_id: 'facebook/opt-125m' is not a catalog model"),
])
def test_what_it_cannot_use_is_refused_in_one_line(tmp_path, capsys, make, flags, says):
    rc, out = _import(tmp_path, "vllm", make(tmp_path), "--gpu", "H100-SXM", *flags)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("sweep import: error: ") and err.count("\n") == 1, err
    assert says in err, err
    assert not out.exists()


@pytest.mark.parametrize("kind,says", [
    ("genai-perf", "KIND genai-perf: its JSON is read by KIND aiperf; allowed: vllm, sglang, "
                   "guidellm, aiperf"),
    ("tgi", "KIND tgi: unknown; allowed: vllm, sglang, guidellm, aiperf")])
def test_an_unknown_kind_is_refused(tmp_path, capsys, kind, says):
    rc, out = _import(tmp_path, kind, CLOSED, "--gpu", "H100-SXM")
    assert rc == 2 and capsys.readouterr().err == f"sweep import: error: {says}\n"
    assert not out.exists()


def test_an_sglang_run_without_its_fields_is_refused(tmp_path, capsys):
    first = json.loads(SGLANG.read_text().splitlines()[0])
    first.pop("median_ttft_ms")
    path = _write(tmp_path / "sg.jsonl", SGLANG.read_text() + json.dumps(first) + "\n")
    rc, out = _import(tmp_path, "sglang", path, "--gpu", "H200", "--model", "Llama-3.1-70B")
    err = capsys.readouterr().err
    assert rc == 2 and "sg.jsonl: line 8: field median_ttft_ms: missing" in err
    assert not out.exists()


def test_flags_and_the_output_folder_are_checked_first(tmp_path, capsys):
    rc, out = _import(tmp_path, "vllm", LLAMA)
    assert rc == 2 and "--gpu: missing" in capsys.readouterr().err and not out.exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["import", "vllm", str(LLAMA), "--gpu", "H100-SXM", "--out",
                 str(blocker / "cases")]) == 2
    assert "not a folder" in capsys.readouterr().err
    rc, out = _import(tmp_path, "vllm", LLAMA, "--gpu", "H100-SXM")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rc, _ = _import(tmp_path, "vllm", LLAMA, "--gpu", "A100-80GB")
    assert rc == 2 and "already exists; allowed: another folder, or --force" in \
        capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    rc, _ = _import(tmp_path, "vllm", LLAMA, "--gpu", "A100-80GB", "--force")
    assert rc == 0 and 'gpu = "A100-80GB"' in (out / f"{LLAMA.stem}.toml").read_text()
