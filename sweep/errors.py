"""Refusals as data: what was refused (key, value) and why (reason, allowed), rendered as one line.

``FieldError`` is what a declaration (``sweep.study.fields``), a design or a workload refuses;
``ConfigError`` is a refused config file, with its path and line. Both are ``ValueError``s whose
``str()`` is one printable line, so the CLI prints them as they are.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import re

_NO_VALUE = object()


class FieldError(ValueError):
    """A refused value: ``str(err)`` is ``key: reason`` plus ``; allowed: ...`` when ``allowed``
    is given (otherwise the reason says what would do)."""

    def __init__(self, key: str, reason: str, allowed: str | None = None, value=_NO_VALUE):
        self.key, self.reason, self.allowed, self.value = key, reason, allowed, value
        tail = "" if allowed is None else f"; allowed: {allowed}"
        super().__init__(f"{key}: {reason}{tail}")

    @property
    def parts(self) -> list[str]:
        """The dotted key as a list (``levers.gpus`` -> ``["levers", "gpus"]``)."""
        return self.key.split(".")


class DoesNotFit(FieldError):
    """The design's model does not fit in its memory: a grid skips such a design, not refuses it."""


class ConfigError(ValueError):
    """A refused config. ``str(err)`` is one line: ``PATH:LINE: key: what; allowed: ...``."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 key: str | None = None, reason: str | None = None):
        super().__init__(fit_line(one_line(message)))
        self.path, self.line, self.key, self.reason = path, line, key, reason


def one_line(s) -> str:
    """Escape every character that could break a line (newlines, U+2028, controls)."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(s))


#: The longest refusal line a command prints, in characters.
LINE_MAX = 300

# A path with at least one folder: its folders (group 1) and its name (group 2).
_PATH = re.compile(r"((?<![^\s'\"(=])[^\s/:;,'\"()]*(?:/[^\s/:;,'\"()]+)*/)([^\s/:;,'\"()]+)")


def fit_line(line: str, n: int = LINE_MAX) -> str:
    """A refusal within ``n`` characters: first the long folders of each path it names go (the
    file's own name stays, so the key and the file are still named), then the line is clipped."""
    if len(line) <= n:
        return line
    line = _PATH.sub(lambda m: m.group(0) if len(m.group(1)) <= 12 else ".../" + m.group(2), line)
    return clip(line, n)


def clip(s: str, n: int = 60) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


#: Values a refusal lists at most; the rest are in the docs.
LISTED = 8


def listed(values, docs: str = "docs/config.md", near: str | None = None) -> str:
    """Allowed values for a refusal: up to ``LISTED`` of them, those closest to the value given
    (``near``) first, then where the rest are."""
    values = [str(v) for v in values]
    if near is not None:
        close = difflib.get_close_matches(str(near), values, n=LISTED, cutoff=0.5)
        values = close + [v for v in values if v not in close]
    if len(values) <= LISTED:
        return ", ".join(values)
    return ", ".join(values[:LISTED]) + f", ... ({len(values)} in all: {docs})"


_BARE = re.compile(r"[A-Za-z0-9_-]+(?:\[\d+\])?")


def key_text(parts) -> str:
    """A dotted key as a message shows it: odd parts quoted and clipped."""
    out = []
    for p in parts:
        p = str(p)
        out.append(p if _BARE.fullmatch(p) else '"' + clip(one_line(p), 40) + '"')
    return ".".join(out)


#: TOML value types and how a message names them; bool before int, which it subclasses.
_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"),
          (dict, "a table"), (list, "an array"),
          ((_dt.datetime, _dt.date, _dt.time), "a date/time"))


def kind(v) -> str:
    """What sort of TOML value ``v`` is, with its article."""
    return next((name for t, name in _KINDS if isinstance(v, t)), type(v).__name__)


def show(v) -> str:
    """A short, one-line rendering of a TOML value for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v) if abs(v) < 10**40 else f"an integer of {len(str(abs(v)))} digits"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return clip(one_line(repr(v)))
    return kind(v)


def got(v) -> str:
    """``kind value`` for scalars, the kind alone for tables and arrays."""
    return f"{kind(v)} {show(v)}" if isinstance(v, (bool, int, float, str)) else kind(v)


class UsageError(ValueError):
    """Something the user can fix: one line; a command exits with status 2."""


def checked(fn, *args, **kwargs):
    """Run an input-validating call; its ValueError (ConfigError, ResultsError, a lever's own
    check) becomes a UsageError. Errors anywhere else keep their traceback: they are bugs."""
    try:
        return fn(*args, **kwargs)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


class Truncated(Exception):
    """A strict run (``--strict``) whose simulation hit its step bound; exit status 3."""
