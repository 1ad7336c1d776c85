"""The config.json loader on twenty real 2025-2026 model configurations (tests/data/hf_configs):
each loads with its published size or is refused in one line naming the field it cannot size,
never silently mis-sized. Fast."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sweep.errors import FieldError
from sweep.physics.catalog import CATALOG
from sweep.physics.hf_config import load_hf_config

CONFIGS = Path(__file__).parent / "data" / "hf_configs"

#: Published total and active parameters, billions (each model card, rounded as it gives them):
#: within 1%, or the rounding.
LOADED = {
    "Qwen--Qwen3-8B": (8.2, 8.2),
    "Qwen--Qwen3-32B": (32.8, 32.8),
    "Qwen--Qwen3-30B-A3B": (30.5, 3.3),
    "meta-llama--Meta-Llama-3.1-8B": (8.03, 8.03),
    "meta-llama--Meta-Llama-3.1-70B": (70.6, 70.6),
    "meta-llama--Meta-Llama-3.1-405B": (405.9, 405.9),
    "mistralai--Mixtral-8x22B-v0.1": (141.0, 39.0),
    "nvidia--Llama-3.1-70B-Instruct-FP8": (70.6, 70.6),  # its precision is a sibling file's
}
#: The field each other configuration is refused by, first in the loader's order.
REFUSED = {
    "Qwen--Qwen3-30B-A3B-FP8": "quantization_config",
    "Qwen--Qwen3.5-35B-A3B": "text_config",
    "deepseek-ai--DeepSeek-R1": "kv_lora_rank",
    "deepseek-ai--DeepSeek-V3": "kv_lora_rank",
    "deepseek-ai--DeepSeek-V3.2": "kv_lora_rank",
    "moonshotai--Kimi-K2-Instruct": "kv_lora_rank",
    "google--gemma-4-26B-A4B": "text_config",
    "meta-llama--Llama-4-Scout-17B-16E-Instruct": "text_config",
    "meta-llama--Llama-4-Maverick-17B-128E-Instruct": "text_config",
    "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "hybrid_override_pattern",
    "openai--gpt-oss-20b": "layer_types",
    "openai--gpt-oss-120b": "layer_types",
}


def test_every_shared_config_is_covered():
    names = {p.name[:-len("_config.json")] for p in CONFIGS.glob("*_config.json")
             if not p.name.endswith("_hf_quant_config.json")}
    assert names == set(LOADED) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(LOADED))
def test_a_supported_config_loads_with_its_published_size(name):
    m = load_hf_config(CONFIGS / f"{name}_config.json")
    total, active = LOADED[name]
    assert m.params / 1e9 == pytest.approx(total, rel=0.01, abs=0.05)
    assert m.active_params / 1e9 == pytest.approx(active, rel=0.01, abs=0.05)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_config_it_cannot_size_is_refused_naming_the_field(name):
    with pytest.raises(FieldError) as info:
        load_hf_config(CONFIGS / f"{name}_config.json")
    err = info.value
    assert err.key == "model.config_json" and "\n" not in str(err)
    assert f": {REFUSED[name]} (" in err.reason and "mis-sized" in err.reason
    assert "full attention" in err.allowed


def test_a_checkpoint_with_its_own_precision_file_is_refused(tmp_path):
    shutil.copy(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_config.json",
                tmp_path / "config.json")
    load_hf_config(tmp_path / "config.json")
    shutil.copy(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8_hf_quant_config.json",
                tmp_path / "hf_quant_config.json")
    with pytest.raises(FieldError, match="hf_quant_config.json"):
        load_hf_config(tmp_path / "config.json")


@pytest.mark.parametrize("window,use,refused", [(4096, None, True), (None, None, False),
                                                (32768, None, False), (4096, False, False)])
def test_a_window_shorter_than_the_context_is_refused(tmp_path, window, use, refused):
    cfg = json.loads((CONFIGS / "meta-llama--Meta-Llama-3.1-8B_config.json").read_text())
    cfg.update(max_position_embeddings=32768, sliding_window=window)
    if use is not None:
        cfg["use_sliding_window"] = use
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    if refused:
        with pytest.raises(FieldError, match="sliding_window"):
            load_hf_config(tmp_path / "config.json")
    else:
        assert load_hf_config(tmp_path / "config.json").max_context == 32768


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
             "Qwen3-30B-A3B": "Qwen--Qwen3-30B-A3B", "Mixtral-8x22B": "mistralai--Mixtral-8x22B-v0.1"}


@pytest.mark.parametrize("name", sorted(CATALOGED))
def test_a_catalog_entry_is_its_configs_reading(name):
    assert CATALOG[name] == load_hf_config(CONFIGS / f"{CATALOGED[name]}_config.json", name=name)
    assert CATALOGED[name].split("--")[1] in CATALOG[name].source
