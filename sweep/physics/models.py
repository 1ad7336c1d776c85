"""Model catalog: the five configurations of the teaching simulator, with the architecture a
roofline needs, and a loader for a local Hugging Face ``config.json`` (no network)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import FieldError, clip, listed, one_line


@dataclass(frozen=True)
class Model:
    name: str
    params: float  # total parameters (every weight is read by a decode pass)
    active_params: float  # parameters used per token (MoE: shared + routed experts); FLOPs = 2x this
    layers: int
    hidden: int
    heads: int  # query heads
    kv_heads: int
    head_dim: int
    ffn: int  # intermediate (FFN) size
    vocab: int
    max_context: int  # tokens
    # Mixture of experts: each token is routed to ``experts_per_token`` of ``experts`` routed
    # experts per layer, whose weights are ``expert_params`` of ``params`` (0 for a dense model).
    experts: int = 1
    experts_per_token: int = 1
    expert_params: float = 0.0
    source: str = field(default="", compare=False)

    def kv_bytes_per_token(self, kv_bits: int = 16) -> float:
        """Keys and values of every layer: layers x KV heads x head dim x 2 x bytes (as the
        teaching simulator has it)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * kv_bits / 8.0

    def weight_bytes(self, weight_bits: int) -> float:
        return self.params * weight_bits / 8.0

    def expert_bytes(self, weight_bits: int) -> float:
        """Bytes of every routed expert's weights (a pass reads only the experts it routes to)."""
        return self.expert_params * weight_bits / 8.0


def _dense_params(layers, hidden, heads, kv_heads, head_dim, ffn, vocab, tied, experts=1):
    """Parameter count of a Llama-style decoder: GQA attention, gated (3-matrix) MLP, RMSNorms."""
    attn = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    mlp = 3 * hidden * ffn * experts
    per_layer = attn + mlp + 2 * hidden
    embed = vocab * hidden * (1 if tied else 2)
    return layers * per_layer + embed + hidden


#: The source of an entry read from its publisher's config.json by ``load_hf_config`` (a copy
#: is in tests/data/hf_configs, and a test keeps the entry equal to the loader's reading).
_HF = "{} config.json, as load_hf_config reads it"

CATALOG: dict[str, Model] = {
    m.name: m
    for m in (
        Model("Llama-3-8B", 8.03e9, 8.03e9, 32, 4096, 32, 8, 128, 14336, 128256, 8192,
              source="meta-llama/Meta-Llama-3-8B config.json; 8,030,261,248 parameters"),
        Model("Llama-3-70B", 70.55e9, 70.55e9, 80, 8192, 64, 8, 128, 28672, 128256, 8192,
              source="meta-llama/Meta-Llama-3-70B config.json; 70,553,706,496 parameters"),
        Model("Llama-3-405B", 405.85e9, 405.85e9, 126, 16384, 128, 8, 128, 53248, 128256, 131072,
              source="meta-llama/Llama-3.1-405B config.json; 405.85e9 parameters"),
        Model("Llama-3.2-1B", 1.24e9, 1.24e9, 16, 2048, 32, 8, 64, 8192, 128256, 131072,
              source="meta-llama/Llama-3.2-1B config.json (tied embeddings); 1.24e9 parameters"),
        Model("Mistral-7B", 7.24e9, 7.24e9, 32, 4096, 32, 8, 128, 14336, 32000, 32768,
              source="mistralai/Mistral-7B-v0.1 config.json (vocab 32000); 7,241,732,096 "
                     "parameters (v0.3 widens the vocab to 32768: 7.25e9)"),
        Model("Llama-3.1-8B", 8_030_261_248, 8_030_261_248, 32, 4096, 32, 8, 128, 14336, 128256,
              131072, source=_HF.format("meta-llama/Meta-Llama-3.1-8B")),
        Model("Llama-3.1-70B", 70_553_706_496, 70_553_706_496, 80, 8192, 64, 8, 128, 28672,
              128256, 131072, source=_HF.format("meta-llama/Meta-Llama-3.1-70B")),
        Model("Llama-3.1-405B", 405_853_388_800, 405_853_388_800, 126, 16384, 128, 8, 128,
              53248, 128256, 131072, source=_HF.format("meta-llama/Meta-Llama-3.1-405B")),
        Model("Qwen3-8B", 8_190_726_144, 8_190_726_144, 36, 4096, 32, 8, 128, 12288, 151936,
              40960, source=_HF.format("Qwen/Qwen3-8B")),
        Model("Qwen3-32B", 32_762_106_880, 32_762_106_880, 64, 5120, 64, 8, 128, 25600, 151936,
              40960, source=_HF.format("Qwen/Qwen3-32B")),
        Model("Qwen3-30B-A3B", 30_519_527_424, 3_340_437_504, 48, 2048, 32, 4, 128, 6144, 151936,
              40960, 128, 8, 28_991_029_248, source=_HF.format("Qwen/Qwen3-30B-A3B")),
        Model("Mixtral-8x22B", 140_617_881_600, 39_149_279_232, 56, 6144, 48, 8, 128, 16384,
              32000, 65536, 8, 2, 135_291_469_824,
              source=_HF.format("mistralai/Mixtral-8x22B-v0.1")),
        Model("GPT-4-est", 1.8e12, 2.8e11, 120, 12288, 96, 96, 128, 49152, 100277, 8192,
              source="the teaching simulator's estimate (120 layers, 96 KV heads, 1.8T "
                     "parameters); ~280B active per token (2 of 16 experts) and 12288 hidden are "
                     "public estimates"),
    )
}


def get_model(name: str) -> Model:
    try:
        return CATALOG[name]
    except KeyError:
        raise ValueError(
            f"model.name: unknown model {name!r}; allowed: {listed(sorted(CATALOG))} "
            "(or model.config_json)"
        ) from None


#: The largest integer a config.json field may hold (sizes and counts are int32 in the engine).
MAX_FIELD = 2**31 - 1


#: What the loader sizes: a decoder whose every layer has full attention (MHA or GQA) and a
#: dense or routed-expert MLP. Fields that would change the size of anything else are refused.
SUPPORTED = ("a decoder with full attention and a dense or routed-expert MLP in every layer "
             "(Llama, Mistral, Mixtral, Qwen3)")


def _nonzero(v) -> bool:
    return v not in (None, 0, False, [], {}, "")


def _unmodelled(cfg: dict, path: Path) -> tuple[str, str] | None:
    """The first field of ``cfg`` that changes the model's size in a way the loader does not
    model, and what it means; None if there is none. A field found by name alone counts when
    it holds anything but an empty or zero value."""
    layer_kinds = sorted({k for k in cfg.get("layer_types") or () if k != "full_attention"})
    window = cfg.get("sliding_window")
    quantised = _nonzero(cfg.get("quantization_config")) or _nonzero(cfg.get("quantization"))
    mamba = sorted(k for k in cfg if k.startswith(("mamba_", "ssm_")))
    checks = (  # (field, found, or None to look it up by name; what it means)
        ("text_config", None, "a language model nested in a multimodal checkpoint"),
        ("vision_config", None, "a vision tower's weights"),
        ("audio_config", None, "an audio tower's weights"),
        ("kv_lora_rank", None, "multi-head latent attention"),
        ("q_lora_rank", None, "multi-head latent attention"),
        ("layer_types", bool(layer_kinds), f"layers of kind {', '.join(map(str, layer_kinds))}"),
        ("sliding_window", isinstance(window, int)
         and 0 < window < (cfg.get("max_position_embeddings") or 0)
         and cfg.get("use_sliding_window", True) is not False, "windowed attention"),
        ("hybrid_override_pattern", None, "state-space (Mamba) layers"),
        ("n_shared_experts", None, "shared experts"),
        ("shared_expert_intermediate_size", None, "shared experts"),
        ("moe_shared_expert_intermediate_size", None, "shared experts"),
        ("first_k_dense_replace", None, "dense layers before the expert layers"),
        ("moe_layer_freq", cfg.get("moe_layer_freq", 1) != 1, "expert layers interleaved"),
        ("interleave_moe_layer_step", cfg.get("interleave_moe_layer_step", 1) not in (0, 1),
         "expert layers interleaved"),
        ("decoder_sparse_step", cfg.get("decoder_sparse_step", 1) not in (0, 1),
         "expert layers interleaved"),
        ("mlp_only_layers", None, "dense layers among the expert layers"),
        ("num_nextn_predict_layers", None, "multi-token prediction layers"),
        ("quantization_config", quantised, "the checkpoint's own weight precision"),
        ("hf_quant_config.json", (path.parent / "hf_quant_config.json").is_file(),
         "the checkpoint's own weight precision"),
        ((mamba or [""])[0], bool(mamba), "state-space (Mamba) layers"),
    )
    return next(((key, meaning) for key, found, meaning in checks
                 if (_nonzero(cfg.get(key)) if found is None else found)), None)


def _refuse_unmodelled(cfg: dict, path: Path, where: str) -> None:
    """A config the loader would mis-size is refused in one line naming the field."""
    found = _unmodelled(cfg, path)
    if found:
        key, meaning = found
        raise FieldError("model.config_json", f"{where}: {key} ({meaning}) is not modelled, so "
                                              "the model would be mis-sized", SUPPORTED)


def load_hf_config(path: str | Path, name: str | None = None) -> Model:
    """Build a Model from a local Hugging Face ``config.json`` (Llama/Mistral/Mixtral/Qwen-style);
    a config with anything the loader does not size is refused in one line naming the field."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and int-size errors are ValueErrors
        raise FieldError("model.config_json", f"cannot read {clip(str(path))}: "
                                              f"{clip(one_line(exc), 100)}") from None
    if not isinstance(cfg, dict):
        raise FieldError("model.config_json", f"{clip(str(path))} is not a JSON object")
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
                "vocab_size", "max_position_embeddings")

    def positive_int(v):
        return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_FIELD

    where = clip(str(path))
    _refuse_unmodelled(cfg, path, where)
    missing = [k for k in required if not positive_int(cfg.get(k))]
    if missing:
        raise FieldError("model.config_json", f"{where}: field {missing[0]} is missing or not an "
                                              f"integer in [1, {MAX_FIELD}]")
    optional = ("num_key_value_heads", "head_dim", "num_local_experts", "num_experts",
                "n_routed_experts", "num_experts_per_tok", "experts_per_token",
                "moe_intermediate_size")
    bad = [k for k in optional if cfg.get(k) is not None and not positive_int(cfg[k])]
    if bad:
        raise FieldError("model.config_json", f"{where}: field {bad[0]} is not an integer in "
                                              f"[1, {MAX_FIELD}]")
    layers, hidden, heads = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or hidden // heads
    ffn, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    tied = bool(cfg.get("tie_word_embeddings", False))
    # Routed experts and top-k go by several names (Mixtral, Qwen, DeepSeek, gpt-oss).
    experts = (cfg.get("num_local_experts") or cfg.get("num_experts")
               or cfg.get("n_routed_experts") or 1)
    active = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token") or 1
    moe_ffn = cfg.get("moe_intermediate_size") or ffn
    top_k = min(active, experts)
    total = _dense_params(layers, hidden, heads, kv_heads, head_dim, moe_ffn, vocab, tied, experts)
    active_params = _dense_params(layers, hidden, heads, kv_heads, head_dim, moe_ffn, vocab, tied,
                                  top_k)
    return Model(
        name=name or cfg.get("_name_or_path") or path.parent.name or path.stem,
        params=float(total), active_params=float(active_params), layers=layers, hidden=hidden,
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=ffn, vocab=vocab,
        max_context=cfg["max_position_embeddings"], experts=experts, experts_per_token=top_k,
        expert_params=float(layers * 3 * hidden * moe_ffn * experts) if experts > 1 else 0.0,
        source=f"Hugging Face config {path}",
    )
