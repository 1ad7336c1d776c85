"""The case files a script writes: which are its own on disk, and writing or checking them, for
``make_cases.py``, ``make_closed_cases.py`` and ``make_engine_cases.py``. Standard library
only."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def parser(doc: str) -> argparse.ArgumentParser:
    """A case script's command line, with its ``--check``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the cases on disk differ from what would be "
                         "written")
    return ap


#: Of each group's rows in order, those at FIT_AT, FIT_AT + FIT_EVERY, ... are fitted.
FIT_EVERY, FIT_AT = 3, 1


def split(rows: list[dict], group, order, name, held=lambda key: False) -> dict[str, str]:
    """Case name (``name(row)``) -> "fit" or "holdout": rows grouped by ``group(row)``, each
    group sorted by ``order(row)``, the second of every three fitted, unless ``held(group)``."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(group(r), []).append(r)
    out = {}
    for key, members in sorted(groups.items()):
        for i, r in enumerate(sorted(members, key=order)):
            out[name(r)] = "fit" if not held(key) and i % FIT_EVERY == FIT_AT else "holdout"
    return out


def files(rows: list[dict], groups: dict[str, str], name, text, out: Path) -> dict[Path, str]:
    """Each row's case file (``out / group / NAME.toml``, NAME ``name(row)``, its group in
    ``groups``) -> its text, ``text(row, group, out)``."""
    return {out / groups[name(r)] / f"{name(r)}.toml": text(r, groups[name(r)], out)
            for r in rows}


def generated(out: Path, groups, header: str) -> list[Path]:
    """The case files under ``out``'s ``groups`` folders that begin with ``header``."""
    return sorted(p for g in groups for p in (out / g).glob("*.toml")
                  if p.read_text().startswith(header))


def sync(want: dict[Path, str], on_disk: list[Path], out: Path, script: str,
         check: bool) -> tuple[int, list[Path], list[Path]]:
    """Write ``want`` (path -> text) and remove the script's other files (``on_disk``), or,
    with ``check``, write nothing and say which differ. Returns (exit status, the files that
    differed, the stale ones)."""
    stale = [p for p in on_disk if p not in want]
    differ = [p for p, text in want.items() if not p.is_file() or p.read_text() != text]
    if check:
        for p in differ + stale:
            print(f"{p.relative_to(out)}: {'stale' if p in stale else 'out of date'}; rerun "
                  f"{script}", file=sys.stderr)
        if not differ and not stale:
            print(f"{len(want)} cases up to date")
        return (1 if differ or stale else 0), differ, stale
    for p in stale:
        p.unlink()
    for p, text in want.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)
    return 0, differ, stale


def main(argv: list[str] | None, doc: str, default: Path, build, on_disk, summary,
         script: str) -> int:
    """A case script's command: write (or ``--check``) the cases ``build(out)`` gives, as
    (path -> text, skipped rows by reason, kept rows), against ``on_disk(out)``, and print
    ``summary`` of them."""
    ap = parser(doc)
    ap.add_argument("--out", type=Path, default=default,
                    help=f"where fit/ and holdout/ are written (default: {script.rsplit('/', 1)[0]}"
                         f"/{default.name})")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    want, skipped, rows = build(out)
    code, differ, stale = sync(want, on_disk(out), out, script, args.check)
    if args.check:
        return code
    print(f"{len(want)} cases ({len(differ)} written, {len(stale)} removed)")
    print("\n".join(summary(want, skipped, rows)))
    return 0
