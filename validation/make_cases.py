"""Write the validation cases (one TOML config per stage of each measured vLLM run).

    python validation/make_cases.py           # (re)write validation/fit/ and validation/holdout/
    python validation/make_cases.py --check   # exit 1 if the committed cases differ
    python validation/make_cases.py --data RUNS --out DIR   # cases of other runs, same layout

Reads ``validation/data/vllm-h100`` (see its README for provenance): per run, the server flags
(``exp-config.yaml``), the load generator's spec (``profile.json``), its resolved config
(``results/config.yaml``) and the measurements (``results/stage_N_lifecycle_metrics.json``).
Runs of the ``general`` workload go to ``fit/`` (for tuning the model against), every other
workload to ``holdout/`` (never tuned against). A stage that overloaded the server (requests
failed, 1% or more, or a mean TTFT over 5 s: a queue, not a pass, set it) becomes a flag-only
case (``[measured] unstable = true``): its latencies describe a growing queue. In the shipped
data these are the ``reasoning`` runs. Standard library only:
the two YAML files are read with a parser for their few ``key: value`` lines.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

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
    prompts = groups * int(resolved["num_prompts_per_group"])
    if prompts <= MAX_PREFIXES:
        # A prompt's full blocks are what vLLM can find cached; the shortest prompt's bound them.
        count, cached = prompts, int(prompt["min"]) // BLOCK * BLOCK
        prefix_note = [
            f"# {BLOCK}-token blocks cached while they survive in free memory, so every prompt is "
            "a shared",
            f"# prefix here, drawn at random per request: its first {cached} tokens (the "
            "shortest measured",
            "# prompt's full blocks), then the rest of the measured prompt length."]
    else:  # more prompts than the simulator's prefixes: only the system prompts are shared
        count, cached = groups, system
        prefix_note = [
            f"# {BLOCK}-token blocks cached while they survive in free memory; {prompts} prompts "
            f"are more than the",
            f"# simulator's {MAX_PREFIXES} prefixes, so only the {groups} system prompts are "
            "shared prefixes here."]
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
        f"arrival_rate = {float(rate)!r}",
        f"duration_s = {float(duration)!r}",
        "drain_s = 60.0",
        "# The generator makes num_groups x num_prompts_per_group prompts (results/config.yaml,",
        f"# its resolved config: {groups} x {resolved['num_prompts_per_group']}; profile.json's "
        f"num_unique_system_prompts, {spec['num_unique_system_prompts']}, is not what ran),",
        f"# each a {system}-token system prompt shared by its group plus a question, and sends "
        "them in",
        "# turn (request i sends prompt i mod count). With prefix caching vLLM finds a prompt's "
        "full",
        *prefix_note,
        f"prefix_count = {count}",
        f"prefix_tokens = {cached}",
        "prefix_share = 1.0",
        f'prompt_tokens = {{ dist = "uniform", low = {int(prompt["min"]) - cached}, '
        f'high = {int(prompt["max"]) - cached} }}',
        *output_comment(output, ttft, e2e),
        f"output_tokens = {out_tokens}",
        "",
        "[levers]  # the server flags; the rest at vLLM v1's defaults",
        'batching = "continuous"',
        'kv_cache = "paged"',
        "block_size = 16",
        f"gpus = {int(server['tensor_parallelism'])}",
        f"max_batch = {int(server['max_num_seqs'])}",
        f"max_num_batched_tokens = {int(server['max_num_batched_tokens'])}",
        f"max_seq_len = {int(server['max_model_len'])}",
        "prefix_cache = true",
        "",
        "[run]",
        "seeds = 3",
        "",
        "[measured]",
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


def cases(data: Path = DATA, out: Path = HERE) -> dict[Path, str]:
    """Every case file's path -> its text."""
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
    return sorted(p for g in GROUPS for p in (out / g).glob("*.toml")
                  if p.read_text().startswith(HEADER))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the cases on disk differ from what would be "
                         "written")
    ap.add_argument("--data", type=Path, default=DATA,
                    help="a folder of runs/ and models/ in this layout (default: the shipped one)")
    ap.add_argument("--out", type=Path, default=HERE,
                    help="where fit/ and holdout/ are written (default: beside this script)")
    args = ap.parse_args(argv)
    data, out = args.data.resolve(), args.out.resolve()
    want = cases(data, out)
    stale = [p for p in generated(out) if p not in want]
    differ = [p for p, text in want.items() if not p.is_file() or p.read_text() != text]
    if args.check:
        for p in differ + stale:
            print(f"{p.relative_to(out)}: {'stale' if p in stale else 'out of date'}; rerun "
                  "validation/make_cases.py", file=sys.stderr)
        if not differ and not stale:
            print(f"{len(want)} cases up to date")
        return 1 if differ or stale else 0
    for p in stale:
        p.unlink()
    for p, text in want.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.is_file() or p.read_text() != text:
            p.write_text(text)
    print(f"{len(want)} cases ({len(differ)} written, {len(stale)} removed) in "
          f"{', '.join(sorted({p.parent.name + '/' for p in want}))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
