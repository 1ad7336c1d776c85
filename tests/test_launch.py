"""The launch commands of a design (``sweep.analysis.launch``): each flag against the lever it
comes from, the levers no flag sets said in the note, the report's shell lines; and a small
study's tables and report carrying them."""
import json
import shlex

import pandas as pd
import pytest

from sweep.analysis.launch import (DRAFT_MODEL, EAGLE_MODEL, HF_IDS, fleet_launch,
                                   launch_sglang, launch_vllm, model_id)
from sweep.analysis.report import WIDTH, launch_lines, render, verdict
from sweep.cli import main
from sweep.physics.catalog import CATALOG

#: Every flag the commands may carry, as the engines' docs name them (docs/running.md).
VLLM_FLAGS = {"--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel",
              "--max-num-batched-tokens", "--enable-prefix-caching", "--no-enable-prefix-caching",
              "--kv-cache-dtype", "--quantization", "--speculative-config", "--max-num-seqs",
              "--max-model-len", "--gpu-memory-utilization", "--num-gpu-blocks-override",
              "--block-size", "--kv-transfer-config", "--kv-offloading-backend",
              "--kv-offloading-size"}
SGLANG_FLAGS = {"--model-path", "--tp", "--dp", "--enable-dp-attention", "--ep-size",
                "--chunked-prefill-size", "--enable-mixed-chunk", "--disable-radix-cache",
                "--kv-cache-dtype", "--quantization", "--speculative-algorithm",
                "--speculative-draft-model-path", "--speculative-num-steps",
                "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                "--max-running-requests", "--context-length", "--mem-fraction-static",
                "--page-size", "--max-total-tokens", "--disaggregation-mode",
                "--enable-hierarchical-cache", "--hicache-write-policy", "--hicache-size"}
BASE = dict(model="Llama-3-8B", gpu="H100-SXM", batching="continuous", kv_cache="paged", gpus=1,
            weight_bits=16, activation_bits=16, kv_bits=16, draft_tokens=0, max_batch=256,
            block_size=16, replicas=1, router="round_robin", prefix_cache=False)


def parse(command: str) -> tuple[dict, str]:
    """A one-line command's flags (flag -> value, or True for a switch) and its note."""
    command, _, note = command.partition("  # ")
    words, flags = shlex.split(command), {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else "--"
            flags[w] = True if nxt.startswith("--") else nxt
    return flags, note


def vllm(**levers) -> tuple[dict, str]:
    return parse(launch_vllm({**BASE, **levers}))


def sglang(**levers) -> tuple[dict, str]:
    return parse(launch_sglang({**BASE, **levers}))


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_tensor_parallel(gpus):
    assert vllm(gpus=gpus)[0]["--tensor-parallel-size"] == str(gpus)
    assert sglang(gpus=gpus)[0]["--tp"] == str(gpus)
    assert "--data-parallel-size" not in vllm(gpus=gpus)[0]


@pytest.mark.parametrize("dp", [2, 4])
def test_data_parallel_ranks_share_the_experts(dp):
    levers = dict(model="Qwen3-30B-A3B", gpus=2, data_parallel=dp, expert_parallel=True,
                  max_batch=32)
    v, _ = vllm(**levers)
    assert (v["--tensor-parallel-size"], v["--data-parallel-size"]) == ("2", str(dp))
    assert v["--enable-expert-parallel"] is True and v["--max-num-seqs"] == "32"  # per rank
    s, _ = sglang(**levers)
    assert (s["--tp"], s["--dp"], s["--ep-size"]) == (str(2 * dp), str(dp), str(2 * dp))
    assert s["--enable-dp-attention"] is True
    assert s["--max-running-requests"] == str(32 * dp)  # SGLang splits it over the ranks


@pytest.mark.parametrize("ep", [True, False])
def test_expert_parallel(ep):
    v, s = vllm(gpus=8, expert_parallel=ep)[0], sglang(gpus=8, expert_parallel=ep)[0]
    assert ("--enable-expert-parallel" in v) == ep
    assert s.get("--ep-size") == ("8" if ep else None)


@pytest.mark.parametrize("budget, chunk", [(0, 0), (8192, 0), (0, 512), (4096, 1024)])
def test_token_budget_and_prefill_chunk(budget, chunk):
    (v, vnote), (s, snote) = (f(max_num_batched_tokens=budget, prefill_chunk_tokens=chunk)
                              for f in (vllm, sglang))
    assert v.get("--max-num-batched-tokens") == (str(budget or chunk) if budget or chunk
                                                 else None)
    assert s.get("--chunked-prefill-size") == str(chunk or budget or -1)  # -1: no chunks
    assert ("prefill_chunk_tokens" in vnote) == bool(chunk)  # vLLM's budget counts decodes
    assert ("max_num_batched_tokens" in snote) == bool(budget)  # SGLang's chunk does not


@pytest.mark.parametrize("on", [True, False])
def test_prefix_cache(on):
    v, s = vllm(prefix_cache=on)[0], sglang(prefix_cache=on)[0]
    assert ("--enable-prefix-caching" in v, "--no-enable-prefix-caching" in v) == (on, not on)
    assert ("--disable-radix-cache" in s) == (not on)


@pytest.mark.parametrize("gib, gpus, cache", [(0.0, 1, True), (64.0, 1, True), (64.0, 4, True),
                                              (64.0, 1, False)])
def test_cpu_kv_tier(gib, gpus, cache):
    """vLLM's buffer is the server's GiB; SGLang's host pool each rank's GB; no tier without
    the prefix cache it serves."""
    v = vllm(kv_offload_gib=gib, gpus=gpus, prefix_cache=cache)[0]
    s = sglang(kv_offload_gib=gib, gpus=gpus, prefix_cache=cache)[0]
    on = gib > 0 and cache
    assert ("--kv-offloading-size" in v, "--enable-hierarchical-cache" in s) == (on, on)
    if on:
        assert v["--kv-offloading-backend"] == "native" and float(v["--kv-offloading-size"]) == gib
        assert float(s["--hicache-size"]) == pytest.approx(gib * 2**30 / 1e9 / gpus, rel=1e-3)


@pytest.mark.parametrize("bits", [16, 8])
def test_kv_bits(bits):
    assert vllm(kv_bits=bits)[0].get("--kv-cache-dtype") == ("fp8" if bits == 8 else None)
    assert sglang(kv_bits=bits)[0].get("--kv-cache-dtype") == ("fp8_e4m3" if bits == 8 else None)


@pytest.mark.parametrize("model, bits, act, quantization, note", [
    ("Llama-3-8B", 16, 16, None, ""),
    ("Llama-3-8B", 8, 8, "fp8", ""),  # a 16-bit checkpoint quantised on load
    ("Llama-3-8B", 8, 16, "fp8", "activation_bits=16"),  # fp8 computes in 8 bits on an H100
    ("DeepSeek-V3", 8, 8, None, ""),  # already fp8
    ("DeepSeek-V3", 16, 16, None, "16-bit (BF16) checkpoint"),
    ("Llama-3-8B", 4, 16, None, "4-bit"),  # no flag quantises to 4 bits: the checkpoint named
    ("gpt-oss-120b", 4, 16, None, ""),  # its own MXFP4, weight-only on an H100
])
def test_weight_bits(model, bits, act, quantization, note):
    for f in (vllm, sglang):
        flags, said = f(model=model, weight_bits=bits, activation_bits=act, gpus=8)
        assert flags.get("--quantization") == quantization
        assert (note in said) if note else "bits" not in said


def test_fp8_on_a_gpu_without_fp8_is_weight_only():
    assert "activation_bits" not in vllm(gpu="A100-80GB", weight_bits=8, activation_bits=16)[1]
    assert "activation_bits=8" in vllm(gpu="A100-80GB", weight_bits=8, activation_bits=8)[1]


@pytest.mark.parametrize("k", [0, 2, 5])
def test_draft_tokens(k):
    (v, vnote), (s, _) = vllm(draft_tokens=k), sglang(draft_tokens=k)
    if not k:
        assert "--speculative-config" not in v and "--speculative-algorithm" not in s
        return
    spec = json.loads(v["--speculative-config"])
    assert spec == {"method": "draft_model", "model": DRAFT_MODEL, "num_speculative_tokens": k}
    assert f"{DRAFT_MODEL}: a placeholder" in vnote  # the draft model is not a lever
    assert (s["--speculative-algorithm"], s["--speculative-draft-model-path"]) == (
        "STANDALONE", DRAFT_MODEL)
    assert (s["--speculative-num-steps"], s["--speculative-eagle-topk"],
            s["--speculative-num-draft-tokens"]) == (str(k), "1", str(k + 1))


def test_mtp_and_eagle_drafts():
    """MTP layers are the checkpoint's own (no draft path); an EAGLE-3 head's checkpoint is
    not a lever, so a placeholder names it and the note says so."""
    (v, _), (s, _) = vllm(model="DeepSeek-V3", draft="mtp", draft_tokens=2), sglang(
        model="DeepSeek-V3", draft="mtp", draft_tokens=2)
    assert json.loads(v["--speculative-config"]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert s["--speculative-algorithm"] == "NEXTN" and "--speculative-draft-model-path" not in s
    assert (s["--speculative-num-steps"], s["--speculative-num-draft-tokens"]) == ("2", "3")
    (v, vnote), (s, snote) = vllm(draft="eagle", draft_tokens=3), sglang(draft="eagle",
                                                                         draft_tokens=3)
    assert json.loads(v["--speculative-config"]) == {"method": "eagle3", "model": EAGLE_MODEL,
                                                     "num_speculative_tokens": 3}
    assert (s["--speculative-algorithm"], s["--speculative-draft-model-path"]) == (
        "EAGLE3", EAGLE_MODEL)
    assert f"{EAGLE_MODEL}: a placeholder" in vnote and f"{EAGLE_MODEL}: a placeholder" in snote
    assert DRAFT_MODEL not in vnote


@pytest.mark.parametrize("batching, seats", [("continuous", 64), ("one_at_a_time", 1)])
def test_max_batch(batching, seats):
    assert vllm(max_batch=64, batching=batching)[0]["--max-num-seqs"] == str(seats)
    assert sglang(max_batch=64, batching=batching)[0]["--max-running-requests"] == str(seats)


@pytest.mark.parametrize("replicas, router", [(1, "round_robin"), (4, "least_outstanding"),
                                              (2, "prefix_aware")])
def test_replicas_are_a_note_not_a_flag(replicas, router):
    for f in (vllm, sglang):
        flags, note = f(replicas=replicas, router=router)
        assert not any("replica" in k or "router" in k for k in flags)
        said = f"x{replicas} replicas behind a {router} router"
        assert (said in note) == (replicas > 1)


def test_static_batching_and_a_contiguous_cache_have_no_flag():
    for levers, said in ((dict(batching="static"), "static batching: no vLLM or SGLang"),
                         (dict(kv_cache="contiguous", block_size=32), "contiguous KV cache")):
        flags, note = vllm(**levers)
        assert said in note and set(flags) <= VLLM_FLAGS and "--block-size" not in flags
        assert launch_sglang({**BASE, **levers}) is None  # the reason: launch_vllm's note


@pytest.mark.parametrize("block", [16, 32])
def test_block_size(block):
    assert vllm(block_size=block)[0].get("--block-size") == (None if block == 16 else str(block))
    assert sglang(block_size=block)[0]["--page-size"] == str(block)


def test_memory_levers():
    levers = dict(max_seq_len=4096.0, gpu_memory_utilization=0.85, kv_blocks=2000, block_size=32)
    v, s = vllm(**levers)[0], sglang(**levers)[0]
    assert (v["--max-model-len"], v["--gpu-memory-utilization"],
            v["--num-gpu-blocks-override"]) == ("4096", "0.85", "2000")
    assert (s["--context-length"], s["--mem-fraction-static"], s["--max-total-tokens"]) == (
        "4096", "0.85", str(2000 * 32))
    unset = vllm(max_seq_len=float("nan"))[0]
    assert not {"--max-model-len", "--gpu-memory-utilization"} & set(unset)


def test_disaggregated_pools_are_two_commands():
    row = {**BASE, "gpus": float("nan"), "prefill_gpus": 2, "decode_gpus": 1,
           "prefill_gpu": "H100-SXM", "decode_gpu": "H200", "kv_link_gbps": 400.0}
    prefill, decode = launch_vllm(row).split("\n")
    for line, tp, gpu in ((prefill, "2", "H100-SXM"), (decode, "1", "H200")):
        flags, note = parse(line)
        assert flags["--tensor-parallel-size"] == tp and f"pool: {tp} x {gpu}" in note
        assert json.loads(flags["--kv-transfer-config"]) == {"kv_connector": "NixlConnector",
                                                            "kv_role": "kv_both"}
    assert "400 Gb/s" in prefill
    modes = [parse(line)[0]["--disaggregation-mode"] for line in launch_sglang(row).split("\n")]
    assert modes == ["prefill", "decode"]


def test_pools_of_several_servers_with_their_own_ranks():
    """xPyD: each pool's line says its servers, and a pool's own attention ranks and experts
    are its flags, not the design's."""
    row = {**BASE, "gpus": float("nan"), "prefill_gpus": 8, "decode_gpus": 1,
           "prefill_workers": 2, "decode_workers": 3, "prefill_data_parallel": float("nan"),
           "decode_data_parallel": 8, "prefill_expert_parallel": False,
           "decode_expert_parallel": True, "router": "least_outstanding", "kv_link_gbps": 400.0}
    prefill, decode = launch_sglang(row).split("\n")
    (pre, pre_note), (dec, dec_note) = parse(prefill), parse(decode)
    assert pre["--tp"] == "8" and "--dp" not in pre and "--ep-size" not in pre
    assert (dec["--tp"], dec["--dp"], dec["--ep-size"]) == ("8", "8", "8")
    assert "prefill pool: 2 servers of 8 x" in pre_note and "(least_outstanding)" in pre_note
    assert "decode pool: 3 servers of 8 x" in dec_note
    # Two of that design as a fleet: twice the servers of each pool.
    cap = pd.DataFrame([{**row, "design": 0}])
    fleet = fleet_launch(cap, [0], [2])["launch_sglang"][0].split("\n")
    assert "prefill pool: 4 servers" in fleet[0] and "decode pool: 6 servers" in fleet[1]


def test_model_ids_and_only_documented_flags():
    assert model_id("Llama-3-8B") == "meta-llama/Meta-Llama-3-8B"
    assert model_id("gpt-oss-120b") == "openai/gpt-oss-120b"
    assert model_id("my-own-model") == "my-own-model"
    for name in CATALOG:
        words = shlex.split(launch_vllm({**BASE, "model": name}).partition("  # ")[0])
        assert words[2] == HF_IDS.get(name, name)
        assert name in HF_IDS or f"{name}: no public checkpoint" in launch_vllm({"model": name})
    rows = [dict(draft_tokens=2, kv_bits=8, weight_bits=8, prefix_cache=True, data_parallel=2,
                 kv_offload_gib=128.0,
                 expert_parallel=True, max_num_batched_tokens=2048, prefill_chunk_tokens=512,
                 max_seq_len=2048, gpu_memory_utilization=0.9, kv_blocks=100, block_size=32),
            dict(gpus=float("nan"), prefill_gpus=1, decode_gpus=1, kv_link_gbps=100.0)]
    for row in rows:
        for line in launch_vllm({**BASE, **row}).split("\n"):
            assert set(parse(line)[0]) <= VLLM_FLAGS
        for line in launch_sglang({**BASE, **row}).split("\n"):
            assert set(parse(line)[0]) <= SGLANG_FLAGS


def test_a_fleet_runs_its_copies_of_a_design():
    cap = pd.DataFrame([{**BASE, "design": 0, "replicas": 2, "router": "session"},
                        {**BASE, "design": 1}])
    cols = fleet_launch(cap, [0, 1], [3, 1])
    assert "x6 replicas behind a session router" in cols["launch_vllm"][0]
    assert "replicas" not in cols["launch_vllm"][1]
    mixed = fleet_launch(cap, [1], [2], router="capacity-weighted")
    assert "x2 replicas behind a capacity-weighted router" in mixed["launch_sglang"][0]


def test_report_lines_wrap_as_shell_lines():
    row = pd.Series({"launch_vllm": launch_vllm({**BASE, "draft_tokens": 4, "replicas": 3,
                                                 "batching": "static", "kv_bits": 8}),
                     "launch_sglang": None})
    lines = launch_lines(row)
    assert all(len(line) <= WIDTH for line in lines)
    command = [line for line in lines if not line.lstrip().startswith("#")]
    assert all(line.endswith(" \\") for line in command[:-1]) and len(command) > 1
    joined = " ".join(line.rstrip("\\").strip() for line in command)
    assert shlex.split(joined) == shlex.split(row["launch_vllm"].partition("  # ")[0])
    assert any("static batching" in line for line in lines if line.lstrip().startswith("#"))


def test_a_small_study_carries_its_launch_commands(small_run, capsys):
    _, out = small_run
    designs = pd.read_parquet(out / "designs.parquet")
    assert designs["launch_vllm"].map(lambda c: isinstance(c, str) and c.startswith(
        "vllm serve meta-llama/Meta-Llama-3-8B ")).all()
    static = designs["batching"] == "static"
    assert designs.loc[static, "launch_sglang"].isna().all()
    assert designs.loc[~static, "launch_sglang"].str.startswith("python -m sglang").all()
    for row in designs.to_dict("records"):
        flags, _ = parse(row["launch_vllm"])
        assert flags["--tensor-parallel-size"] == str(row["gpus"])
        assert ("--speculative-config" in flags) == (row["draft_tokens"] > 0)
    assert main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    passing = text[text.index("Designs that meet the brief"):text.index("Failing designs")]
    assert ("vllm serve" in passing) == bool(designs["meets_brief"].any())
    # Without limits every design passes, each listed with its commands.
    text = render(verdict(designs, []), [])
    assert text.count("vllm serve ") == len(designs) == 16
    assert text.count("python -m sglang.launch_server ") == (~static).sum()
    assert all(len(line) < 120 for line in text.splitlines())
