"""Write the closed-loop validation cases: one TOML config per measured row of
``validation/data/aic-silicon/silicon_vllm_fit.csv`` (real vLLM servers under a fixed number of
concurrent clients; ``data/aic-silicon/README.md`` gives the provenance).

    python validation/make_closed_cases.py           # (re)write validation/closed-loop/fit|holdout/
    python validation/make_closed_cases.py --check   # exit 1 if the committed cases differ

Each row becomes a one-design config: the GPU (``system``), ``gpus = tp_size``, the model's
``config.json``, a closed-loop workload as the benchmark client ran it and the server's flags as
its launch script set them, with ``[measured] mean_ttft_s`` and ``mean_tpot_ms``.

- **The client** (SemiAnalysisAI/InferenceX, ``benchmarks/benchmark_lib.sh``
  ``run_benchmark_serving`` and ``utils/bench_serving/benchmark_serving.py``): ``--max-concurrency
  N --request-rate inf`` (N clients, each sending its next request when its last one returns:
  ``concurrency = batch_size``), ``--num-warmups 2 x N`` (``warmup_requests``), ``--num-prompts
  10 x N`` (``num_requests``), ``--ignore-eos`` (every output its drawn length) and
  ``--dataset-name random --random-range-ratio 0.8``. That copy of the benchmark draws each
  length as ``np.random.randint(int(L * ratio), L + 1)``: a uniform integer in [int(0.8 x L), L],
  both ends included, for prompts and outputs alike (vLLM's own ``vllm bench serve`` reads the
  same flag differently: [floor(L(1 - r)), ceil(L(1 + r))]; the InferenceX copy is what ran).
- **The server:** gpt-oss-120b was launched by InferenceX's ``benchmarks/gptoss_fp4_{h100,h200,
  b200}.sh`` (``SERVERS``); the Llama-3.1-8B-FP8 rows come from another collection that names
  no flags, so they are at ``vllm serve``'s defaults of their version (``VLLM_DEFAULTS``).
- **Skipped rows** (counted in the summary): a measurement repeated in a second dump (the same
  GPU, model, version, lengths, TP, clients and values), and what the simulator cannot state
  here: pipeline parallelism, attention data parallelism, expert parallelism, a backend other
  than vLLM or a mode other than aggregated serving, an unknown GPU or model.
- **The split** (``split``): every H100 row is held out (the H100's factors are already fitted
  on other runs; these check them). For H200 and B200, rows are grouped by (GPU, model, vLLM
  version, TP) and sorted by (prompt length, output length, clients, measured date); the
  second of every three (positions 1, 4, 7, ...) is fitted, the rest held out: about a third
  fitted, and every group keeps held-out rows on both sides of each fitted one, across
  lengths and clients.
- **Size:** a case simulates about ``(warmup + measured requests) x mean output /
  min(clients, max_num_seqs)`` decode passes (more where the KV cache holds fewer sequences
  than that); the summary prints the largest and the cases over ``HUGE_PASSES``.

Standard library only.
"""
from __future__ import annotations

import csv
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import case_files

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "aic-silicon"
CSV = DATA / "silicon_vllm_fit.csv"
OUT = HERE / "closed-loop"
GROUPS = ("fit", "holdout")
HEADER = "# Written by validation/make_closed_cases.py"
#: The dump's ``system`` -> the catalog's GPU (sweep/physics/hardware.py).
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200", "b200_sxm": "B200"}
#: GPUs whose rows are all held out: their factors are fitted on other runs (docs/validation.md).
HOLDOUT_GPUS = ("H100-SXM",)
#: The client (InferenceX benchmark_lib.sh): --num-warmups 2 x N, --num-prompts 10 x N, and the
#: launch scripts' RANDOM_RANGE_RATIO 0.8 (data/aic-silicon/README.md).
WARMUPS_PER_CLIENT, PROMPTS_PER_CLIENT, RANGE_RATIO = 2, 10, 0.8
#: Decode passes above which a case is reported as huge.
HUGE_PASSES = 200_000
SEEDS = 2


@dataclass(frozen=True)
class ModelCase:
    slug: str  # in case names
    config: str  # file under data/aic-silicon/models/
    levers: tuple[str, ...]  # lever lines it needs beyond the server's
    note: tuple[str, ...]  # comment lines on how the case states the checkpoint


#: model_path -> how a case names and states it.
MODELS = {
    "openai/gpt-oss-120b": ModelCase(
        "gpt-oss-120b", "openai--gpt-oss-120b_config.json", (),
        ("# Its own config.json: MXFP4 experts (quantization_config), attention and router at",
         "# 16 bits (modules_to_not_convert); the dump's precision 'fp4' is that checkpoint.")),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ModelCase(
        "llama-3.1-8b-fp8", "meta-llama--Meta-Llama-3.1-8B_config.json",
        ("weight_bits = 8  # the FP8 checkpoint (precision fp8)",
         "activation_bits = 8  # ModelOpt FP8 is W8A8 (gemm_quant_mode fp8)"),
        ("# No config.json of the FP8 checkpoint is at hand: Meta-Llama-3.1-8B's (the same",
         "# layers), at 8-bit weights and activations by the levers. ModelOpt FP8 checkpoints",
         "# keep the embedding and lm_head at 16 bits (exclude_modules): every weight is at 8",
         "# here, 8.0 GB held against about 9.1 GB (2 x 128256 x 4096 parameters at 16 bits).")),
}


@dataclass(frozen=True)
class Server:
    script: str  # where the flags come from
    max_num_seqs: int | None  # None: the client count (--max-num-seqs $CONC)
    max_num_batched_tokens: int
    max_model_len: int | str  # "lengths": the script's CALCULATED_MAX_MODEL_LEN; "model": its own
    kv_bits: int
    prefix_cache: bool
    notes: tuple[str, ...]


_GPTOSS = ("--gpu-memory-utilization 0.9, --max-num-batched-tokens 8192, async scheduling on,",
           "prefix caching off (--no-enable-prefix-caching),")
#: InferenceX benchmarks/gptoss_fp4_<gpu>.sh (and the _docker/_slurm versions before them; the
#: same flags in each): gpt-oss-120b's launch flags per GPU.
SERVERS = {
    "H100-SXM": Server("InferenceX benchmarks/gptoss_fp4_h100.sh", None, 8192, 10240, 16, False,
                       (*_GPTOSS, "--max-num-seqs $CONC, --max-model-len 10240, Marlin MXFP4 "
                        "MoE kernels (VLLM_MXFP4_USE_MARLIN=1).")),
    "H200": Server("InferenceX benchmarks/gptoss_fp4_h200.sh", None, 8192, "lengths", 16, False,
                   (*_GPTOSS, "--max-num-seqs $CONC, --max-model-len ISL + OSL + 20 (1k/1k) or "
                    "+ 200 (an 8k side),", "Marlin MXFP4 MoE kernels.")),
    "B200": Server("InferenceX benchmarks/gptoss_fp4_b200.sh", 512, 8192, "lengths", 8, False,
                   (*_GPTOSS, "--max-num-seqs 512, --max-model-len as on H200, --kv-cache-dtype "
                    "fp8, FlashInfer", "MXFP4 x MXFP8 MoE (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1): "
                    "the experts compute in", "8 bits, which activation_bits (one value for "
                    "every layer) does not state: left at 16.")),
}
#: ``vllm serve`` on a GPU of 70 GiB or more other than an A100: vllm/engine/arg_utils.py
#: (``_set_default_args_v1``, later ``get_batch_defaults``) sets max_num_batched_tokens 8192
#: and max_num_seqs 1024 for the API server; prefix caching and chunked prefill on (V1).
VLLM_DEFAULTS = Server("vllm serve's defaults (vllm/engine/arg_utils.py)", 1024, 8192, "model",
                       16, False, ("no flags are given for these rows: max_num_seqs 1024,",
                                   "max_num_batched_tokens 8192, gpu_memory_utilization 0.9, the "
                                   "model's own context;", "prefix caching is on by default, but "
                                   "random prompts share no prefix."))
#: Which rows the InferenceX scripts launched: by model.
INFERENCEX_MODELS = ("openai/gpt-oss-120b",)


def source_fields(text: str) -> dict[str, str]:
    """``silicon_data_source``'s ``key=value; ...`` pairs."""
    return dict(p.split("=", 1) for p in text.split("; ") if "=" in p)


def num(value: float) -> str:
    """A measured value as a short TOML float (6 significant digits)."""
    return repr(float(f"{value:.6g}"))


def relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def skip_reason(r: dict) -> str | None:
    """Why a row cannot be a case, or None."""
    def n(key: str) -> float:
        return float(r[key]) if r[key] else 1.0
    if r["backend"] != "vllm" or r["mode"] != "agg":
        return f"backend {r['backend']}, mode {r['mode']} (only vllm, agg)"
    if n("pp_size") > 1:
        return "pipeline parallel"
    if n("attention_dp_size") > 1:
        return "attention data parallel"
    if n("moe_ep_size") > 1:
        return "expert parallel"
    if r["system"] not in GPUS:
        return f"GPU {r['system']}"
    if r["model_path"] not in MODELS:
        return f"model {r['model_path']}"
    return None


def measurement_key(r: dict) -> tuple:
    """What identifies one measurement across the dumps that repeat it."""
    return (r["system"], r["model_path"], r["backend_version"], int(r["isl"]), int(r["osl"]),
            int(float(r["tp_size"])), int(float(r["batch_size"])),
            float(f"{float(r['silicon_ttft_ms']):.9g}"),
            float(f"{float(r['silicon_tpot_ms']):.9g}"))


def read_rows(path: Path = CSV) -> tuple[list[dict], dict[str, int]]:
    """The rows that become cases (each with ``line``, its CSV line, and ``also``, the other
    dumps holding the same measurement), and the count of skipped rows by reason."""
    kept: dict[tuple, dict] = {}
    skipped: dict[str, int] = {}
    with open(path, newline="") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            reason = skip_reason(r)
            key = measurement_key(r) if reason is None else None
            if key is not None and key in kept:
                reason = "a measurement repeated in another dump"
                kept[key]["also"].append(source_fields(r["silicon_data_source"])["source_file"])
            if reason is not None:
                skipped[reason] = skipped.get(reason, 0) + 1
                continue
            kept[key] = {**r, "line": line, "also": []}
    return list(kept.values()), skipped


def gpu_of(r: dict) -> str:
    return GPUS[r["system"]]


def case_name(r: dict) -> str:
    version = f"v{r['backend_version']}" if r["backend_version"] else "unversioned"
    return (f"aic-{gpu_of(r).lower()}-{MODELS[r['model_path']].slug}-{version}"
            f"-tp{int(float(r['tp_size']))}-{r['isl']}x{r['osl']}-c{int(float(r['batch_size']))}")


def measured_on(r: dict) -> str:
    return source_fields(r["silicon_data_source"]).get("measured", "")[:10]


def split(rows: list[dict]) -> dict[str, str]:
    """Case name -> "fit" or "holdout" (the module's docstring gives the rule)."""
    return case_files.split(
        rows, lambda r: (gpu_of(r), r["model_path"], r["backend_version"],
                         int(float(r["tp_size"]))),
        lambda r: (int(r["isl"]), int(r["osl"]), int(float(r["batch_size"])), measured_on(r)),
        case_name, held=lambda key: key[0] in HOLDOUT_GPUS)


def lengths(nominal: int) -> tuple[int, int]:
    """The client's draw for a nominal length: [int(0.8 x L), L] (see the docstring)."""
    return int(nominal * RANGE_RATIO), nominal


def server_of(r: dict) -> Server:
    return SERVERS[gpu_of(r)] if r["model_path"] in INFERENCEX_MODELS else VLLM_DEFAULTS


def max_model_len(server: Server, isl: int, osl: int) -> int | None:
    """The served context: the script's fixed value, or its CALCULATED_MAX_MODEL_LEN (ISL + OSL
    + 20 for 1024/1024, + 200 with an 8192 side), or None (the model's own)."""
    if server.max_model_len == "lengths":
        return isl + osl + (20 if (isl, osl) == (1024, 1024) else 200)
    return None if server.max_model_len == "model" else int(server.max_model_len)


def passes(r: dict) -> float:
    """About the decode passes a case simulates: every request's mean output over the seats
    (the clients, or ``max_num_seqs`` if fewer; a KV cache that holds fewer makes more)."""
    n = int(float(r["batch_size"]))
    seats = min(n, server_of(r).max_num_seqs or n)
    low, high = lengths(int(r["osl"]))
    return (WARMUPS_PER_CLIENT + PROMPTS_PER_CLIENT) * n * (low + high) / 2 / seats


def provenance_lines(r: dict, data: Path, out: Path) -> list[str]:
    src = source_fields(r["silicon_data_source"])
    version = r["backend_version"] or "not named"
    when = f"measured {measured_on(r)}" if measured_on(r) else "undated"
    dump = src["source_file"].rsplit("/", 1)[-1]
    lines = [f"{HEADER} from {relative(data / CSV.name, out)}", "# (CSV line "
             f"{r['line']}, id below); do not edit.", f"# {r['id']}",
             f"# vLLM {version}" + (f" ({src['image']})" if "image" in src else "")
             + f", {when}, from {dump}."]
    if r["also"]:
        lines.append(f"# The same measurement is also in {', '.join(r['also'])} (skipped there).")
    return lines


def client_lines(n: int, isl: int, osl: int, note: tuple[str, ...] = ()) -> list[str]:
    """The [workload] table of InferenceX's client with ``n`` clients and nominal lengths."""
    (pl, ph), (ol, oh) = lengths(isl), lengths(osl)
    return [
        "[workload]",
        "# The client: --max-concurrency N --request-rate inf, 2 x N warm-up requests first",
        "# (excluded), then --num-prompts 10 x N; --random-range-ratio 0.8 draws each length",
        "# uniformly from [int(0.8 x nominal), nominal], both ends included; --ignore-eos.",
        *note,
        'arrival = "closed"',
        f"concurrency = {n}",
        f"warmup_requests = {WARMUPS_PER_CLIENT * n}",
        f"num_requests = {PROMPTS_PER_CLIENT * n}",
        f'prompt_tokens = {{ dist = "uniform", low = {pl}, high = {ph} }}  # nominal {isl}',
        f'output_tokens = {{ dist = "uniform", low = {ol}, high = {oh} }}  # nominal {osl}',
    ]


def workload_lines(r: dict) -> list[str]:
    note = () if r["model_path"] in INFERENCEX_MODELS else (
        "# Assumed: the data's README names this client for every row; this collection's",
        "# own (vLLM 0.12.0, nominal 1000-8000 tokens) is not documented.")
    return client_lines(int(float(r["batch_size"])), int(r["isl"]), int(r["osl"]), note)


def lever_lines(r: dict) -> list[str]:
    server = server_of(r)
    n = int(float(r["batch_size"]))
    context = max_model_len(server, int(r["isl"]), int(r["osl"]))
    lines = [f"[levers]  # {server.script}:", *[f"# {x}" for x in server.notes],
             'batching = "continuous"', 'kv_cache = "paged"', "block_size = 16  # vLLM's default",
             f"gpus = {int(float(r['tp_size']))}",
             f"max_batch = {server.max_num_seqs or n}"
             + ("" if server.max_num_seqs else "  # --max-num-seqs $CONC"),
             f"max_num_batched_tokens = {server.max_num_batched_tokens}"]
    if context is not None:
        lines.append(f"max_seq_len = {context}")
    lines.append(f"prefix_cache = {'true' if server.prefix_cache else 'false'}")
    if server.kv_bits != 16:
        lines.append(f"kv_bits = {server.kv_bits}")
    return lines + list(MODELS[r["model_path"]].levers)


def case_text(r: dict, group: str, data: Path = DATA, out: Path = OUT) -> str:
    """One row's case, for the folder ``out / group``."""
    model = MODELS[r["model_path"]]
    n, tp = int(float(r["batch_size"])), int(float(r["tp_size"]))
    lines = [
        *provenance_lines(r, data, out / group),
        f"# {r['model_path']} (precision {r['precision']}) on {tp} x {gpu_of(r)} "
        f"({r['system']}), {n} clients,",
        f"# nominal {r['isl']} prompt and {r['osl']} output tokens. About "
        f"{passes(r):,.0f} decode passes.",
        f'name = "{case_name(r)}"',
        "",
        "[hardware]",
        f'gpu = "{gpu_of(r)}"',
        "gpu_memory_utilization = 0.9  # the scripts' flag; vLLM's default too",
        "",
        "[model]",
        *model.note,
        f'config_json = "{relative(data / "models" / model.config, out / group)}"',
        "",
        *workload_lines(r),
        "",
        *lever_lines(r),
        "",
        "[run]",
        f"seeds = {SEEDS}",
        "",
        "[measured]",
        "# The client's means over the measured requests: TTFT, and each request's (E2E - TTFT)",
        "# / (output tokens - 1) averaged (silicon_ttft_ms / 1000, silicon_tpot_ms).",
        f"mean_ttft_s = {num(float(r['silicon_ttft_ms']) / 1000)}",
        f"mean_tpot_ms = {num(float(r['silicon_tpot_ms']))}",
    ]
    return "\n".join(lines) + "\n"


def cases(path: Path = CSV, out: Path = OUT) -> tuple[dict[Path, str], dict, list[dict]]:
    """Every case file's path -> its text; the skipped rows by reason; the kept rows."""
    rows, skipped = read_rows(path)
    names = [case_name(r) for r in rows]
    clash = sorted({x for x in names if names.count(x) > 1})
    if clash:
        raise ValueError(f"{path}: two measurements make the case {clash[0]!r}; allowed: "
                         "distinct (GPU, model, version, TP, lengths, clients)")
    groups = split(rows)
    found = {out / groups[case_name(r)] / f"{case_name(r)}.toml":
             case_text(r, groups[case_name(r)], path.parent, out) for r in rows}
    return found, skipped, rows


def summary(found: dict[Path, str], skipped: dict, rows: list[dict]) -> list[str]:
    """Counts per GPU and model (fit / holdout), the skipped rows by reason, and the size."""
    counts: dict[tuple, list[int]] = {}
    for p, r in zip(found, rows):
        c = counts.setdefault((gpu_of(r), r["model_path"]), [0, 0])
        c[0 if p.parent.name == "fit" else 1] += 1
    out = [f"{g} {m}: {f} fit, {h} holdout" for (g, m), (f, h) in sorted(counts.items())]
    out += [f"skipped: {k}: {v}" for k, v in sorted(skipped.items())]
    sizes = sorted(((passes(r), case_name(r)) for r in rows), reverse=True)
    out.append(f"largest: {sizes[0][1]}, about {sizes[0][0]:,.0f} decode passes; "
               f"{sum(s > HUGE_PASSES for s, _ in sizes)} over {HUGE_PASSES:,}")
    return out


def generated(out: Path = OUT) -> list[Path]:
    """The case files on disk that this script wrote."""
    return case_files.generated(out, GROUPS, HEADER)


def main(argv: list[str] | None = None) -> int:
    return case_files.main(argv, __doc__, OUT, lambda out: cases(CSV, out), generated, summary,
                           "validation/make_closed_cases.py")


if __name__ == "__main__":
    sys.exit(main())
