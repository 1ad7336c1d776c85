"""``sweep plan``: ``sweep.workflows.plan`` with the question from the command line; the answer
printed, or with ``--write-config`` the config written and nothing run."""
from __future__ import annotations

from sweep.commands.common import reporting, use_executable_cache


def _number(flag: str, text, whole: bool):
    """A flag's text as a number (None where not given); a refusal names the flag."""
    from sweep.errors import UsageError, clip, one_line
    from sweep.workflows.plan import ALLOWED

    if text is None:
        return None
    try:
        return int(text) if whole else float(text)
    except ValueError:
        raise UsageError(f"{flag}: {clip(one_line(repr(text)), 40)} is not a number; allowed: "
                         f"{ALLOWED[flag]}") from None


def cmd_plan(args) -> int:
    from sweep.workflows.plan import Question, plan, write_config

    q = Question(model=args.model, gpu=args.gpu, isl=_number("--isl", args.isl, True),
                 osl=_number("--osl", args.osl, True),
                 ttft_ms=_number("--ttft-ms", args.ttft_ms, False),
                 tpot_ms=_number("--tpot-ms", args.tpot_ms, False),
                 rate=_number("--rate", args.rate, False),
                 concurrency=_number("--concurrency", args.concurrency, True),
                 gpus_max=_number("--gpus-max", args.gpus_max, True), sets=tuple(args.set or ()))
    if args.write_config:
        path = write_config(q, args.write_config, force=args.force)
        print(f"the plan's config -> {path} (run it with: sweep capacity {path})")
        return 0
    use_executable_cache()
    print(plan(q, args.out, force=args.force, **reporting(args.quiet)).text)
    return 0
