"""``sweep calibrate`` and ``sweep validate``: the model against measurements, fitted or compared."""
from __future__ import annotations

import sys
from pathlib import Path

from sweep.commands.common import (UsageError, checked, out_file, out_folder,
                                   use_executable_cache, write_file)


def cmd_calibrate(args) -> int:
    from sweep.physics.models import get_model, load_hf_config
    from sweep.workflows.calibrate import FACTORS, fit, profile_text, read_measurements, roofline

    meas = Path(args.measurements)
    if meas.is_dir() or meas.suffix == ".toml":
        return _calibrate_serving(args, meas)
    for flag in ("gpu", "model"):
        if getattr(args, flag) is None:
            raise UsageError(f"--{flag}: required for measured pass times or latencies; allowed: "
                             "--gpu NAME --model NAME (not with validation cases)")
    model = checked(load_hf_config if args.model.endswith(".json") else get_model, args.model)
    gpu, tp = checked(roofline, args.gpu, model, args.gpus, args.weight_bits, args.kv_bits)
    out = out_file(Path(args.out) if args.out else meas.with_suffix(".profile.toml"), args.force)
    f = fit(tp, checked(read_measurements, meas, gpu.name, args.gpus, args.measured_model), gpu)
    print(f"{model.name} on {args.gpus} x {gpu.name}, {args.weight_bits}-bit weights: "
          f"compute_efficiency {f.compute_efficiency:.4f}, bandwidth_efficiency "
          f"{f.bandwidth_efficiency:.4f}, overhead_ms {f.overhead_ms:.4f}")
    print(f"fit: {f.n} measurements, R^2 {f.r2:.5f}, RMSE {f.rmse_ms:.4g} ms, max relative "
          f"error {100 * f.max_relative_error:.2f}%")
    for k in (k for k in FACTORS if k not in f.identified):
        print(f"note: no measurement depends on {k}; it keeps its default")
    _write_profile(out, profile_text(f, gpu.name, model.name, args.gpus, args.weight_bits,
                                     args.kv_bits, meas.name))
    print(f"-> {out} (name it in a config: [hardware] profile = \"{out.name}\")")
    return 0


def _calibrate_serving(args, meas: Path) -> int:
    """``sweep calibrate CASES``: the factors that best replay measured serving runs."""
    from sweep.workflows.serving_fit import fit_serving, gpu_params, gpu_value, profile_text
    from sweep.workflows.validate import load_cases

    if not 0 < args.duration < float("inf"):
        raise UsageError(f"--duration: {args.duration}; allowed: seconds > 0")
    cases = checked(load_cases, [meas], args.seeds)
    gpus = sorted({c.study.points[0].columns["gpu"] for c in cases})
    if len(gpus) != 1 or (args.gpu is not None and args.gpu != gpus[0]):
        raise UsageError(f"{meas}: cases on {', '.join(gpus)}; allowed: cases of one GPU"
                         + (f" ({args.gpu}, as --gpu says)" if args.gpu else ""))
    need = ("mean_e2e_s", "mean_ttft_s")
    for c in cases:
        missing = [m for m in need if m not in c.study.measured]
        if missing:
            raise UsageError(f"{c.path}: measured: lacks {', '.join(missing)}; allowed: cases "
                             f"measuring {', '.join(need)}")
    out = out_file(Path(args.out) if args.out else meas.with_suffix(".profile.toml"), args.force)
    params = gpu_params(cases)
    gpu = cases[0].study.points[0].design.gpu_spec
    f = fit_serving(cases, params, {p: gpu_value(gpu, p.key) for p in params},
                    duration=args.duration)
    print(f"{gpus[0]}, {f.cases} serving cases: " + ", ".join(
        f"{k} {v:.4g}" for k, v in f.factors().items()))
    print(f"fit: RMS relative error {100 * f.rms_e2e_error:.2f}% (end to end), "
          f"{100 * f.rms_ttft_error:.2f}% (TTFT)")
    _write_profile(out, profile_text(f, gpu, meas.name))
    print(f"-> {out} (name it in a config: [hardware] profile = \"{out.name}\")")
    return 0


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


def cmd_validate(args) -> int:
    from sweep.execution.progress import default_progress
    from sweep.workflows.validate import (DEFAULT_OUT, check_out, compare, load_cases, metadata,
                                         overloaded, plan, render, simulate, write)

    use_executable_cache()
    out = out_folder(Path(args.out) if args.out else DEFAULT_OUT)
    cases = checked(load_cases, args.cases, seeds=args.seeds)
    checked(check_out, out)
    runs = checked(plan, cases)
    if not args.quiet:
        print(f"sweep validate: {len(cases)} cases, "
              f"{sum(len(c.study.seeds) for c in cases)} simulations", file=sys.stderr)
    sims = simulate(cases, runs, None if args.quiet else default_progress())
    table = compare(cases, sims)
    print(render(table, overloaded(cases, sims)))
    try:
        paths = write(out, table, metadata(cases))
    except OSError as exc:
        raise UsageError(f"{out}: cannot write the report: {exc.strerror or exc}") from None
    print(f"-> {', '.join(paths)}")
    return 0
