"""The model's own error, drawn per seed, so that the seeds' spread covers it.

A GPU's model error (``physics.hardware.ModelError``: how far predictions on it strayed from real
runs held out of the fit) is a relative standard deviation of its speed (every GPU-side
efficiency, together) and of ``request_lag_passes``; a design whose routed experts run in
weight-only kernels takes the GPU's error on those (``GPU.weight_only_model_error``). In the
``[hardware]`` distribution syntax each factor is ``{ dist = "normal", mean = <the GPU's>,
sd = <mean x relative sd>, low, high }`` within ``TRUNCATE`` standard deviations (an efficiency
at most 1).

Every seed draws one quantile ``u``: the radical inverse in base 2 of ``seed + 1`` (0.5, 0.25,
0.75, 0.125, ...), so the first ``n`` seeds spread evenly over (0, 1) and seed 0 is the central
prediction. Every factor takes its quantile at ``u``: the efficiencies at ``u`` and the lag at
``1 - u``, so a low ``u`` is a slow GPU in every term, as the held-out runs err (a GPU slower
than predicted is slower in every kernel). A metric that grows with time then has its quantiles
at the factors' quantiles: ``sweep validate`` takes its 90% interval from ``u`` = 0.05 and 0.95.
A factor the config states is its own and has no model error.
"""
from __future__ import annotations

from statistics import NormalDist

from sweep.physics.engines import VLLM
from sweep.study.fields import GPU_FITTED
from sweep.study.uncertainty import Uncertain

#: The GPU-side efficiencies, which err together (the speed).
SPEED = GPU_FITTED
LAG = "request_lag_passes"
TRUNCATE = 3.0
#: The quantiles of a 90% interval.
INTERVAL = (0.05, 0.95)
_NORMAL = NormalDist()


def spreads(design) -> dict[str, tuple[float, float, float]]:
    """The factors ``design`` leaves to its GPU, as its model error spreads them: key ->
    (central value, relative standard deviation, highest value). None for a GPU without a
    model error or a factor the config states."""
    gpu = design.gpu_spec
    err = gpu.model_error
    if gpu.weight_only_model_error is not None and design.model_spec.weight_only_experts(
            design.weight_bits, design.activation_precision):
        err = gpu.weight_only_model_error
    if err is None:
        return {}
    out = {}
    for key in SPEED:
        central = getattr(gpu, key)
        if key == "kv_bandwidth_efficiency":  # it keeps its ratio to a stated weights'
            if design.bandwidth_efficiency is not None:
                continue
            central = central or gpu.bandwidth_efficiency
        if getattr(design, key) is None and central > 0:
            out[key] = (central, err.speed_sd, 1.0)
    if design.request_lag_passes is None and gpu.request_lag_passes > 0:
        out[LAG] = (gpu.request_lag_passes, err.lag_sd, 100.0)
    return out


def tail_sd(metric: str) -> float:
    """The serving engine's own error of a tail metric (p99) beyond what its factors' error
    gives it, as a relative standard deviation; 0 for every other metric."""
    return tails().get(metric, 0.0)


def tails() -> dict[str, float]:
    """Every tail metric's ``tail_sd``."""
    return dict(VLLM.tail_sd)


def distributions(design) -> dict[str, Uncertain]:
    """``spreads`` in the ``[hardware]`` distribution syntax."""
    out = {}
    for key, (mean, rel, highest) in spreads(design).items():
        sd = mean * rel
        out[key] = Uncertain("normal", low=max(mean - TRUNCATE * sd, 0.0),
                             high=min(mean + TRUNCATE * sd, highest), mean=mean, sd=sd)
    return out


def factors_at(design, u: float) -> dict[str, float]:
    """``design``'s model-error factors at quantile ``u`` of its speed (low: slow): each
    ``central x (1 + relative sd x z)``, z the standard normal's quantile at ``u`` (at ``1 - u``
    for the lag) within ``TRUNCATE``, and at most its highest value; ``u`` = 0.5 gives the
    central values exactly."""
    z = min(max(_NORMAL.inv_cdf(u), -TRUNCATE), TRUNCATE)
    return {k: min(max(c * (1.0 + rel * (z if k in SPEED else -z)), 0.0), highest)
            for k, (c, rel, highest) in spreads(design).items()}


def seed_quantile(seed: int) -> float:
    """The radical inverse in base 2 of ``seed + 1``: a point of (0, 1), evenly spread over the
    first seeds."""
    n, u, scale = seed + 1, 0.0, 0.5
    while n:
        u += scale * (n & 1)
        n >>= 1
        scale /= 2
    return u
