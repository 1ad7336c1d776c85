"""A checkpoint's own weight precision, from its ``quantization_config`` or a sibling
``hf_quant_config.json`` (NVIDIA ModelOpt): bits per quantised weight with the scales counted,
and which weights the checkpoint keeps at 16 bits.

Bits per weight, scales included (each format's block layout):
- fp8 (e4m3): 8, plus one fp32 scale per ``weight_block_size`` block (DeepSeek's 128x128) or
  per tensor;
- MXFP4 (OCP Microscaling): 4, plus one 8-bit shared exponent per 32 weights: 4.25;
- NVFP4 (ModelOpt): 4, plus one fp8 scale per 16 weights: 4.5 (the per-tensor fp32 scale is
  nothing per weight);
- int4 AWQ/GPTQ: 4, plus a 16-bit scale and a 4-bit zero point per group (128 unless given);
- compressed-tensors: its weights' ``num_bits``, plus a 16-bit scale per group.
Embeddings and norms are not linear layers, so no format converts them; a skip list
(``modules_to_not_convert``, ``ignore``, ``exclude_modules``) keeps more at 16 bits."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sweep.errors import FieldError, clip, one_line, show
from sweep.physics.config_file import read_json

#: Modules no format converts: the token embedding, the norms and the routers (kept at 16 bits
#: in every checkpoint here, listed or not).
NEVER_CONVERTED = ("embed_tokens", "norm", "gate")
#: A skip-list entry's module, by the first word of it found (checked in this order).
MODULE_WORDS = (("lm_head", "lm_head"), ("embed", "embed_tokens"), ("visual", "vision"),
                ("vision", "vision"), ("shared_expert", "shared_expert"),
                ("experts", "experts"), ("linear_attn", "linear_attn"), ("mixer", "mixer"),
                ("self_attn", "self_attn"), ("attn", "self_attn"), ("router", "gate"),
                ("mlp.gate", "gate"), ("norm", "norm"), ("mlp", "mlp"))
#: Skip-list entries of layers the model as served does not load (multi-token prediction).
UNLOADED = ("mtp", "nextn")
#: The formats read, for the refusal of any other.
METHODS = ("fp8", "mxfp4", "modelopt", "awq", "gptq", "compressed-tensors")
#: Weight bits each integer format's kernels take (vLLM's: GPTQ 2, 3, 4 or 8; AWQ 4, and 8
#: through AWQ-Marlin; compressed-tensors' WNA16 and W8A8 schemes 4 or 8): any other is no
#: checkpoint that exists.
INT_BITS = {"gptq": (2, 3, 4, 8), "awq": (4, 8), "compressed-tensors": (4, 8)}
#: The fewest weights one scale serves: NVFP4's 16, the finest group of any format; a finer
#: one would count more bits of scales than of weights.
MIN_GROUP = 16


@dataclass(frozen=True)
class Precision:
    bits: float  # per quantised weight, scales included
    nominal: int  # as the weight_bits lever names it: 16, 8 or 4
    kept: float  # parameters held at 16 bits
    activation: int = 16  # what the kernels compute in where the GPU has it


def checkpoint_precision(cfg: dict, path: Path, by_module: dict, layers_of: dict,
                         where: str, layers: int, kept: tuple = ()) -> Precision:
    """The checkpoint's precision: ``by_module`` holds its parameters per module, ``layers_of``
    how many of its ``layers`` have each (a skip-list entry naming one layer keeps that share;
    one naming a layer past them names a multi-token-prediction layer, not loaded); ``kept``
    names modules the quantisation does not cover (a vision tower beside a language model's
    own ``quantization_config``)."""
    q, source = _quant_config(cfg, path, where)
    if q is None:
        return Precision(16.0, 16, 0.0)
    method = str(q.get("quant_method", "")).lower()
    bits, nominal, skip = _format(q, method, source, where)
    held = _kept(skip, by_module, layers_of, source, where, layers, kept)
    return Precision(bits, nominal, held, _activation(q, method))


def _activation(q: dict, method: str) -> int:
    """The precision a checkpoint's kernels compute in: fp8 weights with dynamic (or static)
    fp8 activations (W8A8) and ModelOpt's FP8 at 8; ModelOpt's NVFP4 (W4A4) at 4; MXFP4 and
    int4 formats are weight-only (gpt-oss's MXFP4 experts beside 16-bit attention, AWQ/GPTQ's
    W4A16) at 16, as is compressed-tensors without input activations quantised."""
    if method == "fp8":
        return 8
    if method == "modelopt":
        return {"FP8": 8, "NVFP4": 4}.get(str(q.get("quant_algo", "")).upper(), 16)
    if method == "compressed-tensors":
        groups = q.get("config_groups") or {}
        acts = [g.get("input_activations") for g in groups.values() if isinstance(g, dict)]
        bits = [a.get("num_bits") for a in acts if isinstance(a, dict)]
        return 8 if bits and all(b == 8 for b in bits) else 16
    return 16


def _refuse(source: str, where: str, reason: str, allowed: str = ", ".join(METHODS)):
    raise FieldError("model.config_json", one_line(f"{where}: {source} {reason}"), allowed)


def _quant_config(cfg: dict, path: Path, where: str) -> tuple[dict | None, str]:
    q = cfg.get("quantization_config") or cfg.get("quantization")
    if q:
        if not isinstance(q, dict):
            _refuse("quantization_config", where, "is not a table")
        return q, "quantization_config"
    stem = path.name[:-len("config.json")] if path.name.endswith("_config.json") else ""
    for sibling in ("hf_quant_config.json", f"{stem}hf_quant_config.json"):
        p = path.parent / sibling
        if sibling != "hf_quant_config.json" and not stem:
            continue
        if p.exists() or p.is_symlink():  # a pipe or a device is refused, not skipped
            q = read_json(p).get("quantization")
            if not isinstance(q, dict):
                _refuse("hf_quant_config.json", where, "has no quantization table")
            return {"quant_method": "modelopt", **q}, "hf_quant_config.json"
    return None, ""


def _bits(q: dict, key: str, default, method: str, source: str, where: str) -> int:
    """Bits per quantised weight, one of those the format has."""
    v = q.get(key, default)
    if isinstance(v, bool) or v not in INT_BITS[method]:
        _refuse(source, where, f"{key} = {show(v)} is not a weight precision {method} has",
                ", ".join(map(str, INT_BITS[method])))
    return int(v)


def _group(v, key: str, source: str, where: str, per_channel: bool = False) -> int:
    """Weights per scale: an integer of at least ``MIN_GROUP``, or -1 (one scale per output
    channel, nothing per weight: 0 returned) where the format has it."""
    if per_channel and v == -1 and not isinstance(v, bool):
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < MIN_GROUP:
        _refuse(source, where, f"{key} = {show(v)} is not a group of weights per scale",
                f"an integer >= {MIN_GROUP}" + (" or -1 (per channel)" if per_channel else ""))
    return v


def _format(q: dict, method: str, source: str, where: str) -> tuple[float, int, list]:
    """Bits per weight, the lever's name for them and the skip list."""
    skip = q.get("modules_to_not_convert") or q.get("ignored_layers") or []
    if method == "fp8":
        block = q.get("weight_block_size") or [1 << 30, 1]  # none: one scale per tensor
        if not (isinstance(block, list) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            _refuse(source, where, "weight_block_size is not two positive integers")
        area = _group(block[0] * block[1], "weight_block_size's area", source, where)
        return 8.0 + 32.0 / area, 8, skip
    if method == "mxfp4":
        return 4.25, 4, skip
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        skip = q.get("exclude_modules") or skip
        if algo == "FP8":
            return 8.0, 8, skip
        if algo == "NVFP4":
            return 4.0 + 8.0 / _group(q.get("group_size", 16), "group_size", source, where), \
                4, skip
        if algo in ("W4A8_AWQ", "W4A16_AWQ", "INT4_AWQ"):
            return 4.0 + 20.0 / _group(q.get("group_size", 128), "group_size", source, where), \
                4, skip
        _refuse(source, where, f"quant_algo {clip(algo, 30)!r} is not modelled (known: FP8, "
                               "NVFP4, W4A8_AWQ, W4A16_AWQ, INT4_AWQ)")
    if method in ("awq", "gptq"):
        bits = _bits(q, "bits", q.get("w_bit", 4), method, source, where)
        group = _group(q.get("group_size", q.get("q_group_size", 128)), "group_size", source,
                       where, per_channel=True)
        return bits + ((16.0 + bits) / group if group else 0.0), 4 if bits <= 4 else 8, skip
    if method == "compressed-tensors":
        return (*_compressed(q, source, where), q.get("ignore") or skip)
    _refuse(source, where, f"quant_method {clip(method or '-', 30)!r} is not modelled")


def _compressed(q: dict, source: str, where: str) -> tuple[float, int]:
    groups = q.get("config_groups")
    weights = [g.get("weights") for g in groups.values() if isinstance(g, dict)] \
        if isinstance(groups, dict) else []
    if not weights or not all(isinstance(w, dict) for w in weights):
        _refuse(source, where, "config_groups has no weights table")
    bits = {_bits(w, "num_bits", None, "compressed-tensors", source, where) for w in weights}
    if len(bits) != 1:
        _refuse(source, where, "config_groups holds weights at several precisions")
    w, (b,) = weights[0], bits
    group = _group(w.get("group_size"), "group_size", source, where, per_channel=True) \
        if w.get("strategy") == "group" else 0
    return b + (16.0 / group if group else 0.0), 4 if b <= 4 else 8


def _module(entry: str) -> str | None:
    """The module a skip-list entry names (None: a layer the served model does not load)."""
    text = re.sub(r"gate_(up_)?proj", "proj", entry.lower())  # a dense MLP's, not a router
    if any(w in text for w in UNLOADED):
        return None
    return next((m for word, m in MODULE_WORDS if word in text), "")


def _kept(skip, by_module: dict, layers_of: dict, source: str, where: str,
          layers: int, kept: tuple) -> float:
    """Parameters held at 16 bits: the never-converted modules and the skip list's. An entry
    naming one layer (``model.layers.3.mlp.gate``) keeps that layer's share of its module."""
    if not isinstance(skip, list):
        _refuse(source, where, "skip list is not a list of module names")
    whole = set(NEVER_CONVERTED) | set(kept)
    some: dict[str, set] = {}
    for entry in skip:
        layer = re.search(r"layers\.(\d+)", str(entry))  # past 10 digits: past every layer
        index = int(layer.group(1).lstrip("0")[:10] or "0") if layer else None
        if index is not None and index >= layers:
            continue  # a layer the served model does not load
        module = _module(str(entry))
        if module is None:
            continue
        if not module:
            _refuse(source, where, f"skip-list entry {clip(str(entry), 40)!r} names no module "
                                   "that is modelled")
        if module == "experts":
            _refuse(source, where, "keeps the routed experts at 16 bits, which is not modelled")
        if layer and module not in whole:
            some.setdefault(module, set()).add(index)
        else:
            whole.add(module)
    kept = sum(by_module.get(m, 0.0) for m in whole)
    for module, idx in some.items():
        if module not in whole and layers_of.get(module):
            kept += by_module.get(module, 0.0) * min(1.0, len(idx) / layers_of[module])
    return kept
