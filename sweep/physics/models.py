"""A model as the pass-time and memory models see it: its parameters, and what each kind of
layer caches, holds and computes per token."""
from __future__ import annotations

from dataclasses import dataclass, field


#: Generations whose tensor cores compute a checkpoint's floating-point low precision: FP8
#: from Ada and Hopper (the A100's 8-bit path is INT8, so vLLM runs fp8 weight-only there),
#: NVFP4 on Blackwell (its FP4 tensor cores; the A100's 4-bit path is INT4). NVIDIA and AMD
#: datasheets.
NATIVE_FLOAT_GENERATIONS = {8: ("Ada", "Hopper", "Blackwell", "CDNA3", "CDNA4"),
                            4: ("Blackwell",)}


@dataclass(frozen=True)
class Model:
    """What the pass-time and memory models need of a decoder. Layer kinds add up: full-attention
    layers cache ``kv_values`` per token, windowed layers ``window_kv_values`` per token for at
    most ``window`` tokens, and linear-attention and state-space layers hold ``state_bytes`` per
    sequence whatever its length."""

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
    kv_values: float = 0.0  # values cached per token, over the full-attention layers (K and V)
    attn_flops_per_pair: float = 0.0  # prefill attention FLOPs per query-key pair, full layers
    decode_attn_flops_per_pair: float = 0.0  # the same in decode's form (MLA: absorbed)
    window: int = 0  # tokens a windowed layer keeps and attends to
    window_kv_values: float = 0.0  # values cached per token over the windowed layers
    window_flops_per_token: float = 0.0  # windowed layers' attention FLOPs over a full window
    state_bytes: float = 0.0  # per sequence: linear-attention and state-space layers' state
    state_flops_per_token: float = 0.0  # their state update and read-out per token
    native_bits: float = 16.0  # the checkpoint's bits per quantised weight, scales included
    native_nominal_bits: int = 16  # the same as the weight_bits lever names it (16, 8 or 4)
    native_activation_bits: int = 16  # the precision the checkpoint computes in (W8A8 fp8: 8)
    # The routed experts' own bits per weight, scales included, where the checkpoint holds them
    # apart from its other quantised weights (DeepSeek-V4's MXFP4 experts); 0: native_bits.
    native_expert_bits: float = 0.0
    kept_params: float = 0.0  # weights the checkpoint holds at 16 bits (embeddings, skip list)
    moe_layers: int = 0  # layers with routed experts
    kv_split: int = 1  # ways tensor parallelism splits the KV cache (KV heads; MLA's latent: 1)
    mtp_layers: int = 0  # multi-token-prediction modules the checkpoint holds (not in params)
    source: str = field(default="", compare=False)

    @classmethod
    def gqa(cls, name, params, active_params, layers, hidden, heads, kv_heads, head_dim, ffn,
            vocab, max_context, experts=1, experts_per_token=1, expert_params=0.0, source=""):
        """A decoder whose every layer has full grouped-query attention (Llama, Mistral)."""
        return cls(name, params, active_params, layers, hidden, heads, kv_heads, head_dim, ffn,
                   vocab, max_context, experts, experts_per_token, expert_params,
                   kv_values=2.0 * layers * kv_heads * head_dim,
                   attn_flops_per_pair=4.0 * layers * heads * head_dim,
                   decode_attn_flops_per_pair=4.0 * layers * heads * head_dim,
                   moe_layers=layers if experts > 1 else 0, kv_split=kv_heads, source=source)

    def kv_copies(self, gpus: int) -> float:
        """How many GPUs of a tensor-parallel group hold each cached value: a KV head (or an
        MLA latent) cannot be split, so past ``kv_split`` GPUs it is replicated."""
        return gpus / min(gpus, self.kv_split)

    def kv_bytes_per_token(self, kv_bits: int = 16) -> float:
        """Keys and values of every layer that caches them, a windowed layer's counted as if
        its window reached the token (layers x KV heads x head dim x 2 x bytes under GQA, as
        the teaching simulator has it)."""
        return (self.kv_values + self.window_kv_values) * kv_bits / 8.0

    def held_kv_bytes_per_token(self, kv_bits: int, gpus: int) -> float:
        """The cache that grows with a sequence, its full-attention layers', as a group of
        ``gpus`` tensor-parallel GPUs holds it (replicas included)."""
        return self.kv_values * kv_bits / 8.0 * self.kv_copies(gpus)

    def held_seq_bytes(self, kv_bits: int, gpus: int) -> float:
        """What a sequence holds whatever its length past the window, over the same group: its
        windowed layers' KV over a full window (replicas included) and its state."""
        return (self.window_kv_values * self.window * kv_bits / 8.0 * self.kv_copies(gpus)
                + self.state_bytes)

    def weight_only_experts(self, weight_bits: int | None, activation_bits: int) -> bool:
        """Whether its routed experts run in weight-only kernels: their weights (``weight_bits``,
        unset the checkpoint's, its experts' own where it holds them apart: MXFP4's 4) narrower
        than the products (``activation_bits``)."""
        nominal = self.native_nominal_bits if weight_bits is None else weight_bits
        if self.native_expert_bits and nominal == self.native_nominal_bits:
            nominal = int(self.native_expert_bits)  # the format's bits, its scales aside
        return self.experts > 1 and nominal < activation_bits

    def activation_bits(self, gpu, activation_bits: int | None) -> int:
        """Bits the matrix products compute in: the ``activation_bits`` lever's, or, unset,
        the checkpoint's where the GPU has that peak (fp8 W8A8 on Hopper and later; NVFP4's
        4-bit on Blackwell) and 16 otherwise (weight-only: dequantised to 16-bit compute)."""
        if activation_bits is not None:
            return activation_bits
        native = self.native_activation_bits
        floating = NATIVE_FLOAT_GENERATIONS.get(native)
        runs = floating is None or gpu.generation in floating
        return native if runs and gpu.has_activation_bits(native) else 16

    def weight_bits(self, weight_bits: int | None) -> float:
        """Bits per quantisable weight: the checkpoint's own (scales included) unless the
        ``weight_bits`` lever names another precision."""
        if weight_bits is None or weight_bits == self.native_nominal_bits:
            return self.native_bits
        return float(weight_bits)

    def expert_weight_bits(self, weight_bits: int | None) -> float:
        """Bits per routed-expert weight: the checkpoint's own for its experts where it holds
        them apart and the lever keeps the checkpoint's precision, else ``weight_bits``'."""
        if self.native_expert_bits and (weight_bits is None
                                        or weight_bits == self.native_nominal_bits):
            return self.native_expert_bits
        return self.weight_bits(weight_bits)

    def weight_bytes(self, weight_bits: int | None) -> float:
        kept = self.kept_params
        if self.native_expert_bits:
            rest = self.params - kept - self.expert_params
            return (rest * self.weight_bits(weight_bits) / 8.0 + self.expert_bytes(weight_bits)
                    + kept * 2.0)
        return (self.params - kept) * self.weight_bits(weight_bits) / 8.0 + kept * 2.0

    def expert_bytes(self, weight_bits: int | None) -> float:
        """Bytes of every routed expert's weights (a pass reads only the experts it routes to)."""
        return self.expert_params * self.expert_weight_bits(weight_bits) / 8.0
