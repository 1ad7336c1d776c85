"""A config's grid: every combination of its axes, less the ``[[exclude]]`` matches and the
designs that do not fit in memory, each a validated design, workload and row of columns."""
from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

from sweep.errors import ConfigError, DoesNotFit, FieldError, got, listed, one_line, show
from sweep.physics.catalog import get_model
from sweep.physics.engines import HOST_TERMS, served_by
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.models import Model
from sweep.physics.timing import kv_efficiency
from sweep.study.design import Design
from sweep.study.fields import (ATTRS, COLUMNS, CONDITIONAL, DESIGN_FIELDS, FIELDS, KEYS,
                                WORKLOAD_FIELDS)
from sweep.study.lengths import length_columns, pause_columns
from sweep.study.reader import Reader
from sweep.study.workload import Workload

#: Columns the GPU fills in when the config leaves them unset.
_GPU_DEFAULTS = tuple(f.attr for f in FIELDS if f.gpu_default)

#: Columns of true/false levers, which an exclusion may name by a boolean.
_BOOL_COLUMNS = {c for f in FIELDS if f.kind == "bool" for c in f.columns}


@dataclass
class Point:
    design: Design  # validated
    workload: Workload  # validated
    columns: dict  # every column of COLUMNS, in that order

    @property
    def closed(self) -> bool:
        """A closed loop: its load is its clients, not a rate."""
        return self.workload.arrival == "closed"

    def at_load(self, load: float) -> "Point":
        """The same point at another load (a capacity search's probe): an arrival rate, or a
        closed loop's clients, each sending as many requests as the configured clients do
        (``closed_requests``)."""
        if not self.closed:
            return Point(self.design, dataclasses.replace(self.workload, arrival_rate=load),
                         {**self.columns, "arrival_rate": load})
        scaled = dict(concurrency=int(load), **closed_requests(self.workload, int(load)))
        return Point(self.design, dataclasses.replace(self.workload, **scaled),
                     {**self.columns, **scaled})


def closed_requests(wl: Workload, clients: int) -> dict:
    """A closed loop's measured and warm-up requests for ``clients`` clients: the configured
    counts per configured client, rounded up, so that every probe of a capacity search runs
    the benchmark the config describes (InferenceX sends 2 x N warm-ups and 10 x N prompts to
    N clients). Kept fixed, a count below the clients would send one burst, not a loop."""
    def per(n: int) -> int:
        return -(-n * clients // wl.concurrency)
    return dict(num_requests=per(wl.num_requests), warmup_requests=per(wl.warmup_requests))


def parse_excludes(r: Reader, raw) -> list[dict]:
    """``[[exclude]]``: column -> the values that drop a point (all of a table's keys match)."""
    if isinstance(raw, dict) or not isinstance(raw, list):
        raise r.err(["exclude"], f"must be an array of tables ([[exclude]]), got {got(raw)}")
    out = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise r.err(["exclude"], f"entry {i} must be a table, got {got(t)}", index=i)
        if not t:
            raise r.err(["exclude"], "an empty [[exclude]] table would drop every point; "
                                     f"allowed: column = value(s), columns: "
                                     f"{listed(COLUMNS)}", index=i)
        entry = {}
        for col, v in t.items():
            parts = ["exclude", col]
            if col not in COLUMNS:
                raise r.err(parts, f"not a column; allowed: {listed(COLUMNS)}", index=i)
            values = v if isinstance(v, list) else [v]
            if not values:
                raise r.err(parts, "empty array; allowed: a value or a list of values", index=i)
            for x in values:
                # A boolean matches only a boolean column (True would match a 1 elsewhere).
                if (isinstance(x, bool) and col not in _BOOL_COLUMNS) or not isinstance(
                        x, (str, int, float)):
                    raise r.err(parts, f"must be a value or a list of values, got {got(x)}",
                                index=i)
                if isinstance(x, float) and not math.isfinite(x):
                    raise r.err(parts, f"must be finite, got {x}", index=i)
            entry[col] = values
        out.append(entry)
    return out


def check_size(r: Reader, keys, max_designs: int) -> None:
    """Refuse a grid larger than ``max_designs`` before building it."""
    dims = [(key, len(opts)) for _, key, opts, axis in keys if axis]
    total = math.prod(n for _, n in dims)
    if total > max_designs:
        big = sorted(dims, key=lambda d: -d[1])  # the largest axes, the ones to shrink
        shape = " x ".join(f"{key} {n}" for key, n in big[:3]) + (" x ..." if len(big) > 3
                                                                  else "")
        raise r.err(["run", "max_designs"],
                    f"the grid asks for {total} points ({shape}), more than max_designs = "
                    f"{max_designs}; allowed: at most {max_designs} (shrink an axis, or raise "
                    "[run] max_designs or --max-designs)")


def build(r: Reader, keys, excludes, max_requests: int):
    """(points, skipped, axes) of the given keys, each ``(section, key, options, is_axis)``
    with options of ``(columns, design kwargs, workload kwargs)``; refuses a grid left empty
    and an exclusion that matches nothing; a workload of more than ``max_requests`` requests
    per simulation is refused."""
    base = _defaults()
    axis_keys = []
    for sec, key, options, axis in keys:
        if axis:
            axis_keys.append((sec, key, options))
        else:
            _apply(base, options[0])
    axes = _axes(axis_keys)
    seen = {col: set() for ex in excludes for col in ex}
    designs, workloads = {}, {}
    points, skipped, n_excluded = [], [], 0
    given = {(sec, key) for sec, key, _, _ in keys}
    idle = {f for f in CONDITIONAL if (f.section, f.key) in given}  # given, no effect yet
    for combo in itertools.product(*(opts for _, _, opts in axis_keys)):
        cols, dkw, wkw = point = tuple(dict(x) for x in base)
        for option in combo:
            _apply(point, option)
        idle = {f for f in idle if not f.when(dkw, wkw)}
        stated = {c: cols[c] for c in seen}  # before _fill empties the keys that do not apply
        _fill(cols, dkw, wkw, _served(dkw))
        # An exclusion matches the values given, where a key that does not apply at this point
        # has an empty column, and the filled-in ones (a GPU's defaults) elsewhere.
        match = {c: cols[c] if stated[c] is None else stated[c] for c in seen}
        for col, s in seen.items():
            s.add(_hashable(match[col]))
        if any(all(match[col] in vals for col, vals in ex.items()) for ex in excludes):
            n_excluded += 1
            continue
        dkey = tuple(dkw.values())
        if dkey not in designs:
            designs[dkey] = _check_design(r, dkw, cols, axes)
        design, reason = designs[dkey]
        _resolved(cols, design)
        if reason is not None:
            skipped.append((cols, reason))
            continue
        wkey = tuple(wkw.values())
        if wkey not in workloads:
            workloads[wkey] = _check_workload(r, wkw, cols, axes, max_requests)
        points.append(Point(design, workloads[wkey],
                            columns(design, workloads[wkey], getattr(r, "uncertain", ()))))
    _check_exclusions(r, excludes, seen)
    for f in sorted(idle, key=lambda f: FIELDS.index(f)):
        raise r.err([f.section, f.key], f"has no effect here: it applies only {f.when.says}; "
                                        "allowed: drop it, or give it where it applies")
    if not points:
        raise _nothing_left(r, skipped, n_excluded)
    return points, skipped, axes


def columns(design: Design, workload: Workload, uncertain=()) -> dict:
    """A point's results row, every column of ``COLUMNS`` in order, from its design and
    workload: catalog entries and traces by name, the GPU's own values where the design leaves
    a factor to it, keys that do not apply empty, a trace as what it amounts to, and the factors
    drawn per seed (``uncertain``) empty."""
    dkw = {a: getattr(design, a) for a in DESIGN_FIELDS}
    dkw["gpu"] = getattr(dkw["gpu"], "name", dkw["gpu"])
    wkw = {a: getattr(workload, a) for a in WORKLOAD_FIELDS}
    cols = dict.fromkeys(COLUMNS)
    for f in FIELDS:
        if f.kind == "lengths":
            cols.update(length_columns(f.key, wkw[f.attr]))
        elif f.kind == "pauses":
            cols.update(pause_columns(f.key, wkw[f.attr]))
        elif f.attr:
            v = (wkw if f.section == "workload" else dkw)[f.attr]
            cols[f.attr] = getattr(v, "name", v)
    _fill(cols, dkw, wkw, design.gpu_spec)
    cols.update(dict.fromkeys(uncertain))  # after the conditional keys' own values
    if workload.trace is not None:
        cols.update(_trace_columns(workload))
    _resolved(cols, design)
    cols.update(sizes(design))
    return cols


def _resolved(cols: dict, design: Design) -> None:
    """The columns a design resolves: where its GPU-side factors come from, the weight
    precision (the checkpoint's where ``weight_bits`` is unset), and the all-reduce its kernels
    run with where the config leaves it to the GPU (a column drawn per seed stays empty)."""
    cols["calibration"] = design.calibration
    cols["weight_bits"] = design.weight_precision
    cols["activation_bits"] = design.activation_precision
    for key, value in zip(("allreduce_latency_us", "allreduce_growth"), design.allreduce()):
        if getattr(design, key) is None and cols[key] is not None:
            cols[key] = float(value)
    if design.disaggregated:  # each pool's GPU and ranks, the design's where it names none
        for side, (pool, _) in zip(("prefill", "decode"), design.pools()):
            cols[f"{side}_gpu"] = getattr(design, f"{side}_gpu") or cols["gpu"]
            cols[f"{side}_data_parallel"] = pool.data_parallel
            cols[f"{side}_expert_parallel"] = pool.expert_parallel
        for key in HOST_TERMS:  # the host terms both pools' servers run with (the decode's)
            if getattr(design, key) is None and cols[key] is not None:
                cols[key] = float(pool.resolved(key))


def sizes(design: Design) -> dict:
    """What the model and its memory amount to: parameters (billions), KV bytes per token at the
    design's KV precision, and per server (a disaggregated design's decode pool, which holds
    the KV cache for longest) the weights on each GPU (GiB) and the KV cache's tokens."""
    model = design.model_spec
    server = design.decode_pool() if design.disaggregated else design
    return {"params_b": model.params / 1e9, "active_params_b": model.active_params / 1e9,
            "kv_bytes_per_token": float(model.kv_bytes_per_token(design.kv_bits)),
            "weight_gib_per_gpu": server.budget().weights_gib / server.server_gpus,
            "kv_tokens": int(server.kv_tokens())}


def _defaults() -> tuple[dict, dict, dict]:
    """A point's columns, Design and Workload keywords where the config gives no key."""
    cols = dict.fromkeys(COLUMNS)
    for f in FIELDS:
        if f.kind == "lengths":
            cols.update(length_columns(f.key, f.default))
        elif f.attr:
            cols[f.attr] = f.config_default
    return (cols, {a: f.config_default for a, f in DESIGN_FIELDS.items()},
            {a: f.config_default for a, f in WORKLOAD_FIELDS.items()})


def _apply(point, option) -> None:
    for target, changes in zip(point, option):
        target.update(changes)


def _axes(axis_keys) -> list[str]:
    """The columns the axes vary, in file order (of a length axis, those that differ)."""
    axes: list[str] = []
    for sec, key, options in axis_keys:
        if KEYS[sec][key].kind in ("lengths", "pauses"):
            varying = [c for c in options[0][0] if len({_hashable(o[0][c]) for o in options}) > 1]
            axes.extend(c for c in varying if c not in axes)
        else:
            col = "model" if sec == "model" else key
            if col not in axes:
                axes.append(col)
    return axes


def _served(dkw: dict):
    """The catalog GPU of a grid point's design keys as its engine drives its model (a model the
    catalog lacks is the design's check to refuse, later)."""
    model = dkw["model"]
    if dkw["engine"] != "vllm" and not isinstance(model, Model):
        try:
            model = get_model(model)
        except ValueError:
            model = None
    return served_by(GPU_CATALOG[dkw["gpu"]], dkw["engine"], model)


def _fill(cols, dkw, wkw, gpu) -> None:
    """The columns that follow from others: the GPU's defaults (``gpu``, as the design's
    engine drives it), and the keys that apply only with others (``Field.when``: gamma
    arrivals, a trace, disaggregated pools), empty where they do not."""
    for c in _GPU_DEFAULTS:
        if dkw[c] is None:
            cols[c] = float(getattr(gpu, c) or 0.0)
    if dkw["kv_bandwidth_efficiency"] is None and dkw["bandwidth_efficiency"] is not None:
        # (of a bandwidth drawn per seed, the centre's)
        cols["kv_bandwidth_efficiency"] = kv_efficiency(gpu, dkw["bandwidth_efficiency"])
    for f in CONDITIONAL:
        kw = wkw if f.section == "workload" else dkw
        on = f.when(dkw, wkw)
        if f.kind in ("lengths", "pauses"):
            table = length_columns if f.kind == "lengths" else pause_columns
            cols.update(table(f.key, kw[f.attr] if on else None))
        elif on:
            v = kw[f.attr]
            cols[f.attr] = float(v) if f.kind == "num" and v is not None else v
        else:
            cols[f.attr] = None
        if on:
            continue
        # A design key left as given is for its checks to judge (gpus with pools is refused).
        if f.section == "workload":
            kw[f.attr] = f.default


def _check_exclusions(r: Reader, excludes, seen) -> None:
    for i, ex in enumerate(excludes):
        for col, vals in ex.items():
            for v in vals:
                if _hashable(v) not in seen[col]:
                    present = sorted(map(show, seen[col]))
                    raise r.err(["exclude", col], f"{show(v)} matches no grid point; "
                                f"allowed: {listed(present)}", index=i)


def _nothing_left(r: Reader, skipped, n_excluded: int) -> ConfigError:
    if skipped:
        return r.err(["levers", "gpus"], f"nothing left to run: no design fits in memory (e.g. "
                     f"{skipped[0][1]}); allowed: at least one design that fits")
    return r.err(["exclude"], f"nothing left to run: [[exclude]] drops all {n_excluded} grid "
                 "points; allowed: exclusions that leave a point", index=0)


def _check_design(r: Reader, dkw: dict, cols, axes):
    """(design, None), or (design, why it is skipped) for one that does not fit in memory."""
    try:
        design = Design(**dkw)
        design.validate()
    except DoesNotFit as exc:
        return design, one_line(exc.reason)
    except FieldError as exc:
        raise _refusal(r, exc, cols, axes) from None
    return design, None


def _check_workload(r: Reader, wl: Workload | dict, cols, axes, max_requests: int) -> Workload:
    """The workload (made here from a grid point's keys, so a refused value names its line),
    checked whole and against ``max_requests``."""
    try:
        wl = Workload(**wl) if isinstance(wl, dict) else wl
        wl.validate()
    except FieldError as exc:
        raise _refusal(r, exc, cols, axes) from None
    if wl.trace is not None and wl.capacity < 1:
        raise r.err(["workload", "duration_s"], f"keeps no request of the trace"
                    f"{_at(cols, axes)}; allowed: a duration_s at or after its first "
                    "arrival (time 0)")
    if wl.duration_s is not None and wl.trace is None:
        mean = wl.arrival_rate * wl.duration_s
        if not math.isfinite(mean) or mean > max_requests:
            raise r.err(["workload", "duration_s"],
                        f"arrival_rate x duration_s asks for about {mean:.3g} requests"
                        f"{_at(cols, axes)}; allowed: at most {max_requests} per simulation "
                        "(raise [run] max_requests for more)")
    elif wl.capacity > max_requests:
        key = "trace" if wl.trace is not None else "num_requests"
        raise r.err(["workload", key], f"asks for {wl.capacity} requests{_at(cols, axes)}; "
                    f"allowed: at most {max_requests} per simulation (raise [run] "
                    "max_requests for more)")
    return wl


def _refusal(r: Reader, exc: FieldError, cols, axes) -> ConfigError:
    """A Design or Workload refusal at its key's line, naming the grid point."""
    parts = exc.parts
    if len(parts) > 1 and parts[1] in ATTRS:
        parts[0] = ATTRS[parts[1]].section  # Design calls every field a lever
    allowed = "" if exc.allowed is None else f"; allowed: {exc.allowed}"
    return r.err(parts, exc.reason + _at(cols, axes) + allowed)


def _at(cols, axes) -> str:
    """Where on the grid: each axis's value (an axis key that does not apply there is empty)."""
    at = [f"{a}={show(cols[a])}" for a in axes if cols[a] is not None]
    return " (at " + ", ".join(at) + ")" if at else ""


def _trace_columns(wl: Workload) -> dict:
    """What a replayed trace amounts to: its mean rate and lengths (before context clipping)."""
    n = wl.capacity
    t = wl.trace
    return {"arrival_rate": t.mean_rate(wl.trace_time_scale, n),
            "prompt_tokens_dist": "trace", "output_tokens_dist": "trace",
            "prompt_tokens_mean": float(t.prompt[:n].mean()),
            "output_tokens_mean": float(t.output[:n].mean()),
            **{f"{x}_tokens_{k}": None for x in ("prompt", "output")
               for k in ("low", "high", "sigma")}}


def _hashable(v):
    return v if not isinstance(v, list) else tuple(v)
