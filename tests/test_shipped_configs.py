"""Every shipped config of the serving features runs under 'sweep run', shrunk to 40 requests, 8
seats and 12 simulations each (so the engine compiles for a few shapes in all, and once more
with prefix caching and chunked prefill)."""
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sweep.cli import main
from sweep.study.config import load_study

CONFIGS = Path(__file__).parents[1] / "configs"
SEEDS = {"bursty": 2, "trace_replay": 3, "uncertainty": 3, "calibrated": 6, "replicas": 2,
         "disaggregated": 3, "prefix_cache": 6, "chunked_prefill": 4,
         "vllm_fleet": 6, "block_trace": 3, "agent_contexts": 3}  # x designs = 12


def shrunk(name: str, tmp_path: Path) -> Path:
    """The config with 40 requests and 8 seats, beside copies of the files it names."""
    for folder in ("traces", "calibration"):
        shutil.copytree(CONFIGS / folder, tmp_path / folder)
    text = (CONFIGS / f"{name}.toml").read_text()
    text = re.sub(r"(?m)^(duration_s|num_requests|warmup_requests) = .*\n", "", text)
    text = text.replace("[workload]\n", "[workload]\nnum_requests = 40\n")
    text = text.replace("[levers]\n", "[levers]\nmax_batch = 8\n")
    # the router the comment suggests for a small workload, as an axis
    text = text.replace('router = "round_robin"', 'router = ["round_robin", "least_outstanding"]')
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", list(SEEDS))
def test_shipped_config_runs(name, tmp_path):
    cfg = shrunk(name, tmp_path)
    study = load_study(cfg, seeds=SEEDS[name])
    assert len(study.points) * len(study.seeds) == 12
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--seeds", str(SEEDS[name]),
                 "--quiet"]) == 0
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 12 and not runs["truncated"].any()
    assert (runs["completed"] + runs["unfinished"] == runs["requests"]).all()
    if name == "bursty":
        assert sorted(runs["arrival_cv"].unique()) == [1.0, 2.0, 4.0]
    elif name == "trace_replay":
        assert (runs["arrival"] == "trace").all() and (runs["requests"] == 40).all()
        assert (runs["trace"] == "traces/azure_sample.csv").all()
        # every seed replays the same requests: without speculation, only the model's error
        # tells the seeds apart (seed 1 draws a slower GPU than seed 0, seed 2 a faster one)
        plain = runs[runs["draft_tokens"] == 0]
        assert plain.groupby("design")["requests"].nunique().eq(1).all()
        for _, d in plain.groupby("design"):
            e2e = d.set_index("seed")["mean_e2e_s"]
            assert e2e[1] > e2e[0] > e2e[2]
    elif name == "uncertainty":
        assert runs.groupby("seed")["compute_efficiency"].nunique().eq(1).all()
        assert runs["compute_efficiency"].nunique() == 3
        assert runs["acceptance"].between(0.5, 0.8).all()
    elif name == "replicas":
        assert sorted(runs["replicas"].unique()) == [1, 2, 4]
        assert sorted(runs["router"].unique()) == ["least_outstanding", "round_robin"]
        one = runs[runs["replicas"] == 1].sort_values(["router", "seed"])
        assert one.iloc[:2]["p95_ttft_s"].tolist() == one.iloc[2:]["p95_ttft_s"].tolist()
        four = runs[runs["replicas"] == 4]
        assert (four["cost_per_mtok"] > 0).all() and (four["unfinished"] == 0).all()
    elif name == "disaggregated":
        assert sorted(runs["prefill_gpus"].unique()) == [1, 2]
        assert (runs["decode_gpus"] == 2).all() and runs["gpus"].isna().all()
        assert sorted(runs["kv_link_gbps"].unique()) == [100.0, 400.0]
    elif name == "prefix_cache":
        on = runs["prefix_cache"]
        assert runs.loc[~on, "prefix_hit_rate"].isna().all()
        assert (runs.loc[~on, "prefill_tokens_saved"] == 0).all()
        assert runs.loc[on, "prefix_hit_rate"].between(0, 1, inclusive="neither").all()
        saved = runs.loc[on, "prefill_tokens_saved"]
        assert (saved > 0).all() and (saved % 1024 == 0).all()
    elif name == "chunked_prefill":
        assert sorted(runs["prefill_chunk_tokens"].unique()) == [0, 512, 2048]
        assert (runs["prefill_tokens_saved"] == 0).all()
    elif name == "vllm_fleet":  # the router that sees the caches saves prefills
        saved = runs.pivot(index="seed", columns="router", values="prefill_tokens_saved")
        assert (saved["prefix_aware"] >= saved["round_robin"]).all()
        assert saved["prefix_aware"].sum() > saved["round_robin"].sum()
        assert (runs["replica_load_cv"] >= 0).all() and (runs["replicas"] == 4).all()
    elif name == "block_trace":  # the conversations' blocks are found cached
        on = runs["prefix_cache"]
        assert (runs.loc[~on, "prefix_token_hit_rate"] == 0).all()
        assert (runs.loc[on, "prefix_token_hit_rate"] > 0).all()
        assert (runs.loc[on, "prefill_tokens_saved"] % 512 == 0).all()
    elif name == "agent_contexts":  # a CPU tier only adds to what the GPUs keep
        hits = runs.pivot_table(index=["seed", "router"], columns="kv_offload_gib",
                                values="prefix_token_hit_rate")
        assert list(hits.columns) == [0.0, 512.0] and (hits[512.0] >= hits[0.0]).all()
    else:
        assert runs["compute_efficiency"].iloc[0] == pytest.approx(0.55, rel=0.03)
