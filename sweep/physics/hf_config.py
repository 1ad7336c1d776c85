"""Reading a local Hugging Face ``config.json`` (no network) into a Model, layer by layer.

Each layer has an attention kind (full, windowed, multi-head latent, linear or state-space) and
an MLP kind (dense, routed experts with or without a shared expert, or none); the counts follow
the publishers' modelling code (transformers' and vLLM's model files). A field that would change
the model's size in a way read here is refused in one line naming it, never guessed."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import FieldError, clip, one_line
from sweep.physics.models import Model
from sweep.physics.quantisation import checkpoint_precision

#: The largest integer a config.json field may hold (sizes and counts are int32 in the engine).
MAX_FIELD = 2**31 - 1

#: What the loader sizes.
SUPPORTED = "full, windowed, latent, linear or Mamba attention; dense or expert MLPs"

#: Layer kinds ``layer_types`` may name, and what each is read as.
LAYER_TYPES = {"full_attention": "full", "sliding_attention": "window",
               "chunked_attention": "window", "linear_attention": "linear"}
#: Nemotron-H's ``hybrid_override_pattern``: (attention kind, MLP kind) of each letter.
HYBRID_LETTERS = {"M": ("mamba", "none"), "*": ("full", "none"), "E": ("none", "moe"),
                  "-": ("none", "dense")}
#: MLP activations with two matrices rather than three (no gate).
UNGATED = ("relu2", "gelu", "relu")
#: Bytes of a state element in the dtype a config names (fp32 unless it says otherwise).
STATE_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
#: Fields that change a model's size in ways not read here: (field, what it is).
#: Words in a field's name that say it may size the model: such a field the loader neither
#: reads nor knows to be harmless is refused, so a new family's fields are never ignored.
SIZE_WORDS = ("expert", "moe", "lora", "mamba", "ssm", "linear_", "window", "shared", "dense",
              "sparse", "kv_", "key_value", "layer_types", "attn_type", "attention_type",
              "head_dim", "intermediate", "per_layer", "cross_attention", "global_")
#: Fields with such words read here, or that do not change the size (routing and loss
#: settings, kernel choices, the state dtype, multi-token-prediction layers, which are not
#: counted).
KNOWN = frozenset((
    "attention_k_eq_v", "attn_output_gate", "decoder_sparse_step", "enable_moe_block",
    "experts_per_token", "first_k_dense_replace", "global_head_dim", "head_dim",
    "hidden_size_per_layer_input", "index_head_dim", "interleave_moe_layer_step",
    "intermediate_size", "intermediate_size_mlp", "kv_lora_rank", "layer_types",
    "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
    "linear_num_value_heads", "linear_value_head_dim", "mamba_head_dim", "mamba_hidden_act",
    "mamba_num_heads", "mamba_proj_bias", "mamba_ssm_cache_dtype", "mamba_ssm_dtype",
    "max_window_layers", "mlp_only_layers", "moe_intermediate_size", "moe_layer_freq",
    "moe_shared_expert_intermediate_size", "n_routed_experts", "n_shared_experts",
    "num_experts", "num_experts_per_tok", "num_global_key_value_heads", "num_key_value_heads",
    "num_kv_shared_layers", "num_local_experts", "q_lora_rank", "qk_nope_head_dim",
    "qk_head_dim", "qk_rope_head_dim", "shared_expert_intermediate_size", "sliding_window",
    "sliding_window_pattern", "ssm_state_size", "top_k_experts", "use_sliding_window",
    "v_head_dim", "vocab_size_per_layer_input", "moe_router_enable_expert_bias",
    "router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "moe_aux_loss_coeff",
    "use_mamba_kernels", "router_jitter_noise", "moe_z_loss_coeff", "ep_size", "moe_layers",
    "attn_type_list",
))
UNREAD = (("audio_config", "an audio tower's weights"),
          ("num_kv_shared_layers", "layers sharing another layer's KV cache"),
          ("hidden_size_per_layer_input", "per-layer input embeddings"),
          ("cross_attention_layers", "cross-attention layers"))


def _positive(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_FIELD


def _nonzero(v) -> bool:
    return v not in (None, 0, False, [], {}, "")


@dataclass
class _Reading:
    """One config's fields, read with the file named in every refusal."""

    cfg: dict
    where: str

    def refuse(self, key: str, reason: str, allowed: str = SUPPORTED):
        raise FieldError("model.config_json", f"{self.where}: {key} {reason}", allowed)

    def int(self, key: str, default=None, *alias: str) -> int:
        for k in (key, *alias):
            v = self.cfg.get(k)
            if v is not None:
                if not _positive(v):
                    self.refuse(k, f"is not an integer in [1, {MAX_FIELD}]")
                return v
        if default is None:
            self.refuse(key, f"is missing (an integer in [1, {MAX_FIELD}])")
        return default


@dataclass
class _Count:
    """Parameters by module, for the total, the active set and the skip lists."""

    by_module: dict = field(default_factory=dict)
    active: float = 0.0

    def add(self, module: str, n: float, active: float | None = None) -> None:
        self.by_module[module] = self.by_module.get(module, 0.0) + n
        self.active += n if active is None else active

    @property
    def total(self) -> float:
        return sum(self.by_module.values())


def _layer_kinds(r: _Reading, layers: int, moe: bool) -> list[tuple[str, str]]:
    """(attention kind, MLP kind) of every layer."""
    c = r.cfg
    if c.get("hybrid_override_pattern") is not None:
        pattern = c["hybrid_override_pattern"]
        bad = sorted(set(str(pattern)) - set(HYBRID_LETTERS))
        if not isinstance(pattern, str) or len(pattern) != layers or bad:
            r.refuse("hybrid_override_pattern", f"is not {layers} of the letters "
                     f"{''.join(HYBRID_LETTERS)} (found {clip(', '.join(bad) or '-', 20)})")
        return [HYBRID_LETTERS[ch] for ch in pattern]
    attention = _attention_kinds(r, layers)
    return [(a, _mlp_kind(r, i, moe)) for i, a in enumerate(attention)]


def _attention_kinds(r: _Reading, layers: int) -> list[str]:
    c = r.cfg
    latent = "mla" if _nonzero(c.get("kv_lora_rank")) else "full"
    minimax = c.get("attn_type_list")  # MiniMax: 1 softmax attention, 0 lightning (linear)
    if minimax is not None:
        if not isinstance(minimax, list) or len(minimax) != layers or not all(
                isinstance(v, int) and v in (0, 1) for v in minimax):
            r.refuse("attn_type_list", f"is not a list of {layers} of 0 and 1")
        if 0 in minimax:
            r.refuse("attn_type_list", "names lightning-attention layers (0), which are not "
                                       "modelled", "1 (softmax attention) in every layer")
    types = c.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            r.refuse("layer_types", f"is not a list of {layers} layer kinds")
        unknown = sorted({str(t) for t in types} - set(LAYER_TYPES))
        if unknown:
            r.refuse("layer_types", f"names layer kind {clip(unknown[0], 40)!r}, which is not "
                                    "modelled", ", ".join(LAYER_TYPES))
        return [LAYER_TYPES[t] for t in types]
    if _nonzero(c.get("attention_chunk_size")):  # Llama-4: chunked local attention, every
        r.int("attention_chunk_size")  # interval-th layer global
        interval = r.int("no_rope_layer_interval", 4)
        no_rope = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
        if not isinstance(no_rope, list) or len(no_rope) < layers:
            r.refuse("no_rope_layers", f"is not a list of {layers} flags")
        return ["window" if used else "full" for used in no_rope[:layers]]
    if _windowed(c):
        pattern = c.get("sliding_window_pattern")  # Gemma-3: every pattern-th layer full
        if _positive(pattern):
            return ["full" if (i + 1) % pattern == 0 else "window" for i in range(layers)]
        first = r.int("max_window_layers", 0) if _nonzero(c.get("max_window_layers")) else 0
        return [latent if i < first else "window" for i in range(layers)]
    if _nonzero(c.get("full_attention_interval")):  # Qwen3-Next: linear attention, every
        interval = r.int("full_attention_interval")  # interval-th layer full
        return ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    return [latent] * layers


def _windowed(c: dict) -> bool:
    w = c.get("sliding_window")
    return (isinstance(w, int) and 0 < w < (c.get("max_position_embeddings") or 0)
            and c.get("use_sliding_window", True) is not False)


def _mlp_kind(r: _Reading, i: int, moe: bool) -> str:
    """Routed experts or dense, as each family's code places them."""
    c = r.cfg
    if not moe or (c.get("enable_moe_block") is False):
        return "dense"
    listed = c.get("moe_layers")  # Llama-4's newer configs list the expert layers
    if listed is not None:
        if not isinstance(listed, list) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in listed):
            r.refuse("moe_layers", "is not a list of layer indices")
        return "moe" if i in listed else "dense"
    dense_first = c.get("first_k_dense_replace") or 0
    freq = c.get("moe_layer_freq", 1) or 1
    step = c.get("decoder_sparse_step", 1) or 1
    every = c.get("interleave_moe_layer_step", 1) or 1
    only = c.get("mlp_only_layers") or []
    if not all(isinstance(v, int) for v in (dense_first, freq, step, every)) or not isinstance(
            only, list):
        r.refuse("moe_layer_freq", "or a field placing the expert layers is not an integer")
    routed = (i >= dense_first and i % freq == 0 and (i + 1) % step == 0
              and i % every == every - 1 and i not in only)
    return "moe" if routed else "dense"


def _attention(r: _Reading, kind: str, hidden: int, count: _Count, m: dict) -> None:
    """One layer's attention: its weights, the values it caches per token, its FLOPs per pair."""
    c = r.cfg
    heads = r.int("num_attention_heads")
    if kind == "mla":
        _latent(r, heads, hidden, count, m)
        return
    if kind in ("linear", "mamba"):
        (_linear if kind == "linear" else _mamba)(r, hidden, count, m)
        return
    glob = kind == "full" and c.get("global_head_dim") is not None  # Gemma-4's global layers
    hd = r.int("global_head_dim" if glob else "head_dim", hidden // heads)
    kv = r.int("num_global_key_value_heads" if glob else "num_key_value_heads", heads)
    k_is_v = glob and c.get("attention_k_eq_v") is True
    gated = c.get("attn_output_gate") or c.get("model_type") == "qwen3_next"
    q = heads * hd * (2 if gated else 1)  # a gate beside each query (Qwen3-Next's always)
    n = hidden * q + hidden * kv * hd * (1 if k_is_v else 2) + heads * hd * hidden
    if c.get("attention_bias"):
        n += q + 2 * kv * hd + hidden
    if c.get("model_type") == "gpt_oss":
        n += heads  # one attention sink per head
    count.add("self_attn", n)
    values, pair = 2.0 * kv * hd, 4.0 * heads * hd
    m["kv_split"].append(kv)
    if kind == "window":
        w = min(r.int("attention_chunk_size" if _nonzero(c.get("attention_chunk_size"))
                      else "sliding_window"), r.int("max_position_embeddings"))
        m["window"] = w
        m["window_kv_values"] += values
        m["window_flops_per_token"] += pair * w
    else:
        m["kv_values"] += values
        m["attn_flops_per_pair"] += pair
        m["decode_attn_flops_per_pair"] += pair


def _latent(r: _Reading, heads: int, hidden: int, count: _Count, m: dict) -> None:
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed ``kv_lora_rank`` latent and
    a shared rotary key cached per token. Prefill attends in the expanded form (per head: keys
    of ``nope + rope``, values of ``v_head_dim``); decode in the absorbed form vLLM runs, each
    head's query against the latent and the rotary key, its output in the latent."""
    c = r.cfg
    lora, rope = r.int("kv_lora_rank"), r.int("qk_rope_head_dim")
    nope, v = r.int("qk_nope_head_dim"), r.int("v_head_dim")
    q_lora = r.int("q_lora_rank") if _nonzero(c.get("q_lora_rank")) else None
    qk = nope + rope
    q = ((hidden * q_lora + q_lora + q_lora * heads * qk) if _nonzero(q_lora)
         else hidden * heads * qk)
    n = q + hidden * (lora + rope) + lora + lora * heads * (nope + v) + heads * v * hidden
    if _nonzero(c.get("index_n_heads")):  # DeepSeek-V3.2's indexer: its own keys per token
        ih, ihd = r.int("index_n_heads"), r.int("index_head_dim")
        n += (q_lora or hidden) * ih * ihd + hidden * ihd + 2 * ihd + hidden * ih
        m["kv_values"] += ihd
        m["attn_flops_per_pair"] += 2.0 * ih * ihd
        m["decode_attn_flops_per_pair"] += 2.0 * ih * ihd
    count.add("self_attn", n)
    m["kv_values"] += lora + rope
    m["attn_flops_per_pair"] += heads * (2.0 * qk + 2.0 * v)
    m["decode_attn_flops_per_pair"] += heads * (2.0 * (lora + rope) + 2.0 * lora)


def _state_bytes(c: dict, key: str) -> int:
    return STATE_DTYPE_BYTES.get(str(c.get(key, "float32")), 4)


def _linear(r: _Reading, hidden: int, count: _Count, m: dict) -> None:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a ``key x value`` state per value
    head, updated and read once per token, and a short convolution's last inputs."""
    kh, vh = r.int("linear_num_key_heads"), r.int("linear_num_value_heads")
    dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
    kernel = r.int("linear_conv_kernel_dim", 4)
    key_dim, value_dim = kh * dk, vh * dv
    conv = 2 * key_dim + value_dim
    count.add("linear_attn", hidden * (2 * key_dim + 2 * value_dim) + hidden * 2 * vh
              + conv * kernel + 2 * vh + dv + value_dim * hidden)
    m["state_bytes"] += (vh * dk * dv * _state_bytes(r.cfg, "mamba_ssm_dtype")
                         + conv * (kernel - 1) * 2)
    m["state_flops_per_token"] += 4.0 * vh * dk * dv


def _mamba(r: _Reading, hidden: int, count: _Count, m: dict) -> None:
    """A Mamba-2 mixer (Nemotron-H): a ``head_dim x state`` state per head and a convolution's
    last inputs."""
    heads, hd = r.int("mamba_num_heads"), r.int("mamba_head_dim")
    state, groups = r.int("ssm_state_size"), r.int("n_groups", 1)
    kernel = r.int("conv_kernel", 4)
    inner = heads * hd
    conv = inner + 2 * groups * state
    count.add("mixer", hidden * (2 * inner + 2 * groups * state + heads) + conv * (kernel + 1)
              + 3 * heads + inner + inner * hidden)
    m["state_bytes"] += (heads * hd * state * _state_bytes(r.cfg, "mamba_ssm_cache_dtype")
                         + conv * (kernel - 1) * 2)
    m["state_flops_per_token"] += 4.0 * inner * state


def _mlp(r: _Reading, kind: str, hidden: int, count: _Count, e: dict) -> None:
    """One layer's MLP: dense, or routed experts (top-k of them active) with shared ones."""
    c = r.cfg
    mats = 2 if str(c.get("mlp_hidden_act", c.get("hidden_act"))) in UNGATED else 3
    if kind == "none":
        return
    if kind == "dense" or c.get("enable_moe_block"):  # Gemma-4: a dense MLP beside the experts
        ffn = r.int("intermediate_size") if kind == "moe" else r.int(
            "intermediate_size_mlp", c.get("intermediate_size"), "intermediate_size")
        count.add("mlp", mats * hidden * ffn)
    if kind == "dense":
        return
    experts, top_k = e["experts"], e["top_k"]
    ffn = r.int("moe_intermediate_size", c.get("intermediate_size"), "intermediate_size")
    one = mats * hidden * ffn + (2 * ffn + hidden if c.get("model_type") == "gpt_oss" else 0)
    count.add("experts", experts * one, top_k * one)
    e["params"] += experts * one
    shared = _shared_ffn(r, ffn)
    if shared:
        count.add("shared_expert", mats * hidden * shared + (hidden if _nonzero(
            c.get("shared_expert_intermediate_size")) else 0))
    count.add("gate", hidden * experts + (experts if c.get("model_type") == "gpt_oss" else 0))


def _shared_ffn(r: _Reading, ffn: int) -> int:
    """The shared experts' width: DeepSeek's ``n_shared_experts`` of the experts' width,
    Qwen's and Nemotron's own field, Llama-4's one of ``intermediate_size`` (always there)."""
    c = r.cfg
    for key in ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"):
        if _nonzero(c.get(key)):
            return r.int(key)
    if c.get("model_type") == "llama4_text":
        return r.int("intermediate_size")
    return r.int("n_shared_experts", 1) * ffn if _nonzero(c.get("n_shared_experts")) else 0


def _vision(cfg: dict) -> float:
    """A vision tower's weights, estimated from its size: per block attention (4 h^2) and a
    two-matrix MLP (2 h i), and the patch embedding. Zero where the config gives no size."""
    v = cfg.get("vision_config")
    if not isinstance(v, dict):
        return 0.0
    h = v.get("hidden_size") or v.get("vt_hidden_size")  # Kimi's MoonViT: vt_*
    i = v.get("intermediate_size") or v.get("vt_intermediate_size")
    depth = v.get("depth") or v.get("num_hidden_layers") or v.get("vt_num_hidden_layers")
    if not all(_positive(x) for x in (h, i, depth)):
        return 0.0
    sizes = [v.get(k) or d for k, d in (("patch_size", 14), ("in_channels", 3),
                                         ("temporal_patch_size", 1))]
    if not all(_positive(x) for x in sizes):
        return 0.0
    patch = sizes[0] ** 2 * sizes[1] * sizes[2]
    return float(depth * (4 * h * h + 2 * h * i) + patch * h)


def _read(path: Path) -> dict:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as exc:  # JSON, UTF-8 and int-size errors are ValueErrors
        raise FieldError("model.config_json", f"cannot read {clip(str(path))}: "
                                              f"{clip(one_line(exc), 100)}") from None
    if not isinstance(cfg, dict):
        raise FieldError("model.config_json", f"{clip(str(path))} is not a JSON object")
    return cfg


def _language_model(cfg: dict, r: _Reading) -> dict:
    """The language model's fields: a multimodal checkpoint's ``text_config``, which inherits
    what it leaves to the outer config (tied embeddings, the quantisation)."""
    text = cfg.get("text_config")
    if text is None:
        return cfg
    if not isinstance(text, dict):
        r.refuse("text_config", "is not a table")
    inherited = ("tie_word_embeddings", "quantization_config", "quantization")
    return {**{k: cfg[k] for k in inherited if k in cfg}, **text}


def load_hf_config(path: str | Path, name: str | None = None) -> Model:
    """Build a Model from a local Hugging Face ``config.json``; a config with anything the
    loader does not size is refused in one line naming the field."""
    path = Path(path)
    outer = _read(path)
    where = clip(str(path))
    c = _language_model(outer, _Reading(outer, where))
    r = _Reading(c, where)
    for key, what in UNREAD:
        if _nonzero(c.get(key)) or _nonzero(outer.get(key)):
            r.refuse(key, f"({what}) is not modelled, so the model would be mis-sized")
    unknown = sorted(k for k in c if k not in KNOWN and _nonzero(c[k])
                     and any(w in k for w in SIZE_WORDS))
    if unknown:
        r.refuse(clip(unknown[0], 40), "is not read, so the model would be mis-sized")
    layers, hidden = r.int("num_hidden_layers"), r.int("hidden_size")
    heads, vocab = r.int("num_attention_heads"), r.int("vocab_size")
    context = r.int("max_position_embeddings")
    experts = r.int("num_local_experts", 1, "num_experts", "n_routed_experts")
    top_k = min(experts, r.int("num_experts_per_tok", 1, "experts_per_token", "top_k_experts"))
    kinds = _layer_kinds(r, layers, experts > 1)
    count, layers_of = _Count(), {}
    m = dict(kv_split=[heads], kv_values=0.0, attn_flops_per_pair=0.0,
             decode_attn_flops_per_pair=0.0, window=0, window_kv_values=0.0,
             window_flops_per_token=0.0, state_bytes=0.0, state_flops_per_token=0.0)
    e = dict(experts=experts, top_k=top_k, params=0.0)
    for attention, mlp in kinds:
        before = dict(count.by_module)
        if attention != "none":
            _attention(r, attention, hidden, count, m)
        _mlp(r, mlp, hidden, count, e)
        count.add("norm", 2 * hidden)
        for module, n in count.by_module.items():
            if n != before.get(module):
                layers_of[module] = layers_of.get(module, 0) + 1
    count.add("norm", hidden)
    count.add("embed_tokens", vocab * hidden)
    if not c.get("tie_word_embeddings", False):
        count.add("lm_head", vocab * hidden)
    count.add("vision", _vision(outer), 0.0)
    split = m.pop("kv_split")
    if not m["kv_values"]:
        r.refuse("layer_types", "has no full-attention layer (a KV cache that grows with the "
                                "context), which is not modelled")
    outer_quant = any(_nonzero(outer.get(k)) for k in ("quantization_config", "quantization"))
    precision = checkpoint_precision(c, path, count.by_module, layers_of, where, layers,
                                     () if outer_quant else ("vision",))
    latent = _nonzero(c.get("kv_lora_rank"))
    head_dim = (r.int("qk_nope_head_dim") + r.int("qk_rope_head_dim")) if latent \
        else r.int("head_dim", hidden // heads)
    if _nonzero(c.get("qk_head_dim")) and r.int("qk_head_dim") != head_dim:  # GLM-5's copy
        r.refuse("qk_head_dim", f"= {c['qk_head_dim']}, not the query-key head size read here "
                                f"({head_dim}), so the model would be mis-sized")
    return Model(
        name=name or c.get("_name_or_path") or path.parent.name or path.stem,
        params=count.total, active_params=count.active, layers=layers, hidden=hidden,
        heads=heads, kv_heads=heads if latent else r.int("num_key_value_heads", heads),
        head_dim=head_dim, ffn=r.int("intermediate_size", c.get("moe_intermediate_size"),
                                     "moe_intermediate_size"), vocab=vocab, max_context=context,
        experts=experts, experts_per_token=top_k, expert_params=e["params"] if experts > 1
        else 0.0, **m, native_bits=precision.bits, native_nominal_bits=precision.nominal,
        native_activation_bits=precision.activation,
        kept_params=precision.kept, moe_layers=sum(k == "moe" for _, k in kinds),
        kv_split=1 if latent else min(split),
        source=f"Hugging Face config {path}")
