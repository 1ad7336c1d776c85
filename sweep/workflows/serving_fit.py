"""Fit the pass-time factors and the request's time outside the passes to measured serving runs.

A case is a validation case (``sweep.workflows.validate``): one design and a workload, with the
latencies a real server measured. The factors that change a simulation (``SIMULATED``: the
roofline's efficiencies, the host's costs per pass and per sequence, the all-reduce latency) are
fitted by a bounded Levenberg-Marquardt search whose Jacobian is taken by finite differences: each
iteration simulates every case at the current factors and at one step of each factor it depends
on, as one vectorised sweep per case (the product's own use). The time a request spends outside
the passes (``request_overhead_ms + request_lag_passes x mean TPOT``, which changes no pass) is
solved at every evaluation by non-negative least squares on the TTFT metrics; its time per
prompt token (``prompt_overhead_us``, which only long prefills identify) stays the design's.
The objective is the squared relative error of the measured mean and median end-to-end latency
(mean TPOT for a case that measured neither: a closed-loop benchmark's), plus half weight on
TTFT's.

A factor is shared by every case, or belongs to some GPUs (``Param.gpus``) and is fitted on
their cases only: ``validation/fit.py`` fits the serving engine's host terms on every GPU's runs
together and each GPU's efficiencies on its own.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: The metrics fitted: the centre of each distribution. The tails' spread comes from what the
#: factors do not set (jitter, the real lengths' spread), and is left to the model error.
E2E = ("mean_e2e_s", "p50_e2e_s")
TTFT = ("mean_ttft_s", "p50_ttft_s")
TPOT = ("mean_tpot_ms",)  # no time outside the passes: every token is equally late
TTFT_WEIGHT = 0.5
#: Factors a simulation depends on: (lowest, highest, finite-difference step). A step moves a
#: run's latencies by 1-2%: beyond the discreteness of its passes (smaller steps make a noisy
#: Jacobian), and small enough that the fit lands within about 1% of a factor's best value.
SIMULATED = {
    "compute_efficiency": (0.05, 1.0, 0.02),
    "bandwidth_efficiency": (0.05, 1.0, 0.015),
    "kv_bandwidth_efficiency": (0.05, 1.0, 0.015),
    "decode_attention_efficiency": (0.002, 1.0, 0.005),
    "overhead_ms": (0.0, 50.0, 0.15),
    "seq_overhead_us": (0.0, 1000.0, 2.0),
    "allreduce_latency_us": (0.0, 1000.0, 1.5),
    "allreduce_bandwidth_efficiency": (0.01, 1.0, 0.03),
}
MAX_ITERATIONS = 12


@dataclass(frozen=True)
class Param:
    """A fitted factor: shared by every case (``gpus`` empty) or by the cases on these GPUs."""

    key: str
    gpus: tuple[str, ...] = ()

    def applies(self, case) -> bool:
        """Does ``case``'s simulation depend on it? (The all-reduce only under tensor
        parallelism.)"""
        design = case.study.points[0].design
        if self.gpus and design.gpu_spec.name not in self.gpus:
            return False
        return not self.key.startswith("allreduce") or design.gpus > 1

    def __str__(self) -> str:
        return self.key if not self.gpus else f"{self.key} ({', '.join(self.gpus)})"


@dataclass(frozen=True)
class ServingFit:
    values: dict  # Param -> fitted value
    outside: dict  # request_overhead_ms, request_lag_passes -> value
    rms_e2e_error: float  # relative, over the cases and their measured E2E metrics
    rms_ttft_error: float  # relative, over the cases and their measured TTFT metrics
    cases: int
    iterations: int

    def factors(self, gpu: str | None = None) -> dict:
        """Key -> value of the shared factors and ``gpu``'s, and the outside terms."""
        out = {p.key: v for p, v in self.values.items() if not p.gpus or gpu in p.gpus}
        return {**out, **self.outside}


def measured_metrics(case) -> tuple[list[str], list[str]]:
    """The end-to-end (or, where a case measured none, mean TPOT: a closed-loop benchmark's)
    and TTFT metrics a case measured."""
    m = case.study.measured
    e2e = [k for k in E2E if k in m] or [k for k in TPOT if k in m]
    return e2e, [k for k in TTFT if k in m]


def _settings_study(case, settings: list[dict], duration: float | None, seeds):
    """A case's study as one sweep over ``settings`` (factor values) at the central factors
    (no model error), nothing outside the passes but the time per prompt token, its arrivals
    cut to ``duration`` seconds where given."""
    (point,) = case.study.points
    wl = point.workload
    if duration is not None and wl.duration_s is not None:
        wl = dataclasses.replace(wl, duration_s=min(duration, wl.duration_s))
    points = []
    for s in settings:
        factors = {**s, "request_overhead_ms": 0.0, "request_lag_passes": 0.0}
        points.append(dataclasses.replace(point, design=point.design.replace(**factors),
                                          workload=wl, columns={**point.columns, **factors}))
    return dataclasses.replace(case.study, points=points, axes=[], brief=[], model_error=False,
                               max_designs=max(case.study.max_designs, len(points)),
                               seeds=case.study.seeds if seeds is None else list(range(seeds)))


def simulate_settings(cases, settings: list[list[dict]], duration=None, seeds=None,
                      progress=None, metrics=E2E + TTFT) -> list[pd.DataFrame]:
    """Per case, the mean over seeds of ``metrics`` and mean TPOT (no time outside the
    passes but the time per prompt token), one row per setting."""
    from sweep.execution.runner import run_study

    keys = list(metrics) + ["mean_tpot_ms"]
    out = []
    for case, mine in zip(cases, settings):
        runs = run_study(_settings_study(case, mine, duration, seeds), progress=progress).runs
        out.append(runs.groupby("design", sort=True)[keys].mean().reset_index(drop=True))
    return out


def outside_terms(rows: list[pd.Series], cases) -> np.ndarray:
    """(request_overhead_s, request_lag_passes), non-negative, that best close the relative
    TTFT gaps: ``predicted + overhead + lag x mean TPOT = measured``."""
    a, gap = [], []
    for row, case in zip(rows, cases):
        for m in measured_metrics(case)[1]:
            meas = case.study.measured[m]
            a.append([1.0 / meas, row["mean_tpot_ms"] * 1e-3 / meas])
            gap.append((meas - row[m]) / meas)
    if not a:
        return np.zeros(2)
    a, gap = np.array(a), np.array(gap)
    x = np.linalg.lstsq(a, gap, rcond=None)[0]
    if (x < 0).any():  # one term alone, the better of the two
        fits = []
        for j in range(2):
            one = np.zeros(2)
            one[j] = max(0.0, float(np.linalg.lstsq(a[:, [j]], gap, rcond=None)[0][0]))
            fits.append(one)
        x = min(fits, key=lambda f: float(np.sum((a @ f - gap) ** 2)))
    return x


def residuals(rows: list[pd.Series], cases, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relative errors of the measured E2E and TTFT metrics with the outside terms ``x``."""
    e2e, ttft = [], []
    for row, case in zip(rows, cases):
        extra = x[0] + x[1] * row["mean_tpot_ms"] * 1e-3
        e_keys, t_keys = measured_metrics(case)
        e2e += [(row[m] + (0.0 if m in TPOT else extra)) / case.study.measured[m] - 1
                for m in e_keys]
        ttft += [(row[m] + extra) / case.study.measured[m] - 1 for m in t_keys]
    return np.array(e2e), np.array(ttft)


def _objective(rows, cases) -> tuple[np.ndarray, np.ndarray]:
    """(weighted residual vector, outside terms) of one evaluation."""
    x = outside_terms(rows, cases)
    e2e, ttft = residuals(rows, cases, x)
    return np.concatenate([e2e, math.sqrt(TTFT_WEIGHT) * ttft]), x


def fit_serving(cases, params: list[Param], start: dict, duration=None, seeds=None,
                progress=None, iterations: int = MAX_ITERATIONS) -> ServingFit:
    """The values of ``params`` (from ``start``: Param -> value) and the outside terms that
    best replay ``cases``. Each case must measure mean E2E and mean TTFT."""
    uses = [[j for j, p in enumerate(params) if p.applies(c)] for c in cases]
    lo = np.array([SIMULATED[p.key][0] for p in params])
    hi = np.array([SIMULATED[p.key][1] for p in params])
    step = np.array([SIMULATED[p.key][2] for p in params])
    theta = np.clip(np.array([start[p] for p in params], dtype=np.float64), lo, hi)

    def setting(values, case_params):
        return {params[j].key: float(values[j]) for j in case_params}

    def evaluate(values):
        """Rows at ``values`` and at one step of each factor a case depends on."""
        steps = []
        for mine in uses:
            base = setting(values, mine)
            moved = []
            for j in mine:
                v = values.copy()
                v[j] = v[j] + step[j] if v[j] + step[j] <= hi[j] else v[j] - step[j]
                moved.append(setting(v, mine))
            steps.append([base] + moved)
        return simulate_settings(cases, steps, duration, seeds, progress)

    def jacobian(values, tables, r0):
        jac = np.zeros((len(r0), len(params)))
        for j in range(len(params)):
            rows = [t.iloc[1 + mine.index(j)] if j in mine else t.iloc[0]
                    for t, mine in zip(tables, uses)]
            h = step[j] if values[j] + step[j] <= hi[j] else -step[j]
            jac[:, j] = (_objective(rows, cases)[0] - r0) / h
        return jac

    tables = evaluate(theta)
    r, x = _objective([t.iloc[0] for t in tables], cases)
    jac = jacobian(theta, tables, r)
    damping, done = 1e-2, 0
    for done in range(1, iterations + 1):
        g = jac.T @ r
        a = jac.T @ jac
        delta = np.linalg.solve(a + damping * np.diag(np.diag(a) + 1e-12), -g)
        trial = np.clip(theta + delta, lo, hi)
        if np.all(np.abs(trial - theta) < 0.1 * step):
            break
        trial_tables = evaluate(trial)
        r_new, x_new = _objective([t.iloc[0] for t in trial_tables], cases)
        if r_new @ r_new < r @ r:
            theta, tables, r, x = trial, trial_tables, r_new, x_new
            jac = jacobian(theta, tables, r)
            damping = max(damping / 3, 1e-4)
        else:
            damping *= 5
    e2e, ttft = residuals([t.iloc[0] for t in tables], cases, x)
    return ServingFit(values={p: float(v) for p, v in zip(params, theta)},
                      outside={"request_overhead_ms": float(x[0] * 1e3),
                               "request_lag_passes": float(x[1])},
                      rms_e2e_error=float(np.sqrt(np.mean(e2e ** 2))),
                      rms_ttft_error=float(np.sqrt(np.mean(ttft ** 2))) if len(ttft) else
                      math.nan, cases=len(cases), iterations=done)


def gpu_params(cases) -> list[Param]:
    """What ``sweep calibrate CASES`` fits on one GPU's cases: the host's costs per pass and
    per decoding sequence, the weights' and the KV cache's bandwidth efficiency, and under
    tensor parallelism the all-reduce's latency and share of the link."""
    keys = ["overhead_ms", "seq_overhead_us", "bandwidth_efficiency", "kv_bandwidth_efficiency"]
    if any(c.study.points[0].design.gpus > 1 for c in cases):
        keys += ["allreduce_latency_us", "allreduce_bandwidth_efficiency"]
    return [Param(k) for k in keys]


def gpu_value(gpu, key: str) -> float:
    """A GPU's own value of a factor (its KV cache's read efficiency: the weights' if it has
    none of its own)."""
    v = getattr(gpu, key)
    return float(gpu.bandwidth_efficiency if v is None else v)


def profile_text(fit: ServingFit, gpu, source: str, engine: str = "vllm") -> str:
    """A hardware profile (``[hardware] profile``) from a fit on one GPU's cases of one serving
    engine; the factors it did not fit are the GPU's (as that engine drives it)."""
    factors = fit.factors()
    return "\n".join([
        f"# servesweep hardware profile, written by 'sweep calibrate' from {source}",
        "[hardware]",
        f'gpu = "{gpu.name}"',
        f'engine = "{engine}"  # whose runs fitted its host terms',
        f"compute_efficiency = {gpu.compute_efficiency!r}  # the GPU's (not fitted)",
        *(f"{k} = {v!r}" for k, v in factors.items()),
        "",
        "[fit]  # not read by configs",
        f"cases = {fit.cases}",
        f"rms_e2e_error = {fit.rms_e2e_error!r}",
        f"rms_ttft_error = {fit.rms_ttft_error!r}",
        "",
    ])
