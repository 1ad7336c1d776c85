"""Calibration: fit the roofline's efficiency factors and per-pass overhead to measurements.

``sweep calibrate MEASUREMENTS.csv --gpu G --model M`` reads measured times in one of two forms:

- pass times: ``prefill_tokens, decode_seqs, context_tokens, seconds`` (the arguments of
  ``timing.pass_time``), optionally ``prefill_pairs`` (query-key pairs of the prefill; default
  ``L (L + 1) / 2``, one prompt of ``L = prefill_tokens``);
- request latencies measured one request at a time on an idle server: ``prompt_tokens,
  output_tokens, ttft_s, e2e_s``. TTFT is then one prefill pass, and ``e2e_s - ttft_s`` the sum
  of ``output_tokens - 1`` single-sequence decode passes over a growing context;
- static-batch times as the Splitwise simulator publishes them (``perf_model.csv``: ``model,
  hardware, tensor_parallel, prompt_size, batch_size, token_size, prompt_time, token_time``, in
  ms): the rows of the ``--gpu`` (``h100-80gb`` is H100-SXM, ``a100-80gb`` A100-80GB) at
  ``--gpus``; each gives a prefill pass of ``batch_size`` prompts and a decode step of
  ``batch_size`` sequences at their mean context, ``prompt_size + token_size / 2``.

It fits ``compute_efficiency``, ``bandwidth_efficiency`` (each in (0, 1]) and ``overhead_ms``
(>= 0) by least squares on relative errors (a 0.1 ms pass counts as much as a 100 ms one):
the roofline's ``max()`` makes the model piecewise linear in (1/eff_c, 1/eff_b, overhead), so
each iteration fixes which passes are compute-bound, solves the linear least squares, and
repeats until no pass changes side (from a few starts; the best fit is kept). A factor no pass
depends on (no compute-bound pass, say) is not identified and keeps its default.

``sweep calibrate CASES`` (a validation case, or a folder of them: configs of one design with a
``[measured]`` table of at least mean TTFT and end-to-end latency, as ``validation/make_cases.py``
writes from measured vLLM runs) fits to serving runs instead (``sweep.workflows.serving_fit``).

The result is a hardware profile (TOML) that a config names with ``[hardware] profile``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.errors import clip, listed, one_line
from sweep.files import check_table
from sweep.physics.hardware import CATALOG, GPU, get_gpu
from sweep.physics.timing import (allreduce_time, pass_time, pass_work, serial_expert_work,
                                  timing_params)
from sweep.study.fields import GPUS, KV_BITS, WEIGHT_BITS
from sweep.study.vllm_bench import DAY_S

PASS_COLUMNS = ("prefill_tokens", "decode_seqs", "context_tokens", "seconds")
REQUEST_COLUMNS = ("prompt_tokens", "output_tokens", "ttft_s", "e2e_s")
SPLITWISE_COLUMNS = ("hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size",
                     "prompt_time", "token_time")
#: Splitwise's hardware names for catalog GPUs.
SPLITWISE_GPUS = {"H100-SXM": "h100-80gb", "A100-80GB": "a100-80gb"}
FACTORS = ("compute_efficiency", "bandwidth_efficiency", "overhead_ms")
MAX_ITERATIONS = 100
MAX_DECODE_PASSES = 10_000_000  # request rows expand to this many passes at most


@dataclass(frozen=True)
class Passes:
    """Measured observations, each the time of one or more passes: pass ``j`` belongs to
    observation ``obs[j]``; ``seconds[i]`` is observation ``i``'s measured total."""

    obs: np.ndarray  # int64 [P]
    prefill_tokens: np.ndarray  # float64 [P]
    prefill_pairs: np.ndarray  # float64 [P]
    decode_seqs: np.ndarray  # float64 [P]
    context_tokens: np.ndarray  # float64 [P]
    seconds: np.ndarray  # float64 [O]


@dataclass(frozen=True)
class Fit:
    compute_efficiency: float
    bandwidth_efficiency: float
    overhead_ms: float
    identified: tuple[str, ...]  # factors the data determine (the others kept their default)
    n: int  # observations
    r2: float  # of the measured seconds
    rmse_ms: float
    max_relative_error: float
    predicted: np.ndarray  # seconds per observation

    def factors(self) -> dict:
        return {k: getattr(self, k) for k in FACTORS}


def _fail(path, what: str) -> ValueError:
    return ValueError(f"{path}: {what}")


#: The most a column may hold: a time at most one day (``vllm_bench.DAY_S``: a pass or a request
#: slower than that is a unit mix-up or a corrupt file), a count of tokens, sequences or
#: requests at most 1e12 (a thousand times a batch of a thousand 1e6-token contexts); a value
#: beyond them would make the fit's arithmetic overflow or run without end.
_HIGH = {"seconds": DAY_S, "ttft_s": DAY_S, "e2e_s": DAY_S, "prompt_time": DAY_S * 1e3,
         "token_time": DAY_S * 1e3}
MAX_COUNT = 1e12


def _column(df, path, name, integer: bool, low: float) -> np.ndarray:
    import pandas as pd

    try:
        x = pd.to_numeric(df[name], errors="coerce").to_numpy(np.float64)
    except OverflowError:  # an integer beyond float64: infinite, refused below
        x = np.array([float(str(v)) if str(v).lstrip("-").isdigit() else np.nan
                      for v in df[name]])
    high = _HIGH.get(name, MAX_COUNT)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(x) & (x >= low) & (x <= high)) | (
            (x != np.floor(x)) if integer else False)
    if bad.any():
        i = int(np.argmax(bad))
        kind = "an integer" if integer else "a number"
        raise _fail(path, f"column {name}: row {i} is {clip(repr(str(df[name].iloc[i])), 30)}; "
                          f"allowed: {kind} >= {low:g} and <= {high:g}")
    return x


def read_measurements(path: str | Path, gpu: str | None = None, gpus: int = 1,
                      model: str | None = None) -> Passes:
    """The measurements CSV as observations of passes; every refusal is one ``ValueError``.
    ``gpu``, ``gpus`` and ``model`` (the file's model column) select a Splitwise file's rows."""
    import pandas as pd

    path = check_table(path, "a CSV of pass times, request latencies or Splitwise's "
                             "perf_model.csv")
    try:
        df = pd.read_csv(path)
    except Exception as exc:  # OSError, pandas' parser errors: no common base
        raise _fail(path, f"cannot read ({type(exc).__name__}: {str(exc)[:120]})") from None
    if all(c in df.columns for c in PASS_COLUMNS):
        pre = _column(df, path, "prefill_tokens", True, 0)
        seqs = _column(df, path, "decode_seqs", True, 0)
        ctx = _column(df, path, "context_tokens", True, 0)
        sec = _column(df, path, "seconds", False, 0)
        pairs = (_column(df, path, "prefill_pairs", True, 0) if "prefill_pairs" in df.columns
                 else pre * (pre + 1) / 2)
        empty = (pre == 0) & (seqs == 0)
        if empty.any():
            raise _fail(path, f"row {int(np.argmax(empty))}: a pass with no prefill and no "
                              "decode; allowed: prefill_tokens or decode_seqs > 0")
        passes = Passes(np.arange(len(df)), pre, pairs, seqs, ctx, sec)
    elif all(c in df.columns for c in REQUEST_COLUMNS):
        passes = _request_passes(df, path)
    elif all(c in df.columns for c in SPLITWISE_COLUMNS):
        passes = _splitwise_passes(_splitwise_rows(df, path, gpu, gpus, model), path)
    else:
        raise _fail(path, f"missing columns (has: {clip(one_line(', '.join(map(str, df.columns[:8]))), 40)}); "
                          f"allowed: {', '.join(PASS_COLUMNS)}, or request latencies or "
                          "Splitwise's perf_model.csv (docs/running.md)")
    if len(passes.seconds) < len(FACTORS):
        raise _fail(path, f"{len(passes.seconds)} measurements; allowed: at least "
                          f"{len(FACTORS)} to fit {len(FACTORS)} factors")
    if not (passes.seconds > 0).all():
        raise _fail(path, f"measurement {int(np.argmax(passes.seconds <= 0))} takes no time; "
                          "allowed: times > 0")
    return passes


def _request_passes(df, path) -> Passes:
    p = _column(df, path, "prompt_tokens", True, 1)
    o = _column(df, path, "output_tokens", True, 1)
    ttft = _column(df, path, "ttft_s", False, 0)
    e2e = _column(df, path, "e2e_s", False, 0)
    if (e2e < ttft).any():
        raise _fail(path, f"row {int(np.argmax(e2e < ttft))}: e2e_s < ttft_s; allowed: "
                          "e2e_s >= ttft_s")
    if (o - 1).sum() > MAX_DECODE_PASSES:
        raise _fail(path, f"{int((o - 1).sum())} decode passes; allowed: at most "
                          f"{MAX_DECODE_PASSES}")
    n = len(df)
    dec = o > 1  # a one-token request has no decode observation
    n_dec = (o[dec] - 1).astype(np.int64)
    dec_obs = n + np.arange(dec.sum())
    # decode pass g = 1 .. o-1 of a request reads p + g cached tokens
    start = np.repeat(np.cumsum(n_dec) - n_dec, n_dec)
    g = np.arange(n_dec.sum()) - start + 1
    zeros = np.zeros(n)
    return Passes(
        obs=np.concatenate([np.arange(n), np.repeat(dec_obs, n_dec)]),
        prefill_tokens=np.concatenate([p, np.zeros(len(g))]),
        prefill_pairs=np.concatenate([p * (p + 1) / 2, np.zeros(len(g))]),
        decode_seqs=np.concatenate([zeros, np.ones(len(g))]),
        context_tokens=np.concatenate([zeros, np.repeat(p[dec], n_dec) + g]),
        seconds=np.concatenate([ttft, (e2e - ttft)[dec]]))


def _splitwise_rows(df, path, gpu, gpus, model):
    """The rows of one GPU, tensor-parallel degree and model of a Splitwise file."""
    import pandas as pd

    if gpu not in SPLITWISE_GPUS:
        raise _fail(path, f"Splitwise measurements name no {gpu}; allowed: --gpu "
                          f"{', '.join(SPLITWISE_GPUS)}")
    rows = df[(df["hardware"] == SPLITWISE_GPUS[gpu])
              & (pd.to_numeric(df["tensor_parallel"], errors="coerce") == gpus)]
    if "model" in df.columns:
        names = sorted(map(str, rows["model"].unique()))
        if model is None and len(names) > 1:
            raise _fail(path, f"rows of {len(names)} models; allowed: --measured-model "
                              f"{', '.join(names)}")
        if model is not None:
            if model not in names:
                raise _fail(path, f"--measured-model {model!r} has no rows for {gpu} at "
                                  f"--gpus {gpus}; allowed: {', '.join(names) or 'none'}")
            rows = rows[rows["model"] == model]
    if rows.empty:
        raise _fail(path, f"no rows for {gpu} ({SPLITWISE_GPUS[gpu]}) at tensor_parallel "
                          f"{gpus}")
    return rows.reset_index(drop=True)


def _splitwise_passes(df, path) -> Passes:
    prompt = _column(df, path, "prompt_size", True, 1)
    batch = _column(df, path, "batch_size", True, 1)
    out = _column(df, path, "token_size", True, 0)
    prefill_s = _column(df, path, "prompt_time", False, 0) * 1e-3
    decode_s = _column(df, path, "token_time", False, 0) * 1e-3
    n = len(df)
    zeros = np.zeros(n)
    return Passes(
        obs=np.arange(2 * n),
        prefill_tokens=np.concatenate([prompt * batch, zeros]),
        prefill_pairs=np.concatenate([batch * prompt * (prompt + 1) / 2, zeros]),
        decode_seqs=np.concatenate([zeros, batch]),
        context_tokens=np.concatenate([zeros, batch * (prompt + out / 2)]),
        seconds=np.concatenate([prefill_s, decode_s]))


def roofline(gpu_name: str, model, gpus: int = 1, weight_bits: int = 16, kv_bits: int = 16):
    """The GPU and its timing parameters at full efficiency and no overhead (what the factors
    scale), decode attention inside the roofline, the levers checked like a design's."""
    gpu = get_gpu(gpu_name)
    if gpu.timing != "roofline":
        raise ValueError(f"--gpu: {gpu.name} uses a measured linear timing model, not the "
                         "roofline; allowed: " + listed(n for n, g in CATALOG.items()
                                                        if g.timing == "roofline"))
    for flag, value, options in (("--gpus", gpus, GPUS), ("--weight-bits", weight_bits,
                                                          WEIGHT_BITS), ("--kv-bits", kv_bits,
                                                                         KV_BITS)):
        if value not in options:
            raise ValueError(f"{flag}: {value} is not allowed; allowed: "
                             f"{', '.join(map(str, options))}")
    if gpus > 1 and gpu.interconnect_gbs <= 0:
        raise ValueError(f"--gpus: {gpu.name} has no tensor-parallel interconnect; allowed: 1")
    return gpu, timing_params(model, gpu, gpus=gpus, weight_bits=weight_bits, kv_bits=kv_bits,
                              compute_efficiency=1.0, bandwidth_efficiency=1.0,
                              kv_bandwidth_efficiency=1.0, decode_attention_efficiency=0.0,
                              overhead_ms=0.0)


def _terms(tp, m: Passes):
    """Per pass: seconds at full compute efficiency, at full bandwidth efficiency, and of
    all-reduces, decode attention and per-sequence host time (the parts of ``timing.pass_time``
    the factors scale, and the rest; no speculation); then the seconds of a dequantising expert
    kernel's products and reads, which add to the larger of the first two."""
    tokens = m.prefill_tokens + m.decode_seqs
    own = tp.decode_attn_s_per_flop > 0.0
    decode_pairs = m.context_tokens * tp.decode_attn_ratio
    flops, weights, kv = pass_work(tp, tokens, m.prefill_pairs + (0.0 if own else decode_pairs),
                                   m.context_tokens)
    kv = kv + tp.seq_bytes * m.decode_seqs
    products, reads = serial_expert_work(tp, tokens, weights)
    fixed = (allreduce_time(tp, tokens)
             + tp.attn_flops_per_pair * decode_pairs * tp.decode_attn_s_per_flop
             + tp.seq_overhead_s * m.decode_seqs)
    return (flops / tp.flops_per_s - products,
            weights / tp.bytes_per_s - reads + kv / tp.kv_bytes_per_s, fixed, products, reads)


def _solve(terms, m: Passes, x0, w):
    """Regime iteration from ``x0`` = (1/eff_c, 1/eff_b, overhead_s); returns (x, used)."""
    a, b, c, serial_a, serial_b = terms
    x = np.array(x0, dtype=np.float64)
    n_obs = len(m.seconds)
    lo = np.array([1.0, 1.0, 0.0])
    regime = None
    used = np.zeros(3, bool)
    for _ in range(MAX_ITERATIONS):
        compute = a * x[0] >= b * x[1]
        if regime is not None and np.array_equal(compute, regime):
            break
        regime = compute
        cols = np.stack([np.bincount(m.obs, np.where(compute, a, 0.0) + serial_a, n_obs),
                         np.bincount(m.obs, np.where(compute, 0.0, b) + serial_b, n_obs),
                         np.bincount(m.obs, np.ones_like(a), n_obs)], axis=1)
        rhs = m.seconds - np.bincount(m.obs, c, n_obs)
        used = np.abs(cols).sum(axis=0) > 0
        free = used.copy()
        for _ in range(3):  # clamp a factor that leaves its range, refit the others
            fixed = cols[:, ~free] @ x[~free]
            sol, *_ = np.linalg.lstsq(cols[:, free] * w[:, None], (rhs - fixed) * w, rcond=None)
            x[free] = sol
            out = free & (x < lo)
            if not out.any():
                break
            x[out] = lo[out]
            free &= ~out
    return x, used


def _predict(tp, m: Passes, x) -> np.ndarray:
    fitted = tp._replace(flops_per_s=tp.flops_per_s / x[0], bytes_per_s=tp.bytes_per_s / x[1],
                         kv_bytes_per_s=tp.kv_bytes_per_s / x[1],
                         overhead_s=x[2])
    per_pass = pass_time(fitted, m.prefill_tokens, m.prefill_pairs, m.decode_seqs,
                         m.context_tokens)
    return np.bincount(m.obs, per_pass, len(m.seconds))


#: A measurement may be this much faster than the roofline's lower bound and no more: the
#: bound (peak FLOP/s or bandwidth, whichever binds, no overhead) counts the model's work
#: slightly differently from any kernel, but no GPU beats its peak by 10%.
ROOFLINE_SLACK = 0.9


def check_physical(tp, m: Passes, path, gpu_name: str) -> None:
    """Refuse a measurement faster than the GPU's peak allows for this model and these flags
    (then no efficiency at most 1 fits: a wrong GPU, model or precision, or a unit mix-up)."""
    a, b, *_ = _terms(tp, m)
    bound = np.bincount(m.obs, np.maximum(a, b), len(m.seconds))
    fast = m.seconds < ROOFLINE_SLACK * bound
    if fast.any():
        i = int(np.argmax(fast))
        raise _fail(path, f"measurement {i} takes {m.seconds[i]:.4g} s, under the {gpu_name}'s "
                          f"roofline ({bound[i]:.4g} s at its peak FLOP/s and bandwidth for "
                          "this model and --gpus, --weight-bits, --kv-bits); allowed: "
                          "measurements of this model on this GPU, as the flags state")


def fit(tp, m: Passes, gpu: GPU) -> Fit:
    """Least-squares factors for timing parameters ``tp`` from ``roofline``; a factor no
    measurement depends on keeps ``gpu``'s default."""
    terms = _terms(tp, m)
    w = 1.0 / m.seconds
    default = (1 / gpu.compute_efficiency, 1 / gpu.bandwidth_efficiency, gpu.overhead_ms * 1e-3)
    best = None
    for start in (default, (1 / 0.3, 1 / 0.5, 0.0), (1 / 0.9, 1 / 0.95, 1e-3)):
        x, used = _solve(terms, m, start, w)
        x[~used] = np.array(default)[~used]
        err = float(np.sum(((_predict(tp, m, x) - m.seconds) * w) ** 2))
        if best is None or err < best[0]:
            best = (err, x, used)
    _, x, used = best
    pred = _predict(tp, m, x)
    y = m.seconds
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((pred - y) ** 2)) / ss_tot if ss_tot > 0 else math.nan
    return Fit(compute_efficiency=float(1 / x[0]), bandwidth_efficiency=float(1 / x[1]),
               overhead_ms=float(x[2] * 1e3),
               identified=tuple(f for f, u in zip(FACTORS, used) if u), n=len(y), r2=r2,
               rmse_ms=float(np.sqrt(np.mean((pred - y) ** 2)) * 1e3),
               max_relative_error=float(np.max(np.abs(pred - y) / y)), predicted=pred)


def profile_text(f: Fit, gpu: str, model: str, gpus: int, weight_bits: int, kv_bits: int,
                 source: str) -> str:
    """The hardware profile: ``[hardware]`` keys a config takes, and ``[fit]`` for the record."""
    return "\n".join([
        f"# servesweep hardware profile, written by 'sweep calibrate' from {source}",
        "[hardware]",
        f'gpu = "{gpu}"',
        f"compute_efficiency = {f.compute_efficiency!r}",
        f"bandwidth_efficiency = {f.bandwidth_efficiency!r}",
        f"overhead_ms = {f.overhead_ms!r}",
        "decode_attention_efficiency = 0.0  # the fitted roofline's: decode attention inside it",
        "",
        "[fit]  # not read by configs",
        f'model = "{model}"',
        f"gpus = {gpus}",
        f"weight_bits = {weight_bits}",
        f"kv_bits = {kv_bits}",
        f"measurements = {f.n}",
        "identified = [" + ", ".join(f'"{k}"' for k in f.identified) + "]",
        f"r2 = {f.r2!r}" if math.isfinite(f.r2) else "r2 = nan",
        f"rmse_ms = {f.rmse_ms!r}",
        f"max_relative_error = {f.max_relative_error!r}",
        "",
    ])
