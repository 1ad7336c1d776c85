"""What every ``sweep import`` reader shares: a measured run of a benchmark file, its fields read
(dotted keys into nested tables) and refused in one line naming the file and the field, and the
``[workload]`` lines and measured values a case takes from it."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import UsageError, clip, got, one_line
from sweep.files import MAX_TABLE_BYTES, FileRefused, read_text
from sweep.study import vllm_bench

#: A field the file does not have.
MISSING = object()


def load(path: Path, allowed: str) -> dict:
    """A file holding one JSON object (a tool's whole report), refused in one line naming it."""
    try:
        doc = json.loads(read_text(path, allowed, MAX_TABLE_BYTES))
    except FileRefused as exc:
        raise UsageError(f"{path}: {exc.reason}; allowed: {exc.allowed}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: not JSON ({clip(one_line(exc), 60)}); allowed: {allowed}") \
            from None
    if not isinstance(doc, dict):
        raise UsageError(f"{path}: a JSON {type(doc).__name__}, not an object; allowed: {allowed}")
    return doc


@dataclass(frozen=True)
class Run:
    """One measured run: the file as given, its line (None: not one a line), its table and
    where that sits in the file (``prefix`` of the fields a refusal names: GuideLLM's
    ``benchmarks.0.``)."""

    path: Path
    line: int | None
    doc: dict
    prefix: str = ""

    @property
    def where(self) -> str:
        return f"{self.path}" + (f": line {self.line}" if self.line else "")

    def refuse(self, key: str, why: str, allowed: str | None = None) -> UsageError:
        tail = f"; allowed: {allowed}" if allowed else ""
        return UsageError(f"{self.where}: field {self.prefix}{key}: {why}{tail}")

    def get(self, key: str, default=MISSING):
        """The field at dotted ``key``, a part of digits indexing an array; ``default`` where
        the file has none."""
        v = self.doc
        for part in key.split("."):
            if isinstance(v, dict) and part in v:
                v = v[part]
            elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
                v = v[int(part)]
            else:
                return default
        return v

    def number(self, key: str, low: float = 0.0, inclusive: bool = False) -> float:
        """The field ``key``: a finite number above ``low`` (at least it, ``inclusive``)."""
        v = self.get(key)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        x = float(v) if ok and abs(v) < 1e300 else math.nan
        if not (math.isfinite(x) and (x >= low if inclusive else x > low)):
            why = f"{_shown(v)}, not a finite number"
            raise self.refuse(key, f"{why} {'>=' if inclusive else '>'} {low:g}")
        return x

    def count(self, key: str, low: int = 1) -> int:
        """The field ``key``: a whole number in [``low``, 1e7] (a float of one, as AIPerf and
        GuideLLM write counts, included)."""
        v = self.get(key)
        whole = isinstance(v, float) and v.is_integer() and abs(v) < 1e300
        n = int(v) if whole else v
        if not (isinstance(n, int) and not isinstance(n, bool) and low <= n <= 10_000_000):
            raise self.refuse(key, f"{_shown(v)}, not an integer in [{low}, 10000000]")
        return n


def _shown(v) -> str:
    return "missing" if v is MISSING else "null" if v is None else got(v)


@dataclass
class Workload:
    lines: list[str]  # the [workload] table's lines
    what: str  # in words, for the notes
    trace: list[tuple[float, int, int]] | None = None  # rows of a trace beside the case
    reads_bench: bool = True  # a case that [measured] vllm_bench can take the file for


@dataclass
class Found:
    """A run as a case takes it: its workload, its measured values (metric -> value, and the
    field each was read from), the (field, value) pairs naming the model where the file states
    one, and its number among several runs of one file (None: the file's only run)."""

    run: Run
    wl: Workload
    measured: dict
    names: dict
    models: list = field(default_factory=list)
    number: int | None = None


def measured(run: Run, stats: dict) -> tuple[dict, dict]:
    """The run's statistics (field -> our metric, the field's units in one of the metric's) as
    measured values, each one a real server could have measured (``vllm_bench.plausible``);
    a field absent or null is left out. Also: metric -> the field it was read from."""
    values, names = {}, {}
    for key, (metric, per) in stats.items():
        if run.get(key, None) is None:
            continue
        value = run.number(key) / per
        why = vllm_bench.plausible(metric, value)
        if why:
            raise run.refuse(key, f"{got(run.get(key))}: {why}")
        values[metric], names[metric] = value, key
    return values, names


def open_loop(run: Run, rate: float, pattern: str, shape: str | None = None
              ) -> tuple[list[str], str]:
    """``[workload]`` lines of arrivals at ``rate``: "constant", "poisson", or "gamma" whose
    shape (vLLM's burstiness, AIPerf's smoothness: the field ``shape``) makes gaps of cv
    1/sqrt(shape); with the arrivals in words."""
    if pattern in ("constant", "poisson"):
        return [f"arrival = \"{pattern}\"", f"arrival_rate = {rate!r}"], {
            "constant": "even", "poisson": "Poisson"}[pattern]
    b = run.number(shape)
    if b < 0.01:
        raise run.refuse(shape, f"{b:g}: gaps of cv {1 / math.sqrt(b):.3g}",
                         "at least 0.01 (a cv of at most 10)")
    return ["arrival = \"gamma\"", f"arrival_rate = {rate!r}",
            f"arrival_cv = {1 / math.sqrt(b)!r}  # 1/sqrt({shape} {b:g})"], "Gamma"


def closed_loop(clients: int, n: int) -> Workload:
    return Workload(["arrival = \"closed\"", f"concurrency = {clients}", f"num_requests = {n}"],
                    f"closed loop: {clients} clients, {n} requests")


def fixed_lengths(run: Run, wl: Workload, why: str, means: list) -> Workload:
    """Prompt and output lengths fixed at the run's means, ``means`` their (value, the field
    read, how the case's comment shows it); ``why`` none is replayed, in the case's words."""
    wl.lines.append(f"# lengths fixed at the run's means: {why}")
    for key, (mean, source, shown) in zip(("prompt_tokens", "output_tokens"), means):
        if mean < 1:
            raise run.refuse(source, f"{shown}: below one token a request",
                             "at least one token a request")
        wl.lines.append(f"{key} = {{ dist = \"fixed\", mean = {round(mean, 3)!r} }}  # {shown}")
    return wl


def trace_rows(run: Run, key: str, fields: tuple[str, str, str], n: int
               ) -> list[tuple[float, int, int]] | None:
    """Each request's (send time since the first, prompt and output tokens) from the list at
    ``key`` whose entries hold them in ``fields``, where it lists all ``n`` requests (a sample
    of them replays nothing)."""
    rows = run.get(key, None)
    if not (isinstance(rows, list) and len(rows) == n):
        return None
    out = []
    for i in range(n):
        at, p, o = (f"{key}.{i}.{f}" for f in fields)
        out.append((run.number(at, inclusive=True), run.count(p, 0), run.count(o, 0)))
    first = min(t for t, _, _ in out)
    return [(t - first, p, o) for t, p, o in out]
