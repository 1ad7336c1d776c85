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

#: The columns a row must have, and the metrics two of them measure: column -> (metric, per).
REQUIRED = ("id", "batch_size", "tp_size", "silicon_ttft_ms", "silicon_tpot_ms")
MEASURES = {"silicon_ttft_ms": ("mean_ttft_s", 1000.0), "silicon_tpot_ms": ("mean_tpot_ms", 1.0)}


class RowRefused(ValueError):
    """The row cannot give measured values: ``reason`` says why, in one line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _number(row: dict, key: str) -> float:
    try:
        v = float(row[key])
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v) or v < 0:
        raise RowRefused(f"column {key} of row {clip(row['id'], 40)} is "
                         f"{clip(repr(row[key]), 30)}, not a number >= 0")
    return v


def read(path: Path, row_id: str, closed: bool, concurrency: int | None,
         gpus: int | None) -> dict:
    """Metric -> measured value of row ``row_id`` of the CSV at ``path``, for a case that is
    ``closed`` (``arrival = "closed"``) with ``concurrency`` clients on ``gpus`` GPUs (None: not
    stated, which their own keys refuse). A row of another concurrency or tensor-parallel
    degree is refused: the case would not be the run."""
    try:
        text = read_text(path, "a silicon sample (CSV)", MAX_TABLE_BYTES)
    except FileRefused as exc:
        raise RowRefused(exc.reason) from None
    reader = csv.DictReader(io.StringIO(text))
    missing = [k for k in REQUIRED if k not in (reader.fieldnames or [])]
    if missing:
        raise RowRefused(f"no column {missing[0]} (a silicon sample has {', '.join(REQUIRED)})")
    row = next((r for r in reader if r["id"] == row_id), None)
    if row is None:
        raise RowRefused(f"no row with id {clip(row_id, 60)}")
    clients, tp = _number(row, "batch_size"), _number(row, "tp_size")
    if not closed:
        raise RowRefused(f"a closed loop of {clients:g} clients, which an open-loop case cannot "
                         f"replay (a case with arrival = \"closed\" and concurrency = "
                         f"{clients:g} can)")
    if concurrency is not None and clients != concurrency:
        raise RowRefused(f"batch_size (clients) = {clients:g}, but workload.concurrency = "
                         f"{concurrency}")
    if gpus is not None and tp != gpus:
        raise RowRefused(f"tp_size = {tp:g}, but levers.gpus = {gpus}")
    return {metric: _number(row, key) / per for key, (metric, per) in MEASURES.items()}
