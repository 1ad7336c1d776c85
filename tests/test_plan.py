"""``sweep plan``: the Serve a Model question in one line gets the study's answer, the config it
runs is one ``sweep capacity`` reads, and a user error is one line, exit 2, nothing written.

The comparison with the study (``configs/serve_a_model.toml``): the plan is given the study's
hardware keys through ``--set`` (the study states the brief's roofline, the plan otherwise
takes the GPU's fitted factors); both draw exponential lengths of the same means. The plan
runs its own search on the designs the study also holds (``--gpus-max 2``, ``kv_bits=16``:
each design's search is its own, so the capacities equal the full plan's), and the study runs
its own seeds on the same designs (continuous batching, paged KV)."""
import contextlib
import io
import re
import tomllib
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from sweep.cli import main
from sweep.errors import UsageError
from sweep.study.config import parse_study
from sweep.workflows.plan import Question, build

STUDY = Path(__file__).resolve().parents[1] / "configs" / "serve_a_model.toml"
QUESTION = ["--model", "Llama-3-8B", "--gpu", "H100-SXM", "--isl", "1024", "--osl", "256",
            "--ttft-ms", "500", "--tpot-ms", "15"]
LEVERS = ["gpus", "weight_bits", "draft_tokens"]
LATENCY = ("p95_ttft_s", "p95_itl_ms")


def _study_sets() -> list[str]:
    """The study's [hardware] keys (its GPU aside) as ``--set`` flags."""
    hw = tomllib.loads(STUDY.read_text())["hardware"]
    return [f for k, v in hw.items() if k != "gpu" for f in ("--set", f"{k}={v}")]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """The plan of the Serve a Model question on the study's designs: (stdout, folder)."""
    out = tmp_path_factory.mktemp("plan") / "out"
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        rc = main(["plan", *QUESTION, "--rate", "16", "--gpus-max", "2", "--set", "kv_bits=16",
                   *_study_sets(), "--out", str(out), "--quiet"])
    assert rc == 0
    return text.getvalue(), out


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The study's results on its designs the plan holds (continuous batching, paged KV)."""
    from sweep.analysis.results import load_results

    root = tmp_path_factory.mktemp("study")
    cfg = root / "study.toml"
    cfg.write_text(STUDY.read_text() + '\n[[exclude]]\nbatching = "static"\n\n[[exclude]]\n'
                   'kv_cache = "contiguous"\n')
    assert main(["run", str(cfg), "--out", str(root / "out"), "--quiet"]) == 0
    return load_results(root / "out")


def _keys(df: pd.DataFrame) -> set:
    return {tuple(int(v) for v in row) for row in df[LEVERS].itertuples(index=False)}


def test_the_plan_passes_the_designs_the_study_passes(planned, study):
    from sweep.analysis.report import meets_brief
    from sweep.analysis.results import load_capacity

    cap = load_capacity(planned[1])[0]
    assert _keys(cap) == _keys(study.designs)  # the designs both contain: all 18
    carries = _keys(cap[cap["max_rate"] >= 16.0])  # one server carries 16 requests/s
    passes = _keys(study.designs[meets_brief(study.designs, study.brief)])
    assert passes == {(1, 8, 2), (1, 8, 4)}
    # The study's cost ceiling and quality floor are not the plan's question: within them the
    # plan's verdict is the study's.
    others = [lim for lim in study.brief if lim.key not in LATENCY]
    allowed = _keys(study.designs[meets_brief(study.designs, others)])
    assert passes == carries & allowed
    # On the latency targets alone the plan passes a design where 90% of the study's seeds
    # meet them (a capacity's confidence), the study's verdict where their means do.
    latency = [lim for lim in study.brief if lim.key in LATENCY]
    on_means = _keys(study.designs[meets_brief(study.designs, latency)])
    runs = study.runs
    met = runs.assign(ok=(runs["p95_ttft_s"] <= 0.5) & (runs["p95_itl_ms"] <= 15.0))
    share = {tuple(map(int, k)): float(g["ok"].mean()) for k, g in met.groupby(LEVERS)}
    assert carries <= on_means
    assert all(share[k] < 0.9 for k in on_means - carries)
    assert all(share[k] >= 0.9 for k in carries)


def test_the_readme_states_the_study_s_passing_designs_and_costs(study):
    """README's account of the study's frontier is the study's: the passing designs and the
    cheapest costs it quotes (the designs here: continuous batching, paged KV, whose figures
    a contiguous cache repeats)."""
    from sweep.analysis.report import meets_brief

    text = " ".join((STUDY.parents[1] / "README.md").read_text().split())
    found = re.search(r"one GPU \(with a (\d)- or (\d)-token draft, ~\$(\d\.\d+)/M\); "
                      r"4-bit is cheaper \(~\$(\d\.\d+)/M\)", text)
    assert found, "README's frontier paragraph changed: update this test with it"
    d = study.designs
    ok = d[meets_brief(d, study.brief)]
    assert _keys(ok) == {(1, 8, int(found[1])), (1, 8, int(found[2]))}
    assert round(float(ok["cost_per_mtok"].min()), 3) == float(found[3])
    latency_and_cost = [lim for lim in study.brief if lim.key != "weight_bits"]
    four = d[meets_brief(d, latency_and_cost) & (d["weight_bits"] == 4)]
    assert round(float(four["cost_per_mtok"].min()), 3) == float(found[4])
    assert float(four["cost_per_mtok"].min()) < float(ok["cost_per_mtok"].min())


def test_the_plan_prints_the_fleet_and_commands_and_writes_the_folder(planned):
    from sweep.analysis.results import load_capacity

    text, out = planned
    assert "Cheapest fleet for 16 requests/s: 1 x (gpus=1 " in text
    assert "$2.00/hour" in text and "vllm serve meta-llama/Meta-Llama-3-8B" in text
    assert "sglang" not in text
    for name in ("capacity.parquet", "fleet.parquet", "search.parquet", "frontier.parquet",
                 "frontier.png", "frontier.svg", ".servesweep"):
        assert (out / name).is_file(), name
    cap, fleet, meta = load_capacity(out)
    assert meta["target_rate"] == 16.0 and len(meta["seeds"]) == 4
    assert fleet["confirmed"].iloc[0] and fleet["replicas"].iloc[0] == 1
    assert (cap["kv_bits"] == 16).all() and "launch_vllm" in cap.columns
    assert main(["report", str(out)]) == 0


def test_write_config_writes_a_config_capacity_reads_and_runs_nothing(tmp_path, capsys):
    from sweep.study.config import load_study

    path, out = tmp_path / "plan.toml", tmp_path / "out"
    assert main(["plan", *QUESTION, "--rate", "16", "--write-config", str(path), "--out",
                 str(out)]) == 0
    assert not out.exists()  # nothing run
    study = load_study(path)
    doc = tomllib.loads(path.read_text())
    assert doc["levers"]["gpus"] == [1, 2, 4, 8] and doc["levers"]["kv_bits"] == [16, 8]
    assert doc["levers"]["weight_bits"] == [16, 8, 4] and doc["levers"]["draft_tokens"] == [0, 2, 4]
    assert doc["brief"] == {"p95_ttft_s": {"max": 0.5}, "p95_itl_ms": {"max": 15.0}}
    assert doc["workload"]["prompt_tokens"] == {"dist": "exponential", "mean": 1024}
    assert study.capacity["target_rate"] == 16.0 and len(study.points) == 72
    assert main(["plan", *QUESTION, "--rate", "16", "--write-config", str(path)]) == 2
    assert "--write-config" in capsys.readouterr().err
    # A set lever is searched at that value; a hardware key replaces the GPU's factor.
    assert main(["plan", *QUESTION, "--rate", "16", "--set", "weight_bits=8", "--set",
                 "compute_efficiency=0.5", "--write-config", str(path), "--force"]) == 0
    doc = tomllib.loads(path.read_text())
    assert doc["levers"]["weight_bits"] == 8 and doc["hardware"]["compute_efficiency"] == 0.5


def test_a_closed_loop_and_a_mixture_of_experts(tmp_path):
    from sweep.study.config import load_study

    path = tmp_path / "moe.toml"
    assert main(["plan", "--model", "Qwen3-30B-A3B", "--gpu", "H100-SXM", "--isl", "512",
                 "--osl", "128", "--ttft-ms", "1000", "--tpot-ms", "50", "--concurrency", "32",
                 "--gpus-max", "4", "--write-config", str(path)]) == 0
    doc = tomllib.loads(path.read_text())
    assert doc["workload"]["arrival"] == "closed" and doc["workload"]["concurrency"] == 32
    assert doc["capacity"] == {"rate_max": 32}
    assert doc["levers"]["expert_parallel"] == [False, True]
    points = [p.design for p in load_study(path).points]
    assert all(d.server_gpus <= 4 for d in points)
    assert all(d.expert_parallel for d in points if d.data_parallel > 1)
    assert {d.data_parallel for d in points} == {1, 2, 4}


def test_a_closed_loop_fleet_is_clients_over_a_server(tmp_path):
    from sweep.workflows.plan import closed_fleet

    cap = pd.DataFrame({"design": [0, 1, 2], "max_concurrency": [10, 40, 0],
                        "usd_per_hour": [2.0, 4.0, 1.0], "cost_per_mtok_at_max": [1.0, 0.9, 0]})
    fleet = closed_fleet(cap, 100)
    assert fleet["design"].tolist() == [1, 0]  # 3 x $4 beats 10 x $2
    assert fleet["replicas"].tolist() == [3, 10]
    assert fleet["fleet_usd_per_hour"].tolist() == [12.0, 20.0]


RATE = ["--rate", "16"]


@pytest.mark.parametrize("changed, extra, flag", [
    ({"--gpu": "H100-SMX"}, RATE, "--gpu"),
    ({"--model": "Llama-9-8B"}, RATE, "--model"),
    ({"--model": "no/such/config.json"}, RATE, "--model"),
    ({}, [*RATE, "--concurrency", "8"], "--rate/--concurrency"),
    ({}, [], "--rate/--concurrency"),
    ({"--isl": "0"}, RATE, "--isl"),
    ({"--isl": "9000"}, RATE, "--isl/--osl"),
    ({"--ttft-ms": "-1"}, RATE, "--ttft-ms"),
    ({"--tpot-ms": "nan"}, RATE, "--tpot-ms"),
    ({}, ["--rate", "abc"], "--rate"),
    ({}, ["--concurrency", "2.5"], "--concurrency"),
    ({}, [*RATE, "--gpus-max", "129"], "--gpus-max"),
    ({"--model": "Llama-3-405B"}, [*RATE, "--gpus-max", "2"], "--gpus-max"),
    ({"--model": "GPT-4-est", "--gpu": "L4"}, RATE, "--gpus-max"),  # 64 L4s in 8 stages
    ({"--model": "GPT-4-est", "--gpu": "Apple-M3-Max"}, RATE, "--model/--gpu"),
    ({}, [*RATE, "--set", "gpus=2"], "--set gpus=2"),
    ({}, [*RATE, "--set", "nonsense=1"], "--set nonsense=1"),
    ({}, [*RATE, "--set", "expert_parallel=true"], "--set expert_parallel=true"),
])
def test_a_user_error_is_one_line_exit_2_and_writes_nothing(changed, extra, flag, tmp_path,
                                                             capsys):
    given = {**dict(zip(QUESTION[::2], QUESTION[1::2])), **changed}
    out = tmp_path / "out"
    argv = ["plan", *[a for kv in given.items() for a in kv], *extra, "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {flag}:" in err and "allowed:" in err, err
    assert not out.exists()


def test_a_model_beyond_one_node_is_planned_on_pipeline_stages():
    """Llama 3.1 405B at 16 bits fits no node of 8 H100s: the plan says how wide a server must
    be, and at that width tries two nodes as two pipeline stages of 8 GPUs."""
    q = Question(model="Llama-3.1-405B", gpu="H100-SXM", isl=1024, osl=256, ttft_ms=2000,
                 tpot_ms=100, rate=10.0, sets=("weight_bits=16",))
    with pytest.raises(UsageError, match="--gpus-max: .* allowed: at least 16"):
        build(q)
    text = build(replace(q, gpus_max=16))
    study = parse_study(text, "<plan>")
    assert {(p.design.gpus, p.design.pipeline_parallel) for p in study.points} == {(8, 2)}
    assert {p.design.server_gpus for p in study.points} == {16}
