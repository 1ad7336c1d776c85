"""What servesweep owns in a results folder, and nothing else.

A results folder holds servesweep's entries (its marker ``.servesweep``, its tables, ``parts/``,
``capacity-parts/``, the frontier's table and plots, the HTML report, and temporary files of
writes in flight) beside whatever the user keeps there (notes, scripts, plots of their own).
``--force`` removes or replaces only servesweep's entries: ``clear`` empties them in place, and
``replace_folder`` puts a rerun built beside the folder in its place with the user's entries
carried over.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
from pathlib import Path

#: The file whose presence says that a folder holds servesweep's results.
MARKER = ".servesweep"
PARTS = "parts"
CAPACITY_PARTS = "capacity-parts"
#: Where a rerun of finished results is built when the folder is a mount point (``staging``).
INSIDE = ".servesweep.new"
#: Every name servesweep writes at the top of a results folder.
OWNED = frozenset({
    MARKER, PARTS, CAPACITY_PARTS, INSIDE,
    *(f"{t}.parquet" for t in ("runs", "designs", "requests", "capacity", "fleet",
                                "mixed_fleet", "search", "frontier")),
    "frontier.png", "frontier.svg", "report.html"})
#: A write in flight (``.NAME.tmp-HOST-PID``, ``.NAME.tmp``) or a writability probe.
_TRANSIENT = re.compile(r"\..+\.tmp(-.+)?|\.servesweep-probe-\d+")


def owned(name: str) -> bool:
    """Whether the top-level entry ``name`` of a results folder is servesweep's."""
    return name in OWNED or _TRANSIENT.fullmatch(name) is not None


def mark(folder: Path, kind: str) -> None:
    """Say that ``folder`` holds servesweep's results of ``kind`` (``run`` or ``capacity``)."""
    from sweep.version import __version__

    text = json.dumps({"servesweep": __version__, "kind": kind,
                       "owned": sorted(OWNED)}, indent=1)
    tmp = folder / f".{MARKER}.tmp-{os.getpid()}"
    try:
        tmp.write_text(text + "\n")
        os.replace(tmp, folder / MARKER)
    finally:
        tmp.unlink(missing_ok=True)


def is_results(folder: Path) -> bool:
    """Whether ``folder`` holds servesweep's results, finished or not (the marker, or the tables
    and parts of a folder written before the marker existed)."""
    return any((folder / name).exists() for name in (
        MARKER, "runs.parquet", f"{PARTS}/manifest.json", "capacity.parquet", CAPACITY_PARTS))


def clear(folder: Path, keep: Path | None = None) -> None:
    """Remove servesweep's entries from ``folder`` (but ``keep``); the user's stay as they
    are."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if owned(entry.name) and entry != keep:
            _remove(entry)


def undo(work: Path, out: Path, existed: bool) -> str:
    """Remove what a fresh run or search wrote into ``work`` (``out``, or a rerun beside it),
    and ``out`` itself where it created it (``existed``: it was there before); says what is
    left."""
    if work != out:
        shutil.rmtree(work, ignore_errors=True)
        return "the finished results are as they were"
    clear(out)
    if not existed and out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    return "nothing was left behind"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def staging(out: Path) -> Path:
    """Where a rerun of the finished results in ``out`` is built, beside them, until it is
    complete (``replace_folder``): on the same filesystem, so inside a folder that is a mount
    point."""
    return out / INSIDE if os.path.ismount(out) else out.parent / f".{out.name}.new"


def replace_folder(new: Path, out: Path, last: str) -> None:
    """Put servesweep's entries of the complete folder ``new`` in the place of ``out``'s,
    keeping the user's entries of ``out``. Where it can, in one atomic swap of the folders, the
    user's files first hard-linked into ``new``: a kill at any moment leaves the old results or
    the new, and the user's files in ``out``. Elsewhere (no atomic swap, ``out`` a mount point,
    files that cannot be linked) entry by entry, ``last`` (the file that marks the results
    finished) removed first and written last, so that a kill leaves an unfinished folder that
    ``--resume`` or ``sweep merge`` completes."""
    swapped = False
    if new.parent != out:  # beside the folder, not inside it: the two can be swapped
        try:
            _carry(out, new)
            swapped = _exchange(new, out)
        except OSError:  # a file that cannot be linked: entry by entry, below
            swapped = False
    if swapped:
        trash = out.parent / f".{out.name}.old"
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(new, trash)  # no longer where a resume looks for a rerun
        shutil.rmtree(trash, ignore_errors=True)
        return
    (out / last).unlink(missing_ok=True)
    clear(out, keep=new)
    for entry in sorted(new.iterdir(), key=lambda e: e.name == last):
        if owned(entry.name):
            os.replace(entry, out / entry.name)
    shutil.rmtree(new, ignore_errors=True)


def _carry(old: Path, new: Path) -> None:
    """Hard-link the user's entries of ``old`` into ``new`` (folders rebuilt, links kept as
    links): the same files, reachable from both until the swap."""
    for entry in old.iterdir():
        if not owned(entry.name):
            _link_tree(entry, new / entry.name)


def _link_tree(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        dst.mkdir()
        shutil.copystat(src, dst)
        for entry in src.iterdir():
            _link_tree(entry, dst / entry.name)
    else:
        os.link(src, dst, follow_symlinks=False)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one atomic step (Linux's renameat2 with RENAME_EXCHANGE); False
    where the system has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        swap = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    return swap(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
