"""Trace replay: reading Azure-format and plain traces, truncation, scaling, the sampler's
clipping, and one-line refusals of bad files."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweep.study.config import ConfigError, parse_study
from sweep.study.trace import load_trace
from sweep.study.workload import Workload, sample_n

REPO = Path(__file__).parents[1]
AZURE = REPO / "configs" / "traces" / "azure_sample.csv"
DATA = Path(__file__).parent / "data"
N = 1500  # the sampler's slot count in tests/test_queueing.py and test_arrivals.py


def test_the_shipped_azure_sample_loads():
    t = load_trace(AZURE)
    raw = pd.read_csv(AZURE)
    assert list(raw.columns) == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    assert len(t.arrival) == len(raw) == 300
    assert t.arrival[0] == 0.0 and (np.diff(t.arrival) >= 0).all()
    stamps = pd.to_datetime(raw["TIMESTAMP"])
    np.testing.assert_allclose(t.arrival, (stamps - stamps[0]).dt.total_seconds(), atol=1e-6)
    np.testing.assert_array_equal(t.prompt, raw["ContextTokens"])
    np.testing.assert_array_equal(t.output, raw["GeneratedTokens"])


def test_plain_columns_parquet_seconds_sorting_and_zero_tokens(tmp_path):
    df = pd.DataFrame({"arrival_s": [12.5, 10.0, 11.0], "prompt_tokens": [5, 0, 7],
                       "output_tokens": [1, 2, 0]})
    df.to_parquet(tmp_path / "t.parquet")
    t = load_trace(tmp_path / "t.parquet")
    np.testing.assert_array_equal(t.arrival, [0.0, 1.0, 2.5])  # relative to the first, sorted
    np.testing.assert_array_equal(t.prompt, [1, 7, 5])  # 0 tokens are served as 1
    np.testing.assert_array_equal(t.output, [2, 1, 1])
    azure = df.rename(columns={"arrival_s": "TIMESTAMP", "prompt_tokens": "ContextTokens",
                               "output_tokens": "GeneratedTokens"})
    azure.to_csv(tmp_path / "a.csv", index=False)
    np.testing.assert_array_equal(load_trace(tmp_path / "a.csv").arrival, t.arrival)


def test_truncation_scaling_and_mean_rate():
    t = load_trace(AZURE)
    assert t.count(1.0, None, None) == 300
    assert t.count(1.0, None, 40) == 40
    assert t.count(1.0, 10.0, None) == int((t.arrival <= 10.0).sum())
    assert t.count(0.5, 10.0, None) == int((t.arrival * 0.5 <= 10.0).sum())
    assert t.mean_rate(0.5, 300) == pytest.approx(2 * t.mean_rate(1.0, 300))
    arrival, prompt, output = t.rows(2.0, 310)
    np.testing.assert_array_equal(arrival[:300], t.arrival * 2.0)
    assert np.isinf(arrival[300:]).all() and (prompt[300:] == 1).all()


def test_the_sampler_replays_the_trace_for_every_seed_clipped_to_the_context():
    t = load_trace(AZURE)
    wl = Workload(arrival="trace", trace=t, duration_s=20.0, num_requests=None, drain_s=5.0,
                  trace_time_scale=0.5)
    n = wl.capacity
    assert n == int((t.arrival * 0.5 <= 20.0).sum())
    a, b = sample_n(wl, 0, 2048, N), sample_n(wl, 99, 2048, N)
    for field in ("arrival", "prompt", "output", "end_time"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)),
                                      np.asarray(getattr(b, field)))
    arrival = np.asarray(a.arrival)
    np.testing.assert_array_equal(arrival[:n], t.arrival[:n] * 0.5)
    assert np.isinf(arrival[n:]).all()
    assert float(a.end_time) == pytest.approx(t.arrival[n - 1] * 0.5 + 5.0)
    prompt, output = np.asarray(a.prompt)[:n], np.asarray(a.output)[:n]
    np.testing.assert_array_equal(prompt, np.minimum(t.prompt[:n], 2047))
    np.testing.assert_array_equal(output, np.minimum(t.output[:n], 2048 - prompt))
    assert (t.prompt[:n] > 2047).any()  # the clipping was exercised


def write_config(tmp_path, workload: str) -> Path:
    (tmp_path / "azure.csv").write_bytes(AZURE.read_bytes())
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'name = "t"\n[model]\nname = "Llama-3-8B"\n[workload]\n{workload}')
    return cfg


def test_config_columns_axis_and_relative_path(tmp_path, monkeypatch):
    from sweep.study.config import load_study

    monkeypatch.chdir(REPO)  # paths are relative to the config file, not the current folder
    cfg = write_config(tmp_path, 'trace = "azure.csv"\ntrace_time_scale = [1.0, 0.25]\n'
                                 "num_requests = 100\n")
    s = load_study(cfg)
    assert s.axes == ["trace_time_scale"]
    c0, c1 = (p.columns for p in s.points)
    assert c0["arrival"] == "trace" and c0["trace"] == "azure.csv"
    assert c0["prompt_tokens_dist"] == "trace" and c0["prompt_tokens_low"] is None
    assert c1["arrival_rate"] == pytest.approx(4 * c0["arrival_rate"])
    assert c0["num_requests"] == 100 and s.points[0].workload.capacity == 100
    assert c0["trace_time_scale"] == 1.0 and c0["arrival_cv"] is None
    assert s.points[0].workload.trace is s.points[1].workload.trace  # read once


@pytest.mark.parametrize("workload, needle", [
    ('trace = "nope.csv"\n', "workload.trace: "),
    ('trace = "azure.csv"\narrival_rate = 4.0\n', "workload.arrival_rate: does not apply with "
                                                  "workload.trace"),
    ('trace = "azure.csv"\nprompt_tokens = 100\n', "workload.prompt_tokens: does not apply"),
    ('trace = "azure.csv"\nduration_s = 5.0\nnum_requests = 3\n', "workload.num_requests: both"),
    ('trace = "azure.csv"\nduration_s = -1.0\n', "workload.duration_s"),
    ('trace = "azure.csv"\ntrace_time_scale = 0\n', "workload.trace_time_scale: must be a number in (0.0, 1000000.0]"),
    ("trace_time_scale = 2.0\nduration_s = 5.0\n", "workload.trace_time_scale: applies only"),
    (f'trace = "{DATA / "trace_bad_columns.csv"}"\n', "missing columns"),
    (f'trace = "{DATA / "trace_negative_tokens.csv"}"\n', "column prompt_tokens: row 1 is '-3'"),
])
def test_bad_traces_are_refused_in_one_line(tmp_path, workload, needle):
    from sweep.study.config import load_study

    with pytest.raises(ConfigError) as info:
        load_study(write_config(tmp_path, workload))
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and len(msg) <= 300, msg
    assert msg.startswith(str(tmp_path / "c.toml")) or msg.startswith(".../c.toml"), msg


def test_bad_timestamps(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,1,1\n"
                 "yesterday,2,2\n")
    with pytest.raises(ValueError, match="column TIMESTAMP: not seconds or date-times"):
        load_trace(p)
    with pytest.raises(ValueError, match="unknown file type"):
        load_trace(AZURE.with_name("make_azure_sample.py"))


def test_text_configs_resolve_traces_from_the_current_folder(monkeypatch):
    monkeypatch.chdir(AZURE.parent)
    s = parse_study('name = "t"\n[model]\nname = "Llama-3-8B"\n[workload]\n'
                    'trace = "azure_sample.csv"\n')
    assert s.points[0].workload.capacity == 300
