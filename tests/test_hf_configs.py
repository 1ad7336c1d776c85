"""The config.json loader on 21 real 2025-2026 model configurations (tests/data/hf_configs):
each loads with its published size or is refused in one line naming the field it cannot size,
never silently mis-sized. Fast."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweep.errors import FieldError
from sweep.physics.catalog import CATALOG
from sweep.physics.catalog import PUBLISHED as PUBLISHED_ENTRIES
from sweep.physics.hf_config import load_hf_config

CONFIGS = Path(__file__).parent / "data" / "hf_configs"

#: Published total and active parameters, billions, and how many embedding matrices the
#: publisher's active count leaves out (True: the input one, a lookup with no FLOPs): OpenAI's
#: does (gpt-oss model card, 5.13B of 116.83B), as the figures of DeepSeek-V3 and Kimi-K2 do
#: within their rounding; MiniMax's leaves out both (9.80B counted: "10B"); Qwen, Meta, Google
#: and NVIDIA count both. Within 2%. Sources: each model's Hugging Face card; DeepSeek-V3
#: technical report (arXiv:2412.19437: 671B/37B without its 14B multi-token-prediction module,
#: which is not counted here); Kimi-K2 technical report (arXiv:2507.20534: 1.04T/32B); gpt-oss
#: model card (116.8B/5.1B, 20.9B/3.6B); Llama-4 card (Scout 109B/17B, Maverick 400B/17B);
#: Nemotron-3-Nano card (31.6B, 3.6B with embeddings); Gemma-4 card (26B A4B: 25.2B/3.8B);
#: Qwen3.5 card (35B/3B); MiniMax-M2.5's Hugging Face page (229B parameters) and the M2 card
#: (10B active; M2.5 keeps its architecture), without its 3 multi-token-prediction modules;
#: Nemotron-3-Super technical report (120.6B/12.7B, both embeddings counted); DeepSeek-V4-Flash
#: card (284B/13B, counted as DeepSeek's others; its 13B is whole billions: ``ROUNDED``).
PUBLISHED = {
    "Qwen--Qwen3-8B": (8.2, 8.2, False),
    "Qwen--Qwen3-32B": (32.8, 32.8, False),
    "Qwen--Qwen3-30B-A3B": (30.5, 3.3, False),
    "Qwen--Qwen3-30B-A3B-FP8": (30.5, 3.3, False),
    "Qwen--Qwen3.5-35B-A3B": (35.0, 3.0, True),
    "meta-llama--Meta-Llama-3.1-8B": (8.03, 8.03, False),
    "meta-llama--Meta-Llama-3.1-70B": (70.6, 70.6, False),
    "meta-llama--Meta-Llama-3.1-405B": (405.9, 405.9, False),
    "nvidia--Llama-3.1-70B-Instruct-FP8": (70.6, 70.6, False),
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": (109.0, 17.0, False),
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": (400.0, 17.0, False),
    "mistralai--Mixtral-8x22B-v0.1": (141.0, 39.0, False),
    "deepseek-ai--DeepSeek-V3": (671.0, 37.0, True),
    "deepseek-ai--DeepSeek-R1": (671.0, 37.0, True),
    "deepseek-ai--DeepSeek-V3.2": (671.0, 37.0, True),
    "moonshotai--Kimi-K2-Instruct": (1040.0, 32.0, True),
    "openai--gpt-oss-120b": (116.8, 5.1, True),
    "openai--gpt-oss-20b": (20.9, 3.6, True),
    "google--gemma-4-26B-A4B": (25.2, 3.8, False),
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (31.6, 3.6, False),
    "MiniMaxAI--MiniMax-M2.5": (229.0, 10.0, 2),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": (120.6, 12.7, False),
    "deepseek-ai--DeepSeek-V4-Flash": (284.0, 13.0, True),
}
#: Cards whose active count is given in whole billions only: within half a billion of it
#: (DeepSeek-V4-Flash counts 13.27B, 2.1% above "13B").
ROUNDED = {"deepseek-ai--DeepSeek-V4-Flash"}


def _load(name: str):
    return load_hf_config(CONFIGS / f"{name}_config.json")


def test_every_shared_config_is_covered():
    names = {p.name[:-len("_config.json")] for p in CONFIGS.glob("*_config.json")
             if not p.name.endswith("_hf_quant_config.json")}
    assert names == set(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_config_loads_with_its_published_size(name):
    m = _load(name)
    total, active, embeddings_left_out = PUBLISHED[name]
    counted = m.active_params - m.vocab * m.hidden * embeddings_left_out
    assert m.params / 1e9 == pytest.approx(total, rel=0.02)
    if name in ROUNDED:
        assert round(counted / 1e9) == active
    else:
        assert counted / 1e9 == pytest.approx(active, rel=0.02)


def test_kv_bytes_per_token_at_16_bits():
    assert _load("deepseek-ai--DeepSeek-V3").kv_bytes_per_token(16) == 61 * 576 * 2
    assert _load("meta-llama--Meta-Llama-3.1-70B").kv_bytes_per_token(16) == 327_680
    oss = _load("openai--gpt-oss-120b")  # 18 of 36 layers keep 128 tokens
    assert oss.window == 128 and oss.kv_values == oss.window_kv_values == 18 * 2 * 8 * 64
    assert oss.held_kv_bytes_per_token(16, 1) == oss.kv_bytes_per_token(16) / 2


def test_each_layer_kind_is_read():
    ds, oss = _load("deepseek-ai--DeepSeek-V3"), _load("openai--gpt-oss-20b")
    # Latent attention: decode attends in the absorbed form (per head 2(512+64) + 2x512
    # FLOPs a pair), prefill in the expanded one (2x192 + 2x128).
    assert ds.decode_attn_flops_per_pair == 61 * 128 * (2 * 576 + 2 * 512)
    assert ds.attn_flops_per_pair == 61 * 128 * (2 * 192 + 2 * 128) and ds.kv_split == 1
    assert oss.window_flops_per_token == 12 * 4 * 64 * 64 * 128 and oss.state_bytes == 0
    qwen = _load("Qwen--Qwen3.5-35B-A3B")  # 30 Gated DeltaNet layers, 10 full
    assert qwen.kv_values == 10 * 2 * 2 * 256
    assert qwen.state_bytes == 30 * (32 * 128 * 128 * 4 + (2 * 2048 + 4096) * 3 * 2)
    nemo = _load("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")  # 23 Mamba-2, 6 attention
    assert nemo.kv_values == 6 * 2 * 2 * 128 and nemo.moe_layers == 23
    assert nemo.state_bytes == 23 * (64 * 64 * 128 * 4 + (4096 + 2 * 8 * 128) * 3 * 2)
    scout = _load("meta-llama--Llama-4-Scout-17B-16E-Instruct")  # 3 in 4 layers chunked
    assert scout.window == 8192 and scout.kv_values * 3 == scout.window_kv_values


def test_each_expert_variant_is_read(tmp_path):
    assert _load("deepseek-ai--DeepSeek-V3").moe_layers == 58  # 3 dense layers first
    assert _load("moonshotai--Kimi-K2-Instruct").moe_layers == 60
    assert _load("meta-llama--Llama-4-Maverick-17B-128E-Instruct").moe_layers == 24
    assert _load("google--gemma-4-26B-A4B").experts_per_token == 8  # top_k_experts
    maverick = json.loads((CONFIGS / "meta-llama--Llama-4-Maverick-17B-128E-Instruct_config.json"
                           ).read_text())
    maverick["text_config"]["moe_layers"] = list(range(1, 48, 2))  # as newer configs list them
    listed = _write_and_load(tmp_path / "listed", maverick)
    assert listed.params == _load("meta-llama--Llama-4-Maverick-17B-128E-Instruct").params
    cfg = json.loads((CONFIGS / "Qwen--Qwen3-30B-A3B_config.json").read_text())
    base = _load("Qwen--Qwen3-30B-A3B")
    for i, (change, moe) in enumerate((({"decoder_sparse_step": 2}, 24),
                                       ({"mlp_only_layers": [0, 1]}, 46),
                                       ({"decoder_sparse_step": 1, "mlp_only_layers": []}, 48))):
        m = _write_and_load(tmp_path / str(i), cfg | change)
        assert m.moe_layers == moe
        assert (m.params < base.params) == (moe < 48)


def _write_and_load(folder: Path, cfg: dict):
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return load_hf_config(folder / "config.json")


@pytest.mark.parametrize("quant,bits,nominal", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, 8 + 32 / 128**2, 8),
    ({"quant_method": "fp8", "activation_scheme": "static"}, 8.0, 8),  # one scale per tensor
    ({"quant_method": "mxfp4"}, 4.25, 4),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, 4 + 20 / 128, 4),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, 4 + 20 / 128, 4),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 4, "strategy": "group", "group_size": 32}}}}, 4.5, 4),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, 4.5, 4),
])
def test_each_quantisation_format_is_read(tmp_path, quant, bits, nominal):
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    m = _write_and_load(tmp_path, cfg | {"quantization_config": quant | {"modules_to_not_convert":
                                                                ["lm_head"]}})
    assert (m.native_bits, m.native_nominal_bits) == (pytest.approx(bits), nominal)
    embed = m.vocab * m.hidden
    norms = m.layers * 2 * m.hidden + m.hidden
    assert m.kept_params == 2 * embed + norms  # embeddings, norms and the skipped lm_head
    assert m.weight_bytes(None) == pytest.approx((m.params - m.kept_params) * bits / 8
                                                 + m.kept_params * 2)
    assert m.weight_bytes(16) == pytest.approx(m.params * 2)  # dequantised


def test_a_sibling_hf_quant_config_sets_the_precision(tmp_path):
    shutil.copy(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_config.json",
                tmp_path / "config.json")
    assert load_hf_config(tmp_path / "config.json").native_bits == 16
    shutil.copy(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json",
                tmp_path / "hf_quant_config.json")
    m = load_hf_config(tmp_path / "config.json")
    assert (m.native_bits, m.native_nominal_bits) == (8.0, 8)
    assert m.kept_params == pytest.approx(2 * m.vocab * m.hidden + (2 * m.layers + 1) * m.hidden)


def test_a_skip_list_keeps_its_modules_at_16_bits():
    oss = _load("openai--gpt-oss-120b")  # attention, router, embeddings and lm_head
    assert oss.params - oss.kept_params == pytest.approx(oss.expert_params)
    qwen = _load("Qwen--Qwen3-30B-A3B-FP8")  # lm_head, norms and each layer's router
    gates = 48 * 2048 * 128
    assert qwen.kept_params == 2 * 151936 * 2048 + 48 * 2 * 2048 + 2048 + gates


#: Every quantisation format of the real configs (tests/data/hf_configs, the packaged ones in
#: sweep/physics/model_configs and the shared ones): its checkpoint, bits per weight with the
#: scales, the lever's name for them, the precision it computes in where the GPU has it.
REAL_FORMATS = {
    ("fp8", None): ("deepseek-ai--DeepSeek-V3", 8 + 32 / 128**2, 8, 8),
    ("mxfp4", None): ("openai--gpt-oss-120b", 4.25, 4, 16),
    ("modelopt", "FP8"): ("nvidia--Llama-3.1-70B-Instruct-FP8", 8.0, 8, 8),
}


def _formats(folder: Path) -> set:
    """(quant_method, quant_algo) of every config.json in ``folder`` (or its hf_quant_config)."""
    found = set()
    for p in folder.glob("*.json"):
        cfg = json.loads(p.read_text())
        q = (cfg.get("text_config") or cfg).get("quantization_config") or cfg.get("quantization")
        if isinstance(q, dict):
            method = q.get("quant_method", "modelopt" if "quant_algo" in q else None)
            found.add((method, q.get("quant_algo")))
    return found


def test_every_real_quantisation_format_is_read_from_its_file():
    shared = Path(__file__).parents[2] / "shared" / "data" / "aic-silicon" / "models"
    packaged = Path(__file__).parents[1] / "sweep" / "physics" / "model_configs"
    assert _formats(CONFIGS) | _formats(packaged) | _formats(shared) == set(REAL_FORMATS)
    for name, bits, nominal, activation in REAL_FORMATS.values():
        m = _load(name)
        assert (m.native_bits, m.native_nominal_bits, m.native_activation_bits) == (
            pytest.approx(bits), nominal, activation)
    for name in ("MiniMaxAI--MiniMax-M2.5", "Qwen--Qwen3-30B-A3B-FP8", "deepseek-ai--DeepSeek-R1",
                 "deepseek-ai--DeepSeek-V3.2", "moonshotai--Kimi-K2-Instruct"):  # fp8 too
        assert _load(name).native_nominal_bits == 8


def test_minimax_m25_keeps_its_router_and_lm_head_and_notes_the_bias():
    """MiniMax-M2.5's FP8 skip list: "gate" (each layer's router, 256 x 3072), "lm_head", and
    "e_score_correction_bias" (the router's bias, no weight the loader sizes: noted)."""
    m = _load("MiniMaxAI--MiniMax-M2.5")
    gates, norms = 62 * 256 * 3072, (2 * 62 + 1) * 3072
    assert m.kept_params == 2 * 200064 * 3072 + gates + norms
    assert (m.moe_layers, m.experts, m.experts_per_token, m.kv_split) == (62, 256, 8, 8)
    assert "'e_score_correction_bias'" in m.source and "'gate'" not in m.source


@pytest.mark.parametrize("skip,kept", [
    (["model.layers.*.self_attn.q_proj", "lm_head"], 32 * 4096 * 4096 + 128256 * 4096),
    (["model.layers.0.self_attn.qkv_proj"], 4096 * (4096 + 2 * 1024)),  # fused: q, k and v
    (["model.layers.3.mlp"], 3 * 4096 * 14336),  # one layer's MLP
    (["model.layers.3"], 3 * 4096 * 14336 + 4096 * 6144 + 4096 * 4096),  # all of layer 3
    (["re:.*mlp\\.(gate|up)_proj.*"], 32 * 2 * 4096 * 14336),  # a regular expression
    (["model.layers.0.self_attn.q_norm", "rotary_emb", "mtp.fc", "model.layers.40.mlp"], 0),
])
def test_a_skip_list_holds_what_it_names(tmp_path, skip, kept):
    """Parts of modules and single layers are held at their own sizes; norms, rotary tables,
    multi-token-prediction and absent layers name no modelled weight and are left unread."""
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    m = _write_and_load(tmp_path, cfg | {"quantization_config": {
        "quant_method": "fp8", "ignored_layers": skip}})
    embed, norms = 128256 * 4096, (2 * 32 + 1) * 4096
    assert m.kept_params == embed + norms + kept
    assert ("left unread" in m.source) == (kept == 0)


def test_a_skip_list_names_hybrid_layers_as_their_checkpoints_do(tmp_path):
    """Nemotron-H calls each layer's token mixer "mixer", an attention layer's too; Qwen3-Next
    names Qwen3.5's linear-attention input projections fused (``in_proj_ba``: a and b)."""
    nemo = json.loads((CONFIGS / "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16_config.json"
                       ).read_text())
    attention = [i for i, kind in enumerate(nemo["hybrid_override_pattern"]) if kind == "*"]
    m = _write_and_load(tmp_path / "a", nemo | {"quantization_config": {
        "quant_method": "fp8", "modules_to_not_convert": ["backbone.layers.0.mixer.conv1d"] + [
            f"backbone.layers.{i}.mixer" for i in attention]}})
    plain = _write_and_load(tmp_path / "b", nemo | {"quantization_config": {"quant_method": "fp8"}})
    assert m.kept_params - plain.kept_params == 6 * 2688 * 128 * (32 + 2 * 2 + 32)
    assert "'backbone.layers.0.mixer.conv1d'" in m.source
    qwen = json.loads((CONFIGS / "Qwen--Qwen3.5-35B-A3B_config.json").read_text())
    q = {"quant_method": "fp8", "modules_to_not_convert": ["model.visual"]}
    fused, split = ({**q, "modules_to_not_convert": ["model.visual", *names]}
                    for names in (["linear_attn.in_proj_ba"],
                                  ["linear_attn.in_proj_a", "linear_attn.in_proj_b"]))
    kept = [_write_and_load(tmp_path / str(i), qwen | {"quantization_config": c}).kept_params
            for i, c in enumerate((q, fused, split))]
    assert kept[1] == kept[2] == kept[0] + 30 * 2 * 2048 * 32


def test_weights_a_skip_list_names_that_cannot_be_held_are_refused_past_a_thousandth(tmp_path):
    """One routed expert of 62 x 256 is 0.006% of MiniMax-M2.5's weight bytes: noted; every
    layer's experts at 16 bits (98% of them) are refused naming the file, the key and the
    entry."""
    cfg = json.loads((CONFIGS / "MiniMaxAI--MiniMax-M2.5_config.json").read_text())
    q = cfg["quantization_config"]
    small = _write_and_load(tmp_path / "a", cfg | {"quantization_config": q | {
        "modules_to_not_convert": ["gate", "model.layers.0.block_sparse_moe.experts.0"]}})
    assert "experts.0" in small.source
    with pytest.raises(FieldError) as info:
        _write_and_load(tmp_path / "b", cfg | {"quantization_config": q | {
            "modules_to_not_convert": ["block_sparse_moe.experts"]}})
    reason = info.value.reason
    assert "config.json: quantization_config modules_to_not_convert entry " in reason
    assert "'block_sparse_moe.experts'" in reason and "\n" not in reason


@pytest.mark.parametrize("change,field", [
    ({"layer_types": ["full_attention"] * 31 + ["cross_attention"]}, "layer_types"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config"),
    ({"quantization_config": "fp8"}, "quantization_config"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]}},
     "quantization_config"),
    ({"quantization_config": {"quant_method": "fp8",  # a part of layer 0's attention unsized
                              "modules_to_not_convert": ["model.layers.0.self_attn.foo"]}},
     "quantization_config"),
    ({"audio_config": {"hidden_size": 1024}}, "audio_config"),
    ({"moe_num_experts": 64, "moe_k": 6}, "moe_k"),  # a family's own names (sorted)
    ({"attn_type_list": [0, 1] * 16}, "attn_type_list"),  # MiniMax's lightning attention
    ({"layer_types": ["sliding_attention"] * 32, "sliding_window": 4096}, "layer_types"),
    ({"qk_head_dim": 96}, "qk_head_dim"),  # not its head size
])
def test_a_config_it_cannot_size_is_refused_naming_the_field(tmp_path, change, field):
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    with pytest.raises(FieldError) as info:
        _write_and_load(tmp_path, cfg | change)
    assert info.value.key == "model.config_json" and "\n" not in str(info.value)
    assert f": {field} " in info.value.reason and len(str(info.value)) <= 300


@pytest.mark.parametrize("window,use,windowed", [(4096, None, True), (None, None, False),
                                                 (32768, None, False), (4096, False, False)])
def test_a_window_shorter_than_the_context_caps_the_layers(tmp_path, window, use, windowed):
    cfg = json.loads((CONFIGS / "mistralai--Mixtral-8x22B-v0.1_config.json").read_text())
    cfg.update(max_position_embeddings=32768, sliding_window=window, max_window_layers=28)
    if use is not None:
        cfg["use_sliding_window"] = use
    m = _write_and_load(tmp_path / "a", cfg)
    assert (m.window, m.window_kv_values > 0) == ((4096, True) if windowed else (0, False))
    assert m.kv_bytes_per_token(16) == 56 * 2 * 8 * 128 * 2
    if windowed:  # Qwen2's rule: the first max_window_layers layers attend fully
        assert m.kv_values == m.window_kv_values == 28 * 2 * 8 * 128
        # Gemma-3's: every sliding_window_pattern-th layer full
        m = _write_and_load(tmp_path / "b", cfg | {"sliding_window_pattern": 4})
        assert (m.kv_values, m.window_kv_values) == (14 * 2048, 42 * 2048)


def test_routed_experts_and_top_k_are_read_under_each_name(tmp_path):
    cfg = json.loads((CONFIGS / "mistralai--Mixtral-8x22B-v0.1_config.json").read_text())
    base = load_hf_config(CONFIGS / "mistralai--Mixtral-8x22B-v0.1_config.json")
    renamed = {k: v for k, v in cfg.items() if k not in ("num_local_experts",
                                                         "num_experts_per_tok")}
    renamed.update(n_routed_experts=cfg["num_local_experts"],
                   experts_per_token=cfg["num_experts_per_tok"])
    (tmp_path / "config.json").write_text(json.dumps(renamed))
    m = load_hf_config(tmp_path / "config.json", name=base.name)
    assert (m.params, m.active_params, m.experts, m.experts_per_token) == (
        base.params, base.active_params, 8, 2)


#: Catalog entries read from their publishers' configs: name -> the config's file.
CATALOGED = {"Llama-3.1-8B": "meta-llama--Meta-Llama-3.1-8B",
             "Llama-3.1-70B": "meta-llama--Meta-Llama-3.1-70B",
             "Llama-3.1-405B": "meta-llama--Meta-Llama-3.1-405B",
             "Qwen3-8B": "Qwen--Qwen3-8B", "Qwen3-32B": "Qwen--Qwen3-32B",
             "Qwen3-30B-A3B": "Qwen--Qwen3-30B-A3B",
             "Mixtral-8x22B": "mistralai--Mixtral-8x22B-v0.1",
             **{name: repo.replace("/", "--") for name, repo in PUBLISHED_ENTRIES.items()}}


@pytest.mark.parametrize("name", sorted(CATALOGED))
def test_a_catalog_entry_is_its_configs_reading(name):
    assert CATALOG[name] == load_hf_config(CONFIGS / f"{CATALOGED[name]}_config.json", name=name)
    assert CATALOGED[name].split("--")[1] in CATALOG[name].source
    assert CATALOG[name].source.endswith("as load_hf_config reads it")


@pytest.mark.parametrize("gpu,bits,fits", [("H100-SXM", None, False), ("H200", None, True),
                                           ("H200", 16, False), ("H100-SXM", 16, False)])
def test_deepseek_v3_fits_where_it_does(gpu, bits, fits):
    """At its native FP8 (671B weights: 626 GiB) it does not fit on 8 x 80 GB, it does on
    8 x 141 GB; at 16 bits on neither."""
    from sweep.study.config import parse_study
    levers = "gpus = 8" + ("" if bits is None else f"\nweight_bits = {bits}")
    text = (f'name = "x"\n[model]\nname = "DeepSeek-V3"\n[hardware]\ngpu = "{gpu}"\n'
            f"[levers]\n{levers}\n[workload]\nnum_requests = 10\n")
    if not fits:
        with pytest.raises(ValueError, match="does not fit"):
            parse_study(text)
        return
    design = parse_study(text).points[0].design
    assert design.weight_precision == 8
    # MLA's one latent per token cannot be split across the 8 GPUs: each holds all of it.
    assert design.budget().kv_bytes_per_token == 70_272 * 8


def test_sweep_run_refuses_deepseek_v3_where_it_does_not_fit(tmp_path, capsys):
    """Through the CLI: nothing written, one line, exit 2; on H200 the same config is a grid
    of one design that fits (what ``sweep run`` would simulate)."""
    from sweep.cli import main
    from sweep.study.config import load_study
    cfg = tmp_path / "ds.toml"
    for gpu, fits in (("H100-SXM", False), ("H200", True)):
        cfg.write_text(f'name = "ds"\n[model]\nname = "DeepSeek-V3"\n[hardware]\ngpu = "{gpu}"\n'
                       "[levers]\ngpus = 8\n[workload]\nnum_requests = 10\n")
        if fits:
            assert len(load_study(cfg).points) == 1
            continue
        assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "does not fit on 8 x H100-SXM" in err
        assert not (tmp_path / "out").exists()


#: Other 2025-2026 configs of these families, as a new user would bring them (the fields the
#: loader reads, from github.com/ai-dynamo/aiconfigurator's model_configs/, Apache-2.0), with
#: their cards' totals and active parameters (GLM-4.7: 355B/32B; GLM-4.7-Flash: 30B-A3B;
#: Qwen3-Next-80B-A3B: 80B/3B without embeddings; Kimi-K2.5: 1.04T/32B as Kimi-K2; GLM-5, its
#: latent attention with an indexer and a redundant ``qk_head_dim``: 744B/40B).
_GLM47 = {"num_hidden_layers": 92, "hidden_size": 5120, "num_attention_heads": 96,
          "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288,
          "vocab_size": 151552, "max_position_embeddings": 202752, "n_routed_experts": 160,
          "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 1536,
          "first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "tie_word_embeddings": False}
_GLM47_FLASH = {"num_hidden_layers": 47, "hidden_size": 2048, "num_attention_heads": 20,
                "num_key_value_heads": 20, "head_dim": 64, "intermediate_size": 10240,
                "vocab_size": 154880, "max_position_embeddings": 202752, "n_routed_experts": 64,
                "n_shared_experts": 1, "num_experts_per_tok": 4, "moe_intermediate_size": 1536,
                "first_k_dense_replace": 1, "kv_lora_rank": 512, "q_lora_rank": 768,
                "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
                "tie_word_embeddings": False}
_GLM5 = {"model_type": "glm_moe_dsa", "first_k_dense_replace": 3, "head_dim": 192,
         "hidden_size": 6144, "index_head_dim": 128, "index_n_heads": 32, "index_topk": 2048,
         "intermediate_size": 12288, "kv_lora_rank": 512, "max_position_embeddings": 1048576,
         "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256,
         "n_shared_experts": 1, "num_attention_heads": 64, "num_experts_per_tok": 8,
         "num_hidden_layers": 78, "num_key_value_heads": 64, "num_nextn_predict_layers": 1,
         "q_lora_rank": 2048, "qk_head_dim": 256, "qk_nope_head_dim": 192,
         "qk_rope_head_dim": 64, "v_head_dim": 256, "vocab_size": 154880,
         "tie_word_embeddings": False}
_QWEN3_NEXT = {"model_type": "qwen3_next", "decoder_sparse_step": 1,
               "full_attention_interval": 4, "head_dim": 256,
               "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
               "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
               "linear_num_key_heads": 16, "linear_num_value_heads": 32,
               "linear_value_head_dim": 128, "max_position_embeddings": 262144,
               "mlp_only_layers": [], "moe_intermediate_size": 512, "num_attention_heads": 16,
               "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
               "num_key_value_heads": 2, "shared_expert_intermediate_size": 512,
               "tie_word_embeddings": False,
               "use_sliding_window": False, "vocab_size": 151936}
_KIMI25_INT4 = {"model_type": "kimi_k25", "tie_word_embeddings": False, "text_config": {
    "add_cross_attention": False, "first_k_dense_replace": 1, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 262144,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 384,
    "n_shared_experts": 1, "num_attention_heads": 64, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 64, "num_nextn_predict_layers": 0,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 163840, "tie_word_embeddings": False, "quantization_config": {
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "group_size": 32, "num_bits": 4, "strategy": "group", "type": "int"}}},
        "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                   "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
        "quant_method": "compressed-tensors"}},
    "vision_config": {"vt_hidden_size": 1152, "vt_intermediate_size": 4304,
                      "vt_num_hidden_layers": 27, "patch_size": 14}}


@pytest.mark.parametrize("cfg,total,active,without_input_embedding", [
    (_GLM47, 355.0, 32.0, True), (_GLM47_FLASH, 30.0, 3.6, True),
    (_QWEN3_NEXT, 80.0, None, None), (_KIMI25_INT4, 1040.0, 32.0, True),
    (_GLM5, 744.0, 40.0, True)])
def test_other_configs_of_these_families_load(tmp_path, cfg, total, active,
                                              without_input_embedding):
    m = _write_and_load(tmp_path, cfg)
    assert m.params / 1e9 == pytest.approx(total, rel=0.02)
    if active is not None:  # Qwen3-Next's "3B" counts neither the embeddings nor the gates
        counted = m.active_params - m.vocab * m.hidden * int(without_input_embedding)
        assert counted / 1e9 == pytest.approx(active, rel=0.03)


def test_an_int4_checkpoint_in_a_text_config_keeps_its_ignored_modules():
    """Kimi-K2.5's int4 experts (group 32: 4.5 bits) with attention, shared experts, the dense
    layer and lm_head at 16 bits; its vision tower counted from MoonViT's vt_* sizes."""
    import tempfile
    m = _write_and_load(Path(tempfile.mkdtemp()), _KIMI25_INT4)
    assert (m.native_bits, m.native_nominal_bits) == (4.5, 4)
    assert m.params - m.kept_params == pytest.approx(m.expert_params)  # only the experts
    assert m.params > _load("moonshotai--Kimi-K2-Instruct").params + 0.4e9  # the vision tower


def test_a_layer_by_layer_skip_list_and_an_unloaded_layer(tmp_path):
    """NVIDIA's DeepSeek-V3 NVFP4 checkpoint lists every layer's attention, norms and router,
    and its multi-token-prediction layer 61, which the served model does not load."""
    cfg = json.loads((CONFIGS / "deepseek-ai--DeepSeek-V3_config.json").read_text())
    cfg.pop("quantization_config")
    exclude = ["lm_head", "model.embed_tokens", "model.norm", "model.layers.61*"]
    for i in range(61):
        exclude += [f"model.layers.{i}.self_attn*", f"model.layers.{i}.input_layernorm"]
        exclude += [f"model.layers.{i}.mlp.gate"] if i >= 3 else []
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {
        "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": exclude}}))
    m = load_hf_config(tmp_path / "config.json")
    fp8 = _load("deepseek-ai--DeepSeek-V3")
    attention = fp8.kept_params  # the FP8 checkpoint keeps embeddings, norms, lm_head
    assert (m.native_bits, m.native_nominal_bits) == (4.5, 4)
    assert m.kept_params > attention + 11e9  # every layer's attention (11.4B) too
    assert m.weight_bytes(None) < fp8.weight_bytes(None) * 0.65


@pytest.mark.parametrize("model,gpu,bits", [
    ("DeepSeek-V3", "H200", 8), ("DeepSeek-V3", "MI300X", 8), ("DeepSeek-V3", "A100-80GB", 16),
    ("gpt-oss-120b", "H100-SXM", 16), ("gpt-oss-120b", "B200", 16), ("Llama-3.1-8B", "B200", 16)])
def test_a_checkpoint_computes_in_its_own_precision_where_the_gpu_can(model, gpu, bits):
    """fp8 W8A8 on FP8 tensor cores (not the A100's INT8 ones); MXFP4 is weight-only."""
    from sweep.physics.catalog import get_model
    from sweep.physics.hardware import get_gpu
    assert get_model(model).activation_bits(get_gpu(gpu), None) == bits
    assert get_model(model).activation_bits(get_gpu(gpu), 16) == 16  # the lever wins


def test_weight_only_kernels_read_and_multiply_the_converted_weights_slower():
    """gpt-oss's MXFP4 experts at 16-bit compute: their bytes count 1 / the GPU's
    dequant_bandwidth_efficiency and their FLOPs 1 / dequant_compute_efficiency; its 16-bit
    weights, a W8A8 checkpoint's and a dense model's are read and multiplied as they are."""
    from sweep.physics.catalog import get_model
    from sweep.physics.hardware import get_gpu
    from sweep.physics.timing import timing_params
    oss, h200 = get_model("gpt-oss-120b"), get_gpu("H200")
    assert h200.dequant_bandwidth_efficiency < 1 and h200.dequant_compute_efficiency < 1

    def t(model, bits, read=None, mult=None):
        return timing_params(model, h200, weight_bits=None, activation_bits=bits,
                             dequant_bandwidth_efficiency=read, dequant_compute_efficiency=mult)

    plain, half = t(oss, 16, 1.0, 1.0), t(oss, 16, 0.5, 0.25)
    assert half.expert_bytes == pytest.approx(2 * plain.expert_bytes)
    assert half.weight_bytes - plain.weight_bytes == pytest.approx(plain.expert_bytes)
    routed = 2.0 * oss.expert_params * oss.experts_per_token / oss.experts
    assert half.flops_per_token == pytest.approx(plain.flops_per_token + 3 * routed)
    dense = get_model("Llama-3.1-8B")  # 4-bit weight-only GEMMs: no runs, plain efficiencies
    assert timing_params(dense, h200, weight_bits=4, activation_bits=16) == timing_params(
        dense, h200, weight_bits=4, activation_bits=16, dequant_bandwidth_efficiency=1.0,
        dequant_compute_efficiency=1.0)
    assert t(oss, 16) == t(oss, 16, h200.dequant_bandwidth_efficiency,
                           h200.dequant_compute_efficiency)  # unset: the GPU's
    fp8 = get_model("DeepSeek-V3")  # W8A8 on Hopper: nothing to dequantise
    assert t(fp8, 8) == t(fp8, 8, 0.1, 0.1)
    assert t(fp8, 16) != t(fp8, 16, 0.1, 0.1)  # on 16-bit compute its experts dequantise


def test_nvfp4_computes_in_4_bits_on_blackwell_only(tmp_path):
    from sweep.physics.hardware import get_gpu
    shutil.copy(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_config.json",
                tmp_path / "config.json")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}}))
    m = load_hf_config(tmp_path / "config.json")
    assert [m.activation_bits(get_gpu(g), None) for g in ("B200", "H100-SXM", "MI355X")] == [
        4, 16, 16]


def test_minimax_m2_with_softmax_attention_in_every_layer_loads(tmp_path):
    """MiniMax-M2 (230B total, 10B active: its card): every layer softmax attention
    (``attn_type_list`` all 1) and 256 experts of top 8; its MTP modules not counted."""
    cfg = {"hidden_size": 3072, "num_hidden_layers": 62, "num_attention_heads": 48,
           "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 1536,
           "num_local_experts": 256, "num_experts_per_tok": 8, "vocab_size": 200064,
           "max_position_embeddings": 196608, "attn_type_list": [1] * 62,
           "shared_intermediate_size": 0, "use_mtp": True, "num_mtp_modules": 3,
           "tie_word_embeddings": False}
    m = _write_and_load(tmp_path, cfg)
    assert m.params / 1e9 == pytest.approx(230, rel=0.02)
    assert (m.active_params - m.vocab * m.hidden) / 1e9 == pytest.approx(10, rel=0.05)


@pytest.mark.parametrize("name", ["deepseek-ai--DeepSeek-V3", "Qwen--Qwen3.5-35B-A3B",
                                  "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                  "openai--gpt-oss-20b"])
def test_a_malformed_field_is_refused_in_one_line_never_a_crash(tmp_path, name):
    """Fields of the wrong type or value, a few at a time, in the language model's table."""
    import random
    rng = random.Random(name)
    odd = [None, "x", -1, 0, 1.5, [], {}, [1, "a"], True, 10**12, {"quant_method": "fp8",
                                                                   "weight_block_size": "x"}]
    base = json.loads((CONFIGS / f"{name}_config.json").read_text())
    for trial in range(60):
        cfg = json.loads(json.dumps(base))
        table = cfg.get("text_config", cfg)
        for key in rng.sample(sorted(table) + ["quantization_config"], 2):
            table[key] = rng.choice(odd)
        try:
            _write_and_load(tmp_path / str(trial), cfg)
        except FieldError as exc:
            assert "\n" not in str(exc) and exc.key == "model.config_json"
