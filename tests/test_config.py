"""sweep.study.config: TOML sweep definitions -> a validated Study, and one-line refusals of bad ones.

Fast: nothing here simulates or compiles anything.
"""
from __future__ import annotations

import importlib.util
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from sweep.physics.hardware import get_gpu
from sweep.physics.models import Model
from sweep.study.config import COLUMNS, ConfigError, Limit, Study, load_study, parse_study
from sweep.study.design import Design
from sweep.study.workload import Lengths, Workload

HERE = Path(__file__).parent
CONFIGS = HERE / "configs"
REPO = HERE.parent

BRIEF_TOML = '''\
name = "serve_a_model"
[hardware]
gpu = "H100-SXM"              # catalog names include H100-SXM, H200, A100-80GB
price_per_gpu_hour = 2.0
[model]
name = "Llama-3-8B"           # or config_json = "path/to/config.json"
[workload]
arrival = "poisson"
arrival_rate = 16.0           # requests/s; a list makes it an axis
duration_s = 60.0             # or num_requests = 200
drain_s = 60.0                # simulated after arrivals stop; unserved requests are censored
prompt_tokens = { dist = "exponential", mean = 1024 }
output_tokens = { dist = "exponential", mean = 256 }
[levers]
batching = ["static", "continuous"]     # also "one_at_a_time"
kv_cache = ["contiguous", "paged"]
gpus = [1, 2]
weight_bits = [16, 8, 4]
draft_tokens = [0, 2, 4]
acceptance = 0.7
draft_cost = 0.1
max_batch = 256
[run]
seeds = 16
[brief]
p95_ttft_s = { max = 0.5 }
p95_itl_ms = { max = 15 }      # the brief's time per output token: every gap between tokens
cost_per_mtok = { max = 0.20 }
weight_bits = { min = 8 }
'''

MINIMAL = '''\
name = "t"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = 4.0
duration_s = 10.0
'''

BRIEF_AXES = ["batching", "kv_cache", "gpus", "weight_bits", "draft_tokens"]


def lever_tuple(p):
    return tuple(p.columns[a] for a in BRIEF_AXES)


# --- the Serve a Model study -----------------------------------------------------------------

def test_brief_parses():
    s = parse_study(BRIEF_TOML)
    assert isinstance(s, Study)
    assert s.name == "serve_a_model" and s.path is None and s.text == BRIEF_TOML
    assert len(s.points) == 72 and s.skipped == []
    assert s.axes == BRIEF_AXES
    assert s.seeds == list(range(16))
    assert s.brief == [Limit("p95_ttft_s", None, 0.5), Limit("p95_itl_ms", None, 15.0),
                       Limit("cost_per_mtok", None, 0.20), Limit("weight_bits", 8.0, None)]
    assert s.chunk_size is None and s.per_request is False and s.max_designs == 100_000
    # Cartesian order, first axis slowest
    assert lever_tuple(s.points[0]) == ("static", "contiguous", 1, 16, 0)
    assert lever_tuple(s.points[1]) == ("static", "contiguous", 1, 16, 2)
    assert lever_tuple(s.points[3]) == ("static", "contiguous", 1, 8, 0)
    assert lever_tuple(s.points[-1]) == ("continuous", "paged", 2, 4, 4)
    assert len({lever_tuple(p) for p in s.points}) == 72


def test_brief_points_are_validated_designs_and_workloads():
    s = parse_study(BRIEF_TOML)
    p = s.points[0]
    assert isinstance(p.design, Design) and isinstance(p.workload, Workload)
    assert p.design == Design(gpu="H100-SXM", model="Llama-3-8B", batching="static",
                              kv_cache="contiguous", gpus=1, weight_bits=16, draft_tokens=0,
                              acceptance=0.7, draft_cost=0.1, max_batch=256,
                              price_per_gpu_hour=2.0)
    assert p.workload == Workload(arrival_rate=16.0, duration_s=60.0, num_requests=None,
                                  drain_s=60.0, arrival="poisson",
                                  prompt_tokens=Lengths("exponential", 1024.0),
                                  output_tokens=Lengths("exponential", 256.0))
    for q in s.points:
        q.design.validate()
        q.workload.validate()


def test_every_point_has_every_column_in_order():
    s = parse_study(BRIEF_TOML)
    for p in s.points:
        assert list(p.columns) == COLUMNS
    c = s.points[0].columns
    assert c["gpu"] == "H100-SXM" and c["price_per_gpu_hour"] == 2.0 and c["model"] == "Llama-3-8B"
    assert c["duration_s"] == 60.0 and c["num_requests"] is None and c["drain_s"] == 60.0
    assert c["prompt_tokens_dist"] == "exponential" and c["prompt_tokens_mean"] == 1024.0
    assert c["prompt_tokens_low"] is None and c["prompt_tokens_sigma"] is None
    assert c["max_seq_len"] is None and c["kv_bits"] == 16 and c["block_size"] == 16
    h100 = get_gpu("H100-SXM")  # the GPU's defaults, shown in the columns
    assert c["compute_efficiency"] == h100.compute_efficiency
    assert c["overhead_ms"] == h100.overhead_ms


def test_the_repository_configs_parse():
    found = sorted((REPO / "configs").glob("*.toml"))
    for path in found:
        s = load_study(path)
        assert s.points and s.path == str(path)


# --- defaults, axes outside [levers], lengths --------------------------------------------------

def test_defaults_when_sections_omit_keys():
    s = parse_study(MINIMAL)
    assert s.axes == [] and len(s.points) == 1 and s.seeds == [0] and s.brief == []
    p = s.points[0]
    assert p.design == Design(model="Llama-3-8B")
    assert p.workload.drain_s is None and p.workload.arrival == "poisson"
    assert p.workload.prompt_tokens == Lengths("exponential", 1024.0)
    assert p.columns["price_per_gpu_hour"] == 2.0  # H100-SXM's catalog price
    assert p.design.price_per_gpu_hour is None


def test_lists_in_other_sections_become_axes():
    text = '''
name = "axes"
[hardware]
gpu = ["H100-SXM", "H200"]
[model]
name = ["Llama-3-8B", "Mistral-7B"]
[workload]
arrival_rate = [2, 4.0, 8.0]
num_requests = 100
prompt_tokens = [{ dist = "exponential", mean = 512 }, { dist = "exponential", mean = 2048 }]
output_tokens = 64
'''
    s = parse_study(text)
    assert s.axes == ["gpu", "model", "arrival_rate", "prompt_tokens_mean"]
    assert len(s.points) == 2 * 2 * 3 * 2
    first, last = s.points[0].columns, s.points[-1].columns
    assert (first["gpu"], first["model"], first["arrival_rate"], first["prompt_tokens_mean"]) == \
        ("H100-SXM", "Llama-3-8B", 2.0, 512.0)
    assert (last["gpu"], last["model"], last["arrival_rate"], last["prompt_tokens_mean"]) == \
        ("H200", "Mistral-7B", 8.0, 2048.0)
    assert isinstance(first["arrival_rate"], float)
    assert [p.columns["price_per_gpu_hour"] for p in (s.points[0], s.points[-1])] == [2.0, 3.0]
    assert s.points[-1].design.gpu == "H200" and s.points[-1].design.model == "Mistral-7B"
    assert s.points[0].workload.output_tokens == Lengths("fixed", 64.0)
    assert first["output_tokens_dist"] == "fixed" and first["output_tokens_mean"] == 64.0
    assert first["num_requests"] == 100 and first["duration_s"] is None


def test_lengths_axis_of_mixed_kinds():
    text = MINIMAL + 'prompt_tokens = [256, { dist = "uniform", low = 10, high = 100 }, ' \
                     '{ dist = "lognormal", mean = 300, sigma = 0.5 }]\n'
    s = parse_study(text)
    assert s.axes == ["prompt_tokens_dist", "prompt_tokens_mean", "prompt_tokens_low",
                      "prompt_tokens_high", "prompt_tokens_sigma"]
    cols = [p.columns for p in s.points]
    assert [c["prompt_tokens_dist"] for c in cols] == ["fixed", "uniform", "lognormal"]
    assert cols[1]["prompt_tokens_low"] == 10 and cols[1]["prompt_tokens_mean"] is None
    assert s.points[2].workload.prompt_tokens == Lengths("lognormal", 300.0, sigma=0.5)


# --- exclude, memory skips, overrides ----------------------------------------------------------

def test_exclude_drops_the_matching_points():
    text = BRIEF_TOML + '''
[[exclude]]
batching = "static"
kv_cache = "paged"

[[exclude]]
gpus = 2
weight_bits = [8, 4]
'''
    s = parse_study(text)
    assert len(s.points) == 72 - 18 - 24 + 6
    for p in s.points:
        c = p.columns
        assert not (c["batching"] == "static" and c["kv_cache"] == "paged")
        assert not (c["gpus"] == 2 and c["weight_bits"] in (8, 4))
    assert any(p.columns["gpus"] == 2 for p in s.points)  # 16-bit on two GPUs stays
    assert s.axes == BRIEF_AXES and s.skipped == []


def test_designs_that_do_not_fit_are_skipped_with_a_reason():
    text = '''
name = "big_model"
[hardware]
gpu = "A100-80GB"
[model]
name = "Llama-3-70B"
[workload]
duration_s = 10.0
[levers]
gpus = [1, 2, 4]
weight_bits = 16
'''
    s = parse_study(text)
    assert [p.columns["gpus"] for p in s.points] == [2, 4]
    assert len(s.skipped) == 1
    cols, reason = s.skipped[0]
    assert cols["gpus"] == 1 and list(cols) == COLUMNS
    assert "does not fit" in reason and "A100-80GB" in reason and "\n" not in reason


def test_seeds_and_max_designs_overrides():
    assert parse_study(BRIEF_TOML, seeds=3).seeds == [0, 1, 2]
    assert parse_study(MINIMAL + "[run]\nseeds = [7, 3, 11]\n").seeds == [7, 3, 11]
    with pytest.raises(ConfigError, match="run.seeds"):
        parse_study(BRIEF_TOML, seeds=0)
    assert parse_study(BRIEF_TOML, max_designs=72).max_designs == 72
    with pytest.raises(ConfigError, match=r"asks for 72 points.*max_designs = 71"):
        parse_study(BRIEF_TOML, max_designs=71)
    s = parse_study(MINIMAL + "[run]\nchunk_size = 64\nper_request = true\nmax_designs = 5\n")
    assert (s.chunk_size, s.per_request, s.max_designs) == (64, True, 5)


def test_config_json_relative_to_the_config_file(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative to the config's folder, not the current one
    path = CONFIGS / "good_config_json.toml"
    s = load_study(str(path))
    assert s.path == str(path) and s.axes == ["weight_bits"] and len(s.points) == 2
    model = s.points[0].design.model
    assert isinstance(model, Model) and model.layers == 32 and model.kv_heads == 8
    assert model.params == pytest.approx(8.03e9, rel=0.01)
    assert s.points[0].columns["model"] == "llama3_8b_config"
    assert s.points[0].workload.num_requests == 50


def test_config_json_axis():
    s = load_study(CONFIGS / "good_config_json_axis.toml")
    assert s.axes == ["model", "gpus"]
    assert [p.columns["model"] for p in s.points] == ["llama3_8b_config"] * 2 + \
        ["mixtral_8x7b_config"] * 2


def test_limit_ok():
    lim = Limit("p95_ttft_s", max=0.5)
    assert lim.ok(0.5) and lim.ok(-1) and not lim.ok(0.51)
    assert not lim.ok(float("nan")) and not lim.ok(None) and not lim.ok("fast")
    both = Limit("weight_bits", min=8, max=16)
    assert both.ok(8) and both.ok(16) and not both.ok(4) and not both.ok(math.inf)
    assert Limit("x").ok(1e300)


# --- refusals ----------------------------------------------------------------------------------

BAD = sorted(CONFIGS.glob("bad_*.toml"))


def expected_key(path: Path) -> str:
    first = path.read_bytes().split(b"\n", 1)[0].decode("utf-8", "replace")
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: KEY'"
    return first[len("# expect: "):]


def test_the_corpus_is_large_enough():
    assert len(BAD) >= 25


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_config_is_refused_in_one_line(path):
    with pytest.raises(ConfigError) as info:
        load_study(str(path))
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and "\n" not in msg and "\r" not in msg
    assert msg.startswith(str(path) + ":")
    assert path.name in msg
    assert expected_key(path) in msg
    assert "Traceback" not in msg
    assert len(msg) - len(str(path)) <= 250  # the key, the reason and what is allowed, briefly


def test_messages_carry_the_line_of_the_key():
    path = CONFIGS / "bad_weight_bits.toml"
    with pytest.raises(ConfigError) as info:
        load_study(path)
    lines = path.read_text().splitlines()
    n = next(i for i, line in enumerate(lines, 1) if line.startswith("weight_bits"))
    assert str(info.value).startswith(f"{path}:{n}: levers.weight_bits: 3 is not allowed; "
                                      "allowed: 16, 8, 4")
    assert info.value.line == n and info.value.key == "levers.weight_bits"


def test_syntax_error_keeps_its_line_and_column():
    with pytest.raises(ConfigError) as info:
        load_study(CONFIGS / "bad_syntax.toml")
    assert ":6: workload.arrival_rate: TOML syntax error" in str(info.value)
    assert "line 6, column" in str(info.value)


def test_a_huge_grid_is_refused_before_it_is_built():
    """Built, these grids would not fit in memory: that the refusals return at all shows they
    come first."""
    with pytest.raises(ConfigError) as info:
        load_study(CONFIGS / "bad_grid_too_large.toml")
    assert "25600000000" in str(info.value)
    # the default limit too: 10**12 points, refused at once
    text = MINIMAL.replace("arrival_rate = 4.0\n", "") + "arrival_rate = [%s]\n" % ", ".join(
        str(i + 1) for i in range(1000)) + "drain_s = [%s]\n" % ", ".join(
        str(i) for i in range(1000)) + "[levers]\nmax_batch = [%s]\n" % ", ".join(
        str(i + 1) for i in range(1000)) + "block_size = [%s]\n" % ", ".join(
        str(i + 1) for i in range(1000))
    with pytest.raises(ConfigError, match=r"asks for 1000000000000 points"):
        parse_study(text)


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("arrival_rate = 4.0", "arrival_rate = 1e6"), "workload.duration_s"),
    (lambda t: t.replace("arrival_rate = 4.0\nduration_s = 10.0", "num_requests = 2000000"),
     "workload.num_requests"),
    (lambda t: t + "[run]\nmax_requests = 39\n", "workload.duration_s"),
    (lambda t: t + "[run]\nmax_requests = 0\n", "run.max_requests"),
    (lambda t: t + "[run]\nmax_requests = 20000000\n", "run.max_requests"),
])
def test_a_runaway_workload_is_refused_naming_the_key_and_the_bound(edit, key):
    with pytest.raises(ConfigError) as info:
        parse_study(edit(MINIMAL))
    assert info.value.key == key and "max_requests" in str(info.value), str(info.value)
    # at the bound it is a study, and [run] max_requests raises the bound
    assert parse_study(MINIMAL + "[run]\nmax_requests = 40\n").max_requests == 40
    big = MINIMAL.replace("arrival_rate = 4.0", "arrival_rate = 1e6")
    assert parse_study(big + "[run]\nmax_requests = 10000000\n").points


def test_unreadable_files():
    with pytest.raises(ConfigError, match=r"^.*no_such_file\.toml: file: no such file"):
        load_study(CONFIGS / "no_such_file.toml")
    with pytest.raises(ConfigError, match="file: is a folder, not a regular file"):
        load_study(CONFIGS)


def test_unexpected_exceptions_become_config_errors(monkeypatch):
    def boom(self):
        raise RuntimeError("unexpected\nmulti-line failure")

    monkeypatch.setattr(Design, "validate", boom)
    with pytest.raises(ConfigError) as info:
        parse_study(BRIEF_TOML, path="x.toml")
    assert str(info.value).startswith("x.toml: ") and "\n" not in str(info.value)
    assert "RuntimeError" in str(info.value)


def test_mangled_files_never_escape_as_other_exceptions():
    rng = random.Random(0)
    junk = ['"', "[", "]", "{", "}", "=", ",", "\n", "nan", "-", ".", "1e999", "[[exclude]]",
            "\u2028", "\x00", "\\", "true", "'''"]
    for _ in range(120):
        chars = list(BRIEF_TOML)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(chars))
            if rng.random() < 0.5:
                del chars[i]
            else:
                chars.insert(i, rng.choice(junk))
        text = "".join(chars)
        try:
            parse_study(text, path="mangled.toml")
        except ConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("mangled.toml")


# --- the command line --------------------------------------------------------------------------

def run_module(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_check_command_prints_one_line_per_config():
    bad, good = CONFIGS / "bad_nan.toml", CONFIGS / "good_config_json.toml"
    r = run_module("sweep.study.config", str(bad), str(good))
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "bad_nan.toml:8: workload.drain_s: must be a finite number" in r.stderr
    assert "good_config_json.toml: ok" in r.stdout


@pytest.mark.skipif(importlib.util.find_spec("sweep.cli") is None, reason="no sweep.cli")
def test_cli_run_reports_a_bad_config_without_a_traceback(tmp_path):
    path = CONFIGS / "bad_unicode_key.toml"
    r = run_module("sweep.cli", "run", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and path.name in err and 'levers."' in err
    assert not (tmp_path / "out").exists()
