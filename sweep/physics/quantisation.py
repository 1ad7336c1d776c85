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
- compressed-tensors: its weights' ``num_bits``, plus a 16-bit scale per group;
- DeepSeek-V4's ``expert_dtype`` beside fp8: its routed experts in MXFP4 (or the same fp8).
Embeddings and norms are not linear layers, so no format converts them; a skip list
(``modules_to_not_convert``, ``ignored_layers``, ``ignore``, ``exclude_modules``) keeps more at
16 bits: whole modules, their projections, or one layer's share of them. An entry naming no
modelled weight (a router's correction bias, a norm inside a module) is noted and left out; one
naming weights that cannot be held at 16 bits as modelled (routed experts, a part the loader does
not size) is refused where, read as quantised, they would be over 0.1% of the weight bytes."""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from sweep.errors import FieldError, clip, one_line, show
from sweep.physics.config_file import read_json

#: Modules no format converts: the token embedding, the norms and the routers (kept at 16 bits
#: in every checkpoint here, listed or not).
NEVER_CONVERTED = ("embed_tokens", "norm", "gate")
#: The module a skip-list entry names: the first of these found in one of its dotted segments
#: (a segment that is "gate" alone is a router; a dense MLP's ``gate_proj`` is its MLP's part).
MODULE_WORDS = (("lm_head", r"lm_head"), ("embed_tokens", r"embed"),
                ("vision", r"visual|vision"), ("shared_expert", r"shared_expert"),
                ("experts", r"experts"), ("latent_proj", r"latent_proj"),
                ("gate", r"router|^\W*gate\W*$"),
                ("linear_attn", r"linear_attn"), ("mixer", r"mixer"), ("self_attn", r"attn"),
                ("norm", r"norm"), ("mlp", r"mlp|feed_forward|block_sparse_moe"))
#: What a module's word names beside it: a layer's MLP whole is its router, shared expert,
#: routed experts and latent projections too; Nemotron-H calls every layer's token mixer
#: "mixer", an attention, MLP or expert layer's as well as a Mamba layer's.
ALSO = {"mlp": ("gate", "shared_expert", "experts", "latent_proj"),
        "mixer": ("self_attn", "mlp", "gate", "shared_expert", "experts", "latent_proj")}
#: Words of weights no format converts, which the loader sizes within a module or not at all:
#: norms, biases (a router's correction bias), a state-space layer's A_log and D, its
#: convolution, attention sinks, rotary tables, scales.
NOT_LINEAR = r"norm|bias|a_log|^d$|conv1d|sinks|rotary|scale"
#: Names of several parts at once: fused projections, and Qwen3-Next's names of the linear
#: attention's input projections that Qwen3.5 splits.
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
         "in_proj_qkvz": ("in_proj_qkv", "in_proj_z"), "in_proj_ba": ("in_proj_a", "in_proj_b")}
#: The keys a skip list goes by in the formats read.
SKIP_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules")
#: Skip-list entries of layers the model as served does not load (multi-token prediction).
UNLOADED = ("mtp", "nextn")
#: The largest share of the weight bytes a skip list may name without its being read as the
#: checkpoint holds it (weights kept at 16 bits the model counts quantised): past it, refused.
UNREAD_SHARE = 1e-3
#: The formats read, for the refusal of any other.
METHODS = ("fp8", "mxfp4", "modelopt", "awq", "gptq", "compressed-tensors")
#: Weight bits each integer format's kernels take (vLLM's: GPTQ 2, 3, 4 or 8; AWQ 4, and 8
#: through AWQ-Marlin; compressed-tensors' WNA16 and W8A8 schemes 4 or 8): any other is no
#: checkpoint that exists.
INT_BITS = {"gptq": (2, 3, 4, 8), "awq": (4, 8), "compressed-tensors": (4, 8)}
#: MXFP4 (OCP Microscaling) bits per weight: 4, plus one 8-bit shared exponent per 32 weights.
MXFP4_BITS = 4.0 + 8.0 / 32
#: DeepSeek-V4's ``expert_dtype``, its routed experts' own precision beside the fp8 block format
#: of its other linear layers (vLLM's DeepseekV4FP8Config, which allows only these): "fp4" holds
#: them in MXFP4 (one e8m0 scale per 32 weights), "fp8" in that block format (bits: 0, as the rest).
EXPERT_DTYPES = {"fp4": MXFP4_BITS, "fp8": 0.0}
#: The fewest weights one scale serves: NVFP4's 16, the finest group of any format; a finer
#: one would count more bits of scales than of weights.
MIN_GROUP = 16


@dataclass(frozen=True)
class Precision:
    bits: float  # per quantised weight, scales included
    nominal: int  # as the weight_bits lever names it: 16, 8 or 4
    kept: float  # parameters held at 16 bits
    activation: int = 16  # what the kernels compute in where the GPU has it
    notes: tuple = ()  # skip-list entries left unread, in a line
    experts: float = 0.0  # the routed experts' bits where the checkpoint holds them apart


@dataclass(frozen=True)
class Weights:
    """A model's parameters as a skip list names them: per module, per part of a module (its
    projections), and the layers that hold each module (none: a module outside the layers)."""

    by_module: dict
    parts: dict  # module -> {part: parameters}
    layers_of: dict  # module -> set of layer indices
    experts: int = 1  # routed experts per expert layer

    def held(self, module: str) -> set:
        return self.layers_of.get(module) or {-1}

    def share(self, module: str, layers: set) -> float:
        return self.by_module.get(module, 0.0) * len(layers) / len(self.held(module))


def checkpoint_precision(cfg: dict, path: Path, weights: Weights, where: str, layers: int,
                         kept: tuple = ()) -> Precision:
    """The checkpoint's precision over the model's ``layers`` (a skip-list entry naming a layer
    past them names a multi-token-prediction layer, not loaded); ``kept`` names modules the
    quantisation does not cover (a vision tower beside a language model's own
    ``quantization_config``)."""
    q, source = _quant_config(cfg, path, where)
    if q is None:
        if cfg.get("expert_dtype") is not None:
            _refuse("expert_dtype", where, "is given without a quantization_config",
                    "expert_dtype beside an fp8 quantization_config")
        return Precision(16.0, 16, 0.0)
    method = str(q.get("quant_method", "")).lower()
    bits, nominal = _format(q, method, source, where)
    held, unread, unmodelled = _kept(_skip_list(q, source, where), weights, layers, kept)
    notes = _unread(unread, unmodelled, bits, held, weights, source, where)
    return Precision(bits, nominal, held, _activation(q, method), notes,
                     _expert_bits(cfg, method, where))


def _expert_bits(cfg: dict, method: str, where: str) -> float:
    """The routed experts' own bits per weight that ``expert_dtype`` names (0: none named, or
    the same format as the rest)."""
    v = cfg.get("expert_dtype")
    if v is None:
        return 0.0
    if v not in EXPERT_DTYPES or method != "fp8":
        _refuse("expert_dtype", where, f"= {clip(show(v), 20)} beside quant_method "
                                       f"{clip(method or '-', 20)!r} is not modelled",
                f"{', '.join(EXPERT_DTYPES)} beside fp8")
    return EXPERT_DTYPES[v]


def _unread(unread: list, unmodelled: list, bits: float, held: float, w: Weights,
            source: str, where: str) -> tuple:
    """The note of the skip-list entries left unread, or the refusal where the weights they
    name, 16-bit in the checkpoint and counted at ``bits`` here, exceed ``UNREAD_SHARE`` of
    the weight bytes (the largest of them named)."""
    size = (sum(w.by_module.values()) - held) * bits / 8.0 + held * 2.0
    if sum(n for _, _, n, _ in unread) * (16.0 - bits) / 8.0 > UNREAD_SHARE * size:
        key, entry, n, why = max(unread, key=lambda u: u[2])
        _refuse(source, where, f"{key} entry {clip(entry, 40)!r} {why} "
                               f"({n * (16.0 - bits) / 8.0 / size:.2%} of the weight bytes)",
                f"under {UNREAD_SHARE:.1%} of the weight bytes unread")
    named = [e for _, e, _, _ in unread] + unmodelled
    if not named:
        return ()
    return (f"{source}: skip-list entries left unread (no modelled weight, or under "
            f"{UNREAD_SHARE:.1%} of the weight bytes): "
            + ", ".join(repr(clip(e, 60)) for e in named[:3])
            + (f" and {len(named) - 3} more" if len(named) > 3 else ""),)


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


def _skip_list(q: dict, source: str, where: str) -> list[tuple[str, str]]:
    """(key, entry) of every skip list the table has, whatever the format calls it."""
    out = []
    for key in SKIP_KEYS:
        entries = q.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            _refuse(source, where, f"{key} is not a list of module names")
        out += [(key, str(e)) for e in entries]
    return out


def _format(q: dict, method: str, source: str, where: str) -> tuple[float, int]:
    """Bits per weight and the lever's name for them."""
    if method == "fp8":
        block = q.get("weight_block_size") or [1 << 30, 1]  # none: one scale per tensor
        if not (isinstance(block, list) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            _refuse(source, where, "weight_block_size is not two positive integers")
        area = _group(block[0] * block[1], "weight_block_size's area", source, where)
        return 8.0 + 32.0 / area, 8
    if method == "mxfp4":
        return MXFP4_BITS, 4
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo == "FP8":
            return 8.0, 8
        if algo == "NVFP4":
            return 4.0 + 8.0 / _group(q.get("group_size", 16), "group_size", source, where), 4
        if algo in ("W4A8_AWQ", "W4A16_AWQ", "INT4_AWQ"):
            return 4.0 + 20.0 / _group(q.get("group_size", 128), "group_size", source, where), 4
        _refuse(source, where, f"quant_algo {clip(algo, 30)!r} is not modelled (known: FP8, "
                               "NVFP4, W4A8_AWQ, W4A16_AWQ, INT4_AWQ)")
    if method in ("awq", "gptq"):
        bits = _bits(q, "bits", q.get("w_bit", 4), method, source, where)
        group = _group(q.get("group_size", q.get("q_group_size", 128)), "group_size", source,
                       where, per_channel=True)
        return bits + ((16.0 + bits) / group if group else 0.0), 4 if bits <= 4 else 8
    if method == "compressed-tensors":
        return _compressed(q, source, where)
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



def _kept(skip: list, w: Weights, layers: int, kept: tuple) -> tuple[float, list, list]:
    """Parameters held at 16 bits (the never-converted modules, ``kept`` and what the skip list
    names); the entries naming modelled weights that cannot be held so, as (key, entry, their
    parameters, what they name); and those naming no modelled weight."""
    covered = {m: {None: set(w.held(m))} for m in (*NEVER_CONVERTED, *kept)}
    unread, unmodelled = [], []
    for key, entry in skip:
        named = _named(entry, w, layers)
        if named is None:
            continue  # a layer the served model does not load
        cells, n, why = named
        for module, part, held in cells:
            covered.setdefault(module, {}).setdefault(part, set()).update(held)
        if n:
            unread.append((key, entry, n, why))
        elif not cells:
            unmodelled.append(entry)
    return sum(_held(w, m, cover) for m, cover in covered.items()), unread, unmodelled


def _held(w: Weights, module: str, cover: dict) -> float:
    """A module's parameters a skip list holds: its whole layers' share, and its parts' in
    the other layers."""
    whole = cover.get(None, set())
    n = w.share(module, whole)
    for part, layers in cover.items():
        if part is not None:
            n += w.parts[module][part] * len(layers - whole) / len(w.held(module))
    return n


def _named(entry: str, w: Weights, layers: int) -> tuple[list, float, str] | None:
    """What a skip-list entry names: cells (module, part or None for all of it, layer indices)
    held at 16 bits, and the parameters of modelled weights it names that cannot be held so,
    with what they are; None where it names a layer the served model does not load."""
    regex = entry.lower().startswith("re:")
    text = re.sub(r"\.weight$", "", entry.lower()[3 if regex else 0:])
    if any(word in text for word in UNLOADED):
        return None
    segments = re.split(r"\\?\.", text)
    module, at = next(((m, i) for m, pattern in MODULE_WORDS
                       for i, seg in enumerate(segments) if re.search(pattern, seg)), (None, 0))
    # a layer of the language model (a vision tower's own layers are the tower's)
    found = re.search(r"layers\\?\.(\d+)", text) if module != "vision" else None
    index = int(found.group(1).lstrip("0")[:10] or "0") if found else None  # 10 digits: past all
    if index is not None and index >= layers:
        return None
    if module is None:  # a whole layer, a part of one not sized, or nothing modelled
        after = text[found.end():] if found else text
        if index is None or re.search(NOT_LINEAR, after):
            return [], 0.0, ""
        if not re.search(r"[a-z0-9]", after):
            return _whole(w, tuple(w.by_module), index)
        return [], sum(w.share(m, {index}) for m in w.by_module if index in w.held(m)), \
            f"names a part of layer {index} not sized"
    own, rest = re.sub(r"\W", "", segments[at]), segments[at + 1:]
    if module == "experts":  # all of them, or one (``experts.5``)
        cells, n, why = _whole(w, (module,), index)
        return cells, n / w.experts if re.search(r"experts\\?\.\d", text) else n, why
    whole = own not in w.parts.get(module, {}) and not any(re.search(r"\w", s) for s in rest)
    modules = (module, *ALSO.get(module, ())) if whole or module == "mixer" else (module,)
    if whole:
        return _whole(w, modules, index)
    return _part(w, modules, index, [own, *rest], entry[3:] if regex else None)


def _part(w: Weights, modules: tuple, index: int | None, segments: list,
          pattern: str | None) -> tuple[list, float, str]:
    """An entry naming a part of one of ``modules`` (in layer ``index``, or in every layer):
    the parts it names, else nothing modelled (a norm, a bias) or an unsized part, whose
    modules' share is what it may name; a module sized only whole (the vision tower,
    estimated) is held whole."""
    cells, held_by = [], {}
    for m in modules:
        held = w.held(m) if index is None else w.held(m) & {index}
        if held and w.by_module.get(m):
            held_by[m] = held
            cells += [(m, p, held) for p in _parts(w.parts.get(m, {}), segments, pattern,
                                                   segments[0])]
    if cells:
        return cells, 0.0, ""
    if not held_by or any(re.search(NOT_LINEAR, s) for s in segments):
        return [], 0.0, ""
    if not any(w.parts.get(m) for m in held_by):
        return _whole(w, tuple(held_by), index)
    return [], sum(w.share(m, held) for m, held in held_by.items()), \
        f"names a part of {modules[0]} not sized"


def _whole(w: Weights, modules: tuple, index: int | None) -> tuple[list, float, str]:
    """All of ``modules`` in layer ``index`` (None: in every layer): cells to hold, and the
    routed experts among them, which are not modelled at 16 bits."""
    cells, experts = [], 0.0
    for m in modules:
        held = w.held(m) if index is None else w.held(m) & {index}
        if not w.by_module.get(m) or not held:
            continue
        if m == "experts":
            experts = w.share(m, held)
        else:
            cells.append((m, None, held))
    return cells, experts, "keeps routed experts at 16 bits"


def _parts(parts: dict, segments: list, pattern: str | None, own: str) -> set:
    """The parts of a module that an entry's ``segments`` name as globs (or its regular
    expression ``pattern`` matches, as a module's name), fused names spread into their parts."""
    names = set(parts) | {f for f, of in FUSED.items() if set(of) <= set(parts)}
    try:
        hit = {p for p in names if (re.search(pattern, f"model.layers.0.{own}.{p}", re.I)
                                    if pattern is not None else
                                    any(fnmatch.fnmatchcase(p, s) for s in segments))}
    except re.error:  # not a regular expression: it names no part
        hit = set()
    return {b for p in hit for b in FUSED.get(p, (p,))}
