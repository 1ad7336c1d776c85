"""``sweep calibrate`` and ``sweep validate``: ``sweep.workflows.calibration`` and
``sweep.workflows.validate`` with their arguments from the command line, and what they found
printed."""
from __future__ import annotations

from sweep.commands.common import reporting, use_executable_cache


def cmd_calibrate(args) -> int:
    from sweep.workflows.calibration import calibrate

    cal = calibrate(args.measurements, args.out, gpu=args.gpu, model=args.model,
                    gpus=args.gpus, weight_bits=args.weight_bits, kv_bits=args.kv_bits,
                    measured_model=args.measured_model, duration=args.duration,
                    seeds=args.seeds, force=args.force)
    print("\n".join(cal.summary))
    print(f"-> {cal.profile} (name it in a config: [hardware] profile = \"{cal.profile.name}\")")
    return 0


def cmd_validate(args) -> int:
    from sweep.workflows.validate import validate

    use_executable_cache()
    res = validate(args.cases, args.out, seeds=args.seeds, resume=args.resume,
                   **reporting(args.quiet))
    print(res.text)
    print(f"-> {', '.join(res.paths)}")
    return 0
