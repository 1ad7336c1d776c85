"""A row of a closed-loop silicon sample in NVIDIA AIConfigurator's CSV format (its
``silicon_sample.csv``: one measured server per row) as a validation case's measured values,
for ``[measured] silicon = { csv = "FILE.csv", id = "ROW" }``.

A row is a closed loop of ``batch_size`` concurrent clients on ``tp_size`` GPUs; it measured
``silicon_ttft_ms``, the mean TTFT, and ``silicon_tpot_ms``, the mean time per output token
(each request's (E2E - TTFT) / (output tokens - 1), averaged)."""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from sweep.errors import clip
from sweep.files import MAX_TABLE_BYTES, FileRefused, read_text
from sweep.study.vllm_bench import plausible

#: The columns a row must have, and the metrics two of them measure: column -> (metric, per).
REQUIRED = ("id", "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")
MEASURES = {"silicon_ttft_ms": ("mean_ttft_s", 1000.0), "silicon_tpot_ms": ("mean_tpot_ms", 1.0)}
#: What the key takes, for every refusal.
ALLOWED = 'silicon = { csv = "FILE.csv", id = "ROW" }, a row of a silicon sample'


def _refused(path: Path, reason: str) -> FileRefused:
    return FileRefused(path, reason, ALLOWED)


def _number(path: Path, row: dict, key: str) -> float:
    try:
        v = float(row[key])
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise _refused(path, f"column {key} of row {clip(row['id'], 40)} is "
                             f"{clip(repr(row[key]), 30)}, not a number >= 0")
    return v


def read(path: Path, row_id: str, closed: bool, concurrency: int | None,
         gpus: int | None) -> dict:
    """Metric -> measured value of row ``row_id`` of the CSV at ``path``, for a case that is
    ``closed`` (``arrival = "closed"``) with ``concurrency`` clients on ``gpus`` GPUs (None: not
    stated, which their own keys refuse). A row of another concurrency or tensor-parallel
    degree is refused (``FileRefused``, as an unreadable file is): the case would not be the
    run."""
    text = read_text(path, ALLOWED, MAX_TABLE_BYTES)
    reader = csv.DictReader(io.StringIO(text))
    missing = [k for k in REQUIRED if k not in (reader.fieldnames or [])]
    if missing:
        raise _refused(path, f"no column {missing[0]} (a silicon sample has "
                             f"{', '.join(REQUIRED)})")
    row = next((r for r in reader if r["id"] == row_id), None)
    if row is None:
        raise _refused(path, f"no row with id {clip(row_id, 60)}")
    clients, tp = _number(path, row, "batch_size"), _number(path, row, "tp_size")
    if not closed:
        raise _refused(path, f"a closed loop of {clients:g} clients, which an open-loop case "
                             f"cannot replay (a case with arrival = \"closed\" and "
                             f"concurrency = {clients:g} can)")
    if concurrency is not None and clients != concurrency:
        raise _refused(path, f"batch_size (clients) = {clients:g}, but workload.concurrency = "
                             f"{concurrency}")
    if gpus is not None and tp != gpus:
        raise _refused(path, f"tp_size = {tp:g}, but levers.gpus = {gpus}")
    measured = {}
    for key, (metric, per) in MEASURES.items():
        v = _number(path, row, key) / per
        if plausible(metric, v):  # named by the file's own column and unit
            raise _refused(path, f"column {key} of row {clip(row['id'], 30)} is "
                                 f"{clip(repr(row[key]), 30)}, not a time in (0, 1 day]")
        measured[metric] = v
    return measured
