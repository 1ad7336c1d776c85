"""Request traces: replay measured arrivals and lengths from a CSV or Parquet file.

A trace has one row per request: an arrival time, prompt tokens and output tokens. Column names
are those of the public Azure LLM inference traces (``TIMESTAMP``, ``ContextTokens``,
``GeneratedTokens``; TIMESTAMP a date-time string such as ``2023-11-16 18:15:46.6805900`` or a
number of seconds) or plain ``arrival_s``, ``prompt_tokens``, ``output_tokens``. Arrivals are
taken relative to the earliest one; rows are sorted by arrival (stably). Token counts of 0 are
served as 1, as sampled lengths are (the engine needs at least one token of each).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.errors import FieldError
from sweep.files import FileRefused, check_table

#: Accepted column sets: (arrival, prompt, output).
COLUMN_SETS = (("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
               ("arrival_s", "prompt_tokens", "output_tokens"))
MAX_ROWS = 10_000_000  # like Workload.num_requests
MAX_TOKENS = 2**31 - 1


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace (compared and hashed by identity: a file read once serves every point)."""

    name: str  # as the config gave it
    arrival: np.ndarray  # float64 [R], seconds since the first arrival, sorted
    prompt: np.ndarray  # int32 [R]
    output: np.ndarray  # int32 [R]

    def count(self, time_scale: float, duration_s: float | None, num_requests: int | None) -> int:
        """Rows replayed: those arriving within ``duration_s`` (after scaling), at most
        ``num_requests`` of them."""
        n = len(self.arrival)
        if duration_s is not None:
            n = int(np.searchsorted(self.arrival * time_scale, duration_s, side="right"))
        return n if num_requests is None else min(n, num_requests)

    def rows(self, time_scale: float, n: int) -> tuple:
        """(arrival, prompt, output) of the first ``n`` rows, padded with never-arriving rows."""
        k = min(n, len(self.arrival))
        arrival = np.full(n, np.inf)
        arrival[:k] = self.arrival[:k] * time_scale
        prompt, output = np.ones(n, np.int32), np.ones(n, np.int32)
        prompt[:k], output[:k] = self.prompt[:k], self.output[:k]
        return arrival, prompt, output

    def mean_rate(self, time_scale: float, count: int) -> float:
        """Requests/s over the replayed rows (NaN for fewer than two, or all at once)."""
        span = (self.arrival[count - 1] - self.arrival[0]) * time_scale if count > 1 else 0.0
        return (count - 1) / span if span > 0 else math.nan


def _fail(path, what: str) -> FieldError:
    return FieldError("workload.trace", f"{path}: {what}")


def _read_table(path: Path):
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except Exception as exc:  # OSError, pandas' and pyarrow's parser errors: no common base
        raise _fail(path, f"cannot read ({type(exc).__name__}: {str(exc)[:120]})") from None
    raise _fail(path, f"unknown file type {suffix!r}; allowed: .csv, .parquet")


def _seconds(path, col, values) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        t = values.to_numpy(np.float64)
    else:
        try:
            stamps = pd.to_datetime(values, format="ISO8601", utc=True)
        except (ValueError, TypeError) as exc:
            raise _fail(path, f"column {col}: not seconds or date-times ({str(exc)[:80]}); "
                              "allowed: numbers or strings like 2023-11-16 18:15:46.6805900"
                        ) from None
        if stamps.isna().any():
            raise _fail(path, f"column {col}: row {int(np.argmax(stamps.isna()))} is empty")
        t = (stamps - stamps.min()).dt.total_seconds().to_numpy(np.float64)
    if not np.all(np.isfinite(t)):
        raise _fail(path, f"column {col}: row {int(np.argmax(~np.isfinite(t)))} is not a finite "
                          "number")
    return t - t.min()


def _tokens(path, col, values) -> np.ndarray:
    import pandas as pd

    x = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
    bad = ~(np.isfinite(x) & (x >= 0) & (x == np.floor(x)) & (x <= MAX_TOKENS))
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, f"column {col}: row {i} is {str(values.iloc[i])!r}; allowed: integers "
                          f"in [0, {MAX_TOKENS}]")
    return np.maximum(x, 1).astype(np.int32)


def load_trace(path: str | Path, name: str | None = None) -> Trace:
    """Read and check a trace file; every refusal is one ``ValueError`` line."""
    try:
        path = check_table(path, "a CSV or Parquet trace")
    except FileRefused as exc:
        raise _fail(exc.path, f"{exc.reason}; allowed: {exc.allowed}") from None
    df = _read_table(path)
    cols = next((c for c in COLUMN_SETS if all(k in df.columns for k in c)), None)
    if cols is None:
        have = ", ".join(map(str, list(df.columns)[:8]))
        raise _fail(path, f"missing columns (has: {have}); allowed: "
                          + " or ".join(", ".join(c) for c in COLUMN_SETS))
    if not 1 <= len(df) <= MAX_ROWS:
        raise _fail(path, f"{len(df)} rows; allowed: 1 to {MAX_ROWS}")
    t = _seconds(path, cols[0], df[cols[0]])
    prompt = _tokens(path, cols[1], df[cols[1]])
    output = _tokens(path, cols[2], df[cols[2]])
    order = np.argsort(t, kind="stable")
    return Trace(name if name is not None else str(path), t[order], prompt[order], output[order])
