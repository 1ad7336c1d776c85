"""``sweep plan``: a capacity question in one line (a model, a GPU, the mean lengths, the p95
targets and the load) answered by a capacity search over the designs that make sense for it.

``build`` writes the question as a config, the TOML ``sweep capacity`` reads (docs/config.md):
vLLM's server (continuous batching, a paged KV cache) at every tensor-parallel degree that holds
the model up to ``gpus_max``, expert parallelism and data-parallel attention for a mixture of
experts, the weight precisions at or below the checkpoint's, 16- and 8-bit KV, a speculative
draft of 0, 2 or 4 tokens, the GPU's fitted factors, and replicas through the search's fleets.
``plan`` runs it as ``sweep capacity`` does into a results folder, draws its frontier and
returns the answer: the cheapest fleet, and the designs one server of which carries the load.
Every refusal is one line naming the flag, raised before anything is written.
"""
from __future__ import annotations

import math
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from sweep.errors import ConfigError, UsageError, clip, got, listed, one_line, show
from sweep.files import MAX_TEXT_BYTES, FileRefused, check_table, out_file, out_folder, \
    write_file
from sweep.physics.catalog import CATALOG as MODELS
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.hf_config import load_hf_config
from sweep.physics.models import Model
from sweep.study.config import Study, parse_study
from sweep.study.fields import DOMAIN_GPUS, GPUS, KV_BITS, WEIGHT_BITS
from sweep.workflows.capacity_study import CapacityOutcome, capacity
from sweep.workflows.importing import parse_sets, toml_value

#: Seeds per design: a capacity is the load 90% of them carry, so here every one of the 4.
SEEDS = 4
#: Requests an open-loop probe sends at any rate (a benchmark's count), so that a fast design's
#: probes cost no more than a slow one's; run on for ``DRAIN_S`` after the last, then censored.
PROBE_REQUESTS = 500
DRAIN_S = 30.0
#: A closed loop's measured and warm-up requests per client (InferenceX's).
PER_CLIENT, WARMUP_PER_CLIENT = 10, 2
#: Speculative draft lengths searched: none, and a few tokens.
DRAFTS = (0, 2, 4)
#: Pipeline stages a plan tries beyond one node, and so its widest server.
STAGES = (2, 4, 8, 16)
MAX_PLAN_GPUS = DOMAIN_GPUS * STAGES[-1]
#: What each flag allows, for its refusals.
ALLOWED = {"--isl": "a whole number of prompt tokens >= 1",
           "--osl": "a whole number of output tokens >= 1",
           "--ttft-ms": "a positive number of milliseconds (the p95 time to first token)",
           "--tpot-ms": "a positive number of milliseconds (the p95 gap between tokens)",
           "--rate": "a positive number of requests/s",
           "--concurrency": "a whole number of clients >= 1",
           "--gpus-max": f"a whole number of GPUs per server from 1 to {MAX_PLAN_GPUS} (beyond "
                         "a node, whole nodes of pipeline stages)"}
#: The config's keys that a flag sets, for refusals of their values.
FLAG_KEYS = {"hardware.gpu": "--gpu", "model": "--model", "workload.prompt_tokens": "--isl",
             "workload.output_tokens": "--osl", "workload.arrival_rate": "--rate",
             "workload.concurrency": "--concurrency", "brief.p95_ttft_s": "--ttft-ms",
             "brief.p95_itl_ms": "--tpot-ms", "levers.gpus": "--gpus-max"}


@dataclass(frozen=True)
class Question:
    """Serve ``model`` (a catalog name or a Hugging Face config.json) on ``gpu`` GPUs, at most
    ``gpus_max`` a server; prompts of ``isl`` and answers of ``osl`` tokens on average
    (exponential lengths); p95 TTFT within ``ttft_ms`` and p95 gap between tokens within
    ``tpot_ms``; at ``rate`` requests/s (open loop) or for ``concurrency`` clients (closed
    loop). ``sets``: ``KEY=VALUE`` texts for any other [hardware] or [levers] key, as
    ``sweep import --set`` takes them; a searched lever so set is searched at that value."""

    model: str
    gpu: str
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    rate: float | None = None
    concurrency: int | None = None
    gpus_max: int = DOMAIN_GPUS
    sets: tuple = ()

    @property
    def load(self) -> float:
        return self.rate if self.rate is not None else self.concurrency

    @property
    def load_text(self) -> str:
        return (f"{self.rate:g} requests/s" if self.rate is not None
                else f"{self.concurrency} clients")


@dataclass
class Plan:
    """The answer: the config run, the capacity search's outcome (``.capacity``, ``.fleet``,
    ``.meta``, ``.folder``), the designs one server of which carries the load, the cheapest
    fleets (of a closed loop: servers = clients over a server's, not simulated whole), and the
    frontier's files."""

    question: Question
    config: str
    outcome: CapacityOutcome
    passing: pd.DataFrame
    fleet: pd.DataFrame | None
    frontier: tuple

    @property
    def text(self) -> str:
        return render_plan(self)


def _check(q: Question):
    """The numbers and the GPU; a refusal names the flag."""
    if (q.rate is None) == (q.concurrency is None):
        raise UsageError(f"--rate/--concurrency: {'both' if q.rate is not None else 'neither'}"
                         " given; allowed: one of --rate R (requests/s, an open loop) or "
                         "--concurrency C (clients, a closed loop)")
    for flag, v, whole in (("--isl", q.isl, True), ("--osl", q.osl, True),
                           ("--ttft-ms", q.ttft_ms, False), ("--tpot-ms", q.tpot_ms, False),
                           ("--rate", q.rate, False), ("--concurrency", q.concurrency, True),
                           ("--gpus-max", q.gpus_max, True)):
        if v is None and flag in ("--rate", "--concurrency"):
            continue
        number = isinstance(v, int if whole else (int, float)) and not isinstance(v, bool)
        if not (number and (whole or math.isfinite(v)) and v > 0):
            raise UsageError(f"{flag}: {got(v) if v is not None else 'missing'}; allowed: "
                             f"{ALLOWED[flag]}")
    if q.gpus_max > MAX_PLAN_GPUS:
        raise UsageError(f"--gpus-max: {q.gpus_max} GPUs is more than the widest server a plan "
                         f"tries; allowed: {ALLOWED['--gpus-max']}; replicas add servers")
    if q.gpu is None:
        raise UsageError(f"--gpu: missing; allowed: {listed(GPU_CATALOG)}")
    if not isinstance(q.gpu, str) or q.gpu not in GPU_CATALOG:
        raise UsageError(f"--gpu: unknown GPU {show(q.gpu)}; allowed: "
                         f"{listed(GPU_CATALOG, near=str(q.gpu))}")
    return GPU_CATALOG[q.gpu]


def _model(q: Question) -> tuple[Model, str]:
    """The model, and [model]'s line: a catalog name, else a config.json (or its folder)."""
    if not isinstance(q.model, str) or not q.model:
        raise UsageError(f"--model: {'missing' if q.model is None else got(q.model)}; allowed: "
                         f"{listed(MODELS)}, or a Hugging Face config.json")
    if q.model in MODELS:
        return MODELS[q.model], f"name = {toml_value(q.model)}"
    p = Path(q.model)
    if p.suffix != ".json" and not p.exists():
        raise UsageError(f"--model: unknown model {show(q.model)}; allowed: "
                         f"{listed(MODELS, near=q.model)}, or a Hugging Face config.json")
    p = p.resolve()
    f = p / "config.json" if p.is_dir() else p
    try:
        check_table(f, "a readable Hugging Face config.json", MAX_TEXT_BYTES)
        model = load_hf_config(f)
    except (FileRefused, ValueError) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        allowed = getattr(exc, "allowed", None) or "a readable Hugging Face config.json"
        raise UsageError(f"--model: {show(str(f))}: {one_line(reason)}; allowed: "
                         f"{allowed}") from None
    return model, f"config_json = {toml_value(str(p))}"


def _degrees(q: Question, gpu, widest: int) -> list[int]:
    """Tensor-parallel degrees up to ``widest`` within a node: one GPU where the GPU has no
    interconnect."""
    node = min(widest, DOMAIN_GPUS, gpu.node_gpus)
    return [g for g in GPUS if g <= node] if gpu.interconnect_gbs > 0 else [1]


def _stages(gpu, widest: int) -> list[int]:
    """Pipeline stages of a full node each, over nodes linked by a network, up to ``widest``
    GPUs (none for a GPU timed by a measured fit)."""
    node = min(DOMAIN_GPUS, gpu.node_gpus)
    if gpu.timing == "linear" or gpu.interconnect_gbs <= 0 or gpu.internode_gbps <= 0:
        return []
    return [s for s in STAGES if s * node <= widest]


def _levers(model: Model, degrees: list[int], widest: int,
            stages: list[int] = ()) -> tuple[dict, list[dict]]:
    """[levers] (key -> value or list) and the [[exclude]] tables. A mixture of experts also
    tries its experts sharded (expert parallelism), alone or shared by data-parallel attention
    ranks that fill the server (vLLM's wide-EP layout). Beyond a node, ``stages`` of the
    node's GPUs hold the layers (pipeline parallelism), without ranks."""
    lv = {"batching": "continuous", "kv_cache": "paged", "gpus": degrees,
          "weight_bits": [b for b in WEIGHT_BITS if b <= model.native_nominal_bits],
          "kv_bits": list(KV_BITS), "draft_tokens": list(DRAFTS)}
    staged = []
    if stages:
        lv["pipeline_parallel"] = [1, *stages]
        staged = [{"gpus": [g for g in degrees if g != degrees[-1]],
                   "pipeline_parallel": list(stages)}] if len(degrees) > 1 else []
    if model.experts <= 1:
        return lv, staged
    fill = {g: max(d for d in GPUS if g * d <= max(widest, g)) for g in degrees}
    ranks = sorted({1, *fill.values()})
    if ranks == [1]:
        return {**lv, "expert_parallel": [False, True]}, []
    lv.update(expert_parallel=[False, True], data_parallel=ranks)
    out = staged + [{"expert_parallel": False, "data_parallel": ranks[1:]}]
    for g in degrees:
        other = [d for d in ranks if d not in (1, fill[g])]
        if other:
            out.append({"gpus": g, "data_parallel": other})
    if stages:
        out.append({"pipeline_parallel": list(stages), "data_parallel": ranks[1:]})
    return lv, out


def _value(v) -> str:
    return "[" + ", ".join(map(toml_value, v)) + "]" if isinstance(v, list) else toml_value(v)


def _render(q: Question, name: str, model_line: str, levers: dict, excludes: list[dict],
            sets: dict) -> str:
    """The config's TOML; ``sets``: ``--set``'s lines by section and key, each replacing the
    plan's own value of that key."""
    open_loop = q.rate is not None
    wl = {"arrival": "poisson", "arrival_rate": q.rate, "num_requests": PROBE_REQUESTS,
          "drain_s": DRAIN_S} if open_loop else {
        "arrival": "closed", "concurrency": q.concurrency,
        "num_requests": PER_CLIENT * q.concurrency,
        "warmup_requests": WARMUP_PER_CLIENT * q.concurrency}
    wl["prompt_tokens"] = {"dist": "exponential", "mean": q.isl}
    wl["output_tokens"] = {"dist": "exponential", "mean": q.osl}
    hardware = {"gpu": q.gpu}  # the GPU's price and fitted factors unless --set
    capacity = {"target_rate": q.rate} if open_loop else {"rate_max": max(q.concurrency, 2)}
    lines = [f"# sweep plan: {name}: {q.isl}/{q.osl} tokens (exponential lengths),",
             f"# p95 TTFT <= {q.ttft_ms:g} ms, p95 gap between tokens <= {q.tpot_ms:g} ms, "
             f"{q.load_text}.",
             "# Run it with `sweep capacity FILE`; a list is a searched axis (docs/config.md).",
             f"name = {toml_value(name)}", ""]
    for section, keys in (("hardware", hardware), ("model", None), ("workload", wl),
                          ("levers", levers), ("run", {"seeds": SEEDS}),
                          ("brief", {"p95_ttft_s": {"max": q.ttft_ms / 1000.0},
                                     "p95_itl_ms": {"max": float(q.tpot_ms)}}),
                          ("capacity", capacity)):
        lines.append(f"[{section}]")
        if keys is None:
            lines += [model_line, ""]
            continue
        own = {k: _value(v) for k, v in keys.items()}
        lines += [f"{k} = {own.get(k, '')}" if k not in sets.get(section, {}) else
                  f"{k} = {sets[section][k]}" for k in {**own, **sets.get(section, {})}]
        lines.append("")
    for t in excludes:
        lines += ["[[exclude]]", *(f"{k} = {_value(v)}" for k, v in t.items()), ""]
    return "\n".join(lines)


def _sets(q: Question) -> dict[str, dict[str, str]]:
    """``--set``'s values by section and key (the text after ``KEY = ``)."""
    if isinstance(q.sets, (str, bytes)):
        raise UsageError("--set: one text, not a list of them; allowed: KEY=VALUE items")
    for item in q.sets:
        if str(item).partition("=")[0].strip() == "gpus":
            raise UsageError(f"--set {clip(one_line(item), 60)}: the plan searches the "
                             "tensor-parallel degree; allowed: --gpus-max N to bound it")
    out = {}
    for section, lines in parse_sets(q.sets).items():
        out[section] = dict(line.split(" = ", 1) for line in lines)
    return out


def _refusal(exc: ConfigError, q: Question) -> UsageError:
    """A refusal of the built config as one of a flag's (``--set`` first, being the user's)."""
    key = exc.key or ""
    section, _, name = key.partition(".")
    given = {str(s).partition("=")[0].strip(): s for s in q.sets}
    reason = exc.reason or str(exc)
    if section in ("hardware", "levers") and name.split(".")[0] in given:
        return UsageError(f"--set {clip(one_line(given[name.split('.')[0]]), 60)}: {reason}")
    flag = next((f for k, f in FLAG_KEYS.items() if key == k or key.startswith(k + ".")), None)
    return UsageError(f"{flag}: {reason}" if flag else f"the plan's config: {exc}")


def _parse(q: Question, text: str) -> Study:
    try:
        return parse_study(text, "<plan>")
    except ConfigError as exc:
        raise _refusal(exc, q) from None


def _study(q: Question) -> tuple[str, Study]:
    """The config's text and study, at the degrees that hold the model (some precision)."""
    gpu = _check(q)
    model, model_line = _model(q)
    if q.isl + q.osl > model.max_context:
        raise UsageError(f"--isl/--osl: {show(q.isl)} + {show(q.osl)} tokens on average exceed "
                         f"{model.name}'s context of {model.max_context}; allowed: a sum of at "
                         f"most {model.max_context}")
    sets = _sets(q)

    def text(name: str, widest: int, degrees=None) -> str:
        levers, excludes = _levers(model, degrees or _degrees(q, gpu, widest),
                                   min(widest, DOMAIN_GPUS), _stages(gpu, widest))
        return _render(q, name, model_line, levers, excludes, sets)

    try:
        study = parse_study(text("plan", q.gpus_max), "<plan>")
    except ConfigError as exc:
        if not (exc.reason or "").startswith("nothing left to run: no design fits"):
            raise _refusal(exc, q) from None
        raise _no_fit(q, gpu, model, exc, text) from None
    degrees = sorted({p.design.gpus for p in study.points})
    name = f"plan-{model.name}-{q.gpu}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", name)[:128]
    final = text(name, q.gpus_max, degrees)
    return final, _parse(q, final)


def _no_fit(q: Question, gpu, model: Model, exc: ConfigError, text) -> UsageError:
    """No design holds the model: name --gpus-max where a wider server would, else the model
    and the GPU."""
    example = exc.reason.partition("(e.g. ")[2].rpartition(")")[0] or exc.reason
    node = min(DOMAIN_GPUS, gpu.node_gpus)
    wider = [w for w in (DOMAIN_GPUS, *(s * node for s in _stages(gpu, MAX_PLAN_GPUS)))
             if w > q.gpus_max and gpu.interconnect_gbs > 0]
    for w in wider:
        try:
            wide = parse_study(text("plan", w), "<plan>")
        except ConfigError:
            continue
        least = min(p.design.server_gpus for p in wide.points)
        return UsageError(f"--gpus-max: {model.name} fits on no server of at most "
                          f"{q.gpus_max} x {q.gpu} (e.g. {example}); allowed: at least "
                          f"{least}")
    return UsageError(f"--model/--gpu: {model.name} fits on no server of at most "
                      f"{max([q.gpus_max, *wider]) if gpu.interconnect_gbs > 0 else 1} x "
                      f"{q.gpu} (e.g. {example}); allowed: a smaller model or a GPU with more "
                      "memory")


def build(q: Question) -> str:
    """The question as a config (TOML), read back as ``sweep capacity`` reads it; a refusal
    names the flag at fault."""
    return _study(q)[0]


def write_config(q: Question, path, force: bool = False) -> Path:
    """``build`` written to ``path`` (an existing file only with ``force``), nothing run."""
    text = build(q)
    path = out_file(Path(path), force, flag="--write-config")
    write_file(path, text, flag="--write-config")
    return path


def plan(q: Question, out=None, *, force: bool = False, progress=None,
         echo: Callable[[str], None] = lambda line: None) -> Plan:
    """Build the question's config and run its capacity search into ``out`` (default
    ``results/plan-<model>-<gpu>``; an existing folder only with ``force``, which replaces its
    results as ``sweep capacity --force`` does), with its frontier; returns the ``Plan``."""
    text, study = _study(q)
    out = out_folder(Path(out) if out is not None else Path("results") / study.name)
    if out.exists() and not force:
        raise UsageError(f"--out: {out} already exists; allowed: another folder, or --force to "
                         "replace its results")
    with tempfile.TemporaryDirectory(prefix="sweep-plan-") as tmp:
        config = Path(tmp) / f"{study.name}.toml"
        config.write_text(text, encoding="utf-8")
        res = capacity(config, out, force=force, progress=progress, echo=echo)
    cap = res.capacity
    column = "max_rate" if q.rate is not None else "max_concurrency"
    passing = cap[cap[column] >= q.load * (1 - 1e-9)].reset_index(drop=True)
    fleet = res.fleet if q.rate is not None else closed_fleet(cap, q.concurrency)
    return Plan(q, text, res, passing, fleet, _frontier(res))


def closed_fleet(cap: pd.DataFrame, clients: int) -> pd.DataFrame:
    """Servers for ``clients``: each design that carries some, as many copies as the clients
    over its capacity (rounded up), cheapest first; not simulated whole."""
    ok = cap[cap["max_concurrency"] > 0].copy()
    ok["replicas"] = [math.ceil(clients / c) for c in ok["max_concurrency"]]
    ok["fleet_usd_per_hour"] = ok["replicas"] * ok["usd_per_hour"]
    return ok.sort_values(["fleet_usd_per_hour", "cost_per_mtok_at_max", "design"],
                          kind="stable").reset_index(drop=True)


def _frontier(res) -> tuple:
    """Capacity against dollars per hour of the designs that carry load, as ``sweep frontier``
    draws a capacity result: ``frontier.parquet``, ``.png`` and ``.svg`` in the folder."""
    from sweep.analysis.frontier import frontier, plot_frontier

    carrying = res.capacity[res.capacity["max_rate"] > 0].reset_index(drop=True)
    if not len(carrying):
        return ()
    front = frontier(carrying, ["usd_per_hour", "-max_rate"])
    out = res.folder
    return plot_frontier(carrying, "usd_per_hour", "-max_rate", [], out / "frontier.png",
                         out / "frontier.svg", title=f"{res.meta['name']}: capacity of the "
                         f"{len(carrying)} designs that carry load",
                         also={out / "frontier.parquet": lambda fh: front.to_parquet(
                             fh, index=False)})


def render_plan(p: Plan) -> str:
    """The answer in plain words: what was searched, the cheapest fleet, and the best designs
    by cost at capacity, each with the ``vllm serve`` command that runs it."""
    from sweep.analysis.report import launch_lines, levers_text, own_command, wrap

    q, res = p.question, p.outcome
    cap, levers = res.capacity, [a for a in res.meta["axes"] if a in res.capacity.columns]
    closed = q.rate is None
    lines = wrap(f"Plan: {res.meta['name']}: prompts of {q.isl} and answers of {q.osl} tokens "
                 f"on average (exponential), p95 TTFT <= {q.ttft_ms:g} ms, p95 gap between "
                 f"tokens <= {q.tpot_ms:g} ms, {q.load_text}.", indent="", more="  ")
    lines += wrap(f"Searched {len(cap)} designs ({_space(cap, levers)}) x {len(res.meta['seeds'])}"
                  f" seeds: {res.simulations} simulations in {res.seconds:.1f} s -> "
                  f"{res.folder}", indent="", more="  ")
    fleet = p.fleet
    if closed and fleet is not None and len(fleet):
        row = fleet.iloc[0]
        lines += wrap(f"Cheapest fleet for {q.load_text}: {int(row['replicas'])} x "
                      f"({levers_text(row, levers)}), {_money(row['fleet_usd_per_hour'])}/hour;"
                      f" a server carries {int(row['max_concurrency'])} clients (servers = "
                      "clients over that, not simulated whole).", indent="")
        lines += launch_lines(own_command(row))
    elif not closed and fleet is not None and fleet["confirmed"].any():
        row = fleet[fleet["confirmed"]].iloc[0]
        lines += wrap(f"Cheapest fleet for {q.load_text}: {int(row['replicas'])} x "
                      f"({levers_text(row, levers)}), {_money(row['fleet_usd_per_hour'])}/hour, "
                      f"{_money(row['cost_per_mtok'])} per million tokens (simulated whole: "
                      f"{row['p_pass']:.0%} of seeds meet the targets).", indent="")
        lines += launch_lines(own_command(row))
    else:
        lines.append(f"No fleet was found for {q.load_text} within the targets.")
    carrying = cap[cap["max_rate"] > 0].sort_values(["cost_per_mtok_at_max", "design"])
    lines.append(f"{len(p.passing)} of {len(cap)} designs carry {q.load_text} on one server; "
                 "the best by cost at capacity:")
    column = "max_concurrency" if closed else "max_rate"
    for _, row in carrying.head(3).iterrows():
        n = math.ceil(q.load / row[column] - 1e-9)
        unit = "clients" if closed else "requests/s"
        lines += wrap(f"design {int(row['design'])}: {row[column]:.4g} {unit}, "
                      f"{_money(row['cost_per_mtok_at_max'])} per million tokens at capacity, "
                      f"{_money(row['usd_per_hour'])}/hour, bound by {row['binding']}; "
                      f"{'one server' if n == 1 else f'{n} servers'} for the load | "
                      f"{levers_text(row, levers)}")
        lines += launch_lines(own_command(row))
    lines += wrap(f"Every design: sweep report {res.folder}; the frontier: "
                  f"{res.folder / 'frontier.png'}. To search further, add --write-config "
                  "FILE, edit it and run sweep capacity FILE.", indent="", more="  ")
    return "\n".join(lines)


def _space(cap: pd.DataFrame, levers: list[str]) -> str:
    """The searched levers and their values, in few words."""
    return "; ".join(f"{k} " + "/".join(str(v).lower() for v in sorted(cap[k].unique()))
                     for k in levers)


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 1 else f"${x:.3g}"
