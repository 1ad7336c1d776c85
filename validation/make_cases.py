"""Write the validation cases (one TOML config per stage of each measured vLLM run).

    python validation/make_cases.py           # (re)write validation/fit/ and validation/holdout/
    python validation/make_cases.py --check   # exit 1 if the committed cases differ
    python validation/make_cases.py --data RUNS --out DIR   # cases of other runs, either layout

Reads ``validation/data/vllm-h100`` and ``validation/data/blis-vllm`` (see their README for
provenance). vllm-h100 (``runs/``): per run, the server flags
(``exp-config.yaml``), the load generator's spec (``profile.json``), its resolved config
(``results/config.yaml``) and the measurements (``results/stage_N_lifecycle_metrics.json``).
Runs of the ``general`` workload go to ``fit/`` (for tuning the model against), every other
workload to ``holdout/`` (never tuned against). A stage that overloaded the server (requests
failed, 1% or more, or a mean TTFT over 5 s: a queue, not a pass, set it) becomes a flag-only
case (``[measured] unstable = true``): its latencies describe a growing queue. In the shipped
data these are the ``reasoning`` runs. blis-vllm (``measured.csv``): per run and stage, the
measured milliseconds, with the server and workload of ``specs.json`` (or, for a run without a
spec, of the runs with one that ran the same named workload); ``BLIS_SPLIT`` says which runs are
fitted. Standard library only: the two YAML files are read with a parser for their few
``key: value`` lines.
"""
from __future__ import annotations

import csv
import json
import os
import re
import statistics
import sys
from pathlib import Path

import case_files

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "vllm-h100"
FIT = "general"  # the workload the defaults are fitted on; the others are held out
GROUPS = ("fit", "holdout")
#: A stage overloaded the server when this share of its requests failed, or its mean TTFT
#: exceeded this many seconds (far beyond any pass: requests waited in a queue).
OVERLOAD_FAILED = 0.01
OVERLOAD_TTFT_S = 5.0
HEADER = "# Written by validation/make_cases.py"
#: Measured percentiles -> metric suffix (the generator's names on the left).
PERCENTILES = (("mean", "mean"), ("median", "p50"), ("p90", "p90"), ("p95", "p95"),
               ("p99", "p99"))
#: vLLM's KV block (its default) and the simulator's limit on distinct shared prefixes.
BLOCK = 16
MAX_PREFIXES = 128
BLIS = HERE / "data" / "blis-vllm"
#: The blis-vllm study's GPU names -> the catalog's.
BLIS_GPUS = {"H100": "H100-SXM", "A100-80GB": "A100-80GB", "L40S": "L40S"}
#: measured.csv's metrics -> (the results' metric, its factor from milliseconds).
BLIS_METRICS = {"ttft_mean": ("mean_ttft_s", 1e-3), "ttft_p90": ("p90_ttft_s", 1e-3),
                "ttft_p99": ("p99_ttft_s", 1e-3), "e2e_mean": ("mean_e2e_s", 1e-3),
                "e2e_p90": ("p90_e2e_s", 1e-3), "e2e_p99": ("p99_e2e_s", 1e-3)}
#: The study's server flags where a run has no spec (its docs: every run used these).
BLIS_MAX_NUM_SEQS = 128
BLIS_MAX_MODEL_LEN = 4096
#: Groups x prompts per group, as every resolved config of the vllm-h100 runs shows.
BLIS_GROUPS = (10, 10)
#: Which runs (by exp_id) of the shipped blis-vllm data are fitted. H100: the general-lite runs
#: and one long-context run (Llama-2-7B's reasoning-lite) are fitted, the other workloads held
#: out, so every tensor-parallel degree has runs on both sides. A100: CodeLlama-34B fitted (two
#: loads: what identifies its KV-read efficiency), Qwen3-14B held out. L40S, with one run: its
#: first stage fitted, its second (the higher rate) held out. Runs not named here (another
#: folder's) are held out.
BLIS_SPLIT = {"60": "fit", "62": "fit", "65": "fit", "67": "fit", "40": "fit",
              "54": ("fit", "holdout")}
_BLIS_RUN = re.compile(r"^\d+-.+-tp\d+-(.+?)(?:-\d+)+$")
_RUN = re.compile(r"^\d{8}-\d{6}-(.+)$")
_STAGE = re.compile(r"^stage_(\d+)_lifecycle_metrics\.json$")


def yaml_scalars(path: Path) -> dict[str, str]:
    """The ``key: value`` lines of a YAML file with scalar values, by key (the first of each
    key, at any indent; nested structure is ignored, so look up only keys that are unique)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*):\s*(.*?)\s*$", line)
        if m and m[2] and not m[2].startswith("#"):
            out.setdefault(m[1], m[2].strip("'\""))
    return out


def num(text: str) -> str:
    """A measured value as a short TOML float (6 significant digits; they carry far less)."""
    return repr(float(f"{float(text):.6g}"))


def output_comment(output: dict, ttft: dict, e2e: dict) -> list[str]:
    """Why output_tokens is the measured median."""
    if output["min"] >= 0.9 * output["median"]:
        return [f"# The measured median (the mean is {output['mean']:.1f})."]
    return [
        f"# The measured median, not the mean: the low tail of counted output_len (down to "
        f"{output['min']:.0f})",
        "# is a client counting artefact. ignore_eos is on, and the fastest request still took "
        f"{e2e['min']:.2f} s",
        f"# end to end ({e2e['min'] / e2e['mean']:.0%} of the mean; the mean TTFT is "
        f"{ttft['mean']:.3g} s): every request generated the full length.",
    ]


def timeouts(failed: dict) -> str:
    """How the failed requests ended."""
    lat = failed.get("request_latency")
    if not lat:
        return ""
    return f"after {lat['min']:.0f}-{lat['max']:.0f} s (client timeouts)"


def relative(path: Path, start: Path) -> str:
    """``path`` relative to the folder ``start``, with forward slashes (as TOML files share)."""
    return Path(os.path.relpath(path, start)).as_posix()


def stage_lines(rate, duration) -> list[str]:
    """A stage's arrivals: its rate and duration, simulated with a 60 s drain."""
    return [f"arrival_rate = {float(rate)!r}", f"duration_s = {float(duration)!r}",
            "drain_s = 60.0"]


def prompt_lines(groups: int, per_group: int, system: int, shortest: int, longest: int,
                 lengths: str) -> list[str]:
    """The shared-prefix workload: ``groups x per_group`` prompts of ``shortest`` to
    ``longest`` tokens (``lengths`` says where those come from), each a system prompt of its
    group plus a question, sent in turn."""
    prompts = groups * per_group
    if prompts <= MAX_PREFIXES:
        # A prompt's full blocks are what vLLM can find cached; the shortest prompt's bound them.
        count, cached = prompts, shortest // BLOCK * BLOCK
        note = [
            f"# {BLOCK}-token blocks cached while they survive in free memory, so every prompt is "
            "a shared",
            f"# prefix here, drawn at random per request: its first {cached} tokens (the "
            f"shortest {lengths}",
            f"# prompt's full blocks), then the rest of the {lengths} prompt length."]
    else:  # more prompts than the simulator's prefixes: only the system prompts are shared
        count, cached = groups, system
        note = [
            f"# {BLOCK}-token blocks cached while they survive in free memory; {prompts} prompts "
            f"are more than the",
            f"# simulator's {MAX_PREFIXES} prefixes, so only the {groups} system prompts are "
            "shared prefixes here."]
    return [
        f"# each a {system}-token system prompt shared by its group plus a question, and sends "
        "them in",
        "# turn (request i sends prompt i mod count). With prefix caching vLLM finds a prompt's "
        "full",
        *note,
        f"prefix_count = {count}",
        f"prefix_tokens = {cached}",
        "prefix_share = 1.0",
        f'prompt_tokens = {{ dist = "uniform", low = {shortest - cached}, '
        f'high = {longest - cached} }}']


def server_lines(tp: int, max_num_seqs: int, batched_tokens: int, max_model_len: int,
                 extra=()) -> list[str]:
    """The server's flags as levers (and ``extra`` lines), the seeds and the head of the
    measured table."""
    return [
        "[levers]  # the server flags; the rest at vLLM v1's defaults",
        'batching = "continuous"',
        'kv_cache = "paged"',
        "block_size = 16",
        f"gpus = {tp}",
        f"max_batch = {max_num_seqs}",
        f"max_num_batched_tokens = {batched_tokens}",
        f"max_seq_len = {max_model_len}",
        "prefix_cache = true",
        *extra,
        "",
        "[run]",
        "seeds = 3",
        "",
        "[measured]",
    ]


def case_text(run: Path, stage: int, data: Path = DATA, out: Path = HERE
              ) -> tuple[str, str, str]:
    """(group, name, TOML text) of one stage of a run of ``data``, for a case under ``out``."""
    m = _RUN.match(run.name)
    if not m:
        raise ValueError(f"{run}: a run folder is named DATE-TIME-NAME")
    base = m[1]
    workload = base.rsplit("-", 1)[1]
    group = "fit" if workload == FIT else "holdout"
    name = f"{base}-stage{stage}"
    server = yaml_scalars(run / "exp-config.yaml")
    resolved = yaml_scalars(run / "results" / "config.yaml")
    profile = json.loads((run / "profile.json").read_text())
    spec = profile["data"]["shared_prefix"]
    load = profile["load"]
    arrival = {"constant": 'arrival = "constant"  # the generator sends evenly spaced requests',
               "poisson": 'arrival = "poisson"  # the generator sends Poisson arrivals'}
    if load["type"] not in arrival:
        raise ValueError(f"{run}: load type {load['type']!r}; allowed: {', '.join(arrival)}")
    rate, duration = load["stages"][stage]["rate"], load["stages"][stage]["duration"]
    meas = json.loads((run / "results" / f"stage_{stage}_lifecycle_metrics.json").read_text())
    ok, failed = meas["successes"], meas["failures"]
    if not ok["count"]:
        raise ValueError(f"{run}: stage {stage}: no request succeeded, so no lengths were "
                         "measured; allowed: stages with successes")
    prompt, output = ok["prompt_len"], ok["output_len"]
    system = int(spec["system_prompt_len"])
    out_tokens = round(output["median"])
    model_file = server["model"].rsplit("/", 1)[-1] + ".json"
    if not (data / "models" / model_file).is_file():
        raise ValueError(f"{run}: no models/{model_file}")
    lat = ok["latency"]
    ttft, e2e = lat["time_to_first_token"], lat["request_latency"]
    groups = int(resolved["num_groups"])
    per_group = int(resolved["num_prompts_per_group"])
    lines = [
        f"{HEADER} from {relative(run, out)} (stage {stage}); do not "
        "edit.",
        f"# vLLM on {server['tensor_parallelism']} x H100-SXM-80GB, {server['model']}, the "
        f"'{workload}' workload.",
        f"# Stage {stage} of {len(load['stages'])}: {rate} requests/s for {duration} s "
        "(simulated on its own, from an idle server).",
        f"# Measured: {meas['load_summary']['count']} requests sent at "
        f"{meas['load_summary']['achieved_rate']:.3f}/s; {ok['count']} succeeded, "
        f"{failed['count']} failed.",
        f"# Measured prompt_len mean {prompt['mean']:.1f} (min {prompt['min']:.0f}, max "
        f"{prompt['max']:.0f}) tokens, system prompt included;",
        f"# output_len mean {output['mean']:.1f}, median {output['median']:.0f} (min "
        f"{output['min']:.0f}, max {output['max']:.0f}); the spec asked for "
        f"{spec['output_len']} with ignore_eos.",
        f'name = "{name}"',
        "",
        "[hardware]",
        'gpu = "H100-SXM"',
        "gpu_memory_utilization = 0.9  # vLLM's default",
        "",
        "[model]",
        f'config_json = "{relative(data / "models" / model_file, out / "fit")}"',
        "",
        "[workload]",
        arrival[load["type"]],
        *stage_lines(rate, duration),
        "# The generator makes num_groups x num_prompts_per_group prompts (results/config.yaml,",
        f"# its resolved config: {groups} x {per_group}; profile.json's "
        f"num_unique_system_prompts, {spec['num_unique_system_prompts']}, is not what ran),",
        *prompt_lines(groups, per_group, system, int(prompt["min"]), int(prompt["max"]),
                      "measured"),
        *output_comment(output, ttft, e2e),
        f"output_tokens = {out_tokens}",
        "",
        *server_lines(int(server["tensor_parallelism"]), int(server["max_num_seqs"]),
                      int(server["max_num_batched_tokens"]), int(server["max_model_len"])),
    ]
    sent = meas["load_summary"]["count"]
    if failed["count"] >= OVERLOAD_FAILED * sent or ttft["mean"] > OVERLOAD_TTFT_S:
        lines += [
            f"# The server was overloaded: mean TTFT {ttft['mean']:.1f} s (p50 "
            f"{ttft['median']:.1f} s) over the successes,",
            f"# and {failed['count']} of {meas['load_summary']['count']} requests failed "
            f"{timeouts(failed)}. Only the flag is compared.",
            "unstable = true",
        ]
    else:
        lines.append("# Client-side latencies of the successful requests, seconds.")
        for key, suffix in PERCENTILES:
            lines.append(f"{suffix}_ttft_s = {num(ttft[key])}")
        for key, suffix in PERCENTILES:
            lines.append(f"{suffix}_e2e_s = {num(e2e[key])}")
        tpot = (e2e["mean"] - ttft["mean"]) / (out_tokens - 1) * 1000
        lines += [
            f"# (mean E2E - mean TTFT) / (output_tokens - 1), with output_tokens = {out_tokens} "
            "above (the",
            "# measured median, not the mean of the counted lengths; see output_tokens).",
            f"mean_tpot_ms = {num(tpot)}",
        ]
    return group, name, "\n".join(lines) + "\n"


def prompt_ratios(data: Path = DATA) -> tuple[float, float]:
    """The shortest and the longest measured prompt over the spec's ``system_prompt_len +
    question_len`` (medians over the stages of ``data``'s runs): the tokenizer and template add
    a few per cent, which a run that recorded no lengths gets too."""
    lows, highs = [], []
    for run in sorted(p for p in (data / "runs").iterdir() if p.is_dir()):
        spec = json.loads((run / "profile.json").read_text())["data"]["shared_prefix"]
        asked = int(spec["system_prompt_len"]) + int(spec["question_len"])
        for f in sorted((run / "results").glob("stage_*_lifecycle_metrics.json")):
            ok = json.loads(f.read_text())["successes"]
            if ok["count"]:
                lows.append(ok["prompt_len"]["min"] / asked)
                highs.append(ok["prompt_len"]["max"] / asked)
    return statistics.median(lows), statistics.median(highs)


def blis_workloads(data: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """A blis-layout folder's run specs by id (``specs.json``; none without one), and the
    workload shapes (shared prefix and stages) they ran, by the workload their folders name."""
    path = data / "specs.json"
    specs = ({str(e["id"]): e for e in json.loads(path.read_text())["experiments"]}
             if path.is_file() else {})
    rows = blis_rows(data) if specs else {}
    shapes: dict[str, dict] = {}
    for r in rows.values():
        e = specs.get(str(r["exp_id"]))
        if e is not None:
            shape = e["workload"]["inference_perf"]
            if shapes.setdefault(r["workload"], shape) != shape:
                raise ValueError(f"{data}: runs of workload {r['workload']!r} differ in spec")
    return specs, shapes


def blis_specs(data: Path, rows) -> dict[str, dict]:
    """Per run (experiment folder): its server and workload spec: ``specs.json``'s entry, or
    for a run without one, the workload its folder names as the runs with specs ran it (this
    folder's, else the shipped blis-vllm's), else as the named profile (``NAME.profile.yaml``,
    ``-lite`` dropped) gives it."""
    specs, shapes = blis_workloads(data)
    if data != BLIS:
        shapes = {**blis_workloads(BLIS)[1], **shapes}
    out = {}
    for folder, r in rows.items():
        e = specs.get(str(r["exp_id"]))
        if e is None:
            shape = shapes.get(r["workload"]) or named_profile(data, r["workload"])
            if shape is None:
                raise ValueError(f"{data}: run {folder}: no spec, and no run or profile names "
                                 f"workload {r['workload']!r}")
            e = {"max_num_seqs": BLIS_MAX_NUM_SEQS, "workload": {"inference_perf": shape}}
        out[folder] = e
    return out


def named_profile(data: Path, workload: str) -> dict | None:
    """The shared prefix and stages of a named load-generator profile (JSON text in
    ``NAME.profile.yaml``), in this folder or the shipped one."""
    name = workload.removesuffix("-lite") + ".profile.yaml"
    for folder in (data, BLIS):
        if (folder / name).is_file():
            profile = json.loads((folder / name).read_text())
            return {"shared_prefix": profile["data"]["shared_prefix"],
                    "stages": profile["load"]["stages"]}
    return None


def blis_rows(data: Path) -> dict[str, dict]:
    """``measured.csv`` by run: its columns of the first row (``workload`` as the folder names
    it: the column says ``general`` for ``general-lite``), and ``stages``: stage index ->
    metric -> the measured milliseconds (the whole run, stage -1, left out)."""
    runs: dict[str, dict] = {}
    with open(data / "measured.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            m = _BLIS_RUN.match(row["experiment_folder"])
            if not m:
                raise ValueError(f"{data}: run {row['experiment_folder']!r}: a run folder is "
                                 "named ID-MODEL-tpN-WORKLOAD-N")
            r = runs.setdefault(row["experiment_folder"], {**row, "workload": m[1], "stages": {}})
            stage = int(row["stage_index"])
            if stage >= 0:
                r["stages"].setdefault(stage, {})[row["metric_name"]] = float(row["actual"])
    return runs


def blis_case_text(folder: str, r: dict, spec: dict, stage: int, ratios, data: Path, out: Path
                   ) -> tuple[str, str, str]:
    """(group, name, TOML text) of one stage of a run in ``measured.csv``."""
    name = f"{folder}-stage{stage}"
    split = BLIS_SPLIT.get(r["exp_id"], "holdout")
    group = split if isinstance(split, str) else split[stage]
    gpu = BLIS_GPUS.get(r["hardware"])
    if gpu is None:
        raise ValueError(f"{data}: run {folder}: hardware {r['hardware']!r}; allowed: "
                         f"{', '.join(BLIS_GPUS)}")
    model_file = r["model"].rsplit("/", 1)[-1].lower() + ".json"
    if not (data / "models" / model_file).is_file():
        raise ValueError(f"{data}: run {folder}: no models/{model_file}")
    shape = spec["workload"]["inference_perf"]
    prefix, stages = shape["shared_prefix"], shape["stages"]
    rate, duration = stages[stage]["rate"], stages[stage]["duration"]
    system = int(prefix["system_prompt_len"])
    asked = system + int(prefix["question_len"])
    shortest, longest = round(asked * ratios[0]), round(asked * ratios[1])
    measured = r["stages"][stage]
    if "total_kv_blocks" in spec:
        blocks = [f"kv_blocks = {int(spec['total_kv_blocks'])}  # as the server's log reported"]
        where = "specs.json"
    else:
        blocks = []
        where = f"no spec of this run: the '{r['workload']}' runs' specs"
    utilization = float(r["gpu_mem_util"]) if r["gpu_mem_util"] else 0.9
    tp = int(r["tp"])
    lines = [
        f"{HEADER} from {relative(data / 'measured.csv', out)} (run {folder}, stage "
        f"{stage}); do not edit.",
        f"# vLLM 0.15 on {tp} x {gpu}, {r['model']}, the '{r['workload']}' workload ({where}).",
        f"# Stage {stage} of {len(stages)}: {rate} requests/s for {duration} s (simulated on its "
        "own, from an idle server).",
        "# No lengths were recorded: prompts are the spec's system_prompt_len + question_len = "
        f"{asked}",
        f"# tokens times the measured ratio of the vllm-h100 runs ({ratios[0]:.3f} to "
        f"{ratios[1]:.3f}: tokenizer and template);",
        f"# outputs the spec's output_len, {prefix['output_len']}, generated in full "
        "(ignore_eos).",
        f'name = "{name}"',
        "",
        "[hardware]",
        f'gpu = "{gpu}"',
        f"gpu_memory_utilization = {utilization!r}" + ("" if r["gpu_mem_util"] else
                                                       "  # vLLM's default"),
        "",
        "[model]",
        f'config_json = "{relative(data / "models" / model_file, out / group)}"',
        "",
        "[workload]",
        'arrival = "constant"  # the generator sends evenly spaced requests',
        *stage_lines(rate, duration),
        f"# The generator makes {BLIS_GROUPS[0]} x {BLIS_GROUPS[1]} prompts (every resolved "
        "config of the vllm-h100 runs;",
        f"# the spec's {prefix['num_unique_system_prompts']} system prompts x "
        f"{prefix['num_users_per_system_prompt']} users is not what ran there),",
        *prompt_lines(*BLIS_GROUPS, system, shortest, longest, "estimated"),
        f"output_tokens = {int(prefix['output_len'])}",
        "",
        *server_lines(tp, int(spec["max_num_seqs"]), int(float(r["max_num_batched_tokens"])),
                      BLIS_MAX_MODEL_LEN, blocks),
    ]
    if measured["ttft_mean"] * 1e-3 > OVERLOAD_TTFT_S:
        lines += [f"# The server was overloaded: mean TTFT {measured['ttft_mean'] * 1e-3:.1f} s. "
                  "Only the flag is compared.", "unstable = true"]
    else:
        lines.append("# Client-side latencies, seconds.")
        for metric, (key, scale) in BLIS_METRICS.items():
            if metric in measured:
                lines.append(f"{key} = {num(measured[metric] * scale)}")
        out_tokens = int(prefix["output_len"])
        tpot = (measured["e2e_mean"] - measured["ttft_mean"]) / (out_tokens - 1)
        lines += [
            f"# (mean E2E - mean TTFT) / (output_tokens - 1), with output_tokens = {out_tokens} "
            "above (the",
            "# study's itl_mean divides by the counted outputs, which undercount: see "
            "data/README.md).",
            f"mean_tpot_ms = {num(tpot)}"]
    return group, name, "\n".join(lines) + "\n"


def blis_cases(data: Path, out: Path) -> dict[Path, str]:
    """Every case of a folder in the ``blis-vllm`` layout: its path -> its text."""
    rows = blis_rows(data)
    specs = blis_specs(data, rows)
    ratios = prompt_ratios()
    found = {}
    for folder, r in rows.items():
        for stage in sorted(r["stages"]):
            group, name, text = blis_case_text(folder, r, specs[folder], stage, ratios, data, out)
            found[out / group / f"{name}.toml"] = text
    return found


def cases(data: Path = DATA, out: Path = HERE) -> dict[Path, str]:
    """Every case file's path -> its text: of runs in the vllm-h100 layout, or of a
    ``measured.csv`` in the blis-vllm layout."""
    if (data / "measured.csv").is_file():
        return blis_cases(data, out)
    found: dict[Path, str] = {}
    for run in sorted(p for p in (data / "runs").iterdir() if p.is_dir()):
        stages = sorted(int(m[1]) for m in map(_STAGE.match,
                                               (f.name for f in (run / "results").iterdir())) if m)
        for stage in stages:
            group, name, text = case_text(run, stage, data, out)
            found[out / group / f"{name}.toml"] = text
    return found


def generated(out: Path = HERE) -> list[Path]:
    """The case files on disk that this script wrote."""
    return case_files.generated(out, GROUPS, HEADER)


def main(argv: list[str] | None = None) -> int:
    ap = case_files.parser(__doc__)
    ap.add_argument("--data", type=Path, action="append",
                    help="a folder of runs in either layout (repeatable; default: the shipped "
                         "vllm-h100 and blis-vllm folders)")
    ap.add_argument("--out", type=Path, default=HERE,
                    help="where fit/ and holdout/ are written (default: beside this script)")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    want = {}
    for data in args.data or (DATA, BLIS):
        want.update(cases(data.resolve(), out))
    code, differ, stale = case_files.sync(want, generated(out), out, "validation/make_cases.py",
                                          args.check)
    if args.check:
        return code
    print(f"{len(want)} cases ({len(differ)} written, {len(stale)} removed) in "
          f"{', '.join(sorted({p.parent.name + '/' for p in want}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
