"""Memory budget of one tensor-parallel group: weights + overhead reserve + KV cache.

Two rules. The teaching simulator's: a fixed fraction of memory is reserved, the rest less the
weights is KV. vLLM's (``gpu_memory_utilization``): the engine may use that share of each GPU's
memory; its start-up profile subtracts the weights, the activations of the largest pass and
memory outside PyTorch's allocator, and the rest becomes KV blocks
(vllm/v1/worker/gpu_worker.py, ``determine_available_memory``)."""
from __future__ import annotations

from dataclasses import dataclass

from sweep.physics.models import Model

GIB = 1024**3

#: The teaching simulator reserves 10% of GPU memory for activations, CUDA context and
#: fragmentation.
DEFAULT_OVERHEAD_FRACTION = 0.1
#: Per-GPU memory outside the activation peak that vLLM's profile counts against the KV cache:
#: the CUDA context, NCCL buffers and captured CUDA graphs, GiB. vLLM's start-up log on an
#: 80 GB H100 reports about 0.5-1.5 GiB of non-torch memory plus CUDA-graph memory.
ENGINE_RESERVE_GIB = 1.5
#: Tokens in vLLM's profiling pass when no budget is set (its default max_num_batched_tokens
#: for an online server on a data-centre GPU).
DEFAULT_PROFILE_TOKENS = 8192


@dataclass(frozen=True)
class Budget:
    gpus: int
    total_gib: float
    weights_gib: float
    overhead_gib: float
    kv_gib: float  # negative when the weights do not fit
    kv_bytes_per_token: float  # of the KV cache that grows with a sequence (full attention)

    @property
    def fits(self) -> bool:
        return self.kv_gib > 0

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV cache the group holds (0 when the model does not fit)."""
        return max(0, int(self.kv_gib * GIB / self.kv_bytes_per_token))



def activation_peak_gib(model: Model, tokens: int, seqs: int, gpus: int = 1) -> float:
    """Transient memory of the largest pass on one GPU, GiB: the 16-bit activations alive at the
    widest point of a layer (the residual, the query/key/value projections and the gated MLP's
    two halves, the latter three split across the ``gpus``) for ``tokens`` tokens, plus the
    32-bit logits of one token per sequence, which the sampler holds."""
    per_token = 2 * (2 * model.hidden + (model.heads + 2 * model.kv_heads) * model.head_dim
                     / gpus + 2 * model.ffn / gpus)
    return (tokens * per_token + seqs * model.vocab * 4) / GIB


def memory_budget(model: Model, gpu_memory_gib: float, gpus: int = 1,
                  weight_bits: int | None = 16,
                  kv_bits: int = 16, overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION,
                  utilization: float | None = None, profile_tokens: int = DEFAULT_PROFILE_TOKENS,
                  profile_seqs: int = 256, data_parallel: int = 1,
                  pipeline_parallel: int = 1) -> Budget:
    """Weights are split across the ``gpus`` of the group (tensor parallelism), so the group's
    memory is what counts; KV heads split the same way. With ``utilization`` (vLLM's
    ``gpu_memory_utilization``) the reserve is the unused share, the activation peak of a pass
    of ``profile_tokens`` tokens over ``profile_seqs`` sequences and the engine's reserve, on
    every GPU; otherwise it is ``overhead_fraction`` of memory (the teaching simulator's rule).
    ``pipeline_parallel`` stages of such groups share the layers, so their memory adds too (the
    first and last stages' embeddings counted as if spread)."""
    gpus_all = gpus * data_parallel * pipeline_parallel
    total = gpu_memory_gib * gpus_all
    # Each data-parallel rank holds every weight but the routed experts, which they share.
    weights = (model.weight_bytes(weight_bits) + (data_parallel - 1) * (
        model.weight_bytes(weight_bits) - model.expert_bytes(weight_bits))) / GIB
    if utilization is None:
        overhead = total * overhead_fraction
    else:
        per_gpu = activation_peak_gib(model, profile_tokens, profile_seqs, gpus) + \
            ENGINE_RESERVE_GIB
        overhead = total * (1.0 - utilization) + per_gpu * gpus_all
    return Budget(gpus_all, total, weights, overhead, total - weights - overhead,
                  model.held_kv_bytes_per_token(kv_bits, gpus))
