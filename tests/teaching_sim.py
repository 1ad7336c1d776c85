"""The teaching simulator's numbers, re-stated from its text so that the expected values do not
come from the code under test. It is a numpy program: MODEL_CONFIGS, kv_cache_memory,
memory_budget, STEP 1 and STEP 6."""

MODEL_CONFIGS = {
    "Llama-3-8B": dict(num_layers=32, num_kv_heads=8, head_dim=128, model_params_b=8),
    "Llama-3-70B": dict(num_layers=80, num_kv_heads=8, head_dim=128, model_params_b=70),
    "Llama-3-405B": dict(num_layers=126, num_kv_heads=8, head_dim=128, model_params_b=405),
    "Mistral-7B": dict(num_layers=32, num_kv_heads=8, head_dim=128, model_params_b=7),
    "GPT-4-est": dict(num_layers=120, num_kv_heads=96, head_dim=128, model_params_b=1800),
}


def kv_per_token(cfg, dtype_bytes=2):
    """The teaching simulator's kv_cache_memory per_token, bytes."""
    return 2 * cfg["num_layers"] * cfg["num_kv_heads"] * cfg["head_dim"] * dtype_bytes


def memory_budget(cfg, gpu_memory_gb):
    """The teaching simulator's memory_budget: (KV GiB, users at 2K, users at 4K), or None for
    'Model does not fit in GPU memory'."""
    model_gb = cfg["model_params_b"] * 1e9 * 2 / 1024**3
    avail = gpu_memory_gb - model_gb - gpu_memory_gb * 0.1
    if avail <= 0:
        return None
    max_tokens = int(avail * 1024**3 / kv_per_token(cfg))
    return round(avail, 1), max_tokens // 2048, max_tokens // 4096
