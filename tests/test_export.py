"""Throughput per GPU and per user, and ``sweep export``: a results folder's designs as vLLM
benchmark records or CSV."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from sweep.analysis.export import vllm_records
from sweep.analysis.tables import per_gpu_and_user
from sweep.cli import main
from sweep.study.vllm_bench import FIELDS

#: vLLM's save-result fields the reader does not compare, which the export also writes.
_ALSO_VLLM = {"request_throughput"}


def _looks_like_vllm(key: str) -> bool:
    """A statistic of a vLLM latency, or a throughput (levers such as ``overhead_ms`` are not)."""
    return bool(re.fullmatch(r"(mean|median|std|p\d+)_(ttft|tpot|itl|e2el)_ms|\w+_throughput",
                             key))


def test_per_gpu_and_user_by_hand():
    designs = pd.DataFrame({
        "gpus": [2, 4, 1, 8], "replicas": [3, 1, 1, 1], "data_parallel": [2, 1, 1, 1],
        "prefill_gpus": [np.nan, np.nan, 2, np.nan], "decode_gpus": [np.nan, np.nan, 6, np.nan],
        "tokens_per_s": [1200.0, 400.0, 800.0, 100.0],
        "mean_tpot_ms": [20.0, 0.0, 50.0, np.nan]})
    cols = per_gpu_and_user(designs)
    # 3 replicas x 2 ranks x 2 GPUs; 4 GPUs; both pools, 2 + 6; 8 GPUs.
    np.testing.assert_allclose(cols["tokens_per_s_per_gpu"], [100.0, 100.0, 100.0, 12.5])
    np.testing.assert_allclose(cols["tokens_per_s_per_user"], [50.0, np.nan, 20.0, np.nan])


def test_per_gpu_and_user_in_designs(small_run):
    _, out = small_run
    designs = pd.read_parquet(out / "designs.parquet")
    assert list(designs.columns[-2:]) == ["tokens_per_s_per_gpu", "tokens_per_s_per_user"]
    gpus = designs["replicas"] * designs["gpus"] * designs.get("data_parallel", 1)
    np.testing.assert_allclose(designs["tokens_per_s_per_gpu"], designs["tokens_per_s"] / gpus)
    np.testing.assert_allclose(designs["tokens_per_s_per_user"], 1000.0 / designs["mean_tpot_ms"])


def test_export_vllm(small_run, tmp_path, capsys):
    _, out = small_run
    path = tmp_path / "x.jsonl"
    assert main(["export", str(out), "--format", "vllm", "--out", str(path)]) == 0
    designs = pd.read_parquet(out / "designs.parquet")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == len(designs)
    known = set(FIELDS) | _ALSO_VLLM
    for rec, (_, row) in zip(records, designs.iterrows()):
        assert rec["design"] == row["design"] and rec["launch_vllm"] == row["launch_vllm"]
        assert {k for k in rec if _looks_like_vllm(k)} <= known
        assert not any(k.startswith("std_") for k in rec)
        assert rec["mean_ttft_ms"] == pytest.approx(row["mean_ttft_s"] * 1000.0)
        assert rec["p99_e2el_ms"] == pytest.approx(row["p99_e2e_s"] * 1000.0)
        assert rec["mean_tpot_ms"] == pytest.approx(row["mean_tpot_ms"])
        assert rec["output_throughput"] == pytest.approx(row["tokens_per_s"])
        assert rec["request_throughput"] == pytest.approx(row["requests_per_s"])
    assert "export.jsonl" not in capsys.readouterr().err


def test_vllm_records_leave_out_what_is_missing():
    designs = pd.DataFrame({"design": [0], "gpus": [1], "mean_ttft_s": [np.nan],
                            "mean_ttft_s_std": [0.1], "p50_ttft_s": [0.5]})
    (rec,) = vllm_records(designs)
    assert rec == {"design": 0, "gpus": 1, "median_ttft_ms": 500.0}


def test_export_csv_round_trips(small_run, tmp_path):
    _, out = small_run
    path = tmp_path / "x.csv"
    assert main(["export", str(out), "--format", "csv", "--out", str(path)]) == 0
    designs = pd.read_parquet(out / "designs.parquet")
    back = pd.read_csv(path)
    assert list(back.columns) == list(designs.columns)
    for col in designs.columns:
        if pd.api.types.is_numeric_dtype(designs[col]) and designs[col].dtype != bool:
            np.testing.assert_allclose(back[col].astype(float), designs[col].astype(float))
        else:
            assert [str(v) for v in back[col].astype(object).fillna("")] == \
                [str(v) for v in designs[col].astype(object).fillna("")]


def test_export_refuses_existing_file(small_run, tmp_path, capsys):
    _, out = small_run
    path = tmp_path / "x.jsonl"
    path.write_text("kept\n")
    assert main(["export", str(out), "--format", "vllm", "--out", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--force" in err
    assert path.read_text() == "kept\n"
    assert main(["export", str(out), "--format", "vllm", "--out", str(path), "--force"]) == 0
    assert not math.isnan(json.loads(path.read_text().splitlines()[0])["mean_ttft_ms"])


def test_export_refuses_unreadable_results(tmp_path, capsys):
    assert main(["export", str(tmp_path / "none"), "--format", "csv"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
