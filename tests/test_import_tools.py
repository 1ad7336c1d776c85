"""``sweep import guidellm`` and ``sweep import aiperf``: real GuideLLM and AIPerf result files
(tests/data/bench, provenance in its README) become validation cases of the run's load, lengths
and measured values. The other shapes the tools write (GuideLLM 0.2-0.3's, AIPerf's earlier
``loadgen``, GenAI-Perf's flat ``input_config``, other strategies and arrivals) are the real
files edited here, named as such: no real file of those shapes is in the samples. A file, field
or value it cannot use is refused in one line naming the file and the field, exit 2, nothing
written."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sweep.cli import main
from sweep.study.config import load_study

BENCH = Path(__file__).parent / "data" / "bench"
GUIDELLM = BENCH / "guidellm_qwen3_4b_concurrent4.json"  # concurrent, 4 streams, 4 requests
AIPERF = BENCH / "aiperf_qwen36_c2.json"  # 2 clients, 96 requests
AIPERF_RATE = BENCH / "aiperf_qwen36_poisson1.json"  # Poisson at 1 request/s, 96 requests
FLAGS = ["--gpu", "H100-SXM", "--model", "Qwen3-8B"]


def _import(tmp_path, kind, path, *flags) -> tuple[int, Path]:
    out = tmp_path / "cases"
    return main(["import", kind, str(path), "--out", str(out), *map(str, flags)]), out


def _cases(out: Path) -> dict:
    return {p.stem: load_study(p) for p in sorted(out.glob("*.toml"))}


def _one(out: Path):
    (study,) = _cases(out).values()
    return study, study.points[0].workload


def _edited(tmp_path, src: Path, edit, name: str | None = None) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    path = tmp_path / (name or src.name)
    path.write_text(json.dumps(doc))
    return path


def _bench(doc: dict) -> dict:
    return doc["benchmarks"][0]


def _strategy(**s):
    return lambda d: _bench(d)["config"]["strategy"].update(s)


def test_a_guidellm_benchmark_is_a_closed_loop_case_that_validates(tmp_path):
    rc, out = _import(tmp_path, "guidellm", GUIDELLM, *FLAGS)
    assert rc == 0
    study, wl = _one(out)
    m = _bench(json.loads(GUIDELLM.read_text()))["metrics"]
    assert (wl.arrival, wl.concurrency, wl.num_requests) == ("closed", 4, 4)
    assert (wl.prompt_tokens.dist, wl.prompt_tokens.mean, wl.output_tokens.mean) == \
        ("fixed", 99.0, 1024.0)
    ok = {k: v["successful"] for k, v in m.items() if isinstance(v, dict) and "successful" in v}
    assert study.measured["mean_ttft_s"] == pytest.approx(ok["time_to_first_token_ms"]["mean"]
                                                          / 1000)
    assert study.measured["p50_tpot_ms"] == ok["inter_token_latency_ms"]["median"]
    assert study.measured["p90_e2e_s"] == ok["request_latency"]["percentiles"]["p90"]
    assert study.measured["tokens_per_s"] == ok["output_tokens_per_second"]["mean"]
    assert len(study.measured) == 15
    report = tmp_path / "report"
    assert main(["validate", str(out), "--seeds", "1", "--out", str(report), "--quiet"]) == 0
    table = pd.read_parquet(report / "validation.parquet").set_index("metric")
    assert table.loc["mean_e2e_s", "measured"] == ok["request_latency"]["mean"]
    assert table["predicted"].notna().all() and len(table) == 15


@pytest.mark.parametrize("edit,load", [
    (_strategy(type_="synchronous"), ("closed", 1)),
    (_strategy(type_="throughput", max_concurrency=3), ("closed", 3)),
    (_strategy(type_="throughput", max_concurrency=None), ("closed", 4)),  # 4 requests at once
    (_strategy(type_="poisson", rate=0.5), ("poisson", 0.5)),
    (_strategy(type_="constant", rate=2.0), ("constant", 2.0)),
])
def test_a_guidellm_strategy_is_its_load(tmp_path, edit, load):
    rc, out = _import(tmp_path, "guidellm", _edited(tmp_path, GUIDELLM, edit), *FLAGS)
    assert rc == 0
    _, wl = _one(out)
    closed = wl.arrival == "closed"
    assert (wl.arrival, wl.concurrency if closed else wl.arrival_rate) == load
    assert wl.num_requests == 4
    assert wl.prompt_tokens.mean == 99.0  # the sample keeps one request of four: no trace


def test_an_open_loop_listing_every_request_is_a_trace(tmp_path):
    def edit(d):
        _strategy(type_="poisson", rate=0.5)(d)
        _bench(d)["metrics"]["request_totals"]["successful"] = 1  # the one request it lists

    rc, out = _import(tmp_path, "guidellm", _edited(tmp_path, GUIDELLM, edit), *FLAGS)
    assert rc == 0
    trace = pd.read_csv(out / f"{GUIDELLM.stem}.trace.csv")
    assert trace.values.tolist() == [[0.0, 133, 1024]]
    assert _one(out)[1].arrival == "trace"


def test_guidellm_0_3_s_shape_and_a_report_of_several_benchmarks(tmp_path):
    """GuideLLM 0.2-0.3 kept the strategy in args and the counts beside the metrics."""
    def old(d):
        b = _bench(d)
        b["args"] = {"strategy": {**b.pop("config")["strategy"], "streams": 2}}
        b["request_totals"] = b["metrics"].pop("request_totals")
        b["worker"] = {"backend_model": "meta-llama/Meta-Llama-3-8B-Instruct"}
        del b["metrics"]["inter_token_latency_ms"]["successful"]["percentiles"]["p99"]
        b["metrics"]["time_to_first_token_ms"]["successful"].update(count=0, mean=0.0)
        d["benchmarks"].append(json.loads(json.dumps(b)))
        d["benchmarks"][1]["args"]["strategy"].update(type_="constant", rate=1.5)
        del d["args"]

    rc, out = _import(tmp_path, "guidellm", _edited(tmp_path, GUIDELLM, old), "--gpu", "H100-SXM")
    assert rc == 0
    cases = _cases(out)
    assert set(cases) == {f"{GUIDELLM.stem}-1", f"{GUIDELLM.stem}-2"}
    first, second = (cases[f"{GUIDELLM.stem}-{i}"] for i in (1, 2))
    assert first.points[0].design.model == "Llama-3-8B"
    assert (first.points[0].workload.concurrency, second.points[0].workload.arrival_rate) == \
        (2, 1.5)
    assert "p99_tpot_ms" not in first.measured  # absent: left out
    assert "mean_ttft_s" not in first.measured  # a distribution of no requests: left out


def test_an_aiperf_summary_is_its_phase_s_load(tmp_path):
    rc, out = _import(tmp_path, "aiperf", AIPERF, *FLAGS)
    assert rc == 0
    study, wl = _one(out)
    doc = json.loads(AIPERF.read_text())
    assert (wl.arrival, wl.concurrency, wl.num_requests) == ("closed", 2, 96)
    assert wl.prompt_tokens.mean == round(doc["input_sequence_length"]["avg"], 3) == 580.719
    assert wl.output_tokens.mean == round(doc["output_sequence_length"]["avg"], 3)
    assert study.measured == pytest.approx({
        **{f"{s}_ttft_s": doc["time_to_first_token"][k] / 1000 for s, k in (
            ("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))},
        **{f"{s}_tpot_ms": doc["inter_token_latency"][k] for s, k in (
            ("mean", "avg"), ("p50", "p50"), ("p95", "p95"), ("p99", "p99"))},
        **{f"{s}_e2e_s": doc["request_latency"][k] / 1000 for s, k in (
            ("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p95", "p95"), ("p99", "p99"))},
        "tokens_per_s": doc["output_token_throughput"]["avg"],
        "requests_per_s": doc["request_throughput"]["avg"]})
    rc, out = _import(tmp_path / "rate", "aiperf", AIPERF_RATE, *FLAGS)
    assert rc == 0
    study, wl = _one(out)
    assert (wl.arrival, wl.arrival_rate, wl.num_requests) == ("poisson", 1.0, 96)
    assert study.measured["p99_ttft_s"] == pytest.approx(0.24721048975)


def _phase(**p):
    """The measured phase as AIPerf writes one of arrivals at a rate: no clients."""
    def edit(d):
        d["input_config"]["phases"][1].pop("concurrency")
        d["input_config"]["phases"][1].update(p)
    return edit


def _genai_perf(d):
    """GenAI-Perf's summary: its command line's arguments as input_config, no request_count."""
    d["input_config"] = {"model": ["meta-llama/Llama-3.1-8B-Instruct"], "concurrency": None,
                         "request_rate": 4.0, "request_count": 96}
    del d["request_count"]
    d["time_to_first_token"] = {k: v / 1000 if k != "unit" else "s"
                                for k, v in d["time_to_first_token"].items() if k != "count"}
    d["request_latency"]["p50"] = None


@pytest.mark.parametrize("edit,workload,model", [
    (_phase(type="gamma", rate=3.0, smoothness=0.25), ("gamma", 3.0, 2.0), None),
    (_phase(type="constant", rate=0.5), ("constant", 0.5, 1.0), None),
    (lambda d: d.update(input_config={"endpoint": {"model_names": ["Qwen/Qwen3-8B"]},
                                      "loadgen": {"request_rate": 2.0}}),
     ("poisson", 2.0, 1.0), "Qwen3-8B"),
    (_genai_perf, ("constant", 4.0, 1.0), "Llama-3.1-8B"),
])
def test_aiperf_s_other_shapes_and_arrivals(tmp_path, edit, workload, model):
    flags = ["--gpu", "H200"] + ([] if model else ["--model", "Qwen3-8B"])
    rc, out = _import(tmp_path, "aiperf", _edited(tmp_path, AIPERF, edit), *flags)
    assert rc == 0
    study, wl = _one(out)
    assert (wl.arrival, wl.arrival_rate, wl.arrival_cv, wl.num_requests) == (*workload, 96)
    assert study.points[0].design.model == (model or "Qwen3-8B")
    assert study.measured["p95_ttft_s"] == pytest.approx(0.168109425)
    assert ("p50_e2e_s" in study.measured) == (edit is not _genai_perf)


def _write(tmp_path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _g(edit):
    return lambda t: _edited(t, GUIDELLM, edit, "bad.json")


def _a(edit):
    return lambda t: _edited(t, AIPERF, edit, "bad.json")


_M = "benchmarks.0.metrics"


@pytest.mark.parametrize("kind,make,flags,says", [
    ("guidellm", lambda t: _write(t, "bad.json", "{oops"), FLAGS, "bad.json: not JSON"),
    ("guidellm", lambda t: _write(t, "bad.json", "[1]"), FLAGS,
     "bad.json: a JSON list, not an object"),
    ("guidellm", _g(lambda d: d.pop("benchmarks")), FLAGS, "bad.json: field benchmarks: missing"),
    ("guidellm", _g(lambda d: _bench(d).pop("metrics")), FLAGS,
     "field benchmarks.0.metrics: missing (a GuideLLM 0.1 report keeps none)"),
    ("guidellm", _g(lambda d: _bench(d)["metrics"]["time_to_first_token_ms"]["successful"]
                    .update(mean=float("nan"))), FLAGS,
     f"field {_M}.time_to_first_token_ms.successful.mean: a float nan, not a finite number > 0"),
    ("guidellm", _g(lambda d: _bench(d)["metrics"]["request_latency"]["successful"]
                    ["percentiles"].update(p99=-1.5)), FLAGS,
     f"field {_M}.request_latency.successful.percentiles.p99: a float -1.5"),
    ("guidellm", _g(lambda d: _bench(d)["metrics"]["request_totals"].update(successful=0)),
     FLAGS, f"field {_M}.request_totals.successful: an integer 0, not an integer in [1,"),
    ("guidellm", _g(_strategy(type_="replay")), FLAGS,
     "field benchmarks.0.config.strategy.type_: a string 'replay'; allowed: synchronous"),
    ("guidellm", _g(_strategy(rampup_duration=5.0)), FLAGS,
     "field benchmarks.0.config.strategy.rampup_duration: 5.0 s: clients started"),
    ("guidellm", _g(_strategy(type_="poisson", rate="fast")), FLAGS,
     "field benchmarks.0.config.strategy.rate: a string 'fast'"),
    ("guidellm", _g(_strategy(streams=None)), FLAGS,
     "field benchmarks.0.config.strategy.streams: null, not an integer in [1, 10000000]"),
    ("guidellm", lambda t: GUIDELLM, ["--gpu", "H100-SXM"], "field benchmarks.0.config.backend."
     "model: 'Qwen/Qwen3-4B-Thinking-2507' is not a catalog model"),
    ("aiperf", lambda t: _write(t, "bad.json", ""), FLAGS, "bad.json: not JSON"),
    ("aiperf", _a(lambda d: d.pop("input_sequence_length")), FLAGS,
     "bad.json: field input_sequence_length: missing"),
    ("aiperf", _a(lambda d: d["time_to_first_token"].update(unit="min")), FLAGS,
     "field time_to_first_token.unit: a string 'min'; allowed: ms, s, sec, us, ns"),
    ("aiperf", _a(lambda d: d["inter_token_latency"].update(avg=-5.7)), FLAGS,
     "field inter_token_latency.avg: a float -5.7, not a finite number > 0"),
    ("aiperf", _a(lambda d: d["time_to_first_token"].update(p99=float("inf"))), FLAGS,
     "field time_to_first_token.p99: a float inf, not a finite number > 0"),
    ("aiperf", _a(lambda d: d["request_throughput"].update(unit="requests/min")), FLAGS,
     "field request_throughput.unit: a string 'requests/min'; allowed: requests/sec"),
    ("aiperf", _a(lambda d: d["request_count"].update(avg=96.5)), FLAGS,
     "field request_count.avg: a float 96.5, not an integer"),
    ("aiperf", _a(_phase(type="fixed_schedule")), FLAGS,
     "field input_config.phases.1.type: a string 'fixed_schedule'; allowed: concurrency,"),
    ("aiperf", _a(lambda d: d["input_config"]["phases"][1].update(type="poisson", rate=2.0)),
     FLAGS,
     "field input_config.phases.1.concurrency: 2 clients held to a rate of 2.0 besides"),
    ("aiperf", _a(lambda d: d["input_config"]["phases"][0].pop("exclude_from_results")), FLAGS,
     "field input_config.phases: 2 measured phases"),
    ("aiperf", _a(lambda d: d.update(input_config={})), FLAGS,
     "field input_config: states no load"),
    ("aiperf", _a(lambda d: d["input_config"].update(
        phases=None, loadgen={"request_rate": 1.0, "request_rate_mode": "concurrency_burst"})),
     FLAGS, "field input_config.loadgen.request_rate_mode: a string 'concurrency_burst'"),
    ("aiperf", lambda t: AIPERF, ["--gpu", "H200"],
     "field input_config.models.items.0.name: 'qwen3.6-nvfp4' is not a catalog model"),
])
def test_what_it_cannot_use_is_refused_in_one_line(tmp_path, capsys, kind, make, flags, says):
    rc, out = _import(tmp_path, kind, make(tmp_path), *flags)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("sweep import: error: ") and err.count("\n") == 1, err
    assert says in err, err
    assert not out.exists()
