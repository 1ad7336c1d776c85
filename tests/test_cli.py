"""The CLI end to end on a small study: run, frontier, report, determinism, bad configs."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sweep.api import simulate
from sweep.cli import main
from sweep.study.config import load_study
from sweep.study.metric_names import METRICS

N_DESIGNS = 2 * 2 * 2 * 2  # the small study of tests/conftest.py


def test_run_writes_one_row_per_design_and_seed(small_run):
    _, out = small_run
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == N_DESIGNS * 3
    assert sorted(runs["seed"].unique()) == [0, 1, 2]
    for col in ("batching", "gpus", "draft_tokens", "arrival_rate", "seed", *METRICS):
        assert col in runs.columns, col
    schema = pq.read_schema(out / "runs.parquet")
    assert str(schema.field("batching").type).startswith("dictionary")
    assert str(schema.field("p95_ttft_s").type) == "double"
    assert str(schema.field("completed").type) == "int64"
    assert str(schema.field("unstable").type) == "bool"
    meta = schema.metadata[b"servesweep"].decode()
    for needle in ("config_text", "schema_version", "jax", "device", "started"):
        assert needle in meta
    designs = pd.read_parquet(out / "designs.parquet")
    assert len(designs) == N_DESIGNS
    for col in ("p95_ttft_s", "p95_ttft_s_std", "p95_ttft_s_ci_low", "p95_ttft_s_ci_high",
                "p_pass", "meets_brief"):
        assert col in designs.columns
    lo, mid, hi = (designs[f"p95_ttft_s{s}"] for s in ("_ci_low", "", "_ci_high"))
    assert ((lo <= mid) & (mid <= hi)).all()
    requests = pd.read_parquet(out / "requests.parquet")
    assert len(requests) == N_DESIGNS * 3 * 40


def test_values_equal_the_engine_called_directly(small_run):
    cfg, out = small_run
    runs = pd.read_parquet(out / "runs.parquet")
    study = load_study(cfg)
    for design in (0, 5, N_DESIGNS - 1):
        point = study.points[design]
        direct = simulate(point.design, point.workload, seeds=[1]).metrics.iloc[0]
        row = runs[(runs["design"] == design) & (runs["seed"] == 1)].iloc[0]
        for m in METRICS:
            assert row[m] == direct[m] or (np.isnan(row[m]) and np.isnan(direct[m])), m


def test_same_data_twice_and_with_another_chunk_size(small_run, tmp_path):
    cfg, out = small_run
    assert main(["run", str(cfg), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert main(["run", str(cfg), "--out", str(tmp_path / "b"), "--quiet",
                 "--chunk-size", "5"]) == 0
    first = pd.read_parquet(out / "runs.parquet")
    for other in ("a", "b"):
        pd.testing.assert_frame_equal(first, pd.read_parquet(tmp_path / other / "runs.parquet"))
        pd.testing.assert_frame_equal(pd.read_parquet(out / "designs.parquet"),
                                      pd.read_parquet(tmp_path / other / "designs.parquet"))


def test_existing_output_is_not_overwritten_without_force(small_run, capsys):
    cfg, out = small_run
    before = (out / "runs.parquet").stat().st_mtime_ns
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (out / "runs.parquet").stat().st_mtime_ns == before


def test_frontier_and_report(small_run, capsys):
    _, out = small_run
    assert main(["frontier", str(out)]) == 0
    front = pd.read_parquet(out / "frontier.parquet")
    designs = pd.read_parquet(out / "designs.parquet")
    assert 1 <= len(front) <= len(designs)
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["frontier", str(out), "--x", "cost_per_mtok", "--y", "p95_itl_ms",
                 "--z", "p95_ttft_s"]) == 0
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "p95_ttft_s" in text


def test_unknown_frontier_column_is_a_usage_error(small_run, capsys):
    _, out = small_run
    assert main(["frontier", str(out), "--x", "no_such_metric"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_metric" in err[0]


def test_missing_results_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


BAD = sorted((Path(__file__).parent / "configs").glob("bad_*.toml"))


def test_corpus_is_large_enough():
    assert len(BAD) >= 20


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_config_exits_2_with_one_line_and_no_output(path, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, lines
    assert path.name in lines[0] and "Traceback" not in captured.err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_console_script_exit_status(small_study, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(small_study.replace('batching = ["static", "continuous"]',
                                       'batching = "dynamic"'))
    proc = subprocess.run([sys.executable, "-m", "sweep.cli", "run", str(bad), "--out",
                           str(tmp_path / "o")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "levers.batching" in proc.stderr and "Traceback" not in proc.stderr


def test_example_tour_runs_on_the_results(small_run, tmp_path):
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    try:
        import explore_results
    finally:
        sys.path.pop(0)
    _, out = small_run
    got = explore_results.main(str(out), str(tmp_path))
    assert len(got["frontier"]) >= 1
    for name in ("tour_frontier.png", "tour_ttft_histogram.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"


def test_narrow_first_try_reruns_overflowing_simulations(small_run, monkeypatch):
    """Runs first tried with fewer seats than max_batch equal the engine with every seat: the
    ones the narrow seat array held back are detected and rerun."""
    from sweep.execution import planning, runner

    cfg, out = small_run
    monkeypatch.setattr(planning, "SMALL_SEATS", 2)
    res = runner.run_study(load_study(cfg))
    assert res.compile_groups == 2  # some simulations overflowed two seats and were rerun
    pd.testing.assert_frame_equal(res.runs, pd.read_parquet(out / "runs.parquet"))


def test_chunk_size_beyond_memory_is_refused(small_run, tmp_path, capsys):
    cfg, _ = small_run
    out = tmp_path / "o"
    assert main(["run", str(cfg), "--out", str(out), "--chunk-size", "100000000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "chunk_size" in err[0] and not out.exists()
