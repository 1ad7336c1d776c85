"""The config.json loader on NVIDIA Nemotron-3-Super-120B-A12B (hybrid Mamba-2, attention and
latent MoE) and DeepSeek-V4-Flash (a window beside compressed latents, MXFP4 experts): each
loads at its published size, its KV cache and state match a count of its layers written here by
hand from the config's fields, and what the loader cannot size is refused naming the field."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep.errors import FieldError
from sweep.physics.hf_config import load_hf_config

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
SUPER = CONFIGS / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8_config.json"
V4 = CONFIGS / "deepseek-ai--DeepSeek-V4-Flash_config.json"


def _written(tmp_path: Path, source: Path, **changes) -> Path:
    cfg = json.loads(source.read_text())
    cfg.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del cfg[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_nemotron_3_super_is_sized_as_its_technical_report():
    """Nemotron 3 Super technical report (arXiv:2604.12374, its architecture table): 120.6B
    total, 12.7B active, both embedding matrices counted (as the Nano card's figures); its
    multi-token-prediction layers (``mtp_hybrid_override_pattern``) are not counted."""
    m = load_hf_config(SUPER)
    assert m.params / 1e9 == pytest.approx(120.6, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(12.7, rel=0.02)
    # 40 expert layers of 512 experts, each an up and a down matrix in the 1024-wide latent
    assert m.expert_params == 40 * 512 * 2 * 1024 * 2688
    assert (m.moe_layers, m.experts, m.experts_per_token) == (40, 512, 22)


def test_nemotron_3_super_caches_and_state_by_hand():
    """8 attention layers ('*' in the pattern) of 2 KV heads of 128; 40 Mamba-2 layers ('M'),
    each 128 heads x 64 x 128 state in fp32 and a 4-tap convolution's last 3 inputs of
    128 x 64 + 2 x 8 x 128 channels at 2 bytes."""
    m = load_hf_config(SUPER)
    assert m.kv_bytes_per_token(16) == 8 * 2 * 2 * 128 * 2 == 8192
    assert m.held_kv_bytes_per_token(16, 2) == 8192  # 2 KV heads: split over 2 GPUs
    assert m.state_bytes == 40 * (128 * 64 * 128 * 4 + (128 * 64 + 2 * 8 * 128) * 3 * 2)
    assert (m.window, m.window_kv_values, m.kv_split) == (0, 0.0, 2)


def test_deepseek_v4_flash_is_sized_as_its_card():
    """DeepSeek-V4-Flash card and report: 284B total, 13B activated, in whole billions; its
    multi-token-prediction layer not counted (as DeepSeek-V3's 671B). Active as DeepSeek-V3's
    figures count it, without the input embedding (a lookup): 13.27B, 2.1% over 13 but within
    the card's rounding; without the output head too it would be 12.74B."""
    m = load_hf_config(V4)
    assert m.params / 1e9 == pytest.approx(284.0, rel=0.02)
    counted = (m.active_params - m.vocab * m.hidden) / 1e9
    assert round(counted) == 13
    # 43 layers of 256 gated experts, 4096 wide and 2048 inner
    assert m.expert_params == 43 * 256 * 3 * 4096 * 2048
    assert (m.moe_layers, m.experts, m.experts_per_token, m.kv_heads, m.head_dim) == \
        (43, 256, 6, 1, 512)


def test_deepseek_v4_flash_caches_and_state_by_hand():
    """``compress_ratios`` for the 43 layers: 2 of 0 (the window alone), then 4 and 128 in turn,
    the last 4: 21 layers at 4 and 20 at 128. Per token a layer at 4 caches a 512-wide latent
    per 4 tokens and the indexer's 128-wide key per 4; at 128, a latent per 128 tokens; every
    layer keeps the last 128 tokens' latents (one shared latent: no separate K and V). Each
    compressor holds its last (2 x 4 or 128) tokens' fp32 values and scores, twice as wide at
    4 (overlapping windows), the indexer's 128 wide."""
    m = load_hf_config(V4)
    growing = 21 * (512 / 4 + 128 / 4) + 20 * (512 / 128)
    assert m.kv_values == growing == 3440
    assert (m.window, m.window_kv_values) == (128, 43 * 512)
    assert m.kv_bytes_per_token(16) == (3440 + 43 * 512) * 2 == 50912
    assert m.held_kv_bytes_per_token(16, 8) == 8 * 3440 * 2  # one latent: each GPU holds it
    assert m.state_bytes == 21 * (8 * 2 * 2 * 512 * 4 + 8 * 2 * 2 * 128 * 4) \
        + 20 * 128 * 2 * 512 * 4


def test_deepseek_v4_flash_experts_are_held_in_mxfp4_beside_fp8():
    """``expert_dtype = "fp4"``: routed experts in MXFP4 (4 bits and an 8-bit scale per 32),
    the other linear layers fp8 with a scale per 128 x 128 block; set to another precision by
    the lever, the experts take it too."""
    m = load_hf_config(V4)
    assert (m.native_bits, m.native_nominal_bits) == (8.0 + 32.0 / (128 * 128), 8)
    assert m.native_expert_bits == 4.25
    assert m.expert_bytes(None) == m.expert_bytes(8) == m.expert_params * 4.25 / 8
    assert m.expert_bytes(4) == m.expert_params * 4 / 8
    rest = m.params - m.kept_params - m.expert_params
    assert m.weight_bytes(None) == pytest.approx(
        rest * m.native_bits / 8 + m.expert_params * 4.25 / 8 + m.kept_params * 2)
    assert m.weight_bytes(16) == pytest.approx(m.params * 2)
    # 4-bit experts beside 8-bit products run in weight-only kernels (vLLM's MXFP4 MoE)
    assert m.weight_only_experts(None, 8) and not m.weight_only_experts(8, 4)


def test_fp8_experts_take_the_block_format(tmp_path):
    m = load_hf_config(_written(tmp_path, V4, expert_dtype="fp8"))
    assert m.native_expert_bits == 0.0
    assert m.expert_bytes(None) == m.expert_params * m.native_bits / 8


@pytest.mark.parametrize("changes, field", [
    ({"expert_dtype": "fp2"}, "expert_dtype"),
    ({"quantization_config": None}, "expert_dtype"),
    ({"compress_ratios": [0, 3] + [4] * 41}, "compress_ratios"),
    ({"compress_ratios": [0, 4, 128]}, "compress_ratios"),
    ({"num_key_value_heads": 2}, "num_key_value_heads"),
    ({"num_hash_layers": 44}, "num_hash_layers"),
    ({"o_groups": 7}, "o_groups"),
])
def test_what_the_loader_cannot_size_is_refused_naming_the_field(tmp_path, changes, field):
    with pytest.raises(FieldError) as e:
        load_hf_config(_written(tmp_path, V4, **changes))
    assert f" {field} " in str(e.value) and "\n" not in str(e.value)


def test_a_skip_list_names_one_layers_latent_projection(tmp_path):
    """A sibling ModelOpt file keeping one layer's ``fc1_latent_proj`` at 16 bits keeps that
    4096 x 1024 matrix, and only it."""
    config = tmp_path / "super_config.json"
    config.write_text(SUPER.read_text())
    quant = tmp_path / "super_hf_quant_config.json"
    quant.write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}))
    plain = load_hf_config(config)
    quant.write_text(json.dumps({"quantization": {
        "quant_algo": "FP8", "exclude_modules": ["backbone.layers.1.mixer.fc1_latent_proj"]}}))
    kept = load_hf_config(config)
    assert (plain.native_bits, kept.native_bits) == (8.0, 8.0)
    assert kept.kept_params - plain.kept_params == 4096 * 1024
