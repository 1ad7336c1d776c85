"""The model catalog by name: the teaching simulator's five configurations, and models read
from their publishers' ``config.json`` (a copy of each is in ``model_configs/``; tests keep the
entries equal to the loader's reading)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sweep.errors import listed
from sweep.physics.hf_config import load_hf_config
from sweep.physics.models import Model

CONFIGS = Path(__file__).parent / "model_configs"

#: Catalog names read from a publisher's config.json in ``model_configs/``: name -> its
#: Hugging Face repository. Multi-token-prediction layers (DeepSeek-V3's 14B) are not counted:
#: vLLM loads them only to draft speculative tokens.
PUBLISHED = {
    "DeepSeek-V3": "deepseek-ai/DeepSeek-V3",
    "Kimi-K2": "moonshotai/Kimi-K2-Instruct",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "gpt-oss-20b": "openai/gpt-oss-20b",
    "Qwen3.5-35B-A3B": "Qwen/Qwen3.5-35B-A3B",
    "Llama-4-Scout": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "Llama-4-Maverick": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "Gemma-4-26B-A4B": "google/gemma-4-26B-A4B",
    "Nemotron-3-Nano-30B-A3B": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
}


def _published(name: str) -> Model:
    m = load_hf_config(CONFIGS / f"{name}.json", name=name)
    return replace(m, source=f"{PUBLISHED[name]} config.json, as load_hf_config reads it")


#: The source of an entry read from its publisher's config.json by ``load_hf_config`` (a copy
#: is in tests/data/hf_configs, and a test keeps the entry equal to the loader's reading).
_HF = "{} config.json, as load_hf_config reads it"

CATALOG: dict[str, Model] = {
    m.name: m
    for m in (
        Model.gqa("Llama-3-8B", 8.03e9, 8.03e9, 32, 4096, 32, 8, 128, 14336, 128256, 8192,
                  source="meta-llama/Meta-Llama-3-8B config.json; 8,030,261,248 parameters"),
        Model.gqa("Llama-3-70B", 70.55e9, 70.55e9, 80, 8192, 64, 8, 128, 28672, 128256, 8192,
                  source="meta-llama/Meta-Llama-3-70B config.json; 70,553,706,496 parameters"),
        Model.gqa("Llama-3-405B", 405.85e9, 405.85e9, 126, 16384, 128, 8, 128, 53248, 128256,
                  131072, source="meta-llama/Llama-3.1-405B config.json; 405.85e9 parameters"),
        Model.gqa("Llama-3.2-1B", 1.24e9, 1.24e9, 16, 2048, 32, 8, 64, 8192, 128256, 131072,
                  source="meta-llama/Llama-3.2-1B config.json (tied embeddings); 1.24e9 "
                         "parameters"),
        Model.gqa("Mistral-7B", 7.24e9, 7.24e9, 32, 4096, 32, 8, 128, 14336, 32000, 32768,
                  source="mistralai/Mistral-7B-v0.1 config.json (vocab 32000); 7,241,732,096 "
                         "parameters (v0.3 widens the vocab to 32768: 7.25e9)"),
        Model.gqa("Llama-3.1-8B", 8_030_261_248, 8_030_261_248, 32, 4096, 32, 8, 128, 14336, 128256,
                  131072, source=_HF.format("meta-llama/Meta-Llama-3.1-8B")),
        Model.gqa("Llama-3.1-70B", 70_553_706_496, 70_553_706_496, 80, 8192, 64, 8, 128, 28672,
                  128256, 131072, source=_HF.format("meta-llama/Meta-Llama-3.1-70B")),
        Model.gqa("Llama-3.1-405B", 405_853_388_800, 405_853_388_800, 126, 16384, 128, 8, 128,
                  53248, 128256, 131072, source=_HF.format("meta-llama/Meta-Llama-3.1-405B")),
        Model.gqa("Qwen3-8B", 8_190_726_144, 8_190_726_144, 36, 4096, 32, 8, 128, 12288, 151936,
                  40960, source=_HF.format("Qwen/Qwen3-8B")),
        Model.gqa("Qwen3-32B", 32_762_106_880, 32_762_106_880, 64, 5120, 64, 8, 128, 25600, 151936,
                  40960, source=_HF.format("Qwen/Qwen3-32B")),
        Model.gqa("Qwen3-30B-A3B", 30_532_110_336, 3_353_020_416, 48, 2048, 32, 4, 128, 6144,
                  151936, 40960, 128, 8, 28_991_029_248, source=_HF.format("Qwen/Qwen3-30B-A3B")),
        Model.gqa("Mixtral-8x22B", 140_620_634_112, 39_152_031_744, 56, 6144, 48, 8, 128, 16384,
                  32000, 65536, 8, 2, 135_291_469_824,
                  source=_HF.format("mistralai/Mixtral-8x22B-v0.1")),
        *(_published(name) for name in PUBLISHED),
        Model.gqa("GPT-4-est", 1.8e12, 2.8e11, 120, 12288, 96, 96, 128, 49152, 100277, 8192,
                  source="the teaching simulator's estimate (120 layers, 96 KV heads, 1.8T "
                         "parameters); ~280B active per token (2 of 16 experts) and 12288 "
                         "hidden are public estimates"),
    )
}


def get_model(name: str) -> Model:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(
            f"model.name: unknown model {name!r}; allowed: {listed(CATALOG, near=name)} "
            "(or model.config_json)"
        ) from None
