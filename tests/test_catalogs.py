"""The GPU and model catalogs against datasheets, the teaching simulator and public configs,
and the Hugging Face config.json loader.

Fast: plain numpy arithmetic, no JAX compilation.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sweep.physics import timing
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.hardware import get_gpu
from sweep.physics.catalog import CATALOG as MODEL_CATALOG
from sweep.physics.catalog import get_model
from sweep.physics.hf_config import load_hf_config
from sweep.study.design import Design
from tests import teaching_sim

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------------------------
# 1. Catalog completeness.
# --------------------------------------------------------------------------------------------

#: Memory as the catalog has it: the marketed figure for HBM parts (GiB-class), and what
#: nvidia-smi reports for the L40S (46,068 MiB: its ECC, on by default, holds the rest of 48 GB).
GPU_MEMORY = {"H100-SXM": 80, "H200": 141, "A100-80GB": 80, "L40S": 46068 / 1024, "B200": 180,
              "MI300X": 192, "B300": 288, "GB200": 186, "MI325X": 256, "MI355X": 288,
              "GB300": 288}


@pytest.mark.parametrize("name", sorted(GPU_MEMORY))
def test_required_gpus_present(name):
    g = get_gpu(name)
    assert g.name == name
    assert g.memory_gib == GPU_MEMORY[name]
    assert g.timing == "roofline"
    assert g.interconnect_gbs > 0 and g.allreduce_latency_us > 0


def test_an_apple_laptop_gpu_is_present():
    apples = [g for g in GPU_CATALOG.values() if "apple" in g.name.lower()]
    assert apples
    assert any(g.timing == "linear" and g.linear is not None for g in apples)


@pytest.mark.parametrize("name", sorted(GPU_CATALOG))
def test_gpu_entry_is_sane(name):
    g = GPU_CATALOG[name]
    for f in ("memory_gib", "bandwidth_tbs", "tflops_16bit", "tflops_8bit", "tflops_4bit",
              "price_per_gpu_hour"):
        v = getattr(g, f)
        assert isinstance(v, (int, float)) and math.isfinite(v) and v > 0, f
    assert g.interconnect_gbs >= 0 and g.allreduce_latency_us >= 0
    assert g.tflops_4bit >= g.tflops_8bit >= g.tflops_16bit
    assert (g.tflops(16), g.tflops(8), g.tflops(4)) == (g.tflops_16bit, g.tflops_8bit,
                                                        g.tflops_4bit)
    assert g.source.strip()
    assert g.timing in ("roofline", "linear")
    if g.timing == "linear":
        assert g.linear is not None and g.linear.source.strip()
        assert g.linear.fixed_ms > 0 and g.linear.decode_token_ms > 0
        assert g.linear.prefill_token_ms > 0
    else:
        assert g.interconnect_gbs > 0


def test_h100_price_matches_the_brief():
    assert get_gpu("H100-SXM").price_per_gpu_hour == 2.0


@pytest.mark.parametrize("name,bw,bf16", [("H100-SXM", 3.35, 989.4), ("A100-80GB", 2.039, 312.0),
                                          ("H200", 4.8, 989.4), ("MI300X", 5.3, 1307.4),
                                          ("B200", 8.0, 2250.0), ("B300", 8.0, 2250.0),
                                          ("GB200", 8.0, 2500.0), ("MI325X", 6.0, 1307.4),
                                          ("MI355X", 8.0, 2516.6), ("GB300", 8.0, 2500.0)])
def test_gpu_datasheet_figures(name, bw, bf16):
    g = get_gpu(name)
    assert g.bandwidth_tbs == pytest.approx(bw)
    assert g.tflops_16bit == pytest.approx(bf16, rel=1e-3)


@pytest.mark.parametrize("name", sorted(teaching_sim.MODEL_CONFIGS))
def test_model_catalog_matches_teaching_sim(name):
    cfg = teaching_sim.MODEL_CONFIGS[name]
    m = get_model(name)
    assert m.name == name
    assert (m.layers, m.kv_heads, m.head_dim) == (cfg["num_layers"], cfg["num_kv_heads"],
                                                  cfg["head_dim"])
    # The teaching simulator's rounded billions; the catalog has the exact counts.
    assert m.params == pytest.approx(cfg["model_params_b"] * 1e9, rel=0.04)
    assert 0 < m.active_params <= m.params
    assert m.source.strip()
    assert m.heads % m.kv_heads == 0
    assert m.max_context >= 8192


def test_model_catalog_holds_teaching_sims_five():
    assert set(teaching_sim.MODEL_CONFIGS) <= set(MODEL_CATALOG)


#: Dense catalog models and whether their input and output embeddings are tied.
DENSE_TIED = {"Llama-3-8B": False, "Llama-3-70B": False, "Llama-3-405B": False,
              "Mistral-7B": False, "Llama-3.2-1B": True}


@pytest.mark.parametrize("name", sorted(DENSE_TIED))
def test_dense_catalog_params_match_architecture(name, tmp_path):
    """The catalog's parameter counts agree with its own architecture fields."""
    if name not in MODEL_CATALOG:
        pytest.skip(f"{name} not in the catalog")
    m = get_model(name)
    assert m.active_params == m.params
    cfg = dict(num_hidden_layers=m.layers, hidden_size=m.hidden, num_attention_heads=m.heads,
               num_key_value_heads=m.kv_heads, head_dim=m.head_dim, intermediate_size=m.ffn,
               vocab_size=m.vocab, max_position_embeddings=m.max_context,
               tie_word_embeddings=DENSE_TIED[name])
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    loaded = load_hf_config(f, name=name)
    assert loaded.params == pytest.approx(m.params, rel=0.005)  # catalog rounds to 3-4 digits
    assert loaded.kv_bytes_per_token() == m.kv_bytes_per_token()


# --------------------------------------------------------------------------------------------
# 2. The Hugging Face loader.
# --------------------------------------------------------------------------------------------


def test_load_llama3_8b_config():
    m = load_hf_config(DATA / "llama3_8b_config.json", name="llama3-8b")
    assert m.name == "llama3-8b"
    assert m.params == pytest.approx(8.03e9, rel=0.005)
    assert m.params == 8_030_261_248  # the count Hugging Face reports for Meta-Llama-3-8B
    assert m.active_params == m.params
    cat = get_model("Llama-3-8B")
    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab", "max_context"):
        assert getattr(m, f) == getattr(cat, f), f
    assert m.kv_bytes_per_token() == 128 * 1024
    # A loaded model is a valid design.
    Design(model=m, gpu="H100-SXM").validate()


def test_load_mixtral_config():
    m = load_hf_config(DATA / "mixtral_8x7b_config.json")
    assert m.name  # falls back to something non-empty
    assert m.params == pytest.approx(46.7e9, rel=0.02)
    assert m.active_params == pytest.approx(12.9e9, rel=0.02)
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim) == (32, 4096, 32, 8, 128)
    assert m.max_context == 32768 and m.vocab == 32000
    # Every expert is read by a batched decode pass; FLOPs follow the 2 active experts.
    p = timing.timing_params(m, get_gpu("H100-SXM"))
    assert p.weight_bytes == pytest.approx(2 * m.params)
    assert p.flops_per_token == pytest.approx(2 * m.active_params)


def test_loader_defaults_kv_heads_and_head_dim(tmp_path):
    cfg = json.loads((DATA / "llama3_8b_config.json").read_text())
    del cfg["num_key_value_heads"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    m = load_hf_config(f)
    assert m.kv_heads == m.heads == 32  # no GQA: multi-head attention
    assert m.head_dim == 4096 // 32
    cfg["tie_word_embeddings"] = True
    f.write_text(json.dumps(cfg))
    tied = load_hf_config(f)
    assert m.params - tied.params == 128256 * 4096


def _bad_configs():
    good = json.loads((DATA / "llama3_8b_config.json").read_text())
    out = {}
    for field in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                  "intermediate_size", "vocab_size", "max_position_embeddings"):
        c = dict(good)
        del c[field]
        out[f"missing-{field}"] = (json.dumps(c), field)
    c = dict(good, num_hidden_layers=0)
    out["zero-layers"] = (json.dumps(c), "num_hidden_layers")
    c = dict(good, hidden_size="4096")
    out["string-hidden"] = (json.dumps(c), "hidden_size")
    c = dict(good, num_hidden_layers=True)
    out["bool-layers"] = (json.dumps(c), "num_hidden_layers")
    c = dict(good, num_key_value_heads="8")
    out["string-kv-heads"] = (json.dumps(c), "num_key_value_heads")
    c = dict(good, num_local_experts=-8)
    out["negative-experts"] = (json.dumps(c), "num_local_experts")
    out["not-json"] = ('{"hidden_size": 4096,', "")
    out["empty"] = ("", "")
    out["list"] = ("[1, 2, 3]", "not a JSON object")
    out["string"] = ('"config"', "not a JSON object")
    out["null"] = ("null", "not a JSON object")
    return out


BAD_CONFIGS = _bad_configs()


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_malformed_config_raises_value_error(case, tmp_path):
    text, mention = BAD_CONFIGS[case]
    f = tmp_path / "config.json"
    f.write_text(text)
    with pytest.raises(ValueError, match="model.config_json") as exc:
        load_hf_config(f)
    assert mention in str(exc.value)


@pytest.mark.parametrize("kind", ["missing", "directory", "binary"])
def test_unreadable_config_raises_value_error(kind, tmp_path):
    f = tmp_path / "config.json"
    if kind == "directory":
        f.mkdir()
    elif kind == "binary":
        f.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(ValueError, match="model.config_json"):
        load_hf_config(f)
