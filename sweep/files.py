"""A user's files, read safely: only a regular file, and only up to a size limit, so that a pipe
(which would be read forever), a device such as /dev/zero (which would fill memory) or a huge
file is refused in one line. Every refusal is a ``FileRefused`` (a ``ValueError``) naming the
path."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from sweep.errors import UsageError

#: A config, a profile, a case or a model's config.json is a few kilobytes; 16 MiB is far
#: beyond any of them and small enough to hold.
MAX_TEXT_BYTES = 16 * 2**20
#: Measurements and traces are tables: up to 1 GiB.
MAX_TABLE_BYTES = 2**30


class FileRefused(ValueError):
    """``PATH: reason; allowed: ...``, its parts kept for a caller that names a key."""

    def __init__(self, path: Path, reason: str, allowed: str):
        super().__init__(f"{path}: {reason}; allowed: {allowed}")
        self.path, self.reason, self.allowed = path, reason, allowed


def regular(path: str | Path, allowed: str) -> Path:
    """``path`` if it is a regular file (or a link to one); else one line saying what it is."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileRefused(path, "no such file", allowed) from None
    except (OSError, ValueError) as exc:
        raise FileRefused(path, f"cannot be read ({getattr(exc, 'strerror', None) or exc})",
                          allowed) from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a pipe, device or socket"
        raise FileRefused(path, f"is {kind}, not a regular file", allowed)
    return path


def read_bytes(path: str | Path, allowed: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """A regular file's bytes, refused beyond ``limit`` bytes."""
    path = regular(path, allowed)
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise FileRefused(path, f"cannot be read ({exc.strerror or exc})", allowed) from None
    if len(data) > limit:
        raise FileRefused(path, f"larger than {limit} bytes", allowed)
    return data


def read_text(path: str | Path, allowed: str, limit: int = MAX_TEXT_BYTES) -> str:
    """A regular file's UTF-8 text, refused beyond ``limit`` bytes."""
    data = read_bytes(path, allowed, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(path, f"not UTF-8 text (byte {exc.start})", allowed) from None


def check_table(path: str | Path, allowed: str, limit: int = MAX_TABLE_BYTES) -> Path:
    """A table file (CSV, Parquet, JSON) that a library will read: regular and at most
    ``limit`` bytes."""
    path = regular(path, allowed)
    if path.stat().st_size > limit:
        raise FileRefused(path, f"larger than {limit} bytes", allowed)
    return path


# --- where a command writes: refused before anything is written ---------------------------------
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
    writable(path.parent, flag)
    return path


def writable(path: Path, flag: str = "--out") -> Path:
    """Refuse, before anything is written, a folder this process cannot write into: ``path``,
    or where it does not exist yet the nearest folder above it, where it would be created. A
    probe file is created and removed, as a read-only mount or a missing permission shows only
    when a write is tried."""
    top = _ancestor(path)
    probe = top / f".servesweep-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{flag}: {path} cannot be written ({exc.strerror or exc}); allowed: "
                         "a folder this user may write") from None
    return path


def disk_refusal(exc: OSError, path: Path, flag: str = "--out", kept: str = "") -> UsageError:
    """A write that failed (a full disk, a folder made read-only meanwhile) as one line."""
    return UsageError(f"{flag}: {path} cannot be written ({exc.strerror or exc})"
                      + (f"; {kept}" if kept else "; nothing was left behind"))


def write_all(files: dict, flag: str = "--out") -> None:
    """Write every ``{path: write(binary file)}`` or none: each into a temporary sibling, then
    all renamed into place; a failure (a full disk) removes the temporary files and is one
    line."""
    temps = {}
    path = next(iter(files), Path("."))
    try:
        for path, write in files.items():
            temps[path] = tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            with open(tmp, "wb") as fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
        for path, tmp in temps.items():
            os.replace(tmp, path)
    except OSError as exc:
        for tmp in temps.values():
            tmp.unlink(missing_ok=True)
        raise disk_refusal(exc, path, flag) from None


def write_file(path: Path, text: str, flag: str = "--out") -> None:
    """``text`` into ``path`` whole: written beside it, then renamed over it."""
    make_folder(path.parent, flag)
    write_all({path: lambda fh: fh.write(text.encode())}, flag)
