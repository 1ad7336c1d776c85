"""``sweep import``: ``sweep.workflows.importing`` with its arguments from the command line, and
the cases it wrote listed."""
from __future__ import annotations


def cmd_import(args) -> int:
    from sweep.errors import UsageError
    from sweep.workflows.importing import import_runs

    if not args.out:
        raise UsageError("--out: missing; allowed: a folder to write the cases into")
    res = import_runs(args.kind, args.files, args.out, gpu=args.gpu, model=args.model,
                      gpus=args.gpus, sets=args.set or (), force=args.force)
    print("\n".join(res.notes))
    n = len(res.cases)
    print(f"{n} case{'s' * (n != 1)} -> {args.out} (sweep validate {args.out})")
    return 0
