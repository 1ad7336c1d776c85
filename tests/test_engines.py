"""The serving engine as a key: each engine's host terms and error, SGLang's passes that prefill
alone (the engine and the twin agree request by request), and TensorRT-LLM's launch command."""
import json
import math

import numpy as np
import pytest

from sweep.analysis.launch import launch_sglang, launch_trtllm, launch_vllm
from sweep.engine import ITL_LOG_WIDTH
from sweep.engine.params import engine_params
from sweep.physics.catalog import get_model
from sweep.physics.engines import (ENGINES, HOST_TERMS, SGLANG, TRTLLM, VLLM,
                                   latent_attention)
from sweep.physics.hardware import CATALOG
from sweep.study.config import parse_study
from sweep.study.design import Design
from sweep.study.workload import Lengths, Workload, sample_n
from sweep.twin import simulate_reference, summarize_reference
from tests.helpers import run_cases

SEATS, K_MAX, N_REQ = 12, 4, 72


def test_vllm_is_the_catalog_and_other_engines_bring_their_terms():
    for name, gpu in CATALOG.items():
        assert Design(gpu=name).gpu_spec is gpu
    for engine, terms in (("sglang", SGLANG), ("trtllm", TRTLLM)):
        d = Design(gpu="H200", engine=engine)
        spec = d.gpu_spec
        assert all(getattr(spec, k) == getattr(terms, k) for k in HOST_TERMS)
        # The GPU side is the GPU's whatever the engine.
        assert spec.bandwidth_efficiency == CATALOG["H200"].bandwidth_efficiency
        assert spec.compute_efficiency == CATALOG["H200"].compute_efficiency
        own = CATALOG["H200"].model_error
        assert spec.model_error.speed_sd == pytest.approx(math.hypot(own.speed_sd,
                                                                     terms.error.speed_sd))
        assert spec.model_error.speed_sd >= own.speed_sd
        assert d.resolved("overhead_ms") == terms.overhead_ms
    # Models of latent attention take the engine's terms fitted on them (DeepSeek-R1's runs).
    for engine, terms in (("sglang", SGLANG), ("trtllm", TRTLLM)):
        mla = Design(gpu="B200", gpus=8, model="DeepSeek-V3", engine=engine).gpu_spec
        assert latent_attention(get_model("DeepSeek-V3")) and terms.latent is not None
        assert not latent_attention(get_model("gpt-oss-120b"))
        assert all(getattr(mla, k) == getattr(terms.latent, k) for k in HOST_TERMS)
        assert mla.request_lag_passes != terms.request_lag_passes
    assert engine_params(Design(engine="sglang")).prefill_alone
    assert not engine_params(Design(engine="trtllm")).prefill_alone
    assert not engine_params(Design()).prefill_alone
    assert set(ENGINES) == {"vllm", "sglang", "trtllm"} and ENGINES["vllm"] is VLLM


def test_a_pool_server_runs_with_its_engines_pool_terms():
    """A server of disaggregated pools takes its engine's terms fitted on such pools (their
    passes do not mix prefills and decodes), each that the design leaves unset; one server of
    the same design keeps the engine's own, and so do pools of an engine or a model family with
    no pool terms."""
    for engine in ("sglang", "trtllm"):
        latent = ENGINES[engine].latent
        pooled = latent.pooled
        assert pooled is not None and pooled.seq_overhead_us != latent.seq_overhead_us
        d = Design(gpu="B200", model="DeepSeek-V3", engine=engine, prefill_gpus=8,
                   decode_gpus=8)
        for server in (d.prefill_pool(), d.decode_pool()):
            assert all(server.resolved(k) == getattr(pooled, k) for k in HOST_TERMS)
            assert engine_params(server).timing.seq_overhead_s == pytest.approx(
                pooled.seq_overhead_us * 1e-6)
        one = Design(gpu="B200", gpus=8, model="DeepSeek-V3", engine=engine)
        assert one.resolved("seq_overhead_us") == latent.seq_overhead_us
        stated = d.replace(seq_overhead_us=7.0).decode_pool()
        assert stated.resolved("seq_overhead_us") == 7.0
        assert stated.resolved("overhead_ms") == pooled.overhead_ms
        (point,) = parse_study(  # the runs' columns: the terms that ran
            f'name = "p"\n[hardware]\ngpu = "B200"\nengine = "{engine}"\n[model]\n'
            'name = "DeepSeek-V3"\n[workload]\narrival_rate = 1.0\nnum_requests = 4\n'
            '[levers]\nprefill_gpus = 8\ndecode_gpus = 8\n').points
        assert all(point.columns[k] == getattr(pooled, k) for k in HOST_TERMS)
    vllm = Design(gpu="H200", prefill_gpus=1, decode_gpus=1)
    assert vllm.decode_pool() == vllm.pool(1)
    other = Design(gpu="H200", model="gpt-oss-120b", engine="sglang", prefill_gpus=2,
                   decode_gpus=2)
    assert other.decode_pool().resolved("seq_overhead_us") == SGLANG.seq_overhead_us


def test_calibration_names_the_engine():
    assert Design(gpu="H200").calibration == "fitted"
    assert Design(gpu="H200", engine="sglang").calibration == "fitted+sglang"
    assert Design(gpu="L4", engine="trtllm").calibration.startswith("transferred:")
    assert Design(gpu="L4", engine="trtllm").calibration.endswith("+trtllm")
    assert Design(engine="sglang", overhead_ms=2.0).calibration == "fitted+sglang:stated"
    assert Design(engine="sglang", compute_efficiency=0.5).calibration == "stated+sglang"


def test_an_unknown_engine_is_refused_in_one_line(tmp_path, capsys):
    from sweep.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "e"\n[hardware]\nengine = "tgi"\n[model]\nname = "Llama-3-8B"\n[workload]\narrival_rate = 1.0\nduration_s = 10.0\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "hardware.engine" in err and "vllm, sglang, trtllm" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="hardware.engine"):
        Design(engine="TGI")


def _case(i: int):
    """SGLang and vLLM on the same requests: with and without a token budget and drafts, at a
    light and a heavy load; then vLLM V0 scheduling once per 4 or 8 passes."""
    old = dict(engine_version="0.6", num_scheduler_steps=[4, 8][i % 2]) if 8 <= i < 12 else {}
    d = Design(gpu="H100-SXM", model="Llama-3-8B", engine="sglang" if i % 4 and not old
               else "vllm", max_batch=8, max_seq_len=512, kv_cache="paged",
               max_num_batched_tokens=[0, 0, 64, 256][i % 4], draft_tokens=[0, 2][i // 4 % 2],
               acceptance=0.7, **old)
    wl = Workload(arrival_rate=[50.0, 500.0][i % 2], duration_s=None, num_requests=60,
                  prompt_tokens=Lengths("uniform", 0, 10, 300),
                  output_tokens=Lengths("uniform", 0, 5, 60))
    p = engine_params(d)
    if i >= 12:  # SGLang on a cache of a few sequences: its admission keeps room, and preempts
        d = d.replace(engine="sglang")
        p = engine_params(d)._replace(total_blocks=np.int32([24, 40, 64, 96][i % 4]))
    return d, p, sample_n(wl, i % 4, 512, N_REQ)


@pytest.fixture(scope="module")
def prefill_alone_runs():
    return run_cases([_case(i) for i in range(16)], SEATS, K_MAX)


def test_prefill_alone_agrees_with_the_twin(prefill_alone_runs):
    designs, params, reqs, out, mets = prefill_alone_runs
    for b in range(len(designs)):
        ref = simulate_reference(params[b], reqs[b])
        msg = (f"case {b}: {designs[b].engine} {designs[b].engine_version}, "
               f"{designs[b].max_num_batched_tokens}, {designs[b].num_scheduler_steps}")
        for eng, twin in ((out.first[b], ref.first_token), (out.finish[b], ref.finish)):
            eng = np.asarray(eng)
            assert np.array_equal(np.isnan(eng), np.isnan(twin)), msg
            ok = ~np.isnan(twin)
            np.testing.assert_allclose(eng[ok], twin[ok], rtol=1e-9, atol=0, err_msg=msg)
        for name in ("tokens", "preemptions", "max_queue", "peak_blocks", "passes"):
            assert int(getattr(out, name)[b]) == int(getattr(ref, name)), (name, msg)
        summary = summarize_reference(ref, reqs[b], params[b])
        width = math.exp(ITL_LOG_WIDTH) ** 1.01
        for key in ("p95_itl_ms", "p99_itl_ms"):
            assert summary[key] / width <= mets[key][b] <= summary[key] * width, (key, msg)
        assert mets["mean_tpot_ms"][b] == pytest.approx(summary["mean_tpot_ms"], rel=1e-9)


def test_decodes_wait_for_a_prefill_pass(prefill_alone_runs):
    """The same requests and design with and without SGLang's rule (no budget): with it the
    decodes wait out every prefill's pass, so the time per output token is longer, a decode
    gap spans two passes (the ITL's tail grows) and prefills take passes of their own."""
    designs, params, reqs, _, _ = prefill_alone_runs
    checked = 0
    for b in range(8):
        if designs[b].engine != "sglang" or designs[b].max_num_batched_tokens:
            continue
        alone = simulate_reference(params[b], reqs[b])
        mixed = simulate_reference(params[b]._replace(prefill_alone=np.bool_(False)), reqs[b])
        a = summarize_reference(alone, reqs[b], params[b])
        m = summarize_reference(mixed, reqs[b], params[b])
        assert a["mean_tpot_ms"] > m["mean_tpot_ms"], b
        assert a["p99_itl_ms"] > m["p99_itl_ms"], b
        assert alone.passes > mixed.passes, b  # prefills no longer ride along with decodes
        checked += 1
    assert checked == 2


def test_sglang_admission_keeps_room_for_the_outputs(prefill_alone_runs):
    """On a cache of a few sequences SGLang's admission, which keeps room for the outputs to
    come, preempts less than admitting by the prompts' blocks alone; it is SGLang's only."""
    designs, params, reqs, out, _ = prefill_alone_runs
    for b in range(12, 16):
        assert designs[b].engine == "sglang" and params[b].reserves
        alone = simulate_reference(params[b]._replace(reserves=np.bool_(False)), reqs[b])
        assert int(out.preemptions[b]) < alone.preemptions, b
    assert not engine_params(Design()).reserves
    assert not engine_params(Design(engine="trtllm")).reserves


def test_multi_step_scheduling_admits_once_per_block():
    """vLLM V0 scheduling once per block of passes, at light load: the same requests wait
    longer for their first token (they join only on a block's first pass) and decode faster
    (the other passes spend no fixed host time)."""
    wl = Workload(arrival_rate=10.0, duration_s=None, num_requests=40,
                  prompt_tokens=Lengths("uniform", 0, 10, 300),
                  output_tokens=Lengths("uniform", 0, 20, 80))
    for k in (4, 8):
        d = Design(gpu="H100-SXM", model="Llama-3-8B", engine_version="0.6", max_batch=16,
                   num_scheduler_steps=k)
        req = sample_n(wl, k, 256, 48)
        blocks, every = engine_params(d), engine_params(d)._replace(num_scheduler_steps=np.int32(1))
        a, b = (summarize_reference(simulate_reference(p, req), req, p) for p in (blocks, every))
        assert a["mean_ttft_s"] > b["mean_ttft_s"], k
        assert a["mean_tpot_ms"] < b["mean_tpot_ms"], k
    assert engine_params(Design(engine_version="0.6")).prefill_alone  # V0 without a budget
    assert not engine_params(Design(engine_version="0.6", max_num_batched_tokens=512)
                             ).prefill_alone
    assert not engine_params(Design(engine_version="0.8")).prefill_alone


@pytest.mark.parametrize("keys, key", [
    (dict(num_scheduler_steps=8), "levers.num_scheduler_steps"),
    (dict(engine_version="0.15", num_scheduler_steps=2), "levers.num_scheduler_steps"),
    (dict(engine="sglang", engine_version="0.4", num_scheduler_steps=2), "levers.num_scheduler_steps"),
    (dict(engine_version="0.3"), "hardware.engine_version"),
    (dict(engine_version="0.16"), "hardware.engine_version"),
    (dict(engine="trtllm", engine_version="0.6"), "hardware.engine_version"),
    (dict(engine_version="latest"), "hardware.engine_version"),
    (dict(engine_version="0.6x"), "hardware.engine_version"),
    (dict(engine_version="\u0660.\u0666"), "hardware.engine_version"),  # Arabic-Indic 0.6
])
def test_an_engine_version_without_its_rules_is_refused(keys, key):
    with pytest.raises(ValueError, match=key) as err:
        Design(**keys).validate()
    assert "\n" not in str(err.value) and "allowed:" in str(err.value)


def test_versions_are_accepted_as_releases_name_them():
    for engine, version in (("vllm", "0.6.3"), ("vllm", "0.6.3.post1"), ("sglang", "0.5.9"),
                            ("trtllm", "1.2.0rc6"), ("trtllm", ""), ("vllm", "0.15")):
        Design(engine=engine, engine_version=version).validate()
    row = dict(model="Llama-3-8B", gpu="H100-SXM", gpus=1, engine_version="0.6.3",
               num_scheduler_steps=8, batching="continuous", kv_cache="paged", max_batch=16,
               block_size=16, prefix_cache=False, max_num_batched_tokens=512)
    line = launch_vllm(row)
    assert "--num-scheduler-steps 8" in line and "--enable-chunked-prefill" in line
    assert "prefix-caching" not in line  # V0's default: none
    assert "--num-scheduler-steps" not in launch_vllm({**row, "engine_version": "0.15"})
    sglang = launch_vllm({**row, "engine": "sglang", "engine_version": "0.5"})
    assert "--no-enable-prefix-caching" in sglang and "--enable-chunked-prefill" not in sglang


def test_scheduler_steps_on_a_v1_engine_is_refused_in_one_line(tmp_path, capsys):
    from sweep.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "e"\n[hardware]\nengine_version = "0.8"\n[model]\nname = '
                   '"Llama-3-8B"\n[workload]\narrival_rate = 1.0\nduration_s = 10.0\n'
                   '[levers]\nnum_scheduler_steps = 4\n')
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "levers.num_scheduler_steps" in err and "\n" not in err and len(err) <= 300, err
    assert not (tmp_path / "out").exists()


def test_an_exclusion_drops_steps_where_they_do_not_apply(tmp_path):
    """vLLM V0 with and without multi-step beside V1 in one grid: the exclusion matches the
    steps given, though the V1 point's column is empty (the key does not apply there)."""
    from sweep.study.config import load_study

    text = ('name = "ex"\nexclude = [{ engine_version = "0.15", num_scheduler_steps = 8 }]\n'
            '[hardware]\nengine_version = ["0.6", "0.15"]\n[model]\nname = "Llama-3-8B"\n'
            '[workload]\narrival_rate = 4.0\nnum_requests = 10\n'
            '[levers]\nnum_scheduler_steps = [1, 8]\n')
    cfg = tmp_path / "ex.toml"
    cfg.write_text(text)
    points = load_study(cfg).points
    assert [(q.design.engine_version, q.design.num_scheduler_steps) for q in points] == [
        ("0.6", 1), ("0.6", 8), ("0.15", 1)]
    cfg.write_text(text.split("\n", 2)[0] + "\n" + text.split("\n", 2)[2])  # no exclusion
    with pytest.raises(ValueError, match="levers.num_scheduler_steps") as err:
        load_study(cfg)
    assert "NoneType" not in str(err.value) and "engine_version='0.15'" in str(err.value)


ROW = dict(model="DeepSeek-V3", gpu="B200", gpus=8, expert_parallel=True, data_parallel=1,
           max_num_batched_tokens=8192, kv_bits=8, draft_tokens=3, draft="mtp", max_batch=64,
           gpu_memory_utilization=0.9, batching="continuous", kv_cache="paged",
           prefix_cache=False, block_size=32, kv_blocks=1000, engine="trtllm")


def _extra(line: str) -> dict:
    return json.loads(line.split("EXTRA.yml = ", 1)[1].split("; ")[0].split("}  #")[0])


def test_trtllm_launch_command():
    line = launch_trtllm(ROW)
    flags = line.split("  #")[0].split()
    assert flags[:2] == ["trtllm-serve", "deepseek-ai/DeepSeek-V3"]
    for flag in ("--backend pytorch", "--tp_size 8", "--ep_size 8", "--max_num_tokens 8192",
                 "--max_batch_size 64", "--kv_cache_free_gpu_memory_fraction 0.9",
                 "--extra_llm_api_options EXTRA.yml"):
        assert flag in line, flag
    extra = _extra(line.split("  # ", 1)[1])
    assert extra["kv_cache_config"] == {"enable_block_reuse": False, "dtype": "fp8",
                                        "tokens_per_block": 32, "max_tokens": 32000}
    assert extra["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 3}
    assert extra["enable_chunked_prefill"] is True
    assert "simulated as" not in line
    ranks = launch_trtllm({**ROW, "gpus": 1, "data_parallel": 8})
    assert "--tp_size 8" in ranks and "--max_batch_size 512" in ranks
    assert _extra(ranks.split("  # ", 1)[1])["enable_attention_dp"] is True
    assert launch_trtllm({**ROW, "batching": "static"}) is None
    assert launch_trtllm({**ROW, "kv_cache": "contiguous"}) is None
    pools = launch_trtllm({**ROW, "prefill_gpus": 4, "decode_gpus": 8}).split("\n")
    assert len(pools) == 2 and "--tp_size 4" in pools[0] and "prefill server" in pools[0]


def test_each_engine_command_says_which_engine_simulated_it():
    assert "simulated as engine=trtllm" in launch_vllm(ROW)
    sglang = launch_sglang(ROW)
    assert "simulated as engine=trtllm" in sglang and "--enable-mixed-chunk" in sglang
    own = launch_sglang({**ROW, "engine": "sglang"})
    assert "simulated as" not in own and "--enable-mixed-chunk" not in own
    assert "simulated as engine=vllm" in launch_trtllm({**ROW, "engine": "vllm"})


def test_a_profile_names_its_engine(tmp_path):
    from sweep.study.config import load_study
    from sweep.study.profile import parse_profile

    text = ('[hardware]\ngpu = "H200"\nengine = "sglang"\ncompute_efficiency = 0.5\n'
            "bandwidth_efficiency = 0.8\noverhead_ms = 3.0\n")
    (tmp_path / "p.toml").write_text(text)
    assert parse_profile(text, "p.toml")["engine"] == "sglang"
    with pytest.raises(ValueError, match="engine 'tgi' is not known; allowed: vllm"):
        parse_profile(text.replace('"sglang"', '"tgi"'), "p.toml")
    cfg = tmp_path / "c.toml"
    cfg.write_text('name = "c"\n[hardware]\nprofile = "p.toml"\n[model]\nname = "Llama-3-8B"\n'
                   "[workload]\narrival_rate = 1.0\nduration_s = 10.0\n")
    d = load_study(cfg).points[0].design
    assert d.engine == "sglang" and d.overhead_ms == 3.0
    assert d.calibration == "stated+sglang:stated"


def test_the_engines_config_puts_the_engines_on_an_axis(tmp_path):
    """configs/engines.toml, shrunk as the shipped configs' test shrinks them: every design on
    each engine, each naming its engine; SGLang's host terms and its prefills alone make every
    pass slower than vLLM's on the same requests."""
    import pandas as pd

    from sweep.cli import main
    from tests.test_shipped_configs import shrunk

    out = tmp_path / "out"
    assert main(["run", str(shrunk("engines", tmp_path)), "--out", str(out), "--seeds", "2",
                 "--quiet"]) == 0
    runs = pd.read_parquet(out / "runs.parquet")
    assert len(runs) == 12 and sorted(runs["engine"].unique()) == ["sglang", "trtllm", "vllm"]
    assert set(runs["calibration"]) == {"fitted", "fitted+sglang", "fitted+trtllm"}
    tpot = runs.pivot_table(index=["gpus", "seed"], columns="engine", values="mean_tpot_ms")
    assert (tpot["sglang"] > tpot["vllm"]).all()
    assert runs.groupby("engine")["overhead_ms"].first().to_dict() == {
        "sglang": SGLANG.overhead_ms, "trtllm": TRTLLM.overhead_ms, "vllm": VLLM.overhead_ms}
    designs = pd.read_parquet(out / "designs.parquet").set_index("engine")
    assert "simulated as" not in designs.loc["trtllm", "launch_trtllm"].iloc[0]


def test_an_imported_run_names_the_engine_its_backend_drove(tmp_path, capsys):
    from sweep.cli import main
    from sweep.study.config import load_study
    from tests.test_import import CLOSED2, SGLANG

    out = tmp_path / "sg"
    assert main(["import", "sglang", str(SGLANG), "--gpu", "H100-SXM", "--gpus", "4",
                 "--model", "Llama-3.1-70B", "--out", str(out)]) == 0
    cases = sorted(out.glob("*.toml"))
    assert cases and all(load_study(p).points[0].design.engine == "sglang" for p in cases)
    assert 'engine = "sglang"  # the run\'s backend' in cases[0].read_text()
    out = tmp_path / "set"
    assert main(["import", "sglang", str(SGLANG), "--gpu", "H100-SXM", "--gpus", "4",
                 "--model", "Llama-3.1-70B", "--set", "engine=trtllm", "--out", str(out)]) == 0
    assert {load_study(p).points[0].design.engine for p in out.glob("*.toml")} == {"trtllm"}
    out = tmp_path / "vllm"
    assert main(["import", "vllm", str(CLOSED2), "--gpu", "H100-SXM", "--model",
                 "Llama-3.2-1B", "--out", str(out)]) == 0
    (case,) = out.glob("*.toml")
    assert load_study(case).points[0].design.engine == "vllm" and "engine" not in case.read_text()


def test_a_server_toml_beside_the_files_states_the_server(tmp_path, capsys):
    """``sweep import`` reads the server from ``server.toml`` beside the files; each flag
    overrides its key; a bad one is refused in one line naming the file."""
    import shutil

    from sweep.cli import main
    from sweep.study.config import load_study
    from tests.test_import import SGLANG

    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(SGLANG, runs / SGLANG.name)
    (runs / "server.toml").write_text('[hardware]\ngpu = "H200"\nengine = "trtllm"\n'
                                      '[model]\nname = "Llama-3.1-70B"\n'
                                      "[levers]\ngpus = 4\nmax_num_batched_tokens = 8192\n")
    out = tmp_path / "a"
    assert main(["import", "sglang", str(runs / SGLANG.name), "--out", str(out)]) == 0
    d = load_study(sorted(out.glob("*.toml"))[0]).points[0].design
    assert (d.gpu, d.gpus, d.engine, d.max_num_batched_tokens) == ("H200", 4, "trtllm", 8192)
    assert d.model_spec.name == "Llama-3.1-70B"
    out = tmp_path / "b"
    assert main(["import", "sglang", str(runs / SGLANG.name), "--gpu", "H100-SXM", "--gpus", "8",
                 "--set", "engine=sglang", "--out", str(out)]) == 0
    d = load_study(sorted(out.glob("*.toml"))[0]).points[0].design
    assert (d.gpu, d.gpus, d.engine, d.max_num_batched_tokens) == ("H100-SXM", 8, "sglang", 8192)
    capsys.readouterr()
    for bad, says in (("[levers]\nmax_batchh = 3\n", "levers.max_batchh: unknown key"),
                      ("[server]\ngpu = 1\n", "not tables of a server"),
                      ("[levers\n", "not TOML")):
        (runs / "server.toml").write_text(bad)
        out = tmp_path / "c"
        assert main(["import", "sglang", str(runs / SGLANG.name), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert "server.toml" in err and says in err and "\n" not in err, err
        assert not out.exists()


def test_own_command_is_the_row_s_engine_s():
    from sweep.analysis.report import launch_lines, own_command

    row = {"engine": "trtllm", "launch_vllm": "vllm serve M", "launch_trtllm": "trtllm-serve M"}
    assert [ln.strip() for ln in launch_lines(own_command(row))] == ["trtllm-serve M"]
    row["engine"] = float("nan")  # a table without the column's value: vLLM's
    assert [ln.strip() for ln in launch_lines(own_command(row))] == ["vllm serve M"]


def test_a_gpu_timed_by_a_measured_fit_keeps_its_engine():
    with pytest.raises(ValueError, match="hardware.engine: Apple-M3-Max is timed by a measured"):
        Design(gpu="Apple-M3-Max", model="Llama-3.2-1B", engine="sglang").validate()
    Design(gpu="Apple-M3-Max", model="Llama-3.2-1B").validate()
