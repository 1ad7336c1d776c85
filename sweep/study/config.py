"""Sweep definitions: a TOML file -> a validated ``Study`` (a grid of design x workload points).

Every check happens here, before anything is simulated, and every refusal is one line:
``PATH:LINE: key: what is wrong; allowed: ...``. Any field of ``[hardware]``, ``[model]``,
``[workload]`` and ``[levers]`` (declared in ``sweep.study.fields``) given as a TOML array is a
sweep axis; the grid is the Cartesian product of the axes (the first axis in file order varies
slowest), less the ``[[exclude]]`` matches, less the designs that do not fit in memory (listed in
``Study.skipped``).

``python -m sweep.study.config FILE...`` checks configs without running them.
"""
from __future__ import annotations

import dataclasses
import re
import sys
import tomllib
from dataclasses import dataclass, field

from sweep.errors import ConfigError, FieldError, clip, got, one_line, show
from sweep.files import MAX_TEXT_BYTES, FileRefused, check_table, read_text
from sweep.physics.catalog import CATALOG as MODEL_CATALOG
from sweep.physics.hf_config import load_hf_config
from sweep.study.fields import COLUMNS, KEYS, SECTIONS, WORKLOAD_FIELDS
from sweep.study.grid import Point, build, check_size, parse_excludes
from sweep.study.lengths import (LENGTH_KEYS, LENGTH_USES, Lengths, Pauses, length_columns,
                                 pause_columns)
from sweep.study.profile import load_profile
from sweep.study.reader import Reader
from sweep.study.sections import (CAPACITY_DEFAULTS, DEFAULT_MAX_REQUESTS, Limit, parse_brief,
                                  parse_capacity,
                                  parse_measured, parse_request_limits, parse_run)
from sweep.study.trace import load_trace
from sweep.study.uncertainty import FACTORS, USES, Uncertain

__all__ = ["COLUMNS", "ConfigError", "Limit", "Point", "Study", "load_study", "main",
           "parse_study"]

#: Workload keys a trace replaces (it gives arrivals and lengths itself).
HF_ALLOWED = "a readable Hugging Face config.json"
TRACE_REPLACES = ("arrival", "arrival_rate", "arrival_cv", "prompt_tokens", "output_tokens")
TOP_LEVEL = ("name", "hardware", "model", "workload", "levers", "run", "brief", "exclude",
             "measured", "capacity")
NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass
class Study:
    name: str
    path: str | None
    text: str  # the config file, verbatim
    points: list[Point]  # after [[exclude]] and the memory-fit skips, Cartesian order
    axes: list[str]  # columns swept (keys given as arrays), file order
    skipped: list[tuple[dict, str]]  # (columns, reason) of designs that do not fit in memory
    seeds: list[int]
    brief: list[Limit]
    chunk_size: int | None
    per_request: bool
    max_designs: int
    uncertain: dict[str, Uncertain] = field(default_factory=dict)  # factors drawn per seed
    max_steps: int | None = None  # engine steps per simulation (None: the engine's safe bound)
    # [measured]: metric -> what reality measured (float; bool for the bool metrics), for
    # ``sweep validate``; ``sweep run`` ignores it.
    measured: dict = field(default_factory=dict)
    # The brief's per-request limits: request_ttft_s (s), request_tpot_ms (ms); absent: none.
    slo: dict = field(default_factory=dict)
    # [capacity], CAPACITY_DEFAULTS filled in; read by ``sweep capacity`` only.
    capacity: dict = field(default_factory=lambda: dict(CAPACITY_DEFAULTS))
    # Draw the model's own error per seed (sweep.study.model_error) for the factors the config
    # leaves to the GPU.
    model_error: bool = True
    # Requests per simulation at most ([run] max_requests): a bigger workload is refused.
    max_requests: int = DEFAULT_MAX_REQUESTS


class _Parser(Reader):
    def __init__(self, text: str, path: str):
        super().__init__(text, path)
        self.uncertain: dict[str, Uncertain] = {}
        self.traces: dict[str, object] = {}

    def parse(self, seeds_override, max_designs_override) -> Study:
        try:
            doc = tomllib.loads(self.text.lstrip("\ufeff"))
        except tomllib.TOMLDecodeError as exc:
            raise self.syntax_error(exc) from None
        for k in doc:
            if k not in TOP_LEVEL:
                raise self.err([k], f"unknown top-level key; allowed: {', '.join(TOP_LEVEL)}")
        name = self.parse_name(doc)
        sections = {}
        for sec in ("hardware", "model", "workload", "levers", "run", "brief"):
            v = doc.get(sec, {})
            if not isinstance(v, dict):
                raise self.err([sec], f"must be a table ([{sec}]), got {got(v)}")
            sections[sec] = v
        self.apply_profile(sections["hardware"])
        run = parse_run(self, sections["run"], seeds_override, max_designs_override)
        seeds, chunk_size, per_request, max_designs, max_steps, model_error, max_requests = run
        slo = parse_request_limits(self, sections["brief"])
        brief = parse_brief(self, sections["brief"])
        measured = parse_measured(self, doc)
        capacity = parse_capacity(self, doc)
        keys = self.parse_keys(doc, sections)  # [(section, key, options, is_axis)]
        excludes = parse_excludes(self, doc.get("exclude", []))
        check_size(self, keys, max_designs)
        points, skipped, axes = build(self, keys, excludes, max_requests)
        return Study(name=name, path=None if self.path.startswith("<") else self.path,
                     text=self.text, points=points, axes=axes, skipped=skipped, seeds=seeds,
                     brief=brief, chunk_size=chunk_size, per_request=per_request,
                     max_designs=max_designs, uncertain=dict(self.uncertain),
                     max_steps=max_steps, measured=measured, slo=slo, capacity=capacity,
                     model_error=model_error, max_requests=max_requests)

    def syntax_error(self, exc: Exception) -> ConfigError:
        """tomllib's message carries the line; the key on that line names the refusal."""
        msg = str(exc)
        m = re.search(r"at line (\d+), column (\d+)", msg)
        line = int(m[1]) if m else getattr(exc, "lineno", None)
        key = "toml"
        if line and 1 <= line <= len(self.loc.lines):
            km = re.match(r"^\s*([A-Za-z0-9_-]+)\s*=", self.loc.lines[line - 1])
            if km:
                header = self.loc.scope[line - 1][0]
                key = f"{header}.{km[1]}" if header else km[1]
        where = f"{self.path}:{line}" if line else self.path
        return ConfigError(f"{where}: {one_line(key)}: TOML syntax error: {msg}",
                           path=self.path, line=line, key=key, reason=msg)

    def parse_name(self, doc) -> str:
        if "name" not in doc:
            raise self.err(["name"], "missing; every config needs a name (it names the results "
                                     "folder); allowed: letters, digits, '_', '-', '.'")
        name = self.string(["name"], doc["name"])
        if not NAME_RE.fullmatch(name) or set(name) == {"."}:
            raise self.err(["name"], f"{show(name)} is not a usable folder name; allowed: 1-128 "
                                     "letters, digits, '_', '-', '.' (not only dots)")
        return name

    # -- the swept sections --

    def parse_keys(self, doc, sections):
        """Every given key of the swept sections, in file order: (section, key, options, axis),
        each option a (columns, design kwargs, workload kwargs) triple."""
        for sec in SECTIONS:
            self.table([sec], sections[sec], tuple(KEYS[sec]))
        self.check_combinations(sections)
        keys = []
        for sec in (s for s in doc if s in SECTIONS):
            for key, raw in sections[sec].items():
                parts = [sec, key]
                axis = isinstance(raw, list)
                values = raw if axis else [raw]
                if axis and not values:
                    raise self.err(parts, "empty array: an axis needs at least one value")
                if axis and key in FACTORS and any(isinstance(x, dict) for x in values):
                    raise self.err(parts, "a distribution cannot be an axis value; allowed: an "
                                          "axis of numbers, or one distribution table")
                options, seen = [], {}
                for v in values:
                    opt, ident = self.option(sec, key, v)
                    if ident in seen:
                        raise self.err(parts, f"duplicate axis value {show(v)}; allowed: "
                                              "distinct values")
                    seen[ident] = True
                    options.append(opt)
                if KEYS[sec][key].kind == "path" and axis:
                    names = [o[0]["model"] for o in options]
                    dup = next((n for n in names if names.count(n) > 1), None)
                    if dup is not None:
                        raise self.err(parts, f"two configs are both named {show(dup)}; allowed: "
                                              "configs whose models have distinct names")
                keys.append((sec, key, options, axis))
        return keys

    def check_combinations(self, sections) -> None:
        """Keys that exclude or need each other, refused before any value is read."""
        model = sections["model"]
        if ("name" in model) == ("config_json" in model):
            what = "both name and config_json" if model else "neither name nor config_json"
            raise self.err(["model", "config_json" if model else "name"],
                           f"{what}; allowed: exactly one of name (a catalog model, such as "
                           f"{next(iter(MODEL_CATALOG))}) or config_json (a Hugging Face "
                           "config.json path)")
        hw = sections["hardware"]
        if "gpu_memory_utilization" in hw and "memory_overhead_fraction" in hw:
            raise self.err(["hardware", "memory_overhead_fraction"],
                           "not used with gpu_memory_utilization (vLLM's sizing of the KV cache "
                           "replaces the fixed reserve); allowed: one of them")
        levers = sections["levers"]
        if "gpus" in levers and ("prefill_gpus" in levers or "decode_gpus" in levers):
            raise self.err(["levers", "gpus"], "not used with prefill_gpus and decode_gpus (each "
                                               "pool's GPUs); allowed: leave gpus unset")
        wl = sections["workload"]
        if "trace" in wl:
            self.check_trace_keys(wl)
        elif ("duration_s" in wl) == ("num_requests" in wl):
            what = "both duration_s and num_requests" if "duration_s" in wl else \
                "neither duration_s nor num_requests"
            raise self.err(["workload", "num_requests" if "num_requests" in wl else "duration_s"],
                           f"{what}; allowed: exactly one of them")
        elif "trace_time_scale" in wl:
            raise self.err(["workload", "trace_time_scale"], "applies only with a trace; "
                                                             "allowed: workload.trace = \"FILE\"")
        arrivals = wl.get("arrival", WORKLOAD_FIELDS["arrival"].default)
        if "arrival_cv" in wl and "gamma" not in (arrivals if isinstance(arrivals, list)
                                                  else [arrivals]):
            raise self.err(["workload", "arrival_cv"], "applies only to bursty arrivals; allowed: "
                                                       "arrival = \"gamma\" with arrival_cv > 0")

    def check_trace_keys(self, wl):
        for k in TRACE_REPLACES:
            if k in wl:
                raise self.err(["workload", k], "does not apply with workload.trace (the trace "
                                                "gives arrivals and lengths); allowed: drop it, "
                                                "or drop the trace")
        if "duration_s" in wl and "num_requests" in wl:
            raise self.err(["workload", "num_requests"], "both duration_s and num_requests; "
                                                         "allowed: at most one of them with a "
                                                         "trace")

    def option(self, sec, key, v):
        """One value of a key -> ((columns, design kwargs, workload kwargs), identity)."""
        parts = [sec, key]
        f = KEYS[sec][key]
        if f.kind == "lengths":
            return self.lengths(parts, v)
        if f.kind == "pauses":
            return self.pauses(parts, v)
        if isinstance(v, dict) and FACTORS.get(key, ("",))[0] == sec:
            return self.uncertain_factor(parts, v)
        if f.kind == "trace":
            trace = self.load_trace(parts, self.string(parts, v))
            return ({"trace": v, "arrival": "trace"}, {}, {"trace": trace, "arrival": "trace"}), v
        if isinstance(v, list):
            raise self.err(parts, "an array inside an axis; allowed: one value per axis entry")
        read = {"num": self.number, "int": self.integer, "bool": self.boolean}
        v = read.get(f.kind, self.string)(parts, v)
        if f.choices:
            self.choice(parts, v, f.choices, " (or model.config_json)" if sec == "model" else "")
        if f.kind == "path":  # model.config_json ([hardware] profile is read before)
            model = self.load_model(parts, v)
            return ({"model": model.name}, {"model": model}, {}), v
        if sec == "workload":
            return ({f.attr: v}, {}, {f.attr: v}), v
        return ({f.attr: v}, {f.attr: v}, {}), v

    def lengths(self, parts, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            t = {"dist": "fixed", "mean": v}
        elif isinstance(v, dict):
            t = self.table(parts, v, LENGTH_KEYS)
        else:
            raise self.err(parts, f"must be a number or a table like {{ dist = \"exponential\", "
                                  f"mean = 1024 }}, got {got(v)}")
        dist, uses = self.distribution(parts, t, t.get("dist", Lengths.dist), LENGTH_USES)
        vals = {}
        for k in uses:
            if k in t:
                vals[k] = self.integer(parts + [k], t[k]) if k in ("low", "high") \
                    else self.number(parts + [k], t[k])
        lengths = Lengths(dist=dist, **vals)
        cols = length_columns(parts[1], lengths)
        return (cols, {}, {parts[1]: lengths}), tuple(cols.values())

    def pauses(self, parts, v):
        """A number of seconds, or a length table of them (``lengths.Pauses``) giving every key
        its distribution uses; its ranges are the workload's to check."""
        if isinstance(v, dict):
            t = self.table(parts, v, LENGTH_KEYS)
            if "dist" not in t:
                raise self.err(parts, "a table needs dist; allowed: dist = "
                                      + ", ".join(f'"{d}"' for d in LENGTH_USES))
            dist, uses = self.distribution(parts, t, t["dist"], LENGTH_USES)
            for k in uses:
                if k not in t:
                    raise self.err(parts, f"{dist} needs {k}; allowed: {{ dist = \"{dist}\", "
                                          + ", ".join(f"{u} = NUMBER" for u in uses) + " }")
            x = Pauses(dist, **{k: self.number(parts + [k], t[k]) for k in uses})
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            x = self.number(parts, v)
        else:
            raise self.err(parts, f"must be a number of seconds or a table like {{ dist = "
                                  f"\"exponential\", mean = 7.0 }}, got {got(v)}")
        cols = pause_columns(parts[1], x)
        return (cols, {}, {parts[1]: x}), tuple(cols.values())

    def uncertain_factor(self, parts, v):
        """A factor given as a distribution: drawn per seed by the runner; the design holds its
        centre and its column is filled per run with the draw."""
        t = self.table(parts, v, ("dist", "mean", "sd", "low", "high"))
        dist, uses = self.distribution(parts, t, t.get("dist"), USES)
        for k in uses:
            if k not in t:
                raise self.err(parts, f"{dist} needs {k}; allowed: {{ dist = \"{dist}\", "
                                      + ", ".join(f"{u} = NUMBER" for u in uses) + " }")
        factor = Uncertain(dist, **{k: self.number(parts + [k], t[k]) for k in uses})
        try:
            factor.validate(".".join(parts))
        except ValueError as exc:
            key, _, what = str(exc).partition(": ")
            raise self.err(key.split("."), what) from None
        self.uncertain[parts[1]] = factor
        key = parts[1]
        return ({key: None}, {key: factor.nominal}, {}), (dist,) + tuple(t[k] for k in uses)

    def load_trace(self, parts, rel: str):
        if rel not in self.traces:
            try:
                self.traces[rel] = load_trace(self.resolve(rel), name=rel)
            except FieldError as exc:
                raise self.err(parts, exc.reason) from None
        return self.traces[rel]

    def apply_profile(self, hw):
        """``[hardware] profile``: the keys of a ``sweep calibrate`` profile, as if written here."""
        if "profile" not in hw:
            return
        parts = ["hardware", "profile"]
        rel = self.string(parts, hw.pop("profile"))
        try:
            profile = load_profile(self.resolve(rel))
        except ValueError as exc:
            raise self.err(parts, str(exc)) from None
        for k in profile:
            if k in hw:
                raise self.err(["hardware", k], f"also set by hardware.profile {show(rel)}; "
                                                "allowed: one of them")
        hw.update(profile)

    def load_model(self, parts, rel: str):
        if not rel:
            raise self.err(parts, "empty path; allowed: a path to a Hugging Face config.json")
        p = self.resolve(rel)
        if p.is_dir():
            p = p / "config.json"
        allowed = f"allowed: {HF_ALLOWED}"
        try:  # a device or a pipe (/dev/zero, a FIFO) would be read forever
            check_table(p, "a readable Hugging Face config.json", MAX_TEXT_BYTES)
        except FileRefused as exc:
            raise self.err(parts, f"{show(str(p))}: {exc.reason}; {allowed}") from None
        try:
            model = load_hf_config(p)
        except FieldError as exc:
            raise self.err(parts, f"{exc.reason}; allowed: {exc.allowed or HF_ALLOWED}") from None
        if model.max_context < 2:  # a prompt token and an output token at least
            raise self.err(parts, f"{show(str(p))}: max_position_embeddings = "
                                  f"{model.max_context}; {allowed} with a context of at least 2")
        if p.name != "config.json" and model.name == p.parent.name:
            # load_hf_config names a model after its folder (HF layout: NAME/config.json); a
            # file named otherwise is named after itself.
            model = dataclasses.replace(model, name=p.stem)
        return model


# --- entry points ------------------------------------------------------------------------------

def parse_study(text: str, path: str = "<config>", seeds: int | None = None,
                max_designs: int | None = None) -> Study:
    """A Study from TOML text. ``path`` names the file in messages and anchors relative
    ``config_json`` paths (the current folder when it is ``<config>``). ``seeds`` (a count)
    overrides [run] seeds; ``max_designs`` overrides [run] max_designs."""
    path = str(path)
    try:
        if not isinstance(text, str):
            raise ConfigError(f"{path}: file: not text ({type(text).__name__})", path=path)
        return _Parser(text, path).parse(seeds, max_designs)
    except ConfigError:
        raise
    except RecursionError:
        raise ConfigError(f"{path}: toml: arrays or tables nested too deeply; allowed: the "
                          "documented keys, nested at most a few levels", path=path) from None
    except Exception as exc:  # a hostile file must never produce a traceback
        raise ConfigError(f"{path}: config: cannot be read ({type(exc).__name__}: "
                          f"{clip(one_line(exc), 200)})", path=path) from None


def load_study(path, seeds: int | None = None, max_designs: int | None = None) -> Study:
    """Read and parse a config file (see ``parse_study``): a regular UTF-8 file of at most
    ``MAX_TEXT_BYTES``."""
    shown = str(path)
    try:
        text = read_text(path, "a UTF-8 TOML config")
    except FileRefused as exc:
        raise ConfigError(f"{shown}: file: {one_line(exc.reason)}; allowed: {exc.allowed}",
                          path=shown) from None
    return parse_study(text, shown, seeds=seeds, max_designs=max_designs)


def main(argv: list[str] | None = None) -> int:
    """``python -m sweep.study.config FILE...``: check configs; one line each; exit 2 on any error."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print("usage: python -m sweep.study.config CONFIG.toml...", file=sys.stderr)
        return 2
    status = 0
    for p in argv:
        try:
            s = load_study(p)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
            continue
        print(f"{p}: ok: {s.name}: {len(s.points)} points ({len(s.skipped)} skipped), axes "
              f"{', '.join(s.axes) or '-'}, {len(s.seeds)} seeds, {len(s.brief)} limits")
    return status


if __name__ == "__main__":
    sys.exit(main())
