"""``sweep calibrate`` from Python: measurements (pass times, request latencies, Splitwise's
file, or validation cases of measured serving runs) -> the fitted factors, written as a
hardware profile that a config can name, only if its own reader would take it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import UsageError, checked
from sweep.files import out_file, write_file


@dataclass
class Calibration:
    """A fit and the profile it wrote."""

    profile: Path
    factors: dict  # config key -> fitted value
    summary: list[str] = field(default_factory=list)  # what the fit found, a line each


def calibrate(measurements, out=None, *, gpu: str | None = None, model: str | None = None,
              gpus: int = 1, weight_bits: int = 16, kv_bits: int = 16,
              measured_model: str | None = None, duration: float = 120.0,
              seeds: int | None = None, force: bool = False) -> Calibration:
    """Fit the factors to ``measurements`` and write them to ``out`` (default: the
    measurements' name with ``.profile.toml``). A folder or ``.toml`` is validation cases of
    one GPU (``duration``, ``seeds``); else a CSV needs ``gpu`` and ``model``. A refusal,
    including a fit outside the ranges a profile may hold, is a one-line ``UsageError``; nothing
    is written then."""
    meas = Path(measurements)
    default = meas.with_suffix(".profile.toml")
    if meas.is_dir() or meas.suffix == ".toml":
        return _serving(meas, Path(out) if out else default, gpu, duration, seeds, force)
    from sweep.physics.catalog import get_model
    from sweep.physics.hf_config import load_hf_config
    from sweep.workflows.calibrate import (FACTORS, check_physical, fit, profile_text,
                                           read_measurements, roofline)

    for flag, value in (("gpu", gpu), ("model", model)):
        if value is None:
            raise UsageError(f"--{flag}: required for measured pass times or latencies; allowed: "
                             "--gpu NAME --model NAME (not with validation cases)")
    spec = checked(load_hf_config if model.endswith(".json") else get_model, model)
    chip, tp = checked(roofline, gpu, spec, gpus, weight_bits, kv_bits)
    out = out_file(Path(out) if out else default, force)
    passes = checked(read_measurements, meas, chip.name, gpus, measured_model)
    checked(check_physical, tp, passes, meas, chip.name)
    f = fit(tp, passes, chip)
    factors = {"compute_efficiency": f.compute_efficiency,
               "bandwidth_efficiency": f.bandwidth_efficiency, "overhead_ms": f.overhead_ms}
    summary = [f"{spec.name} on {gpus} x {chip.name}, {weight_bits}-bit weights: "
               + ", ".join(f"{k} {v:.4f}" for k, v in factors.items()),
               f"fit: {f.n} measurements, R^2 {f.r2:.5f}, RMSE {f.rmse_ms:.4g} ms, max relative "
               f"error {100 * f.max_relative_error:.2f}%"]
    summary += [f"note: no measurement depends on {k}; it keeps its default"
                for k in FACTORS if k not in f.identified]
    _write_profile(out, profile_text(f, chip.name, spec.name, gpus, weight_bits, kv_bits,
                                     meas.name))
    return Calibration(out, factors, summary)


def _serving(meas: Path, out: Path, gpu: str | None, duration: float, seeds: int | None,
             force: bool) -> Calibration:
    """The factors that best replay measured serving runs (validation cases of one GPU)."""
    from sweep.workflows.serving_fit import fit_serving, gpu_params, gpu_value, profile_text
    from sweep.workflows.validate import load_cases

    if not 0 < duration < float("inf"):
        raise UsageError(f"--duration: {duration}; allowed: seconds > 0")
    cases = checked(load_cases, [meas], seeds)
    gpus = sorted({c.study.points[0].columns["gpu"] for c in cases})
    if len(gpus) != 1 or (gpu is not None and gpu != gpus[0]):
        raise UsageError(f"{meas}: cases on {', '.join(gpus)}; allowed: cases of one GPU"
                         + (f" ({gpu}, as --gpu says)" if gpu else ""))
    engines = sorted({c.study.points[0].design.engine for c in cases})
    if len(engines) != 1:
        raise UsageError(f"{meas}: cases of the engines {', '.join(engines)}; allowed: cases of "
                         "one serving engine (hardware.engine), a profile each")
    need = ("mean_e2e_s", "mean_ttft_s")
    for c in cases:
        missing = [m for m in need if m not in c.study.measured]
        if missing:
            raise UsageError(f"{c.path}: measured: lacks {', '.join(missing)}; allowed: cases "
                             f"measuring {', '.join(need)}")
    out = out_file(out, force)
    params = gpu_params(cases)
    spec = cases[0].study.points[0].design.gpu_spec
    f = fit_serving(cases, params, {p: gpu_value(spec, p.key) for p in params},
                    duration=duration)
    factors = f.factors()
    summary = [f"{gpus[0]}, {f.cases} serving cases of {engines[0]}: "
               + ", ".join(f"{k} {v:.4g}" for k, v in factors.items()),
               f"fit: RMS relative error {100 * f.rms_e2e_error:.2f}% (end to end), "
               f"{100 * f.rms_ttft_error:.2f}% (TTFT)"]
    _write_profile(out, profile_text(f, spec, meas.name, engines[0]))
    return Calibration(out, factors, summary)


def _write_profile(out: Path, text: str) -> None:
    """Write a fitted profile only if a config could name it: a fit outside the ranges the
    config reader allows (measurements far slower than the GPU) is refused, naming the factor."""
    from sweep.study.profile import parse_profile

    try:
        parse_profile(text, out)
    except ValueError as exc:
        raise UsageError(f"{exc}; the fit is refused and nothing written (check --gpu, --model "
                         "and --gpus against the measurements)") from None
    write_file(out, text)
