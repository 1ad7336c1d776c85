"""Results on disk: a Parquet dataset per study, and the loader notebooks and the CLI share.

Layout of ``results/<name>/``: ``runs.parquet`` (one row per design x seed), ``designs.parquet``
(one row per design, aggregated over seeds), optionally ``requests.parquet`` (one row per
request). Every file carries the same JSON metadata under the key ``servesweep``: the schema
version, the config text, the brief, package/JAX/device versions and the start time.

While a sweep runs, ``parts/`` holds what it has finished: ``manifest.json`` (what is being run),
``grid.parquet`` (one row per design) and one ``runs-pPPPPP-NNNNNN.parquet`` (plus
``requests-...`` with per-request output) per finished chunk of process P. Every file is written
to a temporary name, fsynced and renamed, so a kill at any moment leaves only whole files; the
final tables are joined from the parts and written the same way, ``runs.parquet`` last.
"""
from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweep.analysis.ownership import CAPACITY_PARTS, PARTS, mark
from sweep.errors import clip, one_line
from sweep.files import FileRefused, read_text, regular
from sweep.study.config import Limit
from sweep.version import __version__

SCHEMA_VERSION = 1
META_KEY = b"servesweep"
FILES = ("runs", "designs", "requests")
MANIFEST = "manifest.json"
_PART = re.compile(r"(runs|requests)-p(\d{5})-(\d{6})\.parquet")


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


@dataclass
class Partial:
    """A sweep's saved parts: what it runs and the rows finished so far, by any process."""

    manifest: dict
    grid: pd.DataFrame
    metrics: pd.DataFrame  # design, seed and every metric of each finished simulation
    requests: list[pd.DataFrame]  # per-request rows of the finished chunks
    infos: list[dict]  # each runs part's metadata: process, seconds, started, device, jax


def _write_file(path: Path, write) -> None:
    """``write(file)`` into a temporary sibling, fsync, rename over ``path``, fsync the folder:
    a reader (or a resumed run) sees the whole file or none of it."""
    # Unique per writer: two processes may write the same final table at once.
    tmp = path.parent / f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_table(path: Path, df: pd.DataFrame, meta: dict) -> None:
    blob = json.dumps({"schema_version": SCHEMA_VERSION, **meta}, default=str).encode()
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), META_KEY: blob})
    _write_file(path, lambda fh: pq.write_table(table, fh))


def write_results(out_dir: str | Path, tables: dict[str, pd.DataFrame], meta: dict,
                  last: str = "runs") -> Path:
    """Write the final tables into ``out_dir``, each file atomically and ``last`` (what marks a
    folder as finished results: ``runs``, or ``capacity`` for a capacity search) last."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"package": f"servesweep {__version__}", **meta}
    written = []
    try:
        for name in sorted(tables, key=lambda n: n == last):
            _write_table(out / f"{name}.parquet", tables[name], meta)
            written.append(out / f"{name}.parquet")
    except OSError:  # a full disk: no table of this call is left behind
        for path in written:
            path.unlink(missing_ok=True)
        raise
    return out


def start_capacity_parts(out_dir: str | Path, manifest: dict) -> None:
    """Create ``out_dir/CAPACITY_PARTS`` with the manifest of a fresh capacity search."""
    parts = Path(out_dir) / CAPACITY_PARTS
    parts.mkdir(parents=True, exist_ok=True)
    mark(Path(out_dir), "capacity")
    blob = json.dumps({"schema_version": SCHEMA_VERSION, **manifest}, default=str, indent=1)
    _write_file(parts / MANIFEST, lambda fh: fh.write(blob.encode()))


def write_capacity_part(out_dir: str | Path, number: int, rows: pd.DataFrame) -> None:
    """One finished round of a capacity search."""
    _write_table(Path(out_dir) / CAPACITY_PARTS / f"round-{number:04d}.parquet", rows, {})


def read_capacity_parts(out_dir: str | Path) -> tuple[dict, pd.DataFrame]:
    """A capacity search's manifest and every simulation its finished rounds saved."""
    parts = Path(out_dir) / CAPACITY_PARTS
    try:
        manifest = json.loads(read_text(parts / MANIFEST, "the manifest sweep capacity writes"))
    except ValueError as exc:
        raise ResultsError(f"{parts / MANIFEST}: cannot read the search's manifest "
                           f"({clip(one_line(exc), 100)}); use --force to start over") from None
    frames = [_read(p)[0] for p in sorted(parts.glob("round-*.parquet"))]
    return manifest, (pd.concat(frames, ignore_index=True) if frames else
                      pd.DataFrame(columns=["round"]))


def load_capacity(path: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict]:
    """A capacity search's results: the capacity table, the fleets (None without a target) and
    the metadata, each checked to hold what its readers use."""
    folder = Path(path)
    folder = folder.parent if folder.suffix == ".parquet" else folder
    cap, meta = _read(folder / "capacity.parquet")
    _check_meta(folder / "capacity.parquet", meta, CAPACITY_META)
    _check_columns(folder / "capacity.parquet", cap, CAPACITY_COLUMNS)
    _check_axes(folder / "capacity.parquet", meta["axes"], cap, "the table")
    fleet = None
    if (folder / "fleet.parquet").exists():
        fleet = _read(folder / "fleet.parquet")[0]
        _check_columns(folder / "fleet.parquet", fleet, FLEET_COLUMNS)
    return cap, fleet, meta


def load_mixed(path: str | Path) -> pd.DataFrame | None:
    """A capacity search's mixed fleets (None where it sized none), checked as ``load_capacity``
    checks its tables."""
    folder = Path(path)
    folder = folder.parent if folder.suffix == ".parquet" else folder
    if not (folder / "mixed_fleet.parquet").exists():
        return None
    mixed = _read(folder / "mixed_fleet.parquet")[0]
    _check_columns(folder / "mixed_fleet.parquet", mixed, MIXED_COLUMNS)
    return mixed


def start_parts(out_dir: str | Path, manifest: dict, grid: pd.DataFrame) -> None:
    """Create ``out_dir/parts`` with the manifest and the grid of a fresh sweep."""
    parts = Path(out_dir) / PARTS
    parts.mkdir(parents=True, exist_ok=True)
    mark(Path(out_dir), "run")
    _write_table(parts / "grid.parquet", grid, {})
    blob = json.dumps({"schema_version": SCHEMA_VERSION, **manifest}, default=str, indent=1)
    _write_file(parts / MANIFEST, lambda fh: fh.write(blob.encode()))


def read_manifest(out_dir: str | Path) -> dict:
    """The manifest of a partial (or finished) sweep in ``out_dir``."""
    path = Path(out_dir) / PARTS / MANIFEST
    if not (path.exists() or path.is_symlink()):
        raise ResultsError(f"{out_dir}: not a resumable sweep (no {PARTS}/{MANIFEST}); allowed: "
                           "the folder of an unfinished 'sweep run' (its --force starts over)")
    try:
        manifest = json.loads(read_text(path, "the manifest sweep run writes"))
    except ValueError as exc:
        raise ResultsError(f"{path}: unreadable manifest ({clip(one_line(exc), 100)}); use "
                           "--force to start over") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise ResultsError(f"{path}: written by another servesweep (schema version "
                           f"{manifest.get('schema_version') if isinstance(manifest, dict) else '?'}"
                           f", this one writes {SCHEMA_VERSION}); use --force to start over")
    _check_meta(path, manifest, MANIFEST_KEYS)
    _check_meta(path, manifest["meta"], PARTS_META, "meta.")
    return manifest


def next_part(out_dir: str | Path, process: int) -> int:
    """The first unused part number of ``process``; removes the process's temporary files that
    a kill left behind (no other process writes names with its number)."""
    parts = Path(out_dir) / PARTS
    for tmp in parts.glob(f".*-p{process:05d}-*.tmp-*"):
        tmp.unlink(missing_ok=True)
    used = [int(m[3]) for m in map(_PART.fullmatch, os.listdir(parts))
            if m and int(m[2]) == process]
    return max(used, default=0) + 1


def write_part(out_dir: str | Path, process: int, number: int, metrics: pd.DataFrame,
               requests: pd.DataFrame | None, info: dict) -> None:
    """Save a finished chunk: its requests first, then its runs (a chunk is done once its runs
    part exists; a requests part without one is ignored)."""
    parts = Path(out_dir) / PARTS
    name = f"p{process:05d}-{number:06d}.parquet"
    if requests is not None:
        _write_table(parts / f"requests-{name}", requests, {})
    _write_table(parts / f"runs-{name}", metrics, {"process": process, **info})


def read_parts(out_dir: str | Path, requests: bool = True) -> Partial:
    """Everything saved in ``out_dir/parts`` by every process (``requests=False``: not the
    per-request rows, the bulk of the data)."""
    out = Path(out_dir)
    manifest = read_manifest(out)
    grid, _ = _read(out / PARTS / "grid.parquet")
    found = {}
    for name in sorted(os.listdir(out / PARTS)):
        m = _PART.fullmatch(name)
        if m:
            found.setdefault(m[1], {})[(m[2], m[3])] = out / PARTS / name
    _check_columns(out / PARTS / "grid.parquet", grid, {"design": "int"})
    metrics, infos, request_parts = [], [], []
    for key, path in found.get("runs", {}).items():
        df, info = _read(path)
        _check_meta(path, info, PART_INFO)
        _check_columns(path, df, RUNS_COLUMNS)
        metrics.append(df)
        infos.append(info)
        if requests and key in found.get("requests", {}):
            request_parts.append(_read(found["requests"][key])[0])
    empty = pd.DataFrame({"design": pd.Series(dtype="int64"), "seed": pd.Series(dtype="int64")})
    return Partial(manifest, grid, pd.concat(metrics, ignore_index=True) if metrics else empty,
                   request_parts, infos)


def _read(path: Path) -> tuple[pd.DataFrame, dict]:
    try:
        regular(path, "a Parquet file written by servesweep")
    except FileRefused as exc:
        raise ResultsError(str(exc)) from None
    try:
        table = pq.read_table(path)
        frame = table.to_pandas()
    except (OSError, pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise ResultsError(f"{path}: not a readable Parquet file "
                           f"({clip(one_line(exc), 120)})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    if raw is None:
        raise ResultsError(f"{path}: not a servesweep results file (no '{META_KEY.decode()}' "
                           "metadata)")
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    if not isinstance(meta, dict):
        raise ResultsError(f"{path}: not a servesweep results file (its '{META_KEY.decode()}' "
                           "metadata is not a JSON object)")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: results schema version {version}, this servesweep reads "
                           f"version {SCHEMA_VERSION}; rerun the sweep")
    return frame, meta


# --- what the readers use: a file without it is refused in one line, naming the key -------------
def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_limits(v) -> bool:
    return isinstance(v, list) and all(
        isinstance(x, dict) and set(x) <= {"key", "min", "max"} and isinstance(x.get("key"), str)
        and all(x.get(k) is None or _is_num(x[k]) for k in ("min", "max")) for x in v)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_list_of(kind):
    return lambda v: isinstance(v, list) and all(isinstance(x, kind) and not isinstance(x, bool)
                                                 for x in v)


_LIMITS = (_is_limits, "a list of limits {key, min, max}")
_NAMES = (_is_list_of(str), "a list of column names")
_SEEDS = (_is_list_of(int), "a list of integer seeds")
#: Metadata key -> (check, what is allowed), per file.
SWEEP_META = {"brief": _LIMITS, "axes": _NAMES}
CAPACITY_META = {
    **SWEEP_META, "seeds": _SEEDS,
    "capacity": (lambda v: isinstance(v, dict) and _is_num(v.get("confidence")),
                 "a table with a numeric confidence"),
    "target_rate": (lambda v: v is None or _is_num(v), "a number or null"),
    "slo": (lambda v: v is None or isinstance(v, dict) and all(map(_is_num, v.values())),
            "a table of numbers or null")}
MANIFEST_KEYS = {"identity": (lambda v: v is not None, "the sweep's identity"),
                 "meta": (lambda v: isinstance(v, dict), "a table")}
PARTS_META = {**SWEEP_META, "seeds": _SEEDS,
              "per_request": (lambda v: isinstance(v, bool), "true or false"),
              "device": (lambda v: isinstance(v, str), "a string"),
              "drawn": (_is_list_of(str), "a list of keys")}
PART_INFO = {"process": (_is_int, "an integer"),
             "seconds": (_is_num, "a number")}
#: Column -> its kind ("int", "num", "bool" or "any"), per table.
RUNS_COLUMNS = {"design": "int", "seed": "int"}
DESIGNS_COLUMNS = {"design": "int", "p_pass": "num", "meets_brief": "bool"}
CAPACITY_COLUMNS = {"design": "int", "max_rate": "num", "max_rate_low": "num",
                    "max_rate_high": "num", "usd_per_hour": "num", "cost_per_mtok_at_max": "num",
                    "binding": "any", "why": "any"}
FLEET_COLUMNS = {"design": "int", "replicas": "int", "fleet_usd_per_hour": "num",
                 "cost_per_mtok": "num", "confirmed": "bool", "note": "any"}
MIXED_COLUMNS = {"mix": "int", "design": "int", "replicas": "int", "share": "num",
                 "fleet_usd_per_hour": "num", "cost_per_mtok": "num", "confirmed": "bool",
                 "note": "any"}
_KINDS = {"int": pd.api.types.is_integer_dtype, "bool": pd.api.types.is_bool_dtype,
          "num": lambda d: pd.api.types.is_numeric_dtype(d) and not pd.api.types.is_bool_dtype(d),
          "any": lambda d: True}


def _check_meta(path: Path, meta: dict, keys: dict, prefix: str = "") -> None:
    for key, (ok, allowed) in keys.items():
        if key not in meta or not ok(meta[key]):
            state = "missing" if key not in meta else "malformed"
            raise ResultsError(f"{path}: metadata '{prefix}{key}' is {state}; allowed: {allowed}, "
                               "as servesweep writes it (rerun to rebuild it)")


def _check_axes(path: Path, axes: list, table: pd.DataFrame, where: str) -> None:
    missing = [a for a in axes if a not in table.columns]
    if missing:
        raise ResultsError(f"{path}: metadata 'axes' names {clip(repr(missing[0]), 40)}, not a "
                           f"column of {where}; allowed: the axes as servesweep writes them "
                           "(rerun to rebuild it)")


def _check_columns(path: Path, df: pd.DataFrame, columns: dict, present=()) -> None:
    for col, kind in {**dict.fromkeys(present, "any"), **columns}.items():
        if col not in df.columns:
            raise ResultsError(f"{path}: no column '{col}'; allowed: a table as servesweep "
                               "writes it (rerun to rebuild it)")
        if not _KINDS[kind](df[col].dtype):
            raise ResultsError(f"{path}: column '{col}' is {df[col].dtype}, not {kind}; allowed: "
                               "a table as servesweep writes it (rerun to rebuild it)")


def load_results(path: str | Path) -> Results:
    """Load a study's results folder (or any one of its Parquet files)."""
    path = Path(path)
    folder = path.parent if path.suffix == ".parquet" else path
    if not (folder / "runs.parquet").exists() and (folder / PARTS / MANIFEST).exists():
        raise ResultsError(f"{folder}: a sweep not finished yet (no runs.parquet, only parts); "
                           f"finish it with 'sweep run CONFIG --out {folder} --resume', or "
                           f"'sweep merge {folder}' once every process is done")
    if not (folder / "runs.parquet").exists():
        raise ResultsError(f"{folder}: no runs.parquet here; give a folder written by 'sweep run'")
    runs, meta = _read(folder / "runs.parquet")
    _check_meta(folder / "runs.parquet", meta, SWEEP_META)
    _check_columns(folder / "runs.parquet", runs, RUNS_COLUMNS)
    designs, _ = _read(folder / "designs.parquet")
    _check_columns(folder / "designs.parquet", designs, DESIGNS_COLUMNS,
                   [lim["key"] for lim in meta["brief"]])
    _check_axes(folder / "runs.parquet", meta["axes"], designs, "designs.parquet")
    requests = None
    if (folder / "requests.parquet").exists():
        requests, _ = _read(folder / "requests.parquet")
    return Results(runs, designs, requests, meta)
