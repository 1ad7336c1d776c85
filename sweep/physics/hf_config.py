"""Reading a local Hugging Face ``config.json`` (no network) into a Model, layer by layer.

Each layer has an attention kind (full, windowed, multi-head latent, linear, state-space, or
DeepSeek-V4's window beside compressed latents) and an MLP kind (dense, routed experts in the
hidden width or a latent one, with or without a shared expert, or none); the counts follow
the publishers' modelling code (transformers' and vLLM's model files). A field that would change
the model's size in a way read here is refused in one line naming it, never guessed."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import clip
from sweep.physics.compressed_attention import (UNQUANTISED, compressed_attention,
                                                 compressed_kinds, hyper_connections_and_hash)
from sweep.physics.config_file import Reading, positive, read_json, shown
from sweep.physics.drafts import mtp_layers
from sweep.physics.models import Model
from sweep.physics.quantisation import Weights, checkpoint_precision

#: The names of the routed experts' count and of the experts each token is routed to.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
TOP_K_KEYS = ("num_experts_per_tok", "experts_per_token", "top_k_experts")

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
    "attn_type_list", "moe_latent_size", "expert_dtype", "o_lora_rank",
))
UNREAD = (("audio_config", "an audio tower's weights"),
          ("num_kv_shared_layers", "layers sharing another layer's KV cache"),
          ("hidden_size_per_layer_input", "per-layer input embeddings"),
          ("cross_attention_layers", "cross-attention layers"))


def _nonzero(v) -> bool:
    return v not in (None, 0, False, [], {}, "")


@dataclass
class _Count:
    """Parameters by module and by part of a module (the projections a skip list may name),
    for the total, the active set and the skip lists."""

    by_module: dict = field(default_factory=dict)
    parts: dict = field(default_factory=dict)
    active: float = 0.0

    def add(self, module: str, n: float, active: float | None = None,
            parts: dict | None = None) -> None:
        self.by_module[module] = self.by_module.get(module, 0.0) + n
        self.active += n if active is None else active
        into = self.parts.setdefault(module, {})
        for part, size in (parts or {}).items():
            into[part] = into.get(part, 0.0) + size

    @property
    def total(self) -> float:
        return sum(self.by_module.values())


def _layer_kinds(r: Reading, layers: int, moe: bool) -> list[tuple[str, str]]:
    """(attention kind, MLP kind) of every layer."""
    c = r.cfg
    if c.get("hybrid_override_pattern") is not None:
        pattern = c["hybrid_override_pattern"]
        bad = sorted(set(str(pattern)) - set(HYBRID_LETTERS))
        if not isinstance(pattern, str) or len(pattern) != layers or bad:
            r.refuse("hybrid_override_pattern", f"is not {layers} of the letters "
                     f"{''.join(HYBRID_LETTERS)} (found {clip(', '.join(bad) or '-', 20)})")
        return [HYBRID_LETTERS[ch] for ch in pattern]
    return list(zip(_attention_kinds(r, layers), _mlp_kinds(r, layers, moe)))


def _attention_kinds(r: Reading, layers: int) -> list[str]:
    c = r.cfg
    if c.get("compress_ratios") is not None:  # DeepSeek-V4: a window and compressed latents
        return compressed_kinds(r, layers)
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
        if positive(pattern):
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


def _indices(r: Reading, key: str, default: list) -> set:
    """A list of layer indices (``moe_layers``, ``mlp_only_layers``) as a set."""
    v = r.cfg.get(key)
    v = default if v is None else v
    if not isinstance(v, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in v):
        r.refuse(key, "is not a list of layer indices")
    return set(v)


def _mlp_kinds(r: Reading, layers: int, moe: bool) -> list[str]:
    """Routed experts or dense in each layer, as each family's code places them."""
    c = r.cfg
    if not moe or (c.get("enable_moe_block") is False):
        return ["dense"] * layers
    if c.get("moe_layers") is not None:  # Llama-4's newer configs list the expert layers
        listed = _indices(r, "moe_layers", [])
        return ["moe" if i in listed else "dense" for i in range(layers)]
    dense_first = c.get("first_k_dense_replace") or 0
    freq = c.get("moe_layer_freq", 1) or 1
    step = c.get("decoder_sparse_step", 1) or 1
    every = c.get("interleave_moe_layer_step", 1) or 1
    if not all(isinstance(v, int) for v in (dense_first, freq, step, every)):
        r.refuse("moe_layer_freq", "or a field placing the expert layers is not an integer")
    only = _indices(r, "mlp_only_layers", [])
    return ["moe" if (i >= dense_first and i % freq == 0 and (i + 1) % step == 0
                      and i % every == every - 1 and i not in only) else "dense"
            for i in range(layers)]


def _attention(r: Reading, kind: str, hidden: int, count: _Count, m: dict) -> None:
    """One layer's attention: its weights, the values it caches per token, its FLOPs per pair."""
    c = r.cfg
    heads = r.int("num_attention_heads")
    if kind == "mla":
        _latent(r, heads, hidden, count, m)
        return
    if kind in ("linear", "mamba"):
        (_linear if kind == "linear" else _mamba)(r, hidden, count, m)
        return
    if kind.startswith("compressed"):
        compressed_attention(r, kind, hidden, count, m)
        return
    glob = kind == "full" and c.get("global_head_dim") is not None  # Gemma-4's global layers
    hd = r.int("global_head_dim") if glob else _head_dim(r, hidden, heads)
    kv = _divisor(r, "num_global_key_value_heads" if glob else "num_key_value_heads",
                  "num_attention_heads", heads, heads)
    k_is_v = glob and c.get("attention_k_eq_v") is True
    gated = c.get("attn_output_gate") or c.get("model_type") == "qwen3_next"
    q = heads * hd * (2 if gated else 1)  # a gate beside each query (Qwen3-Next's always)
    parts = {"q_proj": hidden * q, "k_proj": hidden * kv * hd, "o_proj": heads * hd * hidden}
    if not k_is_v:
        parts["v_proj"] = hidden * kv * hd
    n = sum(parts.values())
    if c.get("attention_bias"):
        n += q + 2 * kv * hd + hidden
    if c.get("model_type") == "gpt_oss":
        n += heads  # one attention sink per head
    count.add("self_attn", n, parts=parts)
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


def _head_dim(r: Reading, hidden: int, heads: int) -> int:
    """``head_dim`` where stated, else ``hidden_size / num_attention_heads``, which must then be
    whole (rounded down, the model would be mis-sized)."""
    if r.cfg.get("head_dim") is not None:
        return r.int("head_dim")
    if hidden % heads:
        r.refuse("hidden_size", f"= {hidden} is not a multiple of num_attention_heads = {heads} "
                                "and head_dim is not stated", "head_dim stated, or a "
                                "hidden_size that num_attention_heads divides")
    return hidden // heads


def _divisor(r: Reading, key: str, of_key: str, of: int, default=None) -> int:
    """A head count that divides ``of_key``'s: KV heads (or key heads, or state groups) each
    serve an equal group of query heads (value heads, state heads)."""
    v = r.int(key, default)
    if of % v:
        r.refuse(key, f"= {v} does not divide {of_key} = {of}", f"a divisor of {of_key}")
    return v


def _latent(r: Reading, heads: int, hidden: int, count: _Count, m: dict) -> None:
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed ``kv_lora_rank`` latent and
    a shared rotary key cached per token. Prefill attends in the expanded form (per head: keys
    of ``nope + rope``, values of ``v_head_dim``); decode in the absorbed form vLLM runs, each
    head's query against the latent and the rotary key, its output in the latent."""
    c = r.cfg
    lora, rope = r.int("kv_lora_rank"), r.int("qk_rope_head_dim")
    nope, v = r.int("qk_nope_head_dim"), r.int("v_head_dim")
    q_lora = r.int("q_lora_rank") if _nonzero(c.get("q_lora_rank")) else None
    qk = nope + rope
    parts = ({"q_a_proj": hidden * q_lora, "q_b_proj": q_lora * heads * qk} if _nonzero(q_lora)
             else {"q_proj": hidden * heads * qk})
    parts.update(kv_a_proj_with_mqa=hidden * (lora + rope), kv_b_proj=lora * heads * (nope + v),
                 o_proj=heads * v * hidden)
    if _nonzero(c.get("index_n_heads")):  # DeepSeek-V3.2's indexer: its own keys per token
        ih, ihd = r.int("index_n_heads"), r.int("index_head_dim")
        parts["indexer"] = (q_lora or hidden) * ih * ihd + hidden * ihd + 2 * ihd + hidden * ih
        m["kv_values"] += ihd
        m["attn_flops_per_pair"] += 2.0 * ih * ihd
        m["decode_attn_flops_per_pair"] += 2.0 * ih * ihd
    count.add("self_attn", sum(parts.values()) + (q_lora or 0) + lora, parts=parts)
    m["kv_values"] += lora + rope
    m["attn_flops_per_pair"] += heads * (2.0 * qk + 2.0 * v)
    m["decode_attn_flops_per_pair"] += heads * (2.0 * (lora + rope) + 2.0 * lora)


def _state_bytes(c: dict, key: str) -> int:
    return STATE_DTYPE_BYTES.get(str(c.get(key, "float32")), 4)


def _linear(r: Reading, hidden: int, count: _Count, m: dict) -> None:
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a ``key x value`` state per value
    head, updated and read once per token, and a short convolution's last inputs."""
    vh = r.int("linear_num_value_heads")
    kh = _divisor(r, "linear_num_key_heads", "linear_num_value_heads", vh)
    dk, dv = r.int("linear_key_head_dim"), r.int("linear_value_head_dim")
    kernel = r.int("linear_conv_kernel_dim", 4)
    key_dim, value_dim = kh * dk, vh * dv
    conv = 2 * key_dim + value_dim
    parts = {"in_proj_qkv": hidden * (2 * key_dim + value_dim), "in_proj_z": hidden * value_dim,
             "in_proj_b": hidden * vh, "in_proj_a": hidden * vh, "out_proj": value_dim * hidden}
    count.add("linear_attn", sum(parts.values()) + conv * kernel + 2 * vh + dv, parts=parts)
    m["state_bytes"] += (vh * dk * dv * _state_bytes(r.cfg, "mamba_ssm_dtype")
                         + conv * (kernel - 1) * 2)
    m["state_flops_per_token"] += 4.0 * vh * dk * dv


def _mamba(r: Reading, hidden: int, count: _Count, m: dict) -> None:
    """A Mamba-2 mixer (Nemotron-H): a ``head_dim x state`` state per head and a convolution's
    last inputs."""
    heads, hd = r.int("mamba_num_heads"), r.int("mamba_head_dim")
    state, groups = r.int("ssm_state_size"), _divisor(r, "n_groups", "mamba_num_heads", heads, 1)
    kernel = r.int("conv_kernel", 4)
    inner = heads * hd
    conv = inner + 2 * groups * state
    parts = {"in_proj": hidden * (2 * inner + 2 * groups * state + heads),
             "out_proj": inner * hidden}
    count.add("mixer", sum(parts.values()) + conv * (kernel + 1) + 3 * heads + inner,
              parts=parts)
    m["state_bytes"] += (heads * hd * state * _state_bytes(r.cfg, "mamba_ssm_cache_dtype")
                         + conv * (kernel - 1) * 2)
    m["state_flops_per_token"] += 4.0 * inner * state


def _mlp(r: Reading, kind: str, hidden: int, count: _Count, e: dict) -> None:
    """One layer's MLP: dense, or routed experts (top-k of them active) with shared ones."""
    c = r.cfg
    mats = 2 if str(c.get("mlp_hidden_act", c.get("hidden_act"))) in UNGATED else 3
    if kind == "none":
        return
    if kind == "dense" or c.get("enable_moe_block"):  # Gemma-4: a dense MLP beside the experts
        ffn = r.int("intermediate_size") if kind == "moe" else r.int(
            "intermediate_size_mlp", c.get("intermediate_size"), "intermediate_size")
        count.add("mlp", mats * hidden * ffn, parts=_projections(mats, hidden * ffn))
    if kind == "dense":
        return
    experts, top_k = e["experts"], e["top_k"]
    ffn = r.int("moe_intermediate_size", c.get("intermediate_size"), "intermediate_size")
    width = _latent_moe(r, hidden, count)
    one = mats * width * ffn + (2 * ffn + hidden if c.get("model_type") == "gpt_oss" else 0)
    count.add("experts", experts * one, top_k * one)
    e["params"] += experts * one
    shared = _shared_ffn(r, ffn)
    if shared:
        parts = _projections(mats, hidden * shared)
        if _nonzero(c.get("shared_expert_intermediate_size")):  # Qwen's gate on its output
            parts["shared_expert_gate"] = hidden
        count.add("shared_expert", sum(parts.values()), parts=parts)
    count.add("gate", hidden * experts + (experts if c.get("model_type") == "gpt_oss" else 0))


def _latent_moe(r: Reading, hidden: int, count: _Count) -> int:
    """The width the routed experts work in: ``hidden_size``, or Nemotron-3's latent MoE's
    ``moe_latent_size``, tokens projected down to it before the routed experts and back up after
    by each layer's own ``fc1_latent_proj`` and ``fc2_latent_proj`` (the router and the shared
    experts read the full width: vLLM's and NVIDIA's NemotronH modelling code)."""
    if not _nonzero(r.cfg.get("moe_latent_size")):
        return hidden
    latent = r.int("moe_latent_size")
    parts = {"fc1_latent_proj": hidden * latent, "fc2_latent_proj": latent * hidden}
    count.add("latent_proj", sum(parts.values()), parts=parts)
    return latent


def _projections(mats: int, size: int) -> dict:
    """An MLP's matrices by name: gate, up and down (two-matrix MLPs: up and down)."""
    return {p: size for p in ("gate_proj", "up_proj", "down_proj")[3 - mats:]}


def _shared_ffn(r: Reading, ffn: int) -> int:
    """The shared experts' width: DeepSeek's ``n_shared_experts`` of the experts' width,
    Qwen's and Nemotron's own field, Llama-4's one of ``intermediate_size`` (always there)."""
    c = r.cfg
    for key in ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"):
        if _nonzero(c.get(key)):
            return r.int(key)
    if c.get("model_type") == "llama4_text":
        return r.int("intermediate_size")
    return r.int("n_shared_experts", 1) * ffn if _nonzero(c.get("n_shared_experts")) else 0


def _vision(outer: Reading) -> float:
    """A vision tower's weights, estimated from its size: per block attention (4 h^2) and a
    two-matrix MLP (2 h i), and the patch embedding. Zero where the config gives no size."""
    v = outer.cfg.get("vision_config")
    if not isinstance(v, dict):
        return 0.0
    r = Reading(v, f"{outer.where}: vision_config")
    keys = [r.first(*k) for k in (("hidden_size", "vt_hidden_size"),  # Kimi's MoonViT: vt_*
                                  ("intermediate_size", "vt_intermediate_size"),
                                  ("depth", "num_hidden_layers", "vt_num_hidden_layers"))]
    if any(v.get(k) is None for k in keys):
        return 0.0
    h, i, depth = (r.int(k) for k in keys)
    patch = r.int("patch_size", 14) ** 2 * r.int("in_channels", 3) * r.int(
        "temporal_patch_size", 1)
    return float(depth * (4 * h * h + 2 * h * i) + patch * h)


def _experts(r: Reading) -> tuple[int, int]:
    """Routed experts and the experts each token is routed to (a dense model: 1 and 1); never
    more of these than of those."""
    key, per = r.first(*EXPERT_KEYS), r.first(*TOP_K_KEYS)
    experts, top_k = r.int(key, 1), r.int(per, 1)
    if top_k > experts:
        stated = f"{key} = {experts}" if r.cfg.get(key) is not None else \
            "the routed experts (1: none stated)"
        r.refuse(per, f"= {top_k} exceeds {stated}", "at most the routed experts")
    return experts, top_k


def _language_model(cfg: dict, r: Reading) -> dict:
    """The language model's fields: a multimodal checkpoint's ``text_config``, which inherits
    what it leaves to the outer config (tied embeddings, the quantisation)."""
    text = cfg.get("text_config")
    if text is None:
        return cfg
    if not isinstance(text, dict):
        r.refuse("text_config", "is not a table")
    inherited = ("tie_word_embeddings", "quantization_config", "quantization")
    return {**{k: cfg[k] for k in inherited if k in cfg}, **text}


def _given_name(c: dict) -> str | None:
    """``_name_or_path`` where it is a name that prints on one line and, unescaped, in a TOML
    string (a fitted profile names its model)."""
    n = c.get("_name_or_path")
    return n if isinstance(n, str) and n.isprintable() and not set(n) & set('"\\') else None


def load_hf_config(path: str | Path, name: str | None = None) -> Model:
    """Build a Model from a local Hugging Face ``config.json``; a config with anything the
    loader does not size is refused in one line naming the field."""
    path = Path(path)
    outer = read_json(path)
    where = shown(path)
    c = _language_model(outer, Reading(outer, where))
    r = Reading(c, where)
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
    experts, top_k = _experts(r)
    kinds = _layer_kinds(r, layers, experts > 1)
    count, layers_of = _Count(), {}
    m = dict(kv_split=[heads], kv_values=0.0, attn_flops_per_pair=0.0,
             decode_attn_flops_per_pair=0.0, window=0, window_kv_values=0.0,
             window_flops_per_token=0.0, state_bytes=0.0, state_flops_per_token=0.0)
    e = dict(experts=experts, top_k=top_k, params=0.0)
    for i, (attention, mlp) in enumerate(kinds):
        before = dict(count.by_module)
        if attention != "none":
            _attention(r, attention, hidden, count, m)
        _mlp(r, mlp, hidden, count, e)
        count.add("norm", 2 * hidden)
        for module, n in count.by_module.items():
            if n != before.get(module):
                layers_of.setdefault(module, set()).add(i)
    count.add("norm", hidden)
    count.add("embed_tokens", vocab * hidden)
    if not c.get("tie_word_embeddings", False):
        count.add("lm_head", vocab * hidden)
    count.add("vision", _vision(Reading(outer, where)), 0.0)
    hyper_connections_and_hash(r, layers, hidden, count)
    split = m.pop("kv_split")
    if not m["kv_values"]:
        r.refuse("layer_types", "has no full-attention layer (a KV cache that grows with the "
                                "context), which is not modelled")
    outer_quant = any(_nonzero(outer.get(k)) for k in ("quantization_config", "quantization"))
    weights = Weights(count.by_module, count.parts, layers_of, experts)
    precision = checkpoint_precision(c, path, weights, where, layers, tuple(
        u for u in UNQUANTISED if u in count.by_module) + (() if outer_quant else ("vision",)))
    latent = _nonzero(c.get("kv_lora_rank"))
    head_dim = (r.int("qk_nope_head_dim") + r.int("qk_rope_head_dim")) if latent \
        else _head_dim(r, hidden, heads)
    if _nonzero(c.get("qk_head_dim")) and r.int("qk_head_dim") != head_dim:  # GLM-5's copy
        r.refuse("qk_head_dim", f"= {c['qk_head_dim']}, not the query-key head size read here "
                                f"({head_dim}), so the model would be mis-sized")
    return Model(
        name=name or _given_name(c) or path.parent.name or path.stem,
        params=count.total, active_params=count.active, layers=layers, hidden=hidden,
        heads=heads, kv_heads=heads if latent else _divisor(
            r, "num_key_value_heads", "num_attention_heads", heads, heads),
        head_dim=head_dim, ffn=r.int("intermediate_size", c.get("moe_intermediate_size"),
                                     "moe_intermediate_size"), vocab=vocab, max_context=context,
        experts=experts, experts_per_token=top_k, expert_params=e["params"] if experts > 1
        else 0.0, **m, native_bits=precision.bits, native_nominal_bits=precision.nominal,
        native_activation_bits=precision.activation, native_expert_bits=precision.experts,
        kept_params=precision.kept, moe_layers=sum(k == "moe" for _, k in kinds),
        kv_split=1 if latent else min(split), mtp_layers=mtp_layers(c),
        source="; ".join((f"Hugging Face config {path}", *precision.notes)))
