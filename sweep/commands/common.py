"""What every command shares: exit statuses, the signal handler, the executables cache, and
where progress and notes go."""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

EXIT_USAGE = 2
EXIT_TRUNCATED = 3


class Stop:
    """SIGINT/SIGTERM handler: let the chunks in flight finish and be saved, then stop; a second
    signal stops at once (the saved chunks stay). The run then says what was saved in one line
    (Ctrl-C at a terminal first says it is stopping)."""

    def __init__(self):
        self.signum = None

    def __call__(self, signum, frame):
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        if signum == signal.SIGINT and sys.stderr.isatty():  # someone waits at the keyboard
            print("sweep run: stopping after the chunks in flight (again to stop now)",
                  file=sys.stderr)


def use_executable_cache() -> None:
    """Compiled executables persist across runs (the same shapes recompile in ~10 s each
    otherwise). Not JAX's persistent cache as well: what it loads cannot be written again."""
    from sweep.runtime import executables

    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")


def reporting(quiet: bool) -> dict:
    """The ``progress`` and ``echo`` a workflow takes: to stderr, or nothing under --quiet."""
    from sweep.execution.progress import default_progress

    if quiet:
        return {"progress": None, "echo": lambda line: None}
    return {"progress": default_progress(), "echo": lambda line: print(line, file=sys.stderr)}
