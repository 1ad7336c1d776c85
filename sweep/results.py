"""Results on disk: a Parquet dataset per study, and the loader notebooks and the CLI share.

Layout of ``results/<name>/``: ``runs.parquet`` (one row per design x seed), ``designs.parquet``
(one row per design, aggregated over seeds), optionally ``requests.parquet`` (one row per
request). Every file carries the same JSON metadata under the key ``servesweep``: the schema
version, the config text, the brief, package/JAX/device versions and the start time.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .config import Limit

SCHEMA_VERSION = 1
META_KEY = b"servesweep"
FILES = ("runs", "designs", "requests")


class ResultsError(ValueError):
    """A results folder that is missing, foreign or of another schema version."""


@dataclass
class Results:
    runs: pd.DataFrame
    designs: pd.DataFrame
    requests: pd.DataFrame | None
    meta: dict

    @property
    def brief(self) -> list[Limit]:
        return [Limit(**lim) for lim in self.meta["brief"]]

    @property
    def axes(self) -> list[str]:
        return list(self.meta["axes"])


def write_results(out_dir: str | Path, tables: dict[str, pd.DataFrame], meta: dict,
                  force: bool = False) -> Path:
    """Write every table into a temporary sibling folder, then move it into place, so that a
    reader never sees a half-written study."""
    out = Path(out_dir)
    if out.exists() and not force:
        raise ResultsError(f"{out}: already exists; use --force to overwrite")
    meta = {"schema_version": SCHEMA_VERSION, "package": f"servesweep {__version__}", **meta}
    blob = json.dumps(meta, default=str).encode()
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for name, df in tables.items():
            table = pa.Table.from_pandas(df, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                   META_KEY: blob})
            path = tmp / f"{name}.parquet"
            with open(path, "wb") as fh:
                pq.write_table(table, fh)
                fh.flush()
                os.fsync(fh.fileno())
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _read(path: Path) -> tuple[pd.DataFrame, dict]:
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise ResultsError(f"{path}: not a readable Parquet file ({exc})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ResultsError(f"{path}: not a servesweep results file (no '{META_KEY.decode()}' "
                           "metadata)")
    meta = json.loads(raw)
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: results schema version {version}, this servesweep reads "
                           f"version {SCHEMA_VERSION}; rerun the sweep")
    return table.to_pandas(), meta


def load_results(path: str | Path) -> Results:
    """Load a study's results folder (or any one of its Parquet files)."""
    path = Path(path)
    folder = path.parent if path.suffix == ".parquet" else path
    if not (folder / "runs.parquet").exists():
        raise ResultsError(f"{folder}: no runs.parquet here; give a folder written by 'sweep run'")
    runs, meta = _read(folder / "runs.parquet")
    designs, _ = _read(folder / "designs.parquet")
    requests = None
    if (folder / "requests.parquet").exists():
        requests, _ = _read(folder / "requests.parquet")
    return Results(runs, designs, requests, meta)
