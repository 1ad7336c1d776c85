"""Memory budget of one tensor-parallel group: weights + overhead reserve + KV cache (seed 003)."""
from __future__ import annotations

from dataclasses import dataclass

from .models import Model

GIB = 1024**3

#: Seed 003 reserves 10% of GPU memory for activations, CUDA context and fragmentation.
DEFAULT_OVERHEAD_FRACTION = 0.1


@dataclass(frozen=True)
class Budget:
    gpus: int
    total_gib: float
    weights_gib: float
    overhead_gib: float
    kv_gib: float  # negative when the weights do not fit
    kv_bytes_per_token: float

    @property
    def fits(self) -> bool:
        return self.kv_gib > 0

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV cache the group holds (0 when the model does not fit)."""
        return max(0, int(self.kv_gib * GIB / self.kv_bytes_per_token))

    def users_at(self, context_tokens: int) -> int:
        """Concurrent sequences of this length the cache holds."""
        return self.kv_tokens // context_tokens

    @property
    def kv_gib_per_gpu(self) -> float:
        return self.kv_gib / self.gpus


def memory_budget(model: Model, gpu_memory_gib: float, gpus: int = 1, weight_bits: int = 16,
                  kv_bits: int = 16, overhead_fraction: float = DEFAULT_OVERHEAD_FRACTION) -> Budget:
    """Weights are split across the ``gpus`` of the group (tensor parallelism), so the group's
    memory is what counts; KV heads split the same way."""
    total = gpu_memory_gib * gpus
    weights = model.weight_bytes(weight_bits) / GIB
    overhead = total * overhead_fraction
    return Budget(gpus, total, weights, overhead, total - weights - overhead,
                  model.kv_bytes_per_token(kv_bits))
