"""Request traces: replay measured arrivals and lengths from a CSV, Parquet or JSONL file.

A trace has one row per request: an arrival time, prompt tokens and output tokens. Column names
are those of the public Azure LLM inference traces (``TIMESTAMP``, ``ContextTokens``,
``GeneratedTokens``; TIMESTAMP a date-time string such as ``2023-11-16 18:15:46.6805900`` or a
number of seconds), those of the public Mooncake traces (``timestamp`` in milliseconds,
``input_length``, ``output_length``) or plain ``arrival_s``, ``prompt_tokens``,
``output_tokens``; any of them in any of the formats. JSONL has one JSON object a line, as
Mooncake publishes its traces. Arrivals are taken relative to the earliest one; rows are sorted
by arrival (stably). Token counts of 0 are served as 1, as sampled lengths are (the engine needs
at least one token of each).

A trace may also name each row's prompt blocks (column ``hash_ids``: a list, or a string like
``[0, 14, 15]`` or ``0 14 15``): equal ids mean equal block content after an equal prefix, so a
cache holding a block could serve it again. Mooncake's blocks are 512 tokens, the last one
partial; the ids are kept as given, with nothing assumed about the block size.
"""
from __future__ import annotations

import json
import math
import re
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sweep.errors import FieldError
from sweep.files import FileRefused, check_table

#: Accepted column sets: (arrival, prompt, output).
COLUMN_SETS = (("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
               ("timestamp", "input_length", "output_length"),
               ("arrival_s", "prompt_tokens", "output_tokens"))
MILLISECONDS = frozenset({"timestamp"})  # arrival columns counted in ms (Mooncake's)
HASH_COLUMN = "hash_ids"
MOONCAKE_BLOCK_TOKENS = 512  # prompt tokens per hash id in the Mooncake traces
MAX_ROWS = 10_000_000  # like Workload.num_requests
MAX_TOKENS = 2**31 - 1
MAX_HASH_ID = 2**31 - 1
MAX_ROW_HASHES = 2**20  # a 512-million-token prompt in Mooncake's blocks
MAX_HASHES = 2**26  # every row's ids together: 512 MiB as int64
_HASHES_ALLOWED = (f"a list of integers in [0, {MAX_HASH_ID}] like [0, 14, 15] or 0 14 15, "
                   "[] for none")
_DIGITS = re.compile(r"[0-9]{1,10}")
_JSON_KINDS = {"list": "an array", "str": "a string", "int": "a number", "float": "a number",
               "bool": "a boolean", "NoneType": "null"}


@dataclass(frozen=True, eq=False)
class Trace:
    """A loaded trace (compared and hashed by identity: a file read once serves every point)."""

    name: str  # as the config gave it
    arrival: np.ndarray  # float64 [R], seconds since the first arrival, sorted
    prompt: np.ndarray  # int32 [R]
    output: np.ndarray  # int32 [R]
    #: Prompt block ids, ragged: row r's are hash_flat[hash_offsets[r]:hash_offsets[r + 1]].
    #: Both None when the file has no hash column; read-only, as every point shares them.
    hash_flat: np.ndarray | None = None  # int64 [T]
    hash_offsets: np.ndarray | None = None  # int64 [R + 1]

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

    def hashes(self, n: int) -> list[np.ndarray] | None:
        """The block ids of the first ``n`` rows (read-only views), rows beyond the trace
        empty; None when the file states none, which is not the same as no cacheable block."""
        if self.hash_flat is None or self.hash_offsets is None:
            return None
        k, off = min(n, len(self.arrival)), self.hash_offsets
        return ([self.hash_flat[off[r]:off[r + 1]] for r in range(k)]
                + [self.hash_flat[:0]] * (n - k))

    def mean_rate(self, time_scale: float, count: int) -> float:
        """Requests/s over the replayed rows (NaN for fewer than two, or all at once)."""
        span = (self.arrival[count - 1] - self.arrival[0]) * time_scale if count > 1 else 0.0
        return (count - 1) / span if span > 0 else math.nan


def _fail(path, what: str) -> FieldError:
    return FieldError("workload.trace", f"{path}: {what}")


def _parse_ids(value):
    """A row's ids as a list or an integer array; None when ``value`` is not a list of integers
    in range. An over-long row comes back unchecked, to be refused for its length."""
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "iu":
        ok = value.size == 0 or (int(value.min()) >= 0 and int(value.max()) <= MAX_HASH_ID)
        return value if ok or value.size > MAX_ROW_HASHES else None
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind == "O":
        value = value.tolist()  # a Parquet list with missing or mixed elements
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            text = text[1:-1].strip()
        # split before converting, so that a huge row is refused for its length
        value = [t.strip() for t in text.split(",")] if "," in text else text.split()
        if len(value) > MAX_ROW_HASHES:
            return value
        if not all(_DIGITS.fullmatch(t) for t in value):
            return None
        value = [int(t) for t in value]
    elif not isinstance(value, (list, tuple)):
        return None  # a number, an empty cell, an object
    if len(value) > MAX_ROW_HASHES:
        return value
    ok = all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
             and 0 <= x <= MAX_HASH_ID for x in value)
    return value if ok else None


class _Hashes:
    """Rows' block ids, checked a row at a time into a compact buffer (a large file's ids never
    sit in Python lists all at once)."""

    def __init__(self, path):
        self.path, self.flat, self.offsets = path, array("q"), array("q", [0])

    def add(self, where: str, value) -> None:
        ids = _parse_ids(value)
        if ids is None:
            shown = str(value) if len(str(value)) <= 60 else str(value)[:57] + "..."
            raise _fail(self.path, f"column {HASH_COLUMN}: {where} is {shown!r}; allowed: "
                                   + _HASHES_ALLOWED)
        if len(ids) > MAX_ROW_HASHES:
            raise _fail(self.path, f"column {HASH_COLUMN}: {where} has {len(ids)} ids; allowed: "
                                   f"at most {MAX_ROW_HASHES} a row")
        total = len(self.flat) + len(ids)
        if total > MAX_HASHES:
            raise _fail(self.path, f"column {HASH_COLUMN}: {where} brings the ids to {total}; "
                                   f"allowed: at most {MAX_HASHES} in all")
        if isinstance(ids, np.ndarray):
            self.flat.frombytes(ids.astype(np.int64).tobytes())
        else:
            self.flat.extend(ids)
        self.offsets.append(total)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.frombuffer(self.flat, np.int64).copy(),
                np.frombuffer(self.offsets, np.int64).copy())


def _jsonl_objects(path: Path):
    """(row, object) for each line of a JSONL file; row r is line r + 1, so a blank line is
    refused unless only blank lines follow it."""
    allowed = ('one JSON object a line, like {"timestamp": 0, "input_length": 6758, '
               '"output_length": 500, "hash_ids": [0, 1, 2]}')
    blank = None
    try:
        with open(path, encoding="utf-8") as fh:
            for row, line in enumerate(fh):
                if not line.strip():
                    blank = row if blank is None else blank
                    continue
                if blank is not None:
                    raise _fail(path, f"line {blank + 1}: blank; allowed: {allowed}")
                if row >= MAX_ROWS:
                    raise _fail(path, f"more than {MAX_ROWS} rows; allowed: 1 to {MAX_ROWS}")
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise _fail(path, f"line {row + 1}: not JSON ({str(exc)[:80]}); allowed: "
                                      + allowed) from None
                if not isinstance(obj, dict):
                    kind = _JSON_KINDS.get(type(obj).__name__, type(obj).__name__)
                    raise _fail(path, f"line {row + 1}: {kind}, not a JSON object; allowed: "
                                      + allowed)
                yield row, obj
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(path, f"cannot read ({type(exc).__name__}: {str(exc)[:120]})") from None


def _read_jsonl(path: Path):
    """A JSONL trace as (table, (hash_flat, hash_offsets) or None). Keys outside the column
    sets are ignored; ``hash_ids`` is on every line or on none."""
    import pandas as pd

    names = sorted({k for c in COLUMN_SETS for k in c})
    cols: dict[str, list] = {k: [] for k in names}
    hashes, with_hashes = _Hashes(path), None
    for row, obj in _jsonl_objects(path):
        for k in names:
            cols[k].append(obj.get(k))
        if with_hashes is None:
            with_hashes = HASH_COLUMN in obj
        if (HASH_COLUMN in obj) != with_hashes:
            raise _fail(path, f"line {row + 1}: {'has' if with_hashes is False else 'lacks'} "
                              f"{HASH_COLUMN}, unlike line 1; allowed: {HASH_COLUMN} on every "
                              "line or on none")
        if with_hashes:
            hashes.add(f"row {row} (line {row + 1})", obj[HASH_COLUMN])
    df = pd.DataFrame({k: v for k, v in cols.items() if any(x is not None for x in v)})
    return df, (hashes.arrays() if with_hashes else None)


def _read_table(path: Path):
    """(table, hashes or None): a JSONL file's hashes are read with it, a table's later."""
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path)
    try:
        if suffix == ".csv":
            return pd.read_csv(path, dtype={HASH_COLUMN: str}), None
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path), None
    except Exception as exc:  # OSError, pandas' and pyarrow's parser errors: no common base
        raise _fail(path, f"cannot read ({type(exc).__name__}: {str(exc)[:120]})") from None
    raise _fail(path, f"unknown file type {suffix!r}; allowed: .csv, .parquet, .jsonl")


def _seconds(path, col, values) -> np.ndarray:
    import pandas as pd

    if col in MILLISECONDS:
        ms = pd.to_numeric(values, errors="coerce")
        bad = ms.isna().to_numpy()
        if pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
            bad = bad | np.array([isinstance(v, (bool, np.bool_)) for v in values], bool)
        if bad.any():
            i = int(np.argmax(bad))
            raise _fail(path, f"column {col}: row {i} is {str(values.iloc[i])!r}; allowed: "
                              "numbers of milliseconds")
        values = ms / 1000.0
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


def _reorder(flat: np.ndarray, offsets: np.ndarray, order: np.ndarray) -> tuple:
    """The ragged ids with their rows put in ``order``; read-only."""
    if not np.array_equal(order, np.arange(len(order))):
        lengths = np.diff(offsets)[order]
        moved = np.zeros(len(order) + 1, np.int64)
        np.cumsum(lengths, out=moved[1:])
        shift = np.repeat(offsets[:-1][order] - moved[:-1], lengths)
        flat, offsets = flat[np.arange(len(flat), dtype=np.int64) + shift], moved
    flat.flags.writeable = offsets.flags.writeable = False
    return flat, offsets


def load_trace(path: str | Path, name: str | None = None) -> Trace:
    """Read and check a trace file; every refusal is one ``ValueError`` line."""
    try:
        path = check_table(path, "a CSV, Parquet or JSONL trace")
    except FileRefused as exc:
        raise _fail(exc.path, f"{exc.reason}; allowed: {exc.allowed}") from None
    df, hashes = _read_table(path)
    if len(df) == 0 or len(df) > MAX_ROWS:
        raise _fail(path, f"{len(df)} rows; allowed: 1 to {MAX_ROWS}")
    cols = next((c for c in COLUMN_SETS if all(k in df.columns for k in c)), None)
    if cols is None:
        have = ", ".join(map(str, list(df.columns)[:8]))
        raise _fail(path, f"missing columns (has: {have}); allowed: "
                          + " or ".join(", ".join(c) for c in COLUMN_SETS))
    t = _seconds(path, cols[0], df[cols[0]])
    prompt = _tokens(path, cols[1], df[cols[1]])
    output = _tokens(path, cols[2], df[cols[2]])
    if hashes is None and HASH_COLUMN in df.columns:
        reader = _Hashes(path)
        for row, value in enumerate(df[HASH_COLUMN]):
            reader.add(f"row {row}", value)
        hashes = reader.arrays()
    order = np.argsort(t, kind="stable")
    flat, offsets = _reorder(*hashes, order) if hashes is not None else (None, None)
    return Trace(name if name is not None else str(path), t[order], prompt[order], output[order],
                 flat, offsets)
