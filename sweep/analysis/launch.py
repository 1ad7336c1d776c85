"""The serving engine's command line that runs a design, from its row of a results table
(``designs.parquet``, ``capacity.parquet``, a fleet's): ``launch_vllm`` (``vllm serve``),
``launch_sglang`` (``python -m sglang.launch_server``) and ``launch_trtllm`` (``trtllm-serve``
with the YAML of its ``--extra_llm_api_options``). Flags are the engines' own, as their docs
name them (vLLM's engine arguments, SGLang's server arguments, TensorRT-LLM's ``trtllm-serve``
options and LLM API fields); a lever that no flag sets is said in the command's trailing
``# note``, never made into a flag. docs/running.md has the mapping, lever by lever."""
from __future__ import annotations

import json
import shlex
from typing import Iterable, NamedTuple

import pandas as pd

from sweep.physics.catalog import CATALOG as MODEL_CATALOG, PUBLISHED
from sweep.physics.engines import v0
from sweep.physics.hardware import CATALOG as GPU_CATALOG
from sweep.physics.models import NATIVE_FLOAT_GENERATIONS
from sweep.study.fields import DESIGN_FIELDS

#: The tables' columns, in this order.
LAUNCH_COLUMNS = ("launch_vllm", "launch_sglang", "launch_trtllm")
#: The draft model is not a lever: the commands name this placeholder for it.
DRAFT_MODEL = "DRAFT_MODEL"
#: Nor is an EAGLE-3 head's checkpoint (one trained for the target): this placeholder names it.
EAGLE_MODEL = "EAGLE3_MODEL"
#: vLLM's ``--speculative-config`` method of each draft (vLLM docs, "Speculative Decoding":
#: ``mtp`` resolves to the checkpoint's own, e.g. ``deepseek_mtp``; ``eagle3``) and SGLang's
#: ``--speculative-algorithm`` (its docs: ``NEXTN`` for MTP layers, ``EAGLE3``).
SPEC_METHODS = {"model": ("draft_model", "STANDALONE"), "mtp": ("mtp", "NEXTN"),
                "eagle": ("eagle3", "EAGLE3")}
#: Catalog name -> Hugging Face repository, for the entries written from published numbers
#: (the repositories their sources cite); ``PUBLISHED`` names the rest.
HF_IDS = {
    "Llama-3-8B": "meta-llama/Meta-Llama-3-8B",
    "Llama-3-70B": "meta-llama/Meta-Llama-3-70B",
    "Llama-3-405B": "meta-llama/Llama-3.1-405B",
    "Llama-3.2-1B": "meta-llama/Llama-3.2-1B",
    "Mistral-7B": "mistralai/Mistral-7B-v0.1",
    "Llama-3.1-8B": "meta-llama/Llama-3.1-8B",
    "Llama-3.1-70B": "meta-llama/Llama-3.1-70B",
    "Llama-3.1-405B": "meta-llama/Llama-3.1-405B",
    "Qwen3-8B": "Qwen/Qwen3-8B",
    "Qwen3-32B": "Qwen/Qwen3-32B",
    "Qwen3-30B-A3B": "Qwen/Qwen3-30B-A3B",
    "Mixtral-8x22B": "mistralai/Mixtral-8x22B-v0.1",
    **PUBLISHED,
}
#: The engines' defaults a command leaves out: vLLM's block size on CUDA.
VLLM_BLOCK_SIZE = 16
#: vLLM's documented connector for disaggregated prefill, on both pools.
KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
_CHECKPOINT = {16: "a 16-bit (BF16) checkpoint", 8: "an 8-bit (FP8) checkpoint",
               4: "a 4-bit (e.g. AWQ, GPTQ or NVFP4) checkpoint"}


def _value(row, key: str):
    """The row's value of ``key``: None where unset (empty), its declared default where the
    table has no such column."""
    if key not in row:
        f = DESIGN_FIELDS.get(key)
        return f.default if f is not None else None
    v = row[key]
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return None
    return v


def _int(row, key: str) -> int | None:
    v = _value(row, key)
    return None if v is None else int(v)


class _Server(NamedTuple):
    """One engine instance of a design: its tensor-parallel GPUs, its GPU, its pool, its
    data-parallel attention ranks, whether its experts are sharded, and how many such servers
    its pool has."""

    tp: int
    gpu: str
    pool: str = ""  # "prefill" or "decode" of disaggregated pools; "" otherwise
    dp: int = 1
    ep: bool = False
    count: int = 1


def _servers(row) -> list[_Server]:
    prefill, decode = _int(row, "prefill_gpus"), _int(row, "decode_gpus")
    gpu, dp, ep = str(_value(row, "gpu")), _int(row, "data_parallel") or 1, bool(
        _value(row, "expert_parallel"))
    if prefill is None or decode is None:
        return [_Server(_int(row, "gpus") or 1, gpu, "", dp, ep)]

    def pool(side: str, tp: int) -> _Server:
        own_ep = _value(row, f"{side}_expert_parallel")
        return _Server(tp, str(_value(row, f"{side}_gpu") or gpu), side,
                       _int(row, f"{side}_data_parallel") or dp,
                       ep if own_ep is None else bool(own_ep),
                       _int(row, f"{side}_workers") or 1)

    return [pool("prefill", prefill), pool("decode", decode)]


def model_id(name: str) -> str:
    """The model's Hugging Face repository where the catalog knows it, else its name."""
    return HF_IDS.get(name, name)


def _fp8_computes(gpu: str) -> bool:
    """Whether fp8 weights quantised on load compute in 8 bits there (W8A8), not weight-only."""
    g = GPU_CATALOG.get(gpu)
    return bool(g and g.generation in NATIVE_FLOAT_GENERATIONS[8] and g.has_activation_bits(8))


def _weights(row, gpu: str) -> tuple[str | None, list[str]]:
    """``--quantization``'s value where the weights are quantised as they load (fp8 from a
    16-bit checkpoint), and notes: the checkpoint another precision needs, and
    ``activation_bits`` where the served weights compute in other bits on ``gpu``."""
    name, bits = str(_value(row, "model")), _int(row, "weight_bits")
    act = _int(row, "activation_bits")
    model = MODEL_CATALOG.get(name)
    if bits is None or model is None:
        return None, ([] if bits in (None, 16) else
                      [f"weight_bits={bits}: {_CHECKPOINT[bits]} of the model assumed"])
    native, quantization = model.native_nominal_bits, None
    if bits == native:
        g = GPU_CATALOG.get(gpu)
        computes = model.activation_bits(g, None) if g else act
    elif (bits, native) == (8, 16):
        quantization, computes = "fp8", 8 if _fp8_computes(gpu) else 16
    else:
        return None, [f"weight_bits={bits}: serve {_CHECKPOINT[bits]} of {name} (its own is "
                      f"{native}-bit)"]
    notes = [] if act is None or act == computes else [
        f"activation_bits={act}: no flag; the served weights compute in {computes} bits on {gpu}"]
    return quantization, notes


def _common_notes(row) -> list[str]:
    """What the flags cannot say, for either engine."""
    notes = []
    replicas = _int(row, "replicas") or 1
    if replicas > 1:
        notes.append(f"x{replicas} replicas behind a {_value(row, 'router')} router")
    name = str(_value(row, "model"))
    if name in MODEL_CATALOG and name not in HF_IDS:
        notes.append(f"{name}: no public checkpoint")
    if _value(row, "batching") == "static":
        notes.append("static batching: no vLLM or SGLang equivalent (both admit into a "
                     "running batch)")
    if _value(row, "kv_cache") == "contiguous":
        notes.append("contiguous KV cache: no vLLM or SGLang equivalent (both page it)")
    draft, kind = _int(row, "draft_tokens") or 0, _value(row, "draft") or "model"
    if draft and kind == "model":
        notes.append(f"{DRAFT_MODEL}: a placeholder for the draft model, not a lever "
                     f"(acceptance {float(_value(row, 'acceptance')):g}, "
                     f"{float(_value(row, 'draft_cost')):g} of a pass per drafted token)")
    elif draft and kind == "eagle":
        notes.append(f"{EAGLE_MODEL}: a placeholder for an EAGLE-3 head trained for {name} "
                     "(its checkpoint is not a lever)")
    return notes


def _draft_path(kind: str) -> str | None:
    """The draft checkpoint a command names: the placeholders, none for MTP layers (the
    target's own)."""
    return {"model": DRAFT_MODEL, "eagle": EAGLE_MODEL}.get(kind)


def _server_note(row, s: _Server) -> list[str]:
    """The machine a command runs on, which no flag names (a mixed fleet's differ only there)."""
    if not s.pool:
        return [f"on {s.tp * s.dp * _stages(row)} x {s.gpu}" + _nodes(row, s)]
    servers = f"{s.count} servers of " if s.count > 1 else ""
    pool = f"{s.pool} pool: {servers}{s.tp * s.dp * _stages(row)} x {s.gpu}"
    if s.pool == "prefill":
        router = f" ({_value(row, 'router')})" if s.count > 1 else ""
        return [f"{pool}, its KV sent to the decode pool over a "
                f"{float(_value(row, 'kv_link_gbps')):g} Gb/s link; a proxy routes each request "
                f"through both{router}"]
    return [pool]


def _stages(row) -> int:
    return _int(row, "pipeline_parallel") or 1


def _nodes(row, s: _Server) -> str:
    """Where pipeline stages span nodes: how many, which the engine's multi-node launch (a Ray
    cluster for vLLM, ``--nnodes`` for SGLang) joins."""
    gpus, node = s.tp * _stages(row), GPU_CATALOG[s.gpu].node_gpus
    return f" ({-(-gpus // node)} nodes of {node})" if gpus > node else ""


def _seats(row) -> int:
    """Sequences one rank decodes together: one at a time, or ``max_batch``."""
    return 1 if _value(row, "batching") == "one_at_a_time" else _int(row, "max_batch")


def _tokens(row) -> tuple[int, int]:
    """The token budget per pass and the prefill chunk (0: none)."""
    return _int(row, "max_num_batched_tokens") or 0, _int(row, "prefill_chunk_tokens") or 0


def _json(value: dict) -> str:
    """A JSON argument in one shell word without spaces (a wrapped command never splits it)."""
    return shlex.quote(json.dumps(value, separators=(",", ":")))


def _vllm_flags(row, s: _Server) -> tuple[list[str], list[str]]:
    """``vllm serve``'s flags for one server, and the notes they leave."""
    dp, notes = s.dp, []
    flags = [f"--tensor-parallel-size {s.tp}"]
    if _stages(row) > 1:
        flags.append(f"--pipeline-parallel-size {_stages(row)}")
    if dp > 1:
        flags.append(f"--data-parallel-size {dp}")
    if s.ep:
        flags.append("--enable-expert-parallel")
    budget, chunk = _tokens(row)
    # V0's flags for a design of vLLM before 0.8 (another engine's release is that engine's)
    old = v0(str(_value(row, "engine") or "vllm"), str(_value(row, "engine_version") or ""))
    if budget or chunk:  # V0 chunks prefills only when asked to
        flags += ["--enable-chunked-prefill"] * old + [
            f"--max-num-batched-tokens {budget or chunk}"]
    if chunk:
        notes.append(f"prefill_chunk_tokens={chunk}: " + (
            "no vLLM flag beside the token budget" if budget
            else "vLLM's budget also counts the pass's decodes"))
    if _value(row, "prefix_cache") or not old:  # V0 caches no prefix unless asked to
        flags.append("--enable-prefix-caching" if _value(row, "prefix_cache")
                     else "--no-enable-prefix-caching")
    steps = _int(row, "num_scheduler_steps") or 1
    if old and steps > 1:
        flags.append(f"--num-scheduler-steps {steps}")
    tier = _tier_gib(row)
    if tier:  # GiB over the engine's tensor-parallel ranks; each data-parallel rank its own
        flags.append(f"--kv-offloading-backend native --kv-offloading-size {tier / dp:g}")
    if _int(row, "kv_bits") == 8:
        flags.append("--kv-cache-dtype fp8")
    quantization, weight_notes = _weights(row, s.gpu)
    if quantization:
        flags.append(f"--quantization {quantization}")
    draft, kind = _int(row, "draft_tokens") or 0, _value(row, "draft") or "model"
    if draft:
        path = _draft_path(kind)
        spec = {"method": SPEC_METHODS[kind][0], **({"model": path} if path else {}),
                "num_speculative_tokens": draft}
        flags.append(f"--speculative-config {_json(spec)}")
    flags.append(f"--max-num-seqs {_seats(row)}")
    flags += _memory_flags(row, {"max_seq_len": "--max-model-len",
                                 "gpu_memory_utilization": "--gpu-memory-utilization",
                                 "kv_blocks": "--num-gpu-blocks-override"})
    block = _int(row, "block_size")
    if _value(row, "kv_cache") == "paged" and block != VLLM_BLOCK_SIZE:
        flags.append(f"--block-size {block}")
    if s.pool:
        flags.append(f"--kv-transfer-config {_json(KV_TRANSFER)}")
    return flags, weight_notes + notes


def _tier_gib(row) -> float:
    """A CPU KV tier's GiB per server (0: none)."""
    return float(_value(row, "kv_offload_gib") or 0) if _value(row, "prefix_cache") else 0.0


def _memory_flags(row, names: dict) -> list[str]:
    """The flags of the memory levers a design sets (unset ones leave the engine's sizing)."""
    out = []
    for key, flag in names.items():
        v = _value(row, key)
        if v is not None:
            out.append(f"{flag} {int(v)}" if DESIGN_FIELDS[key].kind == "int"
                       else f"{flag} {float(v):g}")
    return out


def _sglang_flags(row, s: _Server) -> tuple[list[str], list[str]]:
    """``sglang.launch_server``'s flags for one server, and the notes they leave. With data
    parallel attention its ``--tp`` is every GPU of the server and its request limit the
    ranks' sum."""
    dp, notes = s.dp, []
    flags = [f"--tp {s.tp * dp}"]
    if _stages(row) > 1:
        flags.append(f"--pp-size {_stages(row)}")
    if dp > 1:
        flags += [f"--dp {dp}", "--enable-dp-attention"]
    if s.ep:
        flags.append(f"--ep-size {s.tp * dp}")
    budget, chunk = _tokens(row)
    # Neither: prompts are prefilled whole, as SGLang does only with chunking off (its own
    # default chunks at 8192 tokens or more).
    flags.append(f"--chunked-prefill-size {chunk or budget or -1}")
    if budget:
        notes.append(f"max_num_batched_tokens={budget}: " + (
            "no SGLang flag beside the prefill chunk" if chunk
            else "SGLang's chunk does not count the pass's decodes"))
    if _value(row, "batching") == "continuous" and _value(row, "engine") != "sglang":
        flags.append("--enable-mixed-chunk")  # as simulated: decodes join a prefill's pass
    if not _value(row, "prefix_cache"):
        flags.append("--disable-radix-cache")
    tier = _tier_gib(row)
    if tier:  # HiCache's host pool is each rank's, in GB (1e9 bytes)
        flags += ["--enable-hierarchical-cache", "--hicache-write-policy write_through",
                  f"--hicache-size {tier * 2**30 / 1e9 / (s.tp * dp):.4g}"]
    if _int(row, "kv_bits") == 8:
        flags.append("--kv-cache-dtype fp8_e4m3")
    quantization, weight_notes = _weights(row, s.gpu)
    if quantization:
        flags.append(f"--quantization {quantization}")
    draft, kind = _int(row, "draft_tokens") or 0, _value(row, "draft") or "model"
    if draft:
        path = _draft_path(kind)
        flags += [f"--speculative-algorithm {SPEC_METHODS[kind][1]}",
                  *([f"--speculative-draft-model-path {path}"] if path else []),
                  f"--speculative-num-steps {draft}", "--speculative-eagle-topk 1",
                  f"--speculative-num-draft-tokens {draft + 1}"]
    flags.append(f"--max-running-requests {_seats(row) * dp}")
    flags += _memory_flags(row, {"max_seq_len": "--context-length",
                                 "gpu_memory_utilization": "--mem-fraction-static"})
    block = _int(row, "block_size")
    flags.append(f"--page-size {block}")
    blocks = _int(row, "kv_blocks")
    if blocks is not None:
        flags.append(f"--max-total-tokens {blocks * block}")
    if s.pool:
        flags.append(f"--disaggregation-mode {s.pool}")
    return flags, weight_notes + notes


#: TensorRT-LLM's ``speculative_config.decoding_type`` of each draft (its LLM API docs,
#: "Speculative Decoding"): a draft model, the checkpoint's MTP layers, an EAGLE-3 head.
TRTLLM_SPEC = {"model": "DraftTarget", "mtp": "MTP", "eagle": "Eagle3"}


def _trtllm_flags(row, s: _Server) -> tuple[list[str], list[str]]:
    """``trtllm-serve``'s flags for one server (PyTorch backend), the options it takes from a
    YAML file (``--extra_llm_api_options``, written out in the note as one JSON object: YAML
    reads it as it is), and the notes they leave. With data-parallel attention its
    ``--tp_size`` is every GPU of the server, as SGLang's ``--tp``."""
    dp, notes, extra = s.dp, [], {}
    flags = ["--backend pytorch", f"--tp_size {s.tp * dp}"]
    if _stages(row) > 1:
        flags.append(f"--pp_size {_stages(row)}")
    if s.ep:
        flags.append(f"--ep_size {s.tp * dp}")
    if dp > 1:
        extra["enable_attention_dp"] = True
    budget, chunk = _tokens(row)
    if budget or chunk:
        flags.append(f"--max_num_tokens {budget or chunk}")
        extra["enable_chunked_prefill"] = True
    flags.append(f"--max_batch_size {_seats(row) * dp}")
    flags += _memory_flags(row, {"max_seq_len": "--max_seq_len",
                                 "gpu_memory_utilization": "--kv_cache_free_gpu_memory_fraction"})
    kv = {"enable_block_reuse": bool(_value(row, "prefix_cache"))}
    if _int(row, "kv_bits") == 8:
        kv["dtype"] = "fp8"
    tier = _tier_gib(row)
    if tier:  # bytes of host memory, each rank's
        kv["host_cache_size"] = int(tier * 2**30 / (s.tp * dp))
    block = _int(row, "block_size")
    if block is not None:
        kv["tokens_per_block"] = block
    blocks = _int(row, "kv_blocks")
    if blocks is not None:
        kv["max_tokens"] = blocks * block
    extra["kv_cache_config"] = kv
    draft, kind = _int(row, "draft_tokens") or 0, _value(row, "draft") or "model"
    if draft:
        path = _draft_path(kind)
        extra["speculative_config"] = {
            "decoding_type": TRTLLM_SPEC[kind],
            **({"num_nextn_predict_layers": draft} if kind == "mtp" else
               {"max_draft_len": draft, "speculative_model_dir": path})}
    quantization, weight_notes = _weights(row, s.gpu)
    if quantization:
        notes.append("weights quantised to fp8 as they load: serve an FP8 checkpoint "
                     "(TensorRT-LLM reads its quantisation from the checkpoint)")
    if _value(row, "gpu_memory_utilization") is not None:
        notes.append("--kv_cache_free_gpu_memory_fraction: of the memory the weights leave")
    if s.pool:
        notes.append(f"{s.pool} server of a `trtllm-serve disaggregated` deployment")
    flags.append("--extra_llm_api_options EXTRA.yml")
    return flags, [f"EXTRA.yml = {json.dumps(extra, separators=(', ', ': '))}",
                   *weight_notes, *notes]


def _engine_note(row, engine: str) -> list[str]:
    """Where the row was simulated with another engine's terms, a note that says whose."""
    simulated = _value(row, "engine") or "vllm"
    return [] if simulated == engine else [f"simulated as engine={simulated}"]


def _line(program: str, flags: list[str], notes: list[str]) -> str:
    return " ".join([program] + flags) + (f"  # {'; '.join(notes)}" if notes else "")


def _command(row, engine: str, program: str, flags) -> str:
    """One engine's command of the design in ``row``: a line per server (of disaggregated pools,
    prefill then decode), each ``program`` with ``flags(row, server)``'s flags, then its notes."""
    lines = []
    for i, s in enumerate(_servers(row)):
        own, notes = flags(row, s)
        lines.append(_line(program, own, _server_note(row, s) + (
            _engine_note(row, engine) + _common_notes(row) if i == 0 else []) + notes))
    return "\n".join(lines)


def _maps(row) -> bool:
    """Whether SGLang and TensorRT-LLM have the design's batching and cache (neither has static
    batching or a contiguous KV cache, which ``launch_vllm``'s note says)."""
    return _value(row, "batching") != "static" and _value(row, "kv_cache") != "contiguous"


def launch_vllm(row) -> str:
    """The ``vllm serve`` command of the design in ``row`` (a mapping of a table's columns):
    one line, or of disaggregated pools two (prefill, then decode)."""
    model = shlex.quote(model_id(str(_value(row, "model"))))
    return _command(row, "vllm", f"vllm serve {model}", _vllm_flags)


def launch_sglang(row) -> str | None:
    """The ``python -m sglang.launch_server`` command of the design in ``row``, as
    ``launch_vllm``; None where a lever has no SGLang equivalent (``_maps``)."""
    model = shlex.quote(model_id(str(_value(row, "model"))))
    return _command(row, "sglang", f"python -m sglang.launch_server --model-path {model}",
                    _sglang_flags) if _maps(row) else None


def launch_trtllm(row) -> str | None:
    """The ``trtllm-serve`` command of the design in ``row``, as ``launch_sglang``."""
    model = shlex.quote(model_id(str(_value(row, "model"))))
    return _command(row, "trtllm", f"trtllm-serve {model}", _trtllm_flags) if _maps(row) \
        else None


def launch_columns(rows: Iterable) -> dict[str, list]:
    """``launch_vllm``, ``launch_sglang`` and ``launch_trtllm`` of each of ``rows``, as a
    table's columns."""
    rows = list(rows)
    return {"launch_vllm": [launch_vllm(r) for r in rows],
            "launch_sglang": [launch_sglang(r) for r in rows],
            "launch_trtllm": [launch_trtllm(r) for r in rows]}


def fleet_launch(cap: pd.DataFrame, designs, copies, router: str | None = None) -> dict:
    """The launch columns of fleets: ``copies`` of each design of ``cap`` (its own replicas
    each, or its pools' servers, as ``Design.times``), behind its router or ``router``."""
    by_design = cap.set_index("design")
    rows = []
    for design, n in zip(designs, copies):
        row = by_design.loc[int(design)].to_dict()
        pools = _int(row, "prefill_gpus") is not None
        for key in ("prefill_workers", "decode_workers") if pools else ("replicas",):
            row[key] = (_int(row, key) or 1) * int(n)
        if router is not None:
            row["router"] = router
        rows.append(row)
    return launch_columns(rows)
