"""Write the disaggregated closed-loop cases: one TOML config per measured run of a real SGLang or
TensorRT-LLM deployment of prefill and decode workers in
``validation/data/aic-engines/silicon_engines_disagg_fit.csv`` (``data/aic-engines/README.md``
gives the provenance).

    python validation/make_disagg_cases.py           # (re)write validation/disagg/fit|holdout/
    python validation/make_disagg_cases.py --check   # exit 1 if the committed cases differ

Each case is a design with disaggregated pools (``prefill_gpus``, ``decode_gpus``, each pool's
servers, ``prefill_workers`` and ``decode_workers``, its attention ranks and whether its experts
are sharded) under the run's engine (``[hardware] engine``), on the KV link's default (one
400 Gb/s NIC a GPU).

- **Rows used:** the InferenceX database's disaggregated runs (NVIDIA's Dynamo recipes) on
  H200, B200, GB200 and GB300 that state their workers and layouts, of DeepSeek-R1/V3 (FP8 and
  NVFP4, as ``make_engine_cases.py`` states them).
- **Skipped rows** (counted in the summary): H100 (its decode pools are 16 GPUs of tensor
  parallelism across nodes, which servesweep does not model); attention ranks whose experts are
  sliced over every GPU rather than sharded (servesweep's ranks share sharded experts only);
  more than 256 clients (minutes a case); a copy of one run under another label.
- **The server:** the Dynamo recipes' flags are not in the rows or the data's sources, so each
  case takes the flags of InferenceX's single-node launch script for the same engine, model and
  GPU (``make_engine_cases.SERVERS``: the token budget, the KV cache's precision, the memory
  share; GB200 and GB300, which have no single-node script, the B200's), and says so. The client
  is InferenceX's (``req_rate: inf``, N clients; its warm-up and prompt counts are assumed the
  single-node client's).
- **The split:** per engine and GPU, rows sorted by (model, layout, prompt length, clients);
  the second of every three is fitted (``fit/``), the rest held out (``holdout/``).

Standard library only.
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import case_files
from make_closed_cases import client_lines, relative, source_fields
from make_engine_cases import (ENGINES, GPUS, MODELS, SERVERS, TRT_MEMORY, ModelCase,
                               measured_lines, model_lines)

HERE = Path(__file__).resolve().parent
CSV = HERE / "data" / "aic-engines" / "silicon_engines_disagg_fit.csv"
OUT = HERE / "disagg"
GROUPS = ("fit", "holdout")
HEADER = "# Written by validation/make_disagg_cases.py"
MAX_CLIENTS = 256
#: The GPUs of the rows: the single-node ones and the NVL72 racks (one NVLink domain each).
DISAGG_GPUS = {**GPUS, "gb200": "GB200", "gb300": "GB300"}
#: The racks' GPUs take the B200's single-node launch flags (InferenceX has none of their own).
SCRIPT_GPU = {"GB200": "B200", "GB300": "B200"}


def pool(r: dict, side: str) -> tuple[int, int, bool]:
    """A worker's (GPUs a rank, attention data-parallel ranks, experts sharded)."""
    def n(key: str) -> int:
        v = r[f"{side}_{key}"]
        return int(float(v)) if v and float(v) > 0 else 1
    return n("tp_size"), n("attention_dp_size"), n("moe_ep_size") > 1


def skip_reason(r: dict) -> str | None:
    """Why a row cannot be a case, or None."""
    if r["backend"] not in ENGINES:
        return f"backend {r['backend']}"
    if r["system"] not in DISAGG_GPUS or r["system"] == "h100_sxm":
        return f"GPU {r['system']}"
    if (r["model_path"], r["precision"]) not in MODELS:
        return f"model {r['model_path']}"
    if any(dp > 1 and not ep for _, dp, ep in (pool(r, "prefill"), pool(r, "decode"))):
        return "attention ranks with experts sliced, not sharded (not modelled)"
    if int(r["concurrency"]) > MAX_CLIENTS:
        return f"more than {MAX_CLIENTS} clients (subset)"
    return None


def model_of(r: dict) -> ModelCase:
    return MODELS[(r["model_path"], r["precision"])]


def gpu_of(r: dict) -> str:
    return DISAGG_GPUS[r["system"]]


def server_of(r: dict):
    """The single-node launch script whose flags the case takes."""
    return SERVERS[(r["backend"], model_of(r).family, SCRIPT_GPU.get(gpu_of(r), gpu_of(r)))]


def workers(r: dict, side: str) -> int:
    return int(float(r[f"{side}_num_workers"]))


def layout_name(r: dict) -> str:
    """``p-tp4-d-tp8(-ep)`` for one worker a pool of one kind; else each pool's workers, ranks
    and experts, as ``p2-tp1dp8ep-d5-tp8``."""
    (tp_p, dp_p, ep_p), (tp_d, dp_d, ep_d) = pool(r, "prefill"), pool(r, "decode")
    p, d = workers(r, "prefill"), workers(r, "decode")
    if (p, d, dp_p, dp_d, ep_p) == (1, 1, 1, 1, ep_d):
        return f"p-tp{tp_p}-d-tp{tp_d}" + ("-ep" if ep_p else "")

    def side(name, n, tp, dp, ep):
        return f"{name}{n if n > 1 else ''}-tp{tp}" + (f"dp{dp}" if dp > 1 else "") + (
            "ep" if ep else "")
    return f"{side('p', p, tp_p, dp_p, ep_p)}-{side('d', d, tp_d, dp_d, ep_d)}"


def case_name(r: dict) -> str:
    version = f"v{r['backend_version']}" if r["backend_version"] else "unversioned"
    return (f"{r['backend']}-{gpu_of(r).lower()}-{model_of(r).slug}-{version}-{layout_name(r)}"
            f"-{r['isl']}x{r['osl']}-c{r['concurrency']}")


def read_rows(path: Path = CSV) -> tuple[list[dict], dict[str, int]]:
    """The rows that become cases (with ``line``, their CSV line), and the skipped by reason."""
    skipped: dict[str, int] = {}
    kept: dict[tuple, dict] = {}
    with open(path, newline="") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            reason = skip_reason(r)
            key = (r["backend"], r["system"], r["isl"], r["osl"], r["silicon_ttft_ms"],
                   r["silicon_tpot_ms"])
            if reason is None and key in kept:
                reason = "a copy of a run kept under another row"
            if reason:
                skipped[reason] = skipped.get(reason, 0) + 1
            else:
                kept[key] = {**r, "line": line}
    return sorted(kept.values(), key=lambda r: r["line"]), skipped


def split(rows: list[dict]) -> dict[str, str]:
    """One group, in order of (engine, GPU, model, layout, prompt length, clients)."""
    return case_files.split(rows, lambda r: (r["backend"], gpu_of(r)), lambda r: (
        model_of(r).slug, layout_name(r), int(r["isl"]), int(r["concurrency"])), case_name)


def _at(value, gpus: int):
    """A script's flag for a server of ``gpus`` GPUs."""
    return value.get(gpus, value.get(8)) if isinstance(value, dict) else value


def server_lines(r: dict) -> tuple[list[str], list[str]]:
    """[hardware]'s memory line and [levers]' lines of the pools."""
    (tp_p, dp_p, ep_p), (tp_d, dp_d, ep_d) = pool(r, "prefill"), pool(r, "decode")
    p, d = workers(r, "prefill"), workers(r, "decode")
    s = server_of(r)
    # Flags the script sets by a server's GPUs: the token budget the prefill server's, the memory
    # share (one key for both pools) the smaller server's; the 8-GPU server's where it has none.
    tokens = _at(s.tokens, tp_p * dp_p) or 8192
    memory = _at(s.memory, min(tp_p * dp_p, tp_d * dp_d))
    hardware = [f"gpu_memory_utilization = {TRT_MEMORY if r['backend'] == 'trtllm' else memory}"
                f"  # {s.script}'s (the recipe's flags are not known)"]
    levers = [f"[levers]  # the row: prefill {p} x (tp {tp_p}, attention ranks {dp_p}, experts "
              f"sharded: {'yes' if ep_p else 'no'}), decode {d} x (tp {tp_d}, attention ranks "
              f"{dp_d}, experts sharded: {'yes' if ep_d else 'no'})",
              'batching = "continuous"', 'kv_cache = "paged"',
              f"prefill_gpus = {tp_p}", f"decode_gpus = {tp_d}"]
    levers += [f"prefill_workers = {p}"] * (p > 1) + [f"decode_workers = {d}"] * (d > 1)
    if ep_p and ep_d:
        levers.append("expert_parallel = true")
    else:
        levers += ["prefill_expert_parallel = true"] * ep_p + ["decode_expert_parallel = true"] * ep_d
    if dp_p == dp_d > 1:
        levers.append(f"data_parallel = {dp_p}")
    elif dp_p != dp_d:
        levers += [f"prefill_data_parallel = {dp_p}"] * (dp_p > 1) + [
            f"decode_data_parallel = {dp_d}"] * (dp_d > 1)
    # A rank's seats, so that they never bind (the recipes' limits are not known; the engines'
    # defaults are far above these loads): half as many again as a decode rank holds on average
    # (the clients spread over the decode servers' ranks), at least 16 (a prefill pool's passes
    # are bound by the token budget before that), at most every client.
    clients = int(r["concurrency"])
    seats = min(clients, max(-(-3 * clients // (2 * d * dp_d)), 16))
    levers += [f"max_batch = {seats}", f"max_num_batched_tokens = {tokens}",
               "prefix_cache = false"]
    if s.kv_bits != 16:
        levers.append(f"kv_bits = {s.kv_bits}")
    return hardware, levers


def case_text(r: dict, group: str, out: Path = OUT) -> str:
    src = source_fields(r["silicon_data_source"])
    hardware, levers = server_lines(r)
    lines = [
        f"{HEADER} from {relative(CSV, out / group)}",
        f"# (CSV line {r['line']}, id below); do not edit.", f"# {r['id']}",
        f"# {ENGINES[r['backend']]} {r['backend_version'] or 'version not named'}, measured "
        f"{src.get('measured', '')[:10] or 'undated'}: {workers(r, 'prefill')} prefill and "
        f"{workers(r, 'decode')} decode worker(s).",
        f'name = "{case_name(r)}"', "", "[hardware]", f'gpu = "{gpu_of(r)}"',
        f'engine = "{r["backend"]}"', *hardware, "", "[model]",
        *model_lines(model_of(r), out / group), "",
        *client_lines(int(r["concurrency"]), int(r["isl"]), int(r["osl"])), "", *levers, "",
        *measured_lines(r),
    ]
    return "\n".join(lines) + "\n"


def cases(path: Path = CSV, out: Path = OUT) -> tuple[dict[Path, str], dict, list[dict]]:
    rows, skipped = read_rows(path)
    return case_files.files(rows, split(rows), case_name, case_text, out), skipped, rows


def summary(found: dict[Path, str], skipped: dict, rows: list[dict]) -> list[str]:
    fit = sum(p.parent.name == "fit" for p in found)
    return [f"{fit} fit, {len(found) - fit} holdout"] + [
        f"skipped: {k}: {v}" for k, v in sorted(skipped.items())]


def main(argv: list[str] | None = None) -> int:
    return case_files.main(argv, __doc__, OUT, lambda out: cases(CSV, out),
                           lambda out: case_files.generated(out, GROUPS, HEADER), summary,
                           "validation/make_disagg_cases.py")


if __name__ == "__main__":
    sys.exit(main())
