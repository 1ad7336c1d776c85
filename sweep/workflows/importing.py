"""``sweep import``: one ``sweep validate`` case per measured run of benchmark result files,
read as the tools wrote them: ``vllm bench serve --save-result`` JSON (and the older
``benchmarks/benchmark_serving.py``'s), a run a file or one a line (``--append-result``),
``python -m sglang.bench_serving --output-file`` JSON lines, GuideLLM's report
(``import_guidellm``) and AIPerf's or GenAI-Perf's summary (``import_aiperf``). docs/running.md
("Benchmark files in") says how a run's workload and measured values are read. Every refusal is
one line naming the file, its line and the field; nothing is written until every case has loaded
as ``sweep validate`` loads it (``validate.load_cases``)."""
from __future__ import annotations

import json
import math
import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from sweep.errors import UsageError, clip, got, listed, one_line, show
from sweep.files import MAX_TABLE_BYTES, MAX_TEXT_BYTES, FileRefused, make_folder, \
    out_folder, read_text, writable, write_all
from sweep.study import vllm_bench
from sweep.study.fields import KEYS
from sweep.study.metric_names import METRICS
from sweep.workflows import import_aiperf, import_guidellm
from sweep.workflows.import_server import SERVER_FILE, Server, beside
from sweep.workflows.import_fields import Found, Run, Workload, closed_loop, fixed_lengths, \
    measured, open_loop

#: The kinds of file read, and the tool each is a run of.
TOOLS = {"vllm": "vllm bench serve", "sglang": "sglang.bench_serving",
         "guidellm": "guidellm benchmark", "aiperf": "aiperf profile"}
KINDS = tuple(TOOLS)
ALLOWED = "a benchmark's result file: one JSON object, or one a line"
#: SGLang's statistics (``bench_serving.py``'s result dict) -> (our metric, its units in ours).
SGLANG_FIELDS = vllm_bench.fields("e2e_latency_ms")
#: vLLM's KV sizing default, written for vLLM runs unless ``--set`` sizes memory.
VLLM_MEMORY = 0.9
#: Keys the flags set, not ``--set``.
FLAG_KEYS = {"gpu": "--gpu", "gpus": "--gpus"}


@dataclass(frozen=True)
class Kind:
    """vLLM's or SGLang's results: the fields every run has, its statistics (field -> our
    metric, its units in the metric's) and the fields (dotted: nested) stating the model."""

    required: tuple
    stats: dict
    models: tuple


_TOTALS = ("completed", "total_input_tokens", "total_output_tokens")
SPECS = {"vllm": Kind(("request_rate", "mean_ttft_ms", "mean_tpot_ms", *_TOTALS),
                      vllm_bench.FIELDS, ("model_id", "model")),
         # Older SGLang writes no mean TTFT: its median is what every version writes.
         "sglang": Kind(("request_rate", "median_ttft_ms", *_TOTALS), SGLANG_FIELDS,
                        ("model_id", "model", "server_info.model_path"))}


@dataclass
class Imported:
    """Cases (file name -> TOML), the files beside them (name -> bytes), a line per case."""

    cases: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def written(self) -> dict[str, bytes]:
        return {**self.files, **{n: t.encode() for n, t in self.cases.items()}}


def read_runs(path: Path) -> list[Run]:
    """The runs of one file: a JSON object, or JSON objects one a line."""
    try:
        text = read_text(path, ALLOWED, MAX_TABLE_BYTES)
    except FileRefused as exc:
        raise UsageError(f"{path}: {exc.reason}; allowed: {exc.allowed}") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None  # JSON lines, or not JSON: read line by line
    if isinstance(doc, dict):
        return [Run(path, None, doc)]
    if doc is not None:
        raise UsageError(f"{path}: a JSON {type(doc).__name__}, not an object; allowed: {ALLOWED}")
    runs = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{path}: line {i}: not JSON ({clip(one_line(exc), 60)}); "
                             f"allowed: {ALLOWED}") from None
        if not isinstance(d, dict):
            raise UsageError(f"{path}: line {i}: not a JSON object; allowed: {ALLOWED}")
        runs.append(Run(path, i, d))
    if not runs:
        raise UsageError(f"{path}: no run in it (the file is empty); allowed: {ALLOWED}")
    return runs


def _rate(run: Run) -> float:
    """``request_rate``: requests/s, or inf (vLLM writes "inf", SGLang Infinity)."""
    v = run.doc.get("request_rate")
    if isinstance(v, str) and v.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(v, float) and v == math.inf:
        return v
    return run.number("request_rate")


def _lengths(run: Run) -> list[tuple[int, int, int]] | None:
    """Each completed request's (index, prompt, output tokens) where the file lists them
    (``input_lens``, ``output_lens``; a request with an ``errors`` entry left out)."""
    if "input_lens" not in run.doc or "output_lens" not in run.doc:
        return None
    ins, outs, errors = run.doc["input_lens"], run.doc["output_lens"], run.doc.get("errors")
    for key, v in (("input_lens", ins), ("output_lens", outs)):
        if not (isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool)
                                                  and 0 <= x < 2**31 for x in v)):
            raise run.refuse(key, "not a list of token counts", "integers >= 0, one a request")
    if len(ins) != len(outs):
        raise run.refuse("output_lens", f"{len(outs)} entries, input_lens {len(ins)}",
                         "one entry a request in each")
    ok = [not (isinstance(e, str) and e) for e in errors] \
        if isinstance(errors, list) and len(errors) == len(ins) else [True] * len(ins)
    return [(k, i, o) for k, (i, o, good) in enumerate(zip(ins, outs, ok)) if good] or None


def _arrivals(run: Run, n: int) -> list[float] | None:
    """Each request's send time since the first (vLLM's ``start_times``, with details)."""
    v = run.doc.get("start_times")
    if v is not None and not (isinstance(v, list) and len(v) == n and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
            for x in v)):
        raise run.refuse("start_times", "not a list of times", "seconds, one a request")
    first = min(v) if v else 0.0
    return None if v is None else [float(x) - first for x in v]


def workload(run: Run) -> Workload:
    """What the benchmark sent (see the module's docstring)."""
    rate, clients = _rate(run), run.doc.get("max_concurrency")
    if run.doc.get("ramp_up_strategy") is not None:
        raise run.refuse("ramp_up_strategy", f"{got(run.doc['ramp_up_strategy'])}: a rate "
                         "that changes during the run, which no case replays", "null")
    completed = run.count("completed")
    n = run.count("num_prompts") if "num_prompts" in run.doc else completed
    rows = _lengths(run)
    if clients is not None:
        clients = run.count("max_concurrency")
        if rate != math.inf:
            raise run.refuse("max_concurrency", f"{clients} clients held to request_rate "
                             f"{rate:g} besides, which no case replays",
                             "a closed loop (request_rate inf) or an open loop (null)")
        wl = closed_loop(clients, n)
    elif rate == math.inf and rows:
        return Workload([], f"all {len(rows)} requests at once (a trace at time 0)",
                        [(0.0, i, o) for _, i, o in rows], reads_bench=False)
    elif rate == math.inf:
        wl = Workload(["arrival = \"closed\"  # every request at time 0: a client each",
                       f"concurrency = {n}", f"num_requests = {n}"],
                      f"all {n} requests at once ({n} clients, one request each)",
                      reads_bench=False)
    else:
        times = _arrivals(run, len(run.doc["input_lens"])) if rows else None
        if times is not None:
            return Workload([], f"{len(rows)} requests at their recorded send times (a trace)",
                            [(times[k], i, o) for k, i, o in rows])
        lines, label = _open(run, rate)
        wl = Workload(lines + [f"num_requests = {n}"],
                      f"open loop: {label} arrivals at {rate:g} requests/s, {n} requests")
    return _fixed_lengths(run, wl, completed, rows is not None)


def _open(run: Run, rate: float) -> tuple[list[str], str]:
    """Arrivals at ``rate``: vLLM's ``burstiness`` (absent: 1) shapes Gamma gaps of cv
    1/sqrt(burstiness), 1 being Poisson and inf evenly spaced; SGLang's are Poisson."""
    b = run.doc.get("burstiness")
    if isinstance(b, float) and b == math.inf:
        return open_loop(run, rate, "constant")
    poisson = b is None or run.number("burstiness") == 1.0
    return open_loop(run, rate, "poisson" if poisson else "gamma", "burstiness")


def _fixed_lengths(run: Run, wl: Workload, completed: int, listed_: bool) -> Workload:
    """Prompt and output lengths fixed at the run's means: totals / completed requests."""
    why = ("a closed loop replays no trace" if wl.lines[0].startswith("arrival = \"closed")
           else "the file has no arrival times") if listed_ else "no request's own lengths"
    return fixed_lengths(run, wl, f"totals / completed; {why}", [
        (run.number(total, inclusive=True) / completed, total,
         f"{total} {run.doc[total]} / {completed}")
        for total in ("total_input_tokens", "total_output_tokens")])


def parse_sets(sets) -> dict[str, list[str]]:
    """``--set KEY=VALUE`` -> the TOML lines of [hardware] and [levers]: a key of either,
    VALUE a TOML value (a bare word is a string), one value (an array would sweep)."""
    out, seen = {"hardware": [], "levers": []}, set()
    keys = {k: s for s in out for k in KEYS[s]}
    for item in sets:
        key, eq, text = str(item).partition("=")
        key = key.strip()
        if not eq or key not in keys or key in FLAG_KEYS:
            why = f"set by {FLAG_KEYS[key]}" if key in FLAG_KEYS else \
                "unknown key" if eq else "not KEY=VALUE"
            raise UsageError(f"--set {clip(one_line(item), 60)}: {why}; allowed: " + (
                FLAG_KEYS.get(key) or listed([k for k in keys if k not in FLAG_KEYS], near=key)))
        if key in seen:
            raise UsageError(f"--set {key}: given twice; allowed: one value")
        seen.add(key)
        value = _value(key, text)
        if key == "profile" and isinstance(value, str):
            value = str(Path(value).resolve())
        out[keys[key]].append(f"{key} = {toml_value(value)}  # --set")
    return out


def _value(key: str, text: str):
    if "\n" in text or "\r" in text:
        raise UsageError(f"--set {key}: a line break in the value; allowed: one TOML value")
    try:
        doc = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return text.strip()  # a bare word: a string, which the reader checks
    if list(doc) != ["v"] or isinstance(doc["v"], list):
        raise UsageError(f"--set {key}={clip(one_line(text), 40)}: not one value; allowed: "
                         "one TOML value (an array would make a sweep)")
    return doc["v"]


def toml_value(v) -> str:
    """A scalar or an inline table of scalars as TOML."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k if re.fullmatch(r'[A-Za-z0-9_-]+', k) else toml_value(k)}"
                                f" = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, str):
        return '"' + "".join(c if c.isprintable() and c not in '"\\' else
                             ("\\" + c if c in '"\\' else f"\\u{ord(c):04x}")
                             for c in v) + '"'
    raise UsageError(f"{show(v)}: not a value a case can hold")


def catalog_name(ident: str) -> str | None:
    """The catalog model a file's model names: a catalog name or the Hugging Face repository of
    one, or of its ``-Instruct`` or ``-Chat`` tune (the same architecture), or a folder so named."""
    from sweep.analysis.launch import HF_IDS
    from sweep.physics.catalog import CATALOG

    def norm(s: str) -> str:
        s = s.strip().rstrip("/").rsplit("/", 1)[-1].lower()
        s = re.sub(r"-(instruct|chat)$", "", s)
        return s.removeprefix("meta-")

    known = {norm(n): n for n in CATALOG}
    known.update({norm(repo): n for n, repo in HF_IDS.items() if n in CATALOG})
    return known.get(norm(ident)) if ident.strip() else None


def model_line(found: Found, model: str | None, srv: Server) -> str:
    """[model]'s line: ``--model`` (a catalog name, or a config.json's path), else
    ``server.toml``'s, else the first model the file states (``found.models``) where it is a
    catalog model."""
    if model is not None:
        p = Path(model)
        if p.suffix == ".json" or p.is_dir() or p.is_file():
            return f"config_json = {toml_value(str(p.resolve()))}  # --model"
        return f"name = {toml_value(model)}  # --model"
    if srv.model is not None:
        key = "config_json" if srv.model.endswith(".json") else "name"
        return f"{key} = {toml_value(srv.model)}  # {SERVER_FILE}"
    for key, v in found.models:
        if isinstance(v, str) and v.strip():
            name = catalog_name(v)
            if name is None:
                raise found.run.refuse(key, f"{show(v)} is not a catalog model",
                                       "--model NAME (docs/config.md) or --model config.json")
            return f"name = {toml_value(name)}  # the file's {key}: {one_line(clip(v, 80))}"
    keys = ", ".join(k for k, _ in found.models)
    raise UsageError(f"{found.run.where}: the run states no model ({keys}); allowed: "
                     "--model NAME or --model config.json")


def case_name(path: Path, line: int | None, taken: set) -> str:
    """The file's name (without its suffixes), and its line for a file of several runs: a
    config name (``[A-Za-z0-9_.-]``), distinct from every name ``taken``."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", path.name.split(".")[0]).strip("-.")[:100] or "run"
    base = f"{stem}-{line}" if line else stem
    name, k = base, 1
    while name.lower() in taken:
        k += 1
        name = f"{base}-{k}"
    taken.add(name.lower())
    return name


#: A benchmark's ``backend`` (vLLM's and SGLang's clients name the server they drove) -> the
#: serving engine whose terms simulate it; another backend (an OpenAI-compatible endpoint)
#: names none, and the case keeps vLLM's, saying so.
BACKENDS = {"vllm": "vllm", "sglang": "sglang", "sglang-native": "sglang", "sglang-oai": "sglang",
            "trt": "trtllm", "tensorrt-llm": "trtllm"}


def engine_lines(found: Found, hardware: list[str]) -> list[str]:
    """``[hardware] engine`` from the run's ``backend`` where ``--set`` does not give it."""
    backend = found.run.doc.get("backend")
    if not isinstance(backend, str) or any(h.startswith("engine ") for h in hardware):
        return []
    engine = BACKENDS.get(backend)
    if engine is None:
        return [f"# backend {toml_value(one_line(backend)[:40])} names no engine: vLLM's terms "
                "(--set engine=...)"]
    return [] if engine == "vllm" else [f"engine = \"{engine}\"  # the run's backend"]


def case_text(kind: str, found: Found, name: str, head: dict) -> tuple[str, dict]:
    """One case's TOML and the files beside it (name -> bytes). ``head``: [hardware]'s and
    [levers]' lines, [model]'s line and, where a vLLM file is the run alone, its ``bytes``."""
    files, wl, values = {}, found.wl, found.measured
    lines = [f"# Written by `sweep import {kind}` from one run of `{TOOLS[kind]}`: "
             f"{one_line(found.run.where)}.", f"# Its workload: {wl.what}.", f"name = \"{name}\"",
             "", "[hardware]", *head["hardware"], *engine_lines(found, head["hardware"]), "",
             "[model]", head["model"], "", "[workload]"]
    if wl.trace is not None:
        files[f"{name}.trace.csv"] = ("arrival_s,prompt_tokens,output_tokens\n" + "".join(
            f"{t!r},{i},{o}\n" for t, i, o in wl.trace)).encode()
        lines.append(f"trace = \"{name}.trace.csv\"  # each request: the file's lengths")
    lines += [*wl.lines, "", "[levers]", *head["levers"], "", "[measured]"]
    if head["bytes"] and wl.reads_bench:
        files[f"{name}.bench.json"] = head["bytes"]
        lines.append(f"vllm_bench = \"{name}.bench.json\"  # the file itself, as it was written")
    else:
        lines += [f"{m} = {values[m]!r}  # {found.names[m]}" for m in METRICS if m in values]
    return "\n".join(lines) + "\n", files


def server(kind: str, gpu: str | None, gpus: int | None, sets, beside: Server) -> dict:
    """[hardware]'s and [levers]' lines from the flags (``--set`` last) over ``beside``, the
    files' ``server.toml``."""
    if not gpu and not beside.gpu:
        raise UsageError(f"--gpu: missing; allowed: the catalog GPU the runs ran on (the files "
                         f"do not say), e.g. --gpu H100-SXM, or gpu in {SERVER_FILE} beside them")
    extra = parse_sets(sets)
    own = parse_sets(beside.sets_under(sets))
    for section in own:
        extra[section] = [line.replace("# --set", f"# {SERVER_FILE}") for line in own[section]] \
            + extra[section]
    hardware = [f"gpu = {toml_value(gpu)}  # --gpu" if gpu else
                f"gpu = {toml_value(beside.gpu)}  # {SERVER_FILE}"]
    sized = any(line.split(" ")[0] in ("gpu_memory_utilization", "memory_overhead_fraction")
                for line in extra["hardware"])
    if kind == "vllm" and not sized:
        hardware.append(f"gpu_memory_utilization = {VLLM_MEMORY}  # vLLM's default")
    tp = (f"gpus = {gpus}  # --gpus" if gpus is not None else
          f"gpus = {beside.gpus}  # {SERVER_FILE}" if beside.gpus is not None else "gpus = 1")
    return {"hardware": hardware + extra["hardware"], "levers": [tp] + extra["levers"]}


def import_cases(kind: str, files, gpu: str | None, model: str | None = None,
                 gpus: int | None = None, sets=()) -> Imported:
    """The cases of every run in ``files`` (benchmark results of ``kind``), as TOML texts and
    the files to write beside them, nothing written; the server is the flags' over a file's
    ``server.toml`` (``import_server``; ``gpus`` None: its, else 1). Refusals:
    ``UsageError``, one line."""
    if kind not in KINDS:
        why = "its JSON is read by KIND aiperf" if kind == "genai-perf" else "unknown"
        raise UsageError(f"KIND {clip(one_line(kind), 30)}: {why}; allowed: {', '.join(KINDS)}")
    if not files:
        raise UsageError("FILE: none given; allowed: benchmark result files")
    res, taken, servers = Imported(), set(), {}
    read = {"guidellm": import_guidellm.found, "aiperf": import_aiperf.found}.get(kind)
    for path in map(Path, files):
        folder = path.parent.resolve()
        if folder not in servers:
            servers[folder] = beside(folder, toml_value)
        srv = servers[folder]
        head = server(kind, gpu, gpus, sets, srv)
        for f in read(path) if read else _found(kind, path):
            name = case_name(path, f.number, taken)
            whole = kind == "vllm" and f.number is None and path.stat().st_size <= MAX_TEXT_BYTES
            text, side = case_text(kind, f, name, {
                **head, "model": model_line(f, model, srv),
                "bytes": path.read_bytes() if whole else b""})
            res.cases[f"{name}.toml"] = text
            res.files.update(side)
            res.notes.append(f"{name}.toml: {f.run.where}: {f.wl.what}")
    return res


def _found(kind: str, path: Path) -> list[Found]:
    """The runs of a vLLM or SGLang file, each holding the fields every run of its tool has."""
    spec, runs = SPECS[kind], read_runs(path)
    out = []
    for run in runs:
        missing = [k for k in spec.required if k not in run.doc]
        if missing:
            raise run.refuse(missing[0], "missing", f"{TOOLS[kind]} results, which hold "
                             f"{', '.join(spec.required)}")
        wl = workload(run)
        out.append(Found(run, wl, *measured(run, spec.stats),
                         [(k, run.get(k, None)) for k in spec.models],
                         run.line if len(runs) > 1 else None))
    return out


def check(res: Imported, out: Path, sets) -> None:
    """Load every case as ``sweep validate`` would, from a scratch folder, before anything is
    written; a refusal names ``out`` and, where a flag set the key, the flag."""
    from sweep.workflows.validate import load_cases

    with tempfile.TemporaryDirectory(prefix="sweep-import-") as tmp:
        for name, data in res.written().items():
            (Path(tmp) / name).write_bytes(data)
        try:
            load_cases([Path(tmp) / name for name in res.cases])
        except ValueError as exc:
            raise _flagged(exc, sets) or UsageError(str(exc).replace(tmp, str(out))) from None


def _flagged(exc: ValueError, sets) -> UsageError | None:
    """A case's refusal of a key a flag set, as that flag's."""
    key = getattr(exc, "key", None) or ""
    reason = getattr(exc, "reason", None) or str(exc)
    flag = {"hardware.gpu": "--gpu", "levers.gpus": "--gpus", "model.name": "--model",
            "model.config_json": "--model"}.get(key)
    given = {str(s).partition("=")[0].strip(): s for s in sets}
    section, _, name = key.partition(".")
    if flag is None and section in ("hardware", "levers") and name.split(".")[0] in given:
        flag = f"--set {clip(one_line(given[name.split('.')[0]]), 60)}"
    return UsageError(f"{flag}: {reason}") if flag else None


def _targets(res: Imported, out: Path, force: bool) -> dict[Path, bytes]:
    """Every file to write, refused before anything is written: ``out`` not a folder this user
    may write, a name in it that exists (without ``force``) or is not a regular file."""
    writable(out_folder(out))
    data = {out / n: b for n, b in res.written().items()}
    for p in data:
        if p.is_symlink() or (p.exists() and not p.is_file()):
            raise UsageError(f"--out: {p} is not a regular file; allowed: a folder without it")
        if p.exists() and not force:
            raise UsageError(f"--out: {p} already exists; allowed: another folder, or --force "
                             "to replace it")
    return data


def import_runs(kind: str, files, out, gpu: str | None, model: str | None = None,
                gpus: int | None = None, sets=(), force: bool = False) -> Imported:
    """``sweep import``: build the cases, load each as ``sweep validate`` would, then write
    them and their files into ``out``, all or none."""
    res = import_cases(kind, files, gpu, model, gpus, sets)
    out = Path(out)
    data = _targets(res, out, force)
    check(res, out, sets)
    created = not out.exists()
    make_folder(out)
    try:
        write_all({p: (lambda fh, b=b: fh.write(b)) for p, b in data.items()})
    except UsageError:
        if created and not any(out.iterdir()):
            out.rmdir()
        raise
    return res
