"""Speculative drafts (``[levers] draft``): a separate draft model, the checkpoint's own
multi-token-prediction (MTP) layers, or an EAGLE-3 head. For the last two, the cost per drafted
token follows from the target's own layer sizes and the acceptance from a published table per
position (docs/model.md, "Speculative decoding").

A drafted token runs the draft once: its decoder layer, its input projection and an LM head.
Its share of a target decode pass is its active parameters over the target's, which is what
the target's pass reads and multiplies per token at one sequence; at larger batches a wide
mixture of experts reads all of its experts and the share falls, and the draft's one layer of
KV is 1/layers of the target's, so the share bounds the draft from above."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sweep.physics.models import Model

DRAFTS = ("model", "mtp", "eagle")

#: The fields of a checkpoint's config.json that count its MTP modules: DeepSeek-V3/R1/V3.2,
#: GLM, MiMo and Nemotron-3-Super's ``num_nextn_predict_layers``, Qwen3-Next and Qwen3.5's
#: ``mtp_num_hidden_layers``, MiniMax's ``num_mtp_modules`` (with ``use_mtp``).
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")

#: EAGLE-3's reduced draft vocabulary, tokens: ``draft_vocab_size`` of the released heads
#: (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B config.json: 32000; vLLM maps it back to the
#: target's vocabulary with the head's ``d2t`` table, vllm/model_executor/models/
#: llama_eagle3.py).
EAGLE_DRAFT_VOCAB = 32000

#: Acceptance of each drafted position given the ones before it were accepted (conditional
#: rates, position 1 first; past the table the last rate holds), greedy sampling.
CONDITIONAL = {
    # DeepSeek-V3's one MTP module, reused for every drafted position. Position 1: 0.882
    # (vLLM tests/v1/spec_decode/test_acceptance_length.py, MTP_MODEL_CONFIGS: DeepSeek-V3,
    # MT-Bench, acceptance length 1.882 at k = 1; DeepSeek-V3 technical report, arXiv:2412.19437
    # section 5.4.3: the second token is accepted 85-90% of the time). Later positions: 0.612,
    # the constant rate giving the original module's mean acceptance length of 3.20 at k = 7
    # (nebius/MTP-DeepSeek-V3-0324 model card: MT-Bench, HumanEval and GSM8K, temperature 0).
    "mtp": (0.882, 0.612),
    # EAGLE-3 on Llama-3.1-8B-Instruct: P(A >= j) = 0.7296, 0.5208, 0.3545 for j = 1..3
    # (vLLM tests/v1/spec_decode/test_acceptance_length.py, EAGLE3_MODEL_CONFIGS,
    # RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3 on MT-Bench), as conditional rates.
    # Later positions keep the third's: EAGLE-3's training-time test keeps its acceptance
    # nearly flat in the position (arXiv:2503.01840, its acceptance rate n-alpha figure).
    "eagle": (0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208),
}


@dataclass(frozen=True)
class DraftSize:
    """What a draft adds to the server: ``params`` held (``experts`` and ``kept`` of them: its
    routed experts' and its 16-bit ones), ``active`` read and multiplied per drafted token, and
    ``kv_values`` cached per token."""

    params: float
    experts: float
    kept: float
    active: float
    kv_values: float


def mtp_layers(cfg: dict) -> int:
    """The MTP modules a config.json declares (0: none)."""
    if cfg.get("use_mtp") is False:
        return 0
    for key in MTP_KEYS:
        v = cfg.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return 0


def _head(model: Model) -> float:
    return float(model.vocab * model.hidden)


def _layer(model: Model) -> tuple[float, float, float]:
    """One decoder layer of the target, as its layers average: the parameters outside the
    routed experts (attention, dense MLP, shared experts, router, norms; embeddings and an
    untied LM head taken out), and one expert layer's routed experts, all and per token."""
    routed_active = model.expert_params * model.experts_per_token / model.experts
    dense = (model.active_params - 2.0 * _head(model) - routed_active) / model.layers
    experts = model.expert_params / model.moe_layers if model.moe_layers else 0.0
    return dense, experts, experts * model.experts_per_token / model.experts


def _layer_kv_values(model: Model) -> float:
    """Values one full-attention layer caches per token: its K and V heads where the cache
    holds that much, else (latent attention) the cache's mean per layer."""
    gqa = 2.0 * model.kv_heads * model.head_dim
    return gqa if gqa <= model.kv_values else model.kv_values / model.layers


def mtp_size(model: Model) -> DraftSize:
    """An MTP module (DeepSeek-V3's ``DeepSeekMultiTokenPredictorLayer``, vLLM's
    deepseek_mtp.py): one more decoder layer of the target, its input projection ``eh_proj``
    (2 hidden x hidden, of the token's embedding beside the target's last hidden state) and
    three norms; it shares the target's embedding and LM head, which each drafted token runs.
    Every module the checkpoint holds is loaded."""
    dense, experts, routed = _layer(model)
    h = float(model.hidden)
    own = dense + 2.0 * h * h + 3.0 * h
    n = model.mtp_layers
    return DraftSize(params=n * (own + experts), experts=n * experts, kept=0.0,
                     active=own + routed + _head(model), kv_values=n * _layer_kv_values(model))


def eagle_size(model: Model) -> DraftSize:
    """An EAGLE-3 head (arXiv:2503.01840; vLLM's llama_eagle3.py): ``fc`` fuses three of the
    target's layers' features (3 hidden x hidden), one decoder layer at the target's width
    whose query, key and value projections read the token's embedding beside them (twice the
    width), and its own LM head over ``EAGLE_DRAFT_VOCAB`` tokens; the embedding is the
    target's. The layer is the target's mean layer with its experts' active share as a dense
    MLP (the heads are dense), its attention at most multi-head at the target's width; the
    head's weights are 16-bit."""
    dense, _, routed = _layer(model)
    h = float(model.hidden)
    kv = min(model.kv_heads * model.head_dim, h)
    qkv = min(model.heads * model.head_dim, h) + 2.0 * kv
    n = 3.0 * h * h + dense + routed + h * qkv + min(model.vocab, EAGLE_DRAFT_VOCAB) * h + 2 * h
    return DraftSize(params=n, experts=0.0, kept=n, active=n, kv_values=2.0 * kv)


def draft_size(model: Model, draft: str) -> DraftSize | None:
    """The MTP module's or EAGLE-3 head's size; None for a separate draft model (its cost is
    the ``draft_cost`` lever's)."""
    return {"mtp": mtp_size, "eagle": eagle_size}.get(draft, lambda m: None)(model)


def cost_share(model: Model, draft: str, draft_cost: float) -> float:
    """A drafted token's cost as a share of a target decode pass: ``draft_cost`` for a separate
    draft model, else the draft's active parameters over the target's."""
    size = draft_size(model, draft)
    return draft_cost if size is None else size.active / model.active_params


def served_model(model: Model, draft: str, draft_tokens: int) -> Model:
    """The model as memory sees it: with an MTP module or EAGLE-3 head that drafts, its weights
    (at the checkpoint's precision; an EAGLE-3 head's at 16 bits) and its KV per token added."""
    size = draft_size(model, draft) if draft_tokens > 0 else None
    if size is None:
        return model
    return replace(model, params=model.params + size.params,
                   expert_params=model.expert_params + size.experts,
                   kept_params=model.kept_params + size.kept,
                   kv_values=model.kv_values + size.kv_values)


def accepted_at_least(draft: str, k_max: int) -> np.ndarray:
    """P(A >= j), j = 1..k_max, of an MTP or EAGLE-3 draft: the product of the conditional
    rates up to position j."""
    rates = CONDITIONAL[draft]
    full = [rates[min(j, len(rates) - 1)] for j in range(k_max)]
    return np.cumprod(np.asarray(full, dtype=np.float64))
