"""DeepSeek-V4's compressed attention, read from its ``config.json`` as vLLM's ``deepseek_v4``
model files build it (models/deepseek_v4.py, layers/deepseek_v4_attention.py,
layers/deepseek_compressor.py).

Every layer attends over one shared latent of ``head_dim`` per token (keys and values alike,
one KV head) in two parts: the last ``sliding_window`` tokens as they are, and, where the layer's
``compress_ratios`` entry r is not 0, one compressed latent per r tokens over the whole context.
A compressor (its own ``wkv`` and ``wgate`` projections, unquantised) builds them, holding each
sequence's partial window of fp32 values and scores; at r = 4 its windows overlap (twice as
wide) and a lightning indexer, with its own compressed keys of ``index_head_dim``, picks the
entries attended. The indexer's top-``index_topk`` cap is not modelled: attention is counted over
every compressed entry, as DeepSeek-V3.2's is. Queries pass through a ``q_lora_rank``
projection, the output through ``o_groups`` grouped ``o_lora_rank`` projections. The residual
stream is ``hc_mult`` streams wide (manifold-constrained hyper-connections), mixed before each
attention and MLP and once at the head by fp32 weights, held at 16 bits here (about 0.04% of
DeepSeek-V4-Flash's weight bytes too few). The first ``num_hash_layers`` layers route tokens by
a table of experts per token id instead of the router's scores."""
from __future__ import annotations

#: Compression ratios vLLM's compressor and attention build: 0 (the window alone), 4 (with
#: overlapping windows and the indexer) and 128.
RATIOS = (0, 4, 128)
#: The ratio whose compressor overlaps its windows and whose layers have the indexer.
INDEXED = 4
#: Bytes of a compressor's state element: fp32 (vLLM's CompressorStateCache).
STATE_BYTES = 4
#: Modules vLLM builds unquantised: the compressors, the indexer's head weights and the
#: hyper-connections' mixing weights.
UNQUANTISED = ("compressor", "indexer", "hyper_connections")


def compressed_kinds(r, layers: int) -> list[str]:
    """Each layer's attention kind, ``compressed:<ratio>``, from ``compress_ratios`` (entries past
    ``num_hidden_layers`` are the multi-token-prediction layers', not counted)."""
    ratios = r.cfg.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < layers or not all(
            isinstance(v, int) and not isinstance(v, bool) and v in RATIOS for v in ratios):
        allowed = ", ".join(map(str, RATIOS))
        r.refuse("compress_ratios", f"is not a list of at least {layers} of {allowed}",
                 f"one of {allowed} per layer")
    if r.int("num_key_value_heads", 1) != 1:
        r.refuse("num_key_value_heads", "is not 1 beside compress_ratios (one shared latent)",
                 "1")
    return [f"compressed:{v}" for v in ratios[:layers]]


def compressed_attention(r, kind: str, hidden: int, count, m: dict) -> None:
    """One layer's attention: its weights, the latents it caches per token (the window's and the
    compressed ones), its compressor's state and its FLOPs."""
    ratio = int(kind.split(":")[1])
    heads, hd = r.int("num_attention_heads"), r.int("head_dim")
    q_lora, o_lora = r.int("q_lora_rank"), r.int("o_lora_rank")
    groups = r.int("o_groups")
    if heads % groups:
        r.refuse("o_groups", f"= {groups} does not divide num_attention_heads = {heads}",
                 "a divisor of num_attention_heads")
    parts = {"wq_a": hidden * q_lora, "wkv": hidden * hd, "wq_b": q_lora * heads * hd,
             "wo_a": heads * hd * o_lora, "wo_b": groups * o_lora * hidden}
    window = min(r.int("sliding_window"), r.int("max_position_embeddings"))
    m["window"] = window
    m["window_kv_values"] += hd
    m["window_flops_per_token"] += 4.0 * heads * hd * window
    m["kv_split"].append(1)
    if ratio:
        _compressor(ratio, hidden, hd, count, m)
        m["kv_values"] += hd / ratio
        m["attn_flops_per_pair"] += 4.0 * heads * hd / ratio
        m["decode_attn_flops_per_pair"] += 4.0 * heads * hd / ratio
    if ratio == INDEXED:
        ih, ihd = r.int("index_n_heads"), r.int("index_head_dim")
        parts["indexer_wq_b"] = q_lora * ih * ihd
        count.add("indexer", hidden * ih + 2 * ihd)  # weights_proj, the keys' LayerNorm
        _compressor(ratio, hidden, ihd, count, m)
        m["kv_values"] += ihd / ratio
        m["attn_flops_per_pair"] += 2.0 * ih * ihd / ratio
        m["decode_attn_flops_per_pair"] += 2.0 * ih * ihd / ratio
    count.add("self_attn", sum(parts.values()) + q_lora + hd + heads, parts=parts)


def _compressor(ratio: int, hidden: int, width: int, count, m: dict) -> None:
    """A compressor of ``width``-wide entries: its ``wkv`` and ``wgate`` projections, position
    biases and norm, and per sequence the last ``coff x ratio`` tokens' values and scores."""
    coff = 2 if ratio == INDEXED else 1
    count.add("compressor", 2 * hidden * coff * width + ratio * coff * width + width)
    m["state_bytes"] += coff * ratio * 2 * coff * width * STATE_BYTES


def hyper_connections_and_hash(r, layers: int, hidden: int, count) -> None:
    """The hyper-connections' mixing weights (two per layer, one at the head) and the hash
    layers' tables of experts per token id (a lookup: no FLOPs)."""
    c = r.cfg
    if c.get("hc_mult") is not None:
        n = r.int("hc_mult")
        mix = (2 + n) * n  # pre, post and n x n residual weights per token
        per_layer = 2 * (mix * n * hidden + mix + 3)
        count.add("hyper_connections", layers * per_layer + n * n * hidden + n + 1)
    if c.get("num_hash_layers"):
        hashed = r.int("num_hash_layers")
        if hashed > layers:
            r.refuse("num_hash_layers", f"= {hashed} exceeds num_hidden_layers = {layers}",
                     f"at most {layers}")
        table = hashed * r.int("vocab_size") * r.int("num_experts_per_tok")
        count.add("gate", table, 0.0)
