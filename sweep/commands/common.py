"""What every command shares: exit statuses, the one-line user error, the executables cache."""
from __future__ import annotations

import os
import sys
from pathlib import Path

EXIT_USAGE = 2
EXIT_TRUNCATED = 3


class UsageError(Exception):
    """Something the user can fix; printed as one line, exit status 2."""


def checked(fn, *args, **kwargs):
    """Run an input-validating call; its ValueError (ConfigError, ResultsError, a lever's own
    check) becomes a UsageError. Errors anywhere else keep their traceback: they are bugs."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class Truncated(Exception):
    """--strict: a simulation hit its step bound; exit status 3."""


class Stop:
    """SIGINT/SIGTERM handler: let the chunks in flight finish and be saved, then stop; a second
    signal stops at once (the saved chunks stay)."""

    def __init__(self):
        self.signum = None

    def __call__(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print("sweep run: stopping after the chunks in flight (again to stop now)",
              file=sys.stderr)


def device() -> str:
    from sweep.execution.runner import device_description

    return device_description()


def use_executable_cache() -> None:
    """Compiled executables persist across runs (the same shapes recompile in ~10 s each
    otherwise). Not JAX's persistent cache as well: what it loads cannot be written again."""
    from sweep.execution import executables

    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")
