"""``sweep capacity``: ``sweep.workflows.capacity_study`` with its arguments from the command
line, progress, and the answer printed."""
from __future__ import annotations

from sweep.commands.common import reporting, use_executable_cache


def cmd_capacity(args) -> int:
    from sweep.analysis.capacity_report import render_capacity
    from sweep.workflows.capacity_study import capacity

    use_executable_cache()
    res = capacity(args.config, args.out, seeds=args.seeds, target_rate=args.target_rate,
                   resume=args.resume, force=args.force, **reporting(args.quiet))
    if res.kept:
        print(f"{res.folder}: the search is complete; its tables are kept (--force runs it "
              "again)")
    else:
        print(f"{len(res.capacity)} designs x {len(res.meta['seeds'])} seeds: {res.simulations} "
              f"simulations in {res.seconds:.1f} s on {res.meta['device']} -> {res.folder}")
    print(render_capacity(res.capacity, res.fleet, res.meta, mixed=res.mixed))
    return 0
