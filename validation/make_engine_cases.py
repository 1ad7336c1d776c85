"""Write the other engines' closed-loop cases: one TOML config per measured run of a real SGLang
or TensorRT-LLM server in ``validation/data/aic-engines/silicon_engines_agg_fit.csv``
(aggregated serving under a fixed number of concurrent clients; ``data/aic-engines/README.md``
gives the provenance).

    python validation/make_engine_cases.py           # (re)write validation/engines/fit|holdout/
    python validation/make_engine_cases.py --check   # exit 1 if the committed cases differ

Each case names its engine (``[hardware] engine``: its host terms and its scheduling) and
records its version and the launch flags it ran with in comments and in its name
(``sglang-...``, ``trtllm-...``). The client, the lengths, the split and the measured values follow
``make_closed_cases.py``: InferenceX's ``benchmark_serving.py``, N clients, 2 x N warm-up
requests first and excluded, then 10 x N measured, every length uniform over [int(0.8 x L), L];
``[measured] mean_ttft_s`` and ``mean_tpot_ms``.

- **Rows used:** ``mode`` agg rows of the InferenceX database dump and of its dated exports
  (``2026-03-25.csv``, ``2026-04-06.csv``), whose client is known, on H200 and B200 (every
  H100 row is a gap-analysis one), of DeepSeek-R1/V3 (FP8: the catalog's ``DeepSeek-V3``;
  NVFP4: the copied ``nvidia--DeepSeek-V3.1-NVFP4`` config and its ``hf_quant_config.json``,
  the same layers) and gpt-oss-120b (the closed-loop set's ``config.json``).
- **The deployment:** where ``moe_ep_size`` > 1, the database's and ``2026-04-06.csv``'s
  ``tp_size x attention_dp_size`` is InferenceX's TP x EP, not the GPU count (the README's
  caveat): the server had that over ``moe_ep_size`` GPUs; ``2026-03-25.csv`` gives the GPUs.
  Every copy of a run then states one layout. Attention data parallelism
  (``attention_dp_size`` > 1, ``tp_size`` 1) is ``data_parallel`` ranks of one GPU with
  ``expert_parallel``; its clients are ``concurrency`` (``batch_size`` is the clients per
  rank), elsewhere ``batch_size``.
- **The server:** the flags of InferenceX's launch scripts as read at the commits ``SERVERS``
  names (the scripts changed over the months these runs span): no prefix cache, the token
  budget (SGLang's ``--chunked-prefill-size``, TRT-LLM's ``--max_num_tokens``), the KV cache's
  precision and SGLang's ``--mem-fraction-static``; seats for every client.
- **Skipped rows** (counted in the summary): gap-analysis rows (every Llama-3.1-8B row, the
  NVFP4-checkpoint rows and gpt-oss-120b on H100: their harness, load pattern and lengths are
  not published); GB200 (its ``tp_size`` 72 rows are disaggregated runs) and B300 (no measured
  run has checked its factors yet); a layout that is not 1-8 GPUs; attention data parallelism
  with tensor-parallel experts (``moe_ep_size`` 1), which servesweep refuses (its ranks need
  ``expert_parallel``); a second copy of one run (R1 and V3 label the same runs: the same
  engine, GPU, lengths, TTFT and TPOT; the copy naming a version is kept); two runs of one
  stated configuration that measured different values (e.g. SGLang 0.5.9 on B200 at FP8, a
  database run and a ``2026-03-25.csv`` run of the same day, 6.7 and 8.8 ms TPOT at 4 clients:
  a setting the rows do not record, such as MTP, differs), both skipped.
- **The subset simulated** (``OUTPUTS``, ``CLIENTS``): the 366 runs left would take about an
  hour on a 2-core CPU (2.5-4.5 s a case of 1,024 output tokens, and a nominal 8,192 takes
  eight times the decode passes), so only runs of nominal 1,024 output tokens at 4, 16 and
  64 clients (every other step of InferenceX's doubling from 4 to 64, its ends and middle)
  are written: 151 runs.
- **The split:** rows are grouped by (engine, GPU, model, version, layout) and sorted by
  (prompt length, output length, clients, measured date); the second of every three is fitted
  (``fit/``), the rest held out (``holdout/``), as in the closed-loop set. Nothing is fitted on
  ``fit/`` yet.

Standard library only.
"""
from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path

import case_files
from make_closed_cases import (PROMPTS_PER_CLIENT, WARMUPS_PER_CLIENT, client_lines, lengths,
                               measured_on, num, relative, source_fields)

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "aic-engines"
CSV = DATA / "silicon_engines_agg_fit.csv"
OUT = HERE / "engines"
GROUPS = ("fit", "holdout")
HEADER = "# Written by validation/make_engine_cases.py"
GPUS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200", "b200_sxm": "B200"}
#: The dated export whose layouts count GPUs (the others count TP x EP where EP > 1).
GPU_COUNTED = "2026-03-25.csv"
#: The subset simulated (the docstring's last skip): nominal outputs and client counts kept.
OUTPUTS, CLIENTS = (1024,), (4, 16, 64)
SEEDS = 2
LAYOUT_KEYS = ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
ENGINES = {"sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@dataclass(frozen=True)
class ModelCase:
    slug: str  # in case names
    family: str  # the servers' key in SERVERS
    note: tuple[str, ...]  # comment lines on how the case states the checkpoint
    config: str | None  # its config.json under validation/data/; None: the catalog's DeepSeek-V3


_DSR1 = {
    "fp8": ModelCase("deepseek-r1-fp8", "deepseek-fp8", (
        "# DeepSeek-R1 and V3 share one architecture: the catalog's DeepSeek-V3, its own FP8",
        "# block-quantised checkpoint (weights and activations at 8 bits)."), None),
    "fp4": ModelCase("deepseek-r1-fp4", "deepseek-fp4", (
        "# An NVFP4 checkpoint (experts and dense MLPs at 4 bits, W4A4; attention and lm_head",
        "# at 16): nvidia/DeepSeek-V3.1-NVFP4's config.json and hf_quant_config.json, the",
        "# layers of R1's NVFP4 checkpoints (no config of those is at hand)."),
        "aic-engines/models/nvidia--DeepSeek-V3.1-NVFP4_config.json"),
}
#: (model_path, precision) -> how a case states the model.
MODELS = {
    **{(path, p): m for path in ("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3")
       for p, m in _DSR1.items()},
    ("openai/gpt-oss-120b", "fp4"): ModelCase("gpt-oss-120b", "gptoss", (
        "# Its own config.json: MXFP4 experts, attention and router at 16 bits.",),
        "aic-silicon/models/openai--gpt-oss-120b_config.json"),
}
#: Two runs of one stated configuration that measured different values.
AMBIGUOUS = "two runs of one stated configuration with different values"
#: The collections of unpublished harness (AIConfigurator's gap analysis).
GAP_ANALYSIS = "aic-auto-gap-analysis"


@dataclass(frozen=True)
class Server:
    script: str  # InferenceX's launch script under benchmarks/, and the commit read
    tokens: int | dict[int, int] | None  # the token budget (by GPUs where the script sets it
    # so); None: TRT-LLM's max(8192, clients + ISL + 64 rounded up to 64)
    kv_bits: int
    memory: float | dict[int, float]  # gpu_memory_utilization (by GPUs, as tokens)
    notes: tuple[str, ...]


#: TRT-LLM gives its KV cache free_gpu_memory_fraction (0.7-0.85) of the memory the weights
#: and activations leave; with these models' weights that is about 0.92-0.99 of the GPU's memory.
TRT_MEMORY = 0.95
_SGL = "--disable-radix-cache, --max-running-requests at or above the clients,"
_TRT = "trtllm-serve --backend pytorch, enable_block_reuse false, max_batch_size at or above"
#: (engine, model family, GPU) -> the launch flags (the scripts changed over the months these
#: runs span; the cases take them as read, and the README says which are known).
SERVERS = {
    ("sglang", "deepseek-fp8", "B200"): Server(
        "dsr1_fp8_b200.sh at 1fc5d73c", {8: 32768, 4: 8192}, 8, {8: 0.82, 4: 0.95},
        (_SGL, "--kv-cache-dtype fp8_e4m3, --chunked-prefill-size 32768 and",
         "--mem-fraction-static 0.82 at TP 8 (8192 and 0.95 at TP 4, for 8192/1024 only).")),
    ("sglang", "deepseek-fp4", "B200"): Server(
        "dsr1_fp4_b200.sh at 1fc5d73c", 16384, 8, 0.85,
        (_SGL, "--kv-cache-dtype fp8_e4m3, --chunked-prefill-size 16384,",
         "--mem-fraction-static 0.85, --quantization modelopt_fp4.")),
    ("sglang", "deepseek-fp8", "H200"): Server(
        "dsr1_fp8_h200.sh at 1fc5d73c", 32768, 16, 0.82,
        (_SGL, "--chunked-prefill-size 32768, --mem-fraction-static 0.82, the KV cache at the",
         "model's 16 bits (no --kv-cache-dtype).")),
    **{("trtllm", f"deepseek-{p}", "B200"): Server(
        f"dsr1_{p}_b200_trt.sh at {at}", None, 8, TRT_MEMORY,
        (_TRT, "the clients, FP8 KV cache (free_gpu_memory_fraction 0.7-0.8), --max_num_tokens",
         "max(8192, clients + ISL + 64 rounded up to 64)."))
      for p, at in (("fp8", "0a919c5f"), ("fp4", "111f0312"))},
    ("trtllm", "deepseek-fp8", "H200"): Server(
        "dsr1_fp8_h200_trt.sh at 1fc5d73c", None, 8, TRT_MEMORY,
        (_TRT, "the clients, FP8 KV cache (free_gpu_memory_fraction 0.75), --max_num_tokens",
         "max(8192, clients + ISL + 64 rounded up to 64).")),
    ("trtllm", "gptoss", "B200"): Server(
        "gptoss_fp4_b200_trt.sh at 1825e7f0", 20000, 8, TRT_MEMORY,
        (_TRT, "the clients, FP8 KV cache (free_gpu_memory_fraction 0.85), --max_num_tokens",
         "20000, TRT-LLM's MoE kernels.")),
    ("trtllm", "gptoss", "H200"): Server(
        "gptoss_fp4_h200_trt.sh at 111f0312", 20000, 16, TRT_MEMORY,
        (_TRT, "the clients, the KV cache at 16 bits (dtype auto, free_gpu_memory_fraction",
         "0.85), --max_num_tokens 20000, Triton MoE kernels.")),
}


def origin(r: dict) -> str:
    """Which collection a row comes from: ``db-dump``, a dated export's name, or a path."""
    src = r["silicon_data_source"]
    return "db-dump" if src.startswith("db-dump/") else source_fields(src)["source_file"]


def layout(r: dict) -> tuple[int, int, bool] | str:
    """(GPUs a rank, data-parallel ranks, expert parallel), or why it cannot be stated."""
    def n(key: str) -> int:
        return int(float(r[key])) if r[key] and float(r[key]) > 0 else 1
    tp, adp, ep = n("tp_size"), n("attention_dp_size"), n("moe_ep_size")
    if n("pp_size") > 1:
        return "pipeline parallel"
    inflated = ep if ep > 1 and origin(r) != GPU_COUNTED else 1
    total, rest = divmod(tp * adp, inflated)
    if rest or total not in (1, 2, 4, 8):
        return "a layout that is not 1-8 GPUs"
    if ep > 1 and ep != total:
        return "experts sharded over part of the GPUs (moe_tp_size x moe_ep_size)"
    if adp == 1:
        return total, 1, ep > 1
    if tp != 1:
        return "attention data parallelism within tensor parallelism"
    if ep == 1:
        return "attention data parallelism with tensor-parallel experts"
    return 1, total, True


def clients(r: dict) -> int:
    """The concurrent clients: ``batch_size`` is the clients per attention-DP rank."""
    return int(r["concurrency"]) if layout(r)[1] > 1 else int(float(r["batch_size"]))


def skip_reason(r: dict) -> str | None:
    """Why a row cannot be a case (before copies and size), or None."""
    if r["mode"] != "agg" or r["backend"] not in ENGINES:
        return f"backend {r['backend']}, mode {r['mode']}"
    if GAP_ANALYSIS in origin(r):
        return "gap-analysis run (harness, load and lengths not published)"
    if r["system"] not in GPUS:
        return f"GPU {r['system']}"
    model = MODELS.get((r["model_path"], r["precision"]))
    if model is None:
        return f"model {r['model_path']} ({r['precision'] or 'precision not recorded'})"
    if (r["backend"], model.family, gpu_of(r)) not in SERVERS:
        return "no launch script read for this engine, model and GPU"
    deployment = layout(r)
    return deployment if isinstance(deployment, str) else None


def gpu_of(r: dict) -> str:
    return GPUS[r["system"]]


def model_of(r: dict) -> ModelCase:
    return MODELS[(r["model_path"], r["precision"])]


def server_of(r: dict) -> Server:
    return SERVERS[(r["backend"], model_of(r).family, gpu_of(r))]


def run_key(r: dict) -> tuple:
    """What identifies one run across its copies (R1 and V3 labels, two dumps)."""
    return (r["backend"], r["system"], model_of(r).slug, int(r["isl"]), int(r["osl"]),
            float(f"{float(r['silicon_ttft_ms']):.9g}"),
            float(f"{float(r['silicon_tpot_ms']):.9g}"))


def size_skip(r: dict) -> str | None:
    """Why a run is outside the simulated subset (``OUTPUTS``, ``CLIENTS``), or None."""
    if int(r["osl"]) not in OUTPUTS:
        return f"output {r['osl']} tokens (subset: {', '.join(map(str, OUTPUTS))})"
    if clients(r) not in CLIENTS:
        return f"clients outside {', '.join(map(str, CLIENTS))} (subset)"
    return None


def read_rows(path: Path = CSV) -> tuple[list[dict], dict[str, int]]:
    """The rows that become cases (each with ``line``, its CSV line, and ``also``, the ids of
    the other copies of its run), and the count of skipped rows by reason."""
    skipped: dict[str, int] = {}

    def skip(reason: str, n: int = 1) -> None:
        skipped[reason] = skipped.get(reason, 0) + n
    runs: dict[tuple, list[dict]] = {}
    with open(path, newline="") as fh:
        for line, r in enumerate(csv.DictReader(fh), start=2):
            reason = skip_reason(r)
            if reason is None:
                runs.setdefault(run_key(r), []).append({**r, "line": line})
            else:
                skip(reason)
    named: dict[str, list[dict]] = {}
    for copies in runs.values():
        copies.sort(key=lambda r: (not r["backend_version"], r["line"]))
        if len(copies) > 1:
            skip("a copy of a run kept under another row", len(copies) - 1)
        size = size_skip(copies[0])
        if size:
            skip(size)
            continue
        first = {**copies[0], "also": [c["id"] for c in copies[1:]]}
        named.setdefault(case_name(first), []).append(first)
    for same in named.values():
        if len(same) > 1:
            skip(AMBIGUOUS, len(same))
    kept = [same[0] for same in named.values() if len(same) == 1]
    return sorted(kept, key=lambda r: r["line"]), skipped


def layout_name(r: dict) -> str:
    tp, dp, ep = layout(r)
    return f"dp{dp}ep{dp}" if dp > 1 else f"tp{tp}" + (f"ep{tp}" if ep else "")


def version_of(r: dict) -> str:
    return f"v{r['backend_version']}" if r["backend_version"] else "unversioned"


def case_name(r: dict) -> str:
    return (f"{r['backend']}-{gpu_of(r).lower()}-{model_of(r).slug}-{version_of(r)}"
            f"-{layout_name(r)}-{r['isl']}x{r['osl']}-c{clients(r)}")


def split(rows: list[dict]) -> dict[str, str]:
    """Case name -> "fit" or "holdout" (the module's docstring gives the rule)."""
    return case_files.split(
        rows, lambda r: (r["backend"], gpu_of(r), model_of(r).slug, r["backend_version"],
                         layout_name(r)),
        lambda r: (int(r["isl"]), int(r["osl"]), clients(r), measured_on(r)), case_name)


def at_gpus(value, r: dict):
    """A flag's value for the row's GPUs, where the script sets it by TP."""
    tp, dp, _ = layout(r)
    return value[tp * dp] if isinstance(value, dict) else value


def token_budget(r: dict) -> int:
    """The server's tokens a pass: the script's, or TRT-LLM's DeepSeek rule (``Server``)."""
    budget = at_gpus(server_of(r).tokens, r)
    if budget is not None:
        return budget
    return max(8192, (clients(r) + int(r["isl"]) + 64 + 63) // 64 * 64)


def passes(r: dict) -> float:
    """About the decode passes a case simulates: every request's mean output over the clients
    (the seats hold them all)."""
    low, high = lengths(int(r["osl"]))
    return (WARMUPS_PER_CLIENT + PROMPTS_PER_CLIENT) * (low + high) / 2


def provenance_lines(r: dict, out: Path) -> list[str]:
    src = source_fields(r["silicon_data_source"])
    when = f"measured {measured_on(r)}" if measured_on(r) else "undated"
    image = src.get("image") or next((p.strip() for p in r["silicon_data_source"].split(";")
                                      if ":" in p and "=" not in p), "")
    lines = [f"{HEADER} from {relative(CSV, out)}", f"# (CSV line {r['line']}, id below); "
             "do not edit.", f"# {r['id']}",
             f"# {ENGINES[r['backend']]} {r['backend_version'] or 'version not named'}"
             + (f" ({image})" if image else "") + f", {when}, from {origin(r)}."]
    if r["also"]:
        lines.append(f"# The same run is also row {', '.join(r['also'])} (skipped there).")
    return lines


def workload_lines(r: dict) -> list[str]:
    return client_lines(clients(r), int(r["isl"]), int(r["osl"]))


def lever_lines(r: dict) -> list[str]:
    server = server_of(r)
    tp, dp, ep = layout(r)
    lines = [f"[levers]  # {server.script}:", *[f"# {x}" for x in server.notes],
             "# The row: " + ", ".join(f"{k} {int(float(r[k]))}" for k in LAYOUT_KEYS) + ".",
             'batching = "continuous"', 'kv_cache = "paged"', f"gpus = {tp}"]
    if ep:
        lines.append("expert_parallel = true")
    if dp > 1:
        lines.append(f"data_parallel = {dp}  # attention ranks, {clients(r)} clients in all")
    lines += [f"max_batch = {clients(r)}", f"max_num_batched_tokens = {token_budget(r)}",
              "prefix_cache = false"]
    if server.kv_bits != 16:
        lines.append(f"kv_bits = {server.kv_bits}")
    return lines


def model_lines(model: ModelCase, at: Path) -> list[str]:
    """The [model] table's entries, a config's path relative to the case's folder ``at``."""
    if model.config is None:
        return [*model.note, 'name = "DeepSeek-V3"']
    return [*model.note, f'config_json = "{relative(HERE / "data" / model.config, at)}"']


def case_text(r: dict, group: str, out: Path = OUT) -> str:
    """One row's case, for the folder ``out / group``."""
    server = server_of(r)
    memory = [f"gpu_memory_utilization = {at_gpus(server.memory, r)}  # --mem-fraction-static"]
    if r["backend"] == "trtllm":
        memory = ["# TRT-LLM's KV cache takes free_gpu_memory_fraction of what the weights leave:",
                  "# about 0.92-0.99 of the GPU's memory with these models.",
                  f"gpu_memory_utilization = {server.memory}"]
    lines = [
        *provenance_lines(r, out / group),
        f"# {r['model_path']} (precision {r['precision']}) on {gpu_of(r)} ({r['system']}), "
        f"{clients(r)} clients,",
        f"# nominal {r['isl']} prompt and {r['osl']} output tokens. About "
        f"{passes(r):,.0f} decode passes.",
        f'name = "{case_name(r)}"',
        "",
        "[hardware]",
        f'gpu = "{gpu_of(r)}"',
        f'engine = "{r["backend"]}"',
        *memory,
        "",
        "[model]",
        *model_lines(model_of(r), out / group),
        "",
        *workload_lines(r),
        "",
        *lever_lines(r),
        "",
        *measured_lines(r),
    ]
    return "\n".join(lines) + "\n"


def measured_lines(r: dict) -> list[str]:
    """[run] and [measured]: the row's mean TTFT and TPOT."""
    return [
        "[run]",
        f"seeds = {SEEDS}",
        "",
        "[measured]",
        "# silicon_ttft_ms / 1000 and silicon_tpot_ms, taken as the client's means over the",
        "# measured requests (the sample does not say mean or median; InferenceX keeps both).",
        f"mean_ttft_s = {num(float(r['silicon_ttft_ms']) / 1000)}",
        f"mean_tpot_ms = {num(float(r['silicon_tpot_ms']))}",
    ]


def cases(path: Path = CSV, out: Path = OUT) -> tuple[dict[Path, str], dict, list[dict]]:
    """Every case file's path -> its text; the skipped rows by reason; the kept rows."""
    rows, skipped = read_rows(path)
    return case_files.files(rows, split(rows), case_name, case_text, out), skipped, rows


def summary(found: dict[Path, str], skipped: dict, rows: list[dict]) -> list[str]:
    """Counts per engine, GPU and model (fit / holdout) and the skipped rows by reason."""
    counts: dict[tuple, list[int]] = {}
    for p, r in zip(found, rows):
        c = counts.setdefault((r["backend"], gpu_of(r), model_of(r).slug), [0, 0])
        c[0 if p.parent.name == "fit" else 1] += 1
    out = [f"{e} {g} {m}: {f} fit, {h} holdout" for (e, g, m), (f, h) in sorted(counts.items())]
    return out + [f"skipped: {k}: {v}" for k, v in sorted(skipped.items())]


def generated(out: Path = OUT) -> list[Path]:
    """The case files on disk that this script wrote."""
    return case_files.generated(out, GROUPS, HEADER)


def main(argv: list[str] | None = None) -> int:
    return case_files.main(argv, __doc__, OUT, lambda out: cases(CSV, out), generated, summary,
                           "validation/make_engine_cases.py")


if __name__ == "__main__":
    sys.exit(main())
