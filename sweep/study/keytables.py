"""The key tables of README.md and docs/config.md, generated from the declarations.

``python -m sweep.study.keytables`` prints them (``--markdown``, the default), ``--write``
puts them into README.md and docs/config.md, ``--check`` exits 1 when a file's tables differ
from the declarations (the tests run it). README's tables are the short form (a few words per
key); docs/config.md's the full one.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sweep.study.declarations import Field
from sweep.study.fields import KEYS, SECTIONS, Range
from sweep.study.uncertainty import FACTORS

REPO = Path(__file__).resolve().parents[2]
#: file -> whether its tables are the short form
FILES = {"README.md": True, "docs/config.md": False}
_TITLES = {"model": " (one of)"}  # what the short form's header says beside the section
_KIND_WORDS = {"num": "number", "int": "integer", "bool": "", "str": "string", "path": "path",
               "lengths": "length table", "trace": "path"}


def _num(v) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


def _interval(r: Range) -> str:
    if r.hi == float("inf"):
        return f"{'>' if r.lo_open else '>='} {_num(r.lo)}"
    return f"{'(' if r.lo_open else '['}{_num(r.lo)}, {_num(r.hi)}]"


def _literal(v, short: bool) -> str:
    if isinstance(v, bool):
        v = "true" if v else "false"
    return str(v) if short or not isinstance(v, str) else f"`{v}`"


#: Choices the README lists whole at most; of more, it shows the first few.
SHORT_CHOICES, SHOWN_CHOICES = 8, 4


def values(f: Field, short: bool) -> str:
    """What a value may be: the choices, or its kind, range and unit."""
    if f.choices and short and f.values:  # the README says what they are, the docs list them
        return f.values
    if f.choices and short and len(f.choices) > SHORT_CHOICES:  # the docs list them all
        shown = ", ".join(_literal(c, short) for c in f.choices[:SHOWN_CHOICES])
        return f"{shown}, ... ([all](docs/config.md))"
    if f.choices:
        return ", ".join(_literal(c, short) for c in f.choices)
    if f.kind == "bool":
        return ", ".join(_literal(b, short) for b in (True, False))
    if short:
        text = f.unit or f.values or (_interval(f.range) if f.range else _KIND_WORDS[f.kind])
    else:
        text = f.values or _KIND_WORDS[f.kind]
        if f.range and not f.values:
            text += (" " if f.range.hi == float("inf") else " in ") + _interval(f.range)
        text += f", {f.unit}" if f.unit and not f.values else ""
    return text + (", or a distribution" if f.key in FACTORS else "")


def default(f: Field, short: bool) -> str:
    if f.shown:
        return f.shown
    if f.gpu_default:
        return "the GPU's"
    v = f.config_default
    if v is None:
        return "unset"
    if f.kind == "lengths":
        return f"{v.dist} {v.mean:g}" if short else f'`{{ dist = "{v.dist}", mean = {v.mean:g} }}`'
    return f"{v:g}" if isinstance(v, float) else _literal(v, short)


def table(section: str, short: bool) -> list[str]:
    """One section's table, a line per key in declaration order; the short form gives the
    factors fitted per GPU or engine one line, where the first of them is declared (few
    planners set them; docs/config.md has each), and a pool's pair of keys one line."""
    first = f"`[{section}]`{_TITLES.get(section, '')}" if short else "key"
    rows = [f"| {first} | values | default | meaning |", "| --- | --- | --- | --- |"]
    fitted = [f for f in KEYS[section].values() if short and f.fitted]
    keys = KEYS[section]
    for f in keys.values():
        # The pools' pairs share a line in the short form: the prefill key's says it of both.
        pair = f"decode_{f.key.removeprefix('prefill_')}"
        leads = short and f.key.startswith("prefill_") and pair in keys
        follows = (short and f.key.startswith("decode_")
                   and f"prefill_{f.key.removeprefix('decode_')}" in keys)
        if f is (fitted[0] if fitted else None):
            names = ", ".join(f"`{g.key}`" for g in fitted)
            rows.append(f"| {names} | shares of peaks, times ([each](docs/config.md#hardware)) "
                        "| the GPU's | the fitted factors and host terms |")
        elif leads:
            rows.append(f"| `{f.key}`, `{pair}` | {values(f, short)} | {default(f, short)} | "
                        f"{f.short} |")
        elif f not in fitted and not follows:
            meaning = f.short if short else f.help
            rows.append(f"| `{f.key}` | {values(f, short)} | {default(f, short)} | {meaning} |")
    return rows


def _table_at(lines: list[str], section: str, short: bool) -> tuple[int, int]:
    """Where a section's table is: README's starts with its header, docs/config.md's is the
    first table under the section's heading."""
    if short:
        mark = f"| `[{section}]`"
        start = next(i for i, line in enumerate(lines) if line.startswith(mark))
    else:
        head = lines.index(f"### `[{section}]`")
        start = next(i for i in range(head, len(lines)) if lines[i].startswith("|"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return start, end


def render(text: str, short: bool) -> str:
    """``text`` with every declared section's table generated anew."""
    lines = text.split("\n")
    for section in SECTIONS:
        start, end = _table_at(lines, section, short)
        lines[start:end] = table(section, short)
    return "\n".join(lines)


def stale(repo: Path = REPO) -> list[str]:
    """The files whose tables differ from the declarations."""
    return [name for name, short in FILES.items()
            if render((repo / name).read_text(), short) != (repo / name).read_text()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sweep.study.keytables", description=__doc__)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--markdown", action="store_true", help="print the tables (the default)")
    what.add_argument("--write", action="store_true", help="update README.md and docs/config.md")
    what.add_argument("--check", action="store_true", help="exit 1 if either file is stale")
    p.add_argument("--short", action="store_true", help="print README's short form")
    args = p.parse_args(argv)
    if args.check:
        for name in stale():
            print(f"{name}: key tables differ from sweep/study/fields.py; run python -m "
                  "sweep.study.keytables --write", file=sys.stderr)
        return 1 if stale() else 0
    if args.write:
        for name, short in FILES.items():
            path = REPO / name
            path.write_text(render(path.read_text(), short))
        return 0
    print("\n\n".join("\n".join(table(s, args.short)) for s in SECTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
