"""Hostile configs: a deterministic corpus of several hundred mutations of a valid config (wrong
types, huge, negative and non-finite numbers, unicode, deep nesting, enormous grids, broken
syntax). Each one must load as a Study or be refused with one ConfigError line: never another
exception, never a hang, never a grid too large to hold. Only the loader runs (fast)."""
from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
import random
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from sweep.cli import main
from sweep.study.config import ConfigError, Study, parse_study

BASE = {
    "name": "fuzz",
    "hardware": {"gpu": "H100-SXM", "price_per_gpu_hour": 2.0, "compute_efficiency": 0.6,
                 "bandwidth_efficiency": 0.8, "overhead_ms": 0.2,
                 "memory_overhead_fraction": 0.1},
    "model": {"name": "Llama-3-8B"},
    "workload": {"arrival": "poisson", "arrival_rate": [4.0, 16.0], "duration_s": 30.0,
                 "drain_s": 30.0, "prompt_tokens": {"dist": "exponential", "mean": 512},
                 "output_tokens": {"dist": "lognormal", "mean": 128, "sigma": 1.0}},
    "levers": {"batching": ["static", "continuous"], "kv_cache": "paged", "block_size": 16,
               "max_seq_len": 8192, "gpus": [1, 2], "weight_bits": 16, "kv_bits": 16,
               "draft_tokens": [0, 2], "acceptance": 0.7, "draft_cost": 0.1, "max_batch": 64},
    "run": {"seeds": 4, "chunk_size": 16, "per_request": False, "max_designs": 1000,
            "max_steps": 100000},
    "brief": {"p95_ttft_s": {"max": 0.5}, "cost_per_mtok": {"max": 0.2}},
}

HOSTILE = [
    "", "H100", "\u202e\u0000\u2028x", "名前", "𝓛𝓵𝓪𝓶𝓪", "x" * 10000, True, False, 0, 1, -1,
    -(2**63), 2**63 - 1, 10**30, 0.0, -0.0, -1.5, 1e308, -1e308, 5e-324, math.nan, math.inf,
    -math.inf, [], [1, 1], [[1, 2], [3]], [math.nan], ["a", 1], {}, {"dist": "fixed"},
    {"a": {"b": {"c": 1}}}, dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, 12, 0),
]


def toml(v) -> str:
    """A TOML value (inline tables for dicts), nan/inf and dates included."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) \
            else repr(v)
    if isinstance(v, (int, dt.date)):
        return v.isoformat() if isinstance(v, dt.date) else str(v)
    if isinstance(v, str):
        return '"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\u{ord(c):04x}"
                             for c in v) + '"'
    if isinstance(v, list):
        return "[" + ", ".join(toml(x) for x in v) + "]"
    return "{" + ", ".join(f"{toml(k)} = {toml(x)}" for k, x in v.items()) + "}"


def document(doc: dict) -> str:
    lines = [f"{toml(k)} = {toml(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for sec, table in doc.items():
        if isinstance(table, dict):
            lines.append(f"[{toml(sec)}]")
            lines += [f"{toml(k)} = {toml(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def mutated(path, value) -> str:
    doc = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    *head, last = path
    table = doc
    for k in head:
        table = table.setdefault(k, {})
    table[last] = value
    return document(doc)


def corpus() -> list[tuple[str, str]]:
    cases = []
    keys = [(k,) for k in ("name",)] + [(s, k) for s, t in BASE.items() if isinstance(t, dict)
                                        for k in t]
    rng = random.Random(6)
    for key in keys:  # every key with a sample of hostile values
        for value in rng.sample(HOSTILE, 9):
            cases.append((f"{'.'.join(key)}={toml(value)[:20]}", mutated(key, value)))
    for sec in ("hardware", "levers", "workload", "run", "brief"):  # unknown and unicode keys
        for key in ("nope", "名前", "\u202e", "max_batch.x", ""):
            cases.append((f"{sec}.{key!r}", mutated((sec, key), 1)))
    for sec in ("hardware", "model", "workload", "levers", "run", "brief", "exclude"):
        for value in (1, "x", [1], [{}], [{"nope": 1}], [{"gpus": 3}]):  # whole sections
            cases.append((f"[{sec}]={toml(value)[:20]}", mutated((sec,), value)))
    deep = "x = " + "[" * 5000 + "]" * 5000
    cases.append(("deep array", document(BASE) + "[run]\n" + deep))
    cases.append(("deep inline table", document(BASE).replace(
        "[run]", "[run]\nx = " + "{a = " * 3000 + "1" + "}" * 3000)))
    cases.append(("deep tables", document(BASE) + "[" + ".".join(["t"] * 2000) + "]\n"))
    for n in (1000, 10**5):  # enormous grids: refused before being materialised
        grid = dict(BASE["levers"], max_batch=list(range(1, n + 1)),
                    block_size=list(range(1, n + 1)))
        cases.append((f"grid {n}^2", document({**BASE, "levers": grid})))
    grid = {**BASE["workload"], "arrival_rate": [float(i) for i in range(1, 2001)]}
    cases.append(("long axis", document({**BASE, "workload": grid})))
    text = document(BASE)
    for cut in rng.sample(range(1, len(text)), 30):  # broken syntax anywhere
        cases.append((f"cut at {cut}", text[:cut] + "\n" + text[cut:cut + 7] + "=\n"))
    for i in range(10):  # garbage
        cases.append((f"garbage {i}", "".join(chr(rng.randrange(1, 0x3000)) for _ in range(200))))
    return cases


CASES = corpus()


def test_corpus_is_large():
    assert len(CASES) >= 200


@contextmanager
def watchdog(seconds: int):
    """Fail a case that hangs (not a timing assertion: a loader that returns at all passes)."""
    def hang(signum, frame):
        raise AssertionError(f"the loader did not return in {seconds} s")
    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("name, text", CASES, ids=[c[0] for c in CASES])
def test_hostile_config_is_a_study_or_one_clear_line(name, text):
    with watchdog(60):
        try:
            study = parse_study(text, "fuzz.toml")
        except ConfigError as exc:
            msg = str(exc)
            assert msg.startswith("fuzz.toml") and "\n" not in msg and len(msg) < 2000, msg
            assert "Traceback" not in msg and "cannot be read" not in msg, msg  # a real check,
            return  # not the loader's last-resort catch-all
    assert isinstance(study, Study)
    assert 1 <= len(study.points) <= study.max_designs


def test_enormous_grid_says_how_many_designs_were_asked_for():
    grid = dict(BASE["levers"], max_batch=list(range(1, 10**5 + 1)),
                block_size=list(range(1, 10**5 + 1)))
    with pytest.raises(ConfigError, match="asks for 160000000000 points .* max_designs = 1000"):
        parse_study(document({**BASE, "levers": grid}), "fuzz.toml")
    with pytest.raises(ConfigError, match="asks for 16 points.*max_designs = 15.*--max-designs"):
        parse_study(document(BASE), "fuzz.toml", max_designs=15)


@pytest.mark.parametrize("name, text", CASES[::40], ids=[c[0] for c in CASES[::40]])  # all refused
def test_hostile_config_through_the_command(name, text, tmp_path, capsys):
    cfg = tmp_path / "fuzz.toml"
    cfg.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert not out.exists()


HF_FIELDS = ["num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
             "num_local_experts", "num_experts_per_tok", "tie_word_embeddings"]
HF_VALUES = [0, -1, 1, 3, 10**6, 10**30, 1e300, math.nan, math.inf, "8", None, True, [8], {}]


def model_files(root):
    """Hostile Hugging Face config.json files: each field of a real one mutated, and files that
    are not files (a pipe, a device, a folder without config.json), deeply nested, huge."""
    real = json.loads((Path(__file__).parent / "data" / "llama3_8b_config.json").read_text())
    files = []
    for i, (field, value) in enumerate(itertools.product(HF_FIELDS, HF_VALUES)):
        path = root / f"m{i}.json"
        path.write_text(json.dumps({**real, field: value}))
        files.append((f"{field}={value!r}"[:40], path))
    (root / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (root / "bigint.json").write_text('{"hidden_size": ' + "9" * 5000 + "}")
    (root / "big.json").write_text(" " * (17 * 2**20) + "{}")
    (root / "list.json").write_text("[]")
    (root / "binary.json").write_bytes(bytes(range(256)))
    os.mkfifo(root / "fifo")
    (root / "empty_dir").mkdir()
    files += [(p, root / p) for p in ("deep.json", "bigint.json", "big.json", "list.json",
                                      "binary.json", "fifo", "empty_dir")]
    return files + [("/dev/zero", Path("/dev/zero"))]


def test_hostile_model_files(tmp_path):
    files = model_files(tmp_path)
    assert len(files) >= 150
    for name, path in files:
        text = document({**BASE, "model": {"config_json": str(path)}})
        with watchdog(60):
            try:
                study = parse_study(text, "fuzz.toml")
            except ConfigError as exc:
                msg = str(exc)
                assert "\n" not in msg and "cannot be read" not in msg, (name, msg)
                assert "model.config_json" in msg or "levers" in msg or "workload" in msg, \
                    (name, msg)
                continue
        assert 1 <= len(study.points) <= study.max_designs, name
