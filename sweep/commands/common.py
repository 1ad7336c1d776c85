"""What every command shares: exit statuses, the one-line user error, the executables cache."""
from __future__ import annotations

import os
import signal
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


def _ancestor(path: Path) -> Path:
    """The nearest part of ``path`` that exists (itself included)."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            return p
    return Path(".")


def out_folder(path: Path, flag: str = "--out") -> Path:
    """A folder to write into, refused before anything is written when it is a file, lies
    under one, or cannot be created."""
    top = _ancestor(path)
    if not top.is_dir():
        where = "is" if top == path else f"lies under {top}, which is"
        raise UsageError(f"{flag}: {path} {where} not a folder; allowed: a new or existing "
                         "folder")
    return path


def make_folder(path: Path, flag: str = "--out") -> Path:
    out_folder(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag}: {path} cannot be created ({exc.strerror or exc}); allowed: "
                         "a folder this user may write") from None
    return path


def out_file(path: Path, force: bool, flag: str = "--out") -> Path:
    """A file to write, refused before anything is written when it is a folder or a special
    file, lies under a file, or exists without ``--force``."""
    if path.exists() or path.is_symlink():
        if not path.is_file():
            raise UsageError(f"{flag}: {path} is not a regular file; allowed: a new file, or an "
                             "existing one with --force")
        if not force:
            raise UsageError(f"{flag}: {path} already exists; use --force to overwrite")
    elif not _ancestor(path.parent).is_dir():
        raise UsageError(f"{flag}: {path} lies under {_ancestor(path.parent)}, which is not a "
                         "folder; allowed: a file path in a folder")
    return path


def write_file(path: Path, text: str, flag: str = "--out") -> None:
    """``text`` into ``path`` whole: written beside it, then renamed over it."""
    make_folder(path.parent, flag)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{flag}: {path} cannot be written ({exc.strerror or exc}); allowed: a "
                         "file this user may write") from None


class Truncated(Exception):
    """--strict: a simulation hit its step bound; exit status 3."""


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


def device() -> str:
    from sweep.execution.runner import device_description

    return device_description()


def use_executable_cache() -> None:
    """Compiled executables persist across runs (the same shapes recompile in ~10 s each
    otherwise). Not JAX's persistent cache as well: what it loads cannot be written again."""
    from sweep.runtime import executables

    cache = os.environ.get("SERVESWEEP_CACHE", Path.home() / ".cache" / "servesweep")
    executables.use(Path(cache) / "executables")
