"""Reading a config's TOML values: where a key is in the text, so that every refusal names its
line, and the checks of values every section shares."""
from __future__ import annotations

import math
import re
from pathlib import Path

from sweep.errors import ConfigError, got, key_text, listed, show

_ARRAY_HEADER = re.compile(r"^\s*\[\[\s*([^\[\]]*?)\s*\]\]\s*(?:#.*)?$")
_TABLE_HEADER = re.compile(r"^\s*\[\s*([^\[\]]*?)\s*\]\s*(?:#.*)?$")


def _norm_header(s: str) -> str:
    return ".".join(p.strip().strip("\"'") for p in s.split("."))


class Locator:
    """Finds the line of a dotted key: the first ``key =`` in the right table (good enough)."""

    def __init__(self, text: str):
        self.lines = text.split("\n")  # TOML counts lines by "\n", as TOMLDecodeError does
        self.scope: list[tuple[str, int | None]] = []
        self.headers: list[tuple[int, str, int | None]] = []
        header, occ, counts = "", None, {}
        for i, line in enumerate(self.lines, 1):
            m = _ARRAY_HEADER.match(line)
            if m:
                header = _norm_header(m[1])
                occ = counts[header] = counts.get(header, -1) + 1
                self.headers.append((i, header, occ))
            else:
                m = _TABLE_HEADER.match(line)
                if m:
                    header, occ = _norm_header(m[1]), None
                    self.headers.append((i, header, None))
            self.scope.append((header, occ))

    def find(self, parts, index: int | None = None) -> int | None:
        parts = [str(p) for p in parts]
        for k in range(len(parts) - 1, -1, -1):
            header, key = ".".join(parts[:k]), re.escape(parts[k])
            pat = re.compile(rf"""^\s*(?:{key}|"{key}"|'{key}')\s*[=.]""")
            for i, line in enumerate(self.lines):
                h, occ = self.scope[i]
                if h == header and (index is None or k == 0 or occ in (None, index)) \
                        and pat.match(line):
                    return i + 1
            whole = ".".join(parts[:k + 1])
            for i, h, occ in self.headers:
                if h == whole and (index is None or occ in (None, index)):
                    return i
        return None


class Reader:
    """One config's text: its refusals (``err``) and the checks of single values."""

    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        self.loc = Locator(text)

    def err(self, parts, what: str, index: int | None = None) -> ConfigError:
        """A ConfigError for ``parts`` (a dotted key as a list; index: which [[exclude]])."""
        parts = [parts] if isinstance(parts, str) else list(parts)
        try:
            line = self.loc.find(parts, index)
        except Exception:  # never let the locator hide the real message
            line = None
        shown = list(parts)
        if index is not None and shown and shown[0] == "exclude":
            shown[0] = f"exclude[{index}]"
        key = key_text(shown)
        where = f"{self.path}:{line}" if line else f"{self.path}"
        return ConfigError(f"{where}: {key}: {what}", path=self.path, line=line, key=key,
                           reason=what)

    def resolve(self, rel: str) -> Path:
        """A path relative to the config file (to the current folder for text configs)."""
        base = Path.cwd() if self.path.startswith("<") else Path(self.path).parent
        p = Path(rel)
        return p if p.is_absolute() else base / p

    def number(self, parts, v) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(parts, f"must be a number, got {got(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise self.err(parts, f"must be a finite number, got {v}")
        try:
            return float(v)
        except OverflowError:
            raise self.err(parts, f"must be a finite number, got {show(v)}") from None

    def integer(self, parts, v) -> int:
        if isinstance(v, float) and not math.isfinite(v):
            raise self.err(parts, f"must be an integer, got {v}")
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.err(parts, f"must be an integer, got {got(v)}")
        return v

    def boolean(self, parts, v) -> bool:
        if not isinstance(v, bool):
            raise self.err(parts, f"must be true or false, got {got(v)}")
        return v

    def string(self, parts, v) -> str:
        if not isinstance(v, str):
            raise self.err(parts, f"must be a string, got {got(v)}")
        return v

    def table(self, parts, v, allowed) -> dict:
        if not isinstance(v, dict):
            raise self.err(parts, f"must be a table, got {got(v)}")
        for k in v:
            if k not in allowed:
                raise self.err(list(parts) + [k], f"unknown key; allowed: {listed(allowed)}")
        return v

    def choice(self, parts, v, options, more=""):
        if isinstance(v, bool) or v not in options:  # (True == 1)
            raise self.err(parts, f"{show(v)} is not allowed; allowed: {listed(options)}{more}")
        return v

    def distribution(self, parts, t: dict, dist, uses_of: dict):
        """A distribution table's kind (one of ``uses_of``) and the keys it uses; any other key
        is refused."""
        if not isinstance(dist, str) or dist not in uses_of:
            raise self.err(parts + ["dist"], f"unknown distribution {show(dist)}; allowed: "
                                             f"{', '.join(uses_of)}")
        uses = uses_of[dist]
        for k in t:
            if k != "dist" and k not in uses:
                raise self.err(parts + [k], f"does not apply to {dist}; allowed for {dist}: "
                                            f"dist, {', '.join(uses)}")
        return dist, uses
