"""A model's config.json is consistent or refused: every reader of one (``[model] config_json``,
``sweep calibrate --model FILE.json``, the packaged configs) goes through one loader, which
refuses in one line naming the file and the field. Loader only: nothing is simulated. Fast."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweep.cli import main
from sweep.errors import FieldError
from sweep.physics.hf_config import load_hf_config

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _real(name: str = "meta-llama--Meta-Llama-3.1-70B") -> dict:
    return json.loads((CONFIGS / f"{name}_config.json").read_text())


def _write(tmp_path: Path, cfg, name: str = "model.json") -> Path:
    path = tmp_path / name
    path.write_text(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return path


def _refused(path: Path, key: str) -> str:
    """The loader's refusal of ``path``: one line of at most 300 characters naming the file and
    ``key``."""
    with pytest.raises(FieldError) as info:
        load_hf_config(path)
    text = str(info.value)
    assert info.value.key == "model.config_json" and "\n" not in text and len(text) <= 300
    assert path.name in text and key in text, text
    return text


def _calibrate(path: Path, tmp_path: Path, capsys) -> str:
    """``sweep calibrate`` with ``path`` as its model: exit status 2, one line, nothing
    written (the model is refused before the measurements are read)."""
    out = tmp_path / "profile.toml"
    capsys.readouterr()
    assert main(["calibrate", str(tmp_path / "absent.csv"), "--gpu", "H100-SXM", "--model",
                 str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and not out.exists()
    return err


def test_kv_heads_must_divide_the_query_heads(tmp_path, capsys):
    path = _write(tmp_path, _real() | {"num_key_value_heads": 5})  # of 64 query heads
    assert _refused(path, "num_key_value_heads").endswith(
        "model.json: num_key_value_heads = 5 does not divide num_attention_heads = 64; "
        "allowed: a divisor of num_attention_heads")
    assert "num_key_value_heads = 5" in _calibrate(path, tmp_path, capsys)


@pytest.mark.parametrize("name,experts", [("mistralai--Mixtral-8x22B-v0.1", "num_local_experts"),
                                          ("Qwen--Qwen3-30B-A3B", "num_experts"),
                                          ("deepseek-ai--DeepSeek-V3", "n_routed_experts")])
def test_no_more_experts_per_token_than_routed_experts(tmp_path, name, experts):
    cfg = _real(name)
    cfg[experts] = cfg["num_experts_per_tok"] - 1
    text = _refused(_write(tmp_path, cfg), "num_experts_per_tok")
    assert f"exceeds {experts} = {cfg[experts]}" in text


def test_experts_per_token_without_routed_experts_is_refused(tmp_path):
    _refused(_write(tmp_path, _real() | {"num_experts_per_tok": 2}), "num_experts_per_tok")


def test_a_head_size_is_stated_or_whole(tmp_path, capsys):
    path = _write(tmp_path, _real() | {"hidden_size": 8200})  # 8200 / 64 heads: 128.125
    assert "head_dim is not stated" in _refused(path, "hidden_size")
    assert "hidden_size = 8200" in _calibrate(path, tmp_path, capsys)
    stated = load_hf_config(_write(tmp_path, _real() | {"hidden_size": 8200, "head_dim": 128}))
    assert stated.head_dim == 128 and stated.hidden == 8200


@pytest.mark.parametrize("quant,key", [
    ({"quant_method": "gptq", "bits": 0.01, "group_size": 128}, "bits"),
    ({"quant_method": "awq", "bits": 5, "group_size": 128}, "bits"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
        "num_bits": 0.5, "strategy": "group", "group_size": 128}}}}, "num_bits"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0.5}, "group_size"),
    ({"quant_method": "fp8", "weight_block_size": [1, 1]}, "weight_block_size"),
])
def test_quantisation_bits_are_those_a_format_has(tmp_path, quant, key):
    cfg = _real() | {"quantization_config": quant}
    assert "quantization_config" in _refused(_write(tmp_path, cfg), key)


def test_a_real_low_bit_checkpoint_still_loads(tmp_path):
    cfg = _real() | {"quantization_config": {"quant_method": "gptq", "bits": 3,
                                             "group_size": 128}}
    m = load_hf_config(_write(tmp_path, cfg))
    assert (m.native_bits, m.native_nominal_bits) == (pytest.approx(3 + 19 / 128), 4)


@pytest.mark.parametrize("key,value", [("num_hidden_layers", 10**8), ("vocab_size", 2**24 + 1),
                                       ("num_attention_heads", 2**20),
                                       ("num_key_value_heads", 10**9),
                                       ("intermediate_size", 2**40), ("hidden_size", 2**30)])
def test_counts_past_any_model_are_refused_before_anything_is_built(tmp_path, key, value):
    assert f"{key} = {value} is not an integer in [1, " in _refused(
        _write(tmp_path, _real() | {key: value}), key)


def test_routed_experts_past_any_model_are_refused(tmp_path):
    _refused(_write(tmp_path, _real("deepseek-ai--DeepSeek-V3") | {"n_routed_experts": 10**7}),
             "n_routed_experts")


def test_a_deeply_nested_file_is_refused_naming_it(tmp_path, capsys):
    deep = _write(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert "nests tables and lists more than" in _refused(deep, "")
    assert "deep" in _calibrate(deep, tmp_path, capsys)
    nested = _real() | {"rope_scaling": json.loads("[" * 80 + "]" * 80)}
    _refused(_write(tmp_path, nested, "nested.json"), "")


@pytest.mark.parametrize("special", ["fifo", "folder", "huge"])
def test_calibrate_reads_its_model_as_config_json_is_read(tmp_path, capsys, special):
    path = tmp_path / "model.json"
    if special == "fifo":
        os.mkfifo(path)
    elif special == "folder":
        path.mkdir()
    else:
        path.write_text(" " * (17 * 2**20) + "{}")
    _refused(path, "model.json")
    assert "model.json" in _calibrate(path, tmp_path, capsys)


def test_a_sibling_quantisation_file_is_read_as_safely(tmp_path):
    path = _write(tmp_path, _real(), "config.json")
    os.mkfifo(tmp_path / "hf_quant_config.json")
    _refused(path, "hf_quant_config.json")


def test_sweep_run_refuses_an_inconsistent_config_json(tmp_path, capsys):
    model = _write(tmp_path, _real() | {"num_key_value_heads": 5})
    cfg = tmp_path / "study.toml"
    cfg.write_text(f'name = "x"\n[model]\nconfig_json = "{model}"\n[hardware]\ngpu = "H200"\n'
                   "[levers]\ngpus = 8\n[workload]\nnum_requests = 10\n")
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "num_key_value_heads = 5" in err and "model.json" in err
    assert not (tmp_path / "out").exists()


#: Real configs whose numeric fields the property test mutates: dense, routed experts, latent
#: attention with fp8, linear attention, Mamba and windowed layers with MXFP4.
MUTATED = ("meta-llama--Meta-Llama-3.1-8B", "Qwen--Qwen3-30B-A3B", "deepseek-ai--DeepSeek-V3",
           "Qwen--Qwen3.5-35B-A3B", "nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
           "openai--gpt-oss-20b")
VALUES = st.one_of(st.integers(), st.integers(-4, 300), st.floats(), st.text(max_size=4),
                   st.none(), st.booleans())
SIZES = ("params", "active_params", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn",
         "vocab", "max_context", "experts", "experts_per_token", "kv_values")


def _numeric_fields(cfg: dict) -> list[tuple[str, ...]]:
    """Paths to the numbers of a config's language model and of its quantisation table."""
    table = ("text_config",) if isinstance(cfg.get("text_config"), dict) else ()
    inner = cfg[table[0]] if table else cfg
    paths = [table + (k,) for k, v in inner.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool)]
    quant = inner.get("quantization_config")
    if isinstance(quant, dict):
        paths += [table + ("quantization_config", k) for k, v in quant.items()
                  if isinstance(v, (int, float, list)) and not isinstance(v, bool)]
    return sorted(paths)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), name=st.sampled_from(MUTATED))
def test_any_mutated_config_loads_to_finite_sizes_or_is_refused_in_one_line(tmp_path, data,
                                                                            name):
    cfg = _real(name)
    fields = data.draw(st.lists(st.sampled_from(_numeric_fields(cfg)), min_size=1, max_size=3,
                                unique=True))
    for path in fields:
        table = cfg
        for part in path[:-1]:
            table = table[part]
        table[path[-1]] = data.draw(VALUES)
    f = _write(tmp_path, cfg, f"{name}.json")
    try:
        m = load_hf_config(f)
    except FieldError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) <= 300 and f.name in text
        return
    for size in SIZES:
        v = getattr(m, size)
        assert not isinstance(v, bool) and 0 < v < math.inf, (size, v)
    assert m.kv_heads <= m.heads and m.experts_per_token <= m.experts
    assert 0 < m.weight_bytes(None) < math.inf and m.active_params <= m.params
