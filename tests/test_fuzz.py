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
            assert msg.startswith("fuzz.toml") and "\n" not in msg and len(msg) <= 300, msg
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


# --- results folders, output paths and measurement files, through every command -------------------
def _rewrite(path: Path, meta=None, table=None) -> None:
    """Rewrite a servesweep Parquet file with its metadata or table changed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(path)
    raw = (t.schema.metadata or {}).get(b"servesweep", b"{}")
    if table is not None:
        t = pa.Table.from_pandas(table(t.to_pandas()), preserve_index=False)
    if meta is not None:
        m = meta(json.loads(raw))
        raw = m if isinstance(m, bytes) else json.dumps(m).encode()
    pq.write_table(t.replace_schema_metadata({b"servesweep": raw}), path)


def _edit(path: Path, edit: dict) -> None:
    """One mutation of a results file: the file replaced, or its metadata or table changed."""
    if "file" in edit:
        edit["file"](path)
    else:
        _rewrite(path, edit.get("meta"), edit.get("table"))


def _drop(key):
    return lambda m: {k: v for k, v in m.items() if k != key}


def _set(key, value):
    return lambda m: {**m, key: value}


def _flip(seed: int):
    def flip(path: Path) -> None:
        data = bytearray(path.read_bytes())
        rng = random.Random(seed)
        for _ in range(8):
            data[rng.randrange(len(data))] ^= 0xFF
        path.write_bytes(bytes(data))
    return flip


def _replace_with(kind: str):
    def make(path: Path) -> None:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "folder":
            path.mkdir()
        elif kind == "empty":
            path.write_bytes(b"")
        else:
            path.write_bytes(b"PAR1" + b"\0" * 64)
    return make


META_EDITS = [_drop("brief"), _set("brief", "x"), _set("brief", [{"key": 1}]),
              _set("brief", [{"key": "p95_ttft_s", "max": "a"}]), _set("brief", [{"nope": 1}]),
              _drop("axes"), _set("axes", "gpus"), _set("axes", [1]), _set("axes", ["nope"]),
              _set("schema_version", 99), _drop("schema_version"), lambda m: b"{", lambda m: []]
SWEEP_EDITS = (
    [(f"runs meta {i}", "runs.parquet", dict(meta=e)) for i, e in enumerate(META_EDITS)]
    + [(f"designs without {c}", "designs.parquet", dict(table=lambda d, c=c: d.drop(columns=c)))
       for c in ("p_pass", "meets_brief", "p95_ttft_s", "cost_per_mtok", "design", "batching")]
    + [("designs p_pass text", "designs.parquet",
        dict(table=lambda d: d.assign(p_pass=d["p_pass"].astype(str)))),
       ("designs design float", "designs.parquet",
        dict(table=lambda d: d.assign(design=d["design"] + 0.5))),
       ("runs without seed", "runs.parquet", dict(table=lambda d: d.drop(columns="seed")))]
    + [(f"{f} {k}", f, dict(file=_replace_with(k))) for f in ("runs.parquet", "designs.parquet")
       for k in ("fifo", "folder", "empty", "truncated")]
    + [(f"runs flipped {s}", "runs.parquet", dict(file=_flip(s))) for s in range(6)])


def _one_refusal(capsys, rc, *names):
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert "\n" not in err and len(err) <= 300 and "Traceback" not in err, err
    assert any(n in err for n in names), err


@pytest.mark.parametrize("name, file, edit", SWEEP_EDITS, ids=[e[0] for e in SWEEP_EDITS])
def test_a_malformed_results_folder_is_one_line_for_every_reader(name, file, edit, small_run,
                                                                 tmp_path, capsys):
    import shutil

    folder = tmp_path / "res"
    shutil.copytree(small_run[1], folder)
    _edit(folder / file, edit)
    capsys.readouterr()
    with watchdog(60):
        rc = main(["report", str(folder)])
        if rc != 0:  # a flipped byte may leave a readable file
            _one_refusal(capsys, rc, file)
        before = sorted(p.name for p in folder.iterdir())
        rc = main(["frontier", str(folder), "--out", str(tmp_path / "front")])
    if rc != 0:
        _one_refusal(capsys, rc, file)
        assert not (tmp_path / "front").exists()
        assert sorted(p.name for p in folder.iterdir()) == before


def _capacity_folder(folder: Path) -> Path:
    """A capacity search's tables as sweep capacity writes them (two designs, one fleet)."""
    import pandas as pd

    from sweep.analysis.results import write_results

    nan = float("nan")
    cap = pd.DataFrame({"design": [0, 1], "max_rate": [2.0, 0.0], "max_rate_low": [2.0, 0.0],
                        "max_rate_high": [2.2, 0.5], "usd_per_hour": [2.0, 4.0],
                        "cost_per_mtok_at_max": [1.0, nan], "binding": ["p95_ttft_s"] * 2,
                        "why": ["p95_ttft_s 0.4 > 0.3"] * 2, "max_batch": [8, 32],
                        "gpu": ["H200"] * 2, "calibration": ["transferred:H100-SXM"] * 2})
    fleet = pd.DataFrame({"design": [0], "replicas": [3], "fleet_usd_per_hour": [6.0],
                          "cost_per_mtok": [1.0], "confirmed": [True], "note": [""],
                          "max_batch": [8]})
    meta = {"kind": "capacity", "name": "fake", "axes": ["max_batch"], "seeds": [0, 1],
            "brief": [{"key": "p95_ttft_s", "min": None, "max": 0.3}], "slo": {},
            "capacity": {"confidence": 0.9}, "target_rate": 5.0}
    write_results(folder, {"capacity": cap, "fleet": fleet}, meta, last="capacity")
    return folder


CAPACITY_EDITS = (
    [(f"capacity meta {i}", "capacity.parquet", dict(meta=e)) for i, e in enumerate(
        META_EDITS + [_drop("capacity"), _set("capacity", {}), _drop("seeds"),
                      _set("seeds", 2), _set("target_rate", "x"), _set("slo", [1])])]
    + [(f"capacity without {c}", "capacity.parquet",
        dict(table=lambda d, c=c: d.drop(columns=c)))
       for c in ("max_rate", "usd_per_hour", "design", "binding", "max_rate_high")]
    + [("capacity max_rate text", "capacity.parquet",
        dict(table=lambda d: d.assign(max_rate=d["max_rate"].astype(str))))]
    + [(f"fleet without {c}", "fleet.parquet", dict(table=lambda d, c=c: d.drop(columns=c)))
       for c in ("confirmed", "replicas", "fleet_usd_per_hour")]
    + [(f"{f} {k}", f, dict(file=_replace_with(k))) for f in ("capacity.parquet", "fleet.parquet")
       for k in ("fifo", "folder", "truncated")])


def test_a_capacity_folder_as_written_reads_back(tmp_path, capsys):
    folder = _capacity_folder(tmp_path / "cap")
    assert main(["report", str(folder)]) == 0
    assert "3 x (max_batch=8)" in capsys.readouterr().out
    assert main(["frontier", str(folder), "--out", str(tmp_path / "front")]) == 0


@pytest.mark.parametrize("name, file, edit", CAPACITY_EDITS, ids=[e[0] for e in CAPACITY_EDITS])
def test_a_malformed_capacity_folder_is_one_line_for_every_reader(name, file, edit, tmp_path,
                                                                  capsys):
    folder = _capacity_folder(tmp_path / "cap")
    _edit(folder / file, edit)
    capsys.readouterr()
    with watchdog(60):
        _one_refusal(capsys, main(["report", str(folder)]), file)
        _one_refusal(capsys, main(["frontier", str(folder), "--out", str(tmp_path / "f")]), file)
    assert not (tmp_path / "f").exists()


def _parts_folder(folder: Path, manifest: dict | None = None) -> Path:
    """A sweep's parts as sweep run starts them (one design, no chunk finished)."""
    import pandas as pd

    from sweep.analysis.results import start_parts

    base = {"identity": {"config": "x"},
            "meta": {"name": "fake", "brief": [], "axes": [], "seeds": [0], "per_request": False,
                     "device": "cpu", "drawn": []}}
    start_parts(folder, base if manifest is None else manifest,
                pd.DataFrame({"design": [0], "max_batch": [8]}))
    return folder


def _meta(edit):
    return lambda m: {**m, "meta": edit(m["meta"])}


MANIFEST_EDITS = [
    _drop("identity"), _drop("meta"), _set("meta", 1), _meta(_drop("brief")),
    _meta(_set("brief", [{"key": 2}])), _meta(_drop("seeds")), _meta(_set("seeds", ["a"])),
    _meta(_set("per_request", "no")), _meta(_drop("device")), _meta(_set("axes", None)),
    _meta(_set("drawn", 3))]


@pytest.mark.parametrize("edit", range(len(MANIFEST_EDITS) + 5))
def test_a_malformed_parts_folder_is_one_line_for_merge(edit, tmp_path, capsys):
    folder = _parts_folder(tmp_path / "res")
    manifest = folder / "parts" / "manifest.json"
    if edit < len(MANIFEST_EDITS):
        manifest.write_text(json.dumps(MANIFEST_EDITS[edit](json.loads(manifest.read_text()))))
        file = "manifest.json"
    elif edit == len(MANIFEST_EDITS):
        manifest.write_text("[1, 2")
        file = "manifest.json"
    else:
        kind = ("fifo", "folder", "truncated", "empty")[edit - len(MANIFEST_EDITS) - 1]
        file = "manifest.json" if kind == "fifo" else "grid.parquet"
        _replace_with(kind)(folder / "parts" / file)
    before = sorted(str(p) for p in folder.rglob("*"))
    capsys.readouterr()
    with watchdog(60):
        _one_refusal(capsys, main(["merge", str(folder)]), file)
    assert sorted(str(p) for p in folder.rglob("*")) == before


PASSES = "prefill_tokens,decode_seqs,context_tokens,seconds\n" + "".join(
    f"{p},{d},{d * 300},{(5 + p / 40 + d / 100) * scale}\n"
    for p, d in ((0, 1), (0, 8), (512, 0), (128, 4), (0, 32)) for scale in (1e-3,))


def _special(root: Path, kind: str, suffix: str) -> Path:
    path = root / f"special-{kind}{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
        return path
    if kind == "folder":
        path.mkdir()
        return path
    return Path("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
@pytest.mark.parametrize("role", ["run config", "capacity config", "validate case", "profile",
                                  "trace", "config_json", "measurements"])
def test_a_special_file_is_refused_in_one_line(role, kind, tmp_path, capsys):
    out = tmp_path / "out"
    suffix = {"trace": ".csv", "measurements": ".csv", "config_json": ".json"}.get(role, ".toml")
    special = _special(tmp_path, kind, suffix)
    cfg = tmp_path / "c.toml"
    base = document({k: v for k, v in BASE.items() if k != "brief"})
    if role in ("profile", "trace", "config_json"):
        section, key = {"profile": ("hardware", "profile"), "trace": ("workload", "trace"),
                        "config_json": ("model", "config_json")}[role]
        doc = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
        if role == "config_json":
            doc["model"] = {}
        if role == "trace":
            doc["workload"] = {"trace": "", "duration_s": 1.0}
        doc[section][key] = str(special)
        base = document(doc)
    cfg.write_text(base)
    argv = {"run config": ["run", str(special), "--out", str(out)],
            "capacity config": ["capacity", str(special), "--out", str(out)],
            "validate case": ["validate", str(special), "--out", str(out)],
            "measurements": ["calibrate", str(special), "--gpu", "H100-SXM", "--model",
                             "Llama-3-8B", "--out", str(out)]}.get(role, ["run", str(cfg),
                                                                          "--out", str(out)])
    capsys.readouterr()
    with watchdog(60):
        rc = main(argv + ["--quiet"] * (argv[0] in ("run", "capacity", "validate")))
    if role == "validate case" and kind == "folder":  # a folder of cases: none in it
        _one_refusal(capsys, rc, "no *.toml case files")
    else:
        _one_refusal(capsys, rc, special.name, "model.config_json: ")
    assert not out.exists()


def test_unusable_output_paths_are_refused_before_anything_is_written(small_run, tmp_path,
                                                                      capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("keep")
    meas = tmp_path / "m.csv"
    meas.write_text(PASSES)
    calibrate = ["calibrate", str(meas), "--gpu", "H100-SXM", "--model", "Llama-3-8B", "--out"]
    cases = [(["frontier", str(small_run[1]), "--out"], a_file, "not a folder"),
             (["frontier", str(small_run[1]), "--out"], a_file / "sub", "lies under"),
             (calibrate, a_file / "p.toml", "lies under"),
             (calibrate, a_file / "sub" / "p.toml", "lies under"),
             (calibrate, tmp_path, "not a regular file"),
             (["run", str(small_run[0]), "--quiet", "--out"], a_file / "r", "lies under"),
             (["validate", "validation/fit", "--quiet", "--out"], a_file / "v", "lies under")]
    for argv, out, needle in cases:
        capsys.readouterr()
        _one_refusal(capsys, main(argv + [str(out)] + ["--force"] * (argv[0] == "calibrate")),
                     needle)
        assert a_file.read_text() == "keep"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "m.csv"]


def test_calibrate_refuses_a_fit_its_own_config_reader_would_refuse(tmp_path, capsys):
    meas = tmp_path / "slow.csv"
    meas.write_text(PASSES.replace("e-3", "").replace(",5.", ",50000."))
    slow = "prefill_tokens,decode_seqs,context_tokens,seconds\n" + "".join(
        f"{p},{d},{d * 300},{40 + p / 1000 + d / 100}\n"
        for p, d in ((0, 1), (0, 8), (512, 0), (128, 4), (0, 32)))
    meas.write_text(slow)
    out = tmp_path / "p.toml"
    argv = ["calibrate", str(meas), "--gpu", "H100-SXM", "--model", "Llama-3-8B", "--out",
            str(out)]
    capsys.readouterr()
    _one_refusal(capsys, main(argv), "overhead_ms")
    assert not out.exists()
    meas.write_text(PASSES)  # passes a GPU could take: the profile is written and reads back
    assert main(argv) == 0
    from sweep.study.profile import load_profile
    assert load_profile(out)["gpu"] == "H100-SXM"


def test_a_long_run_says_so_even_quiet_and_one_beyond_memory_is_refused(tmp_path, capsys,
                                                                        monkeypatch):
    cfg = tmp_path / "big.toml"
    doc = {**BASE, "workload": {**BASE["workload"], "arrival_rate": 1000.0,
                                "duration_s": 900.0}, "run": {"seeds": 40}}
    cfg.write_text(document(doc))
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("taken")  # refused after the estimate: nothing runs
    capsys.readouterr()
    assert main(["run", str(cfg), "--out", str(out), "--quiet"]) == 2
    first, refusal = capsys.readouterr().err.strip().splitlines()
    assert "minutes on this CPU" in first and "already exists" in refusal
    import sweep.execution.planning as planning

    monkeypatch.setattr(planning, "machine_bytes", lambda: 1e9)
    _one_refusal(capsys, main(["run", str(cfg), "--out", str(tmp_path / "o2"), "--quiet",
                               "--per-request"]), "run.per_request: ~")
    monkeypatch.setattr(planning, "machine_bytes", lambda: 1e6)
    _one_refusal(capsys, main(["run", str(cfg), "--out", str(tmp_path / "o2"), "--quiet"]),
                 "workload.duration_s: one simulation of")
    assert not (tmp_path / "o2").exists()


def _measurement_files() -> list[tuple[str, str]]:
    rng = random.Random(11)
    lines = PASSES.splitlines()
    files = [(f"cut at {c}", PASSES[:c]) for c in rng.sample(range(1, len(PASSES)), 12)]
    for value in ("x", "-1", "nan", "inf", "1e400", "", "0x10", "9" * 400, "1,2"):
        row = lines[2].split(",")
        for col in range(4):
            bad = row[:col] + [value] + row[col + 1:]
            files.append((f"col {col}={value[:8]}", "\n".join(lines[:2] + [",".join(bad)]
                                                             + lines[3:]) + "\n"))
    files += [("header only", lines[0] + "\n"), ("empty", ""), ("no header", "\n".join(lines[1:])),
              ("garbage", "".join(chr(rng.randrange(1, 0x3000)) for _ in range(300)))]
    return files


MEASUREMENTS = _measurement_files()


@pytest.mark.parametrize("name, text", MEASUREMENTS, ids=[m[0] for m in MEASUREMENTS])
def test_hostile_measurements_are_a_profile_or_one_line(name, text, tmp_path, capsys):
    meas = tmp_path / "m.csv"
    meas.write_text(text, encoding="utf-8", errors="surrogatepass")
    out = tmp_path / "p.toml"
    capsys.readouterr()
    with watchdog(60):
        rc = main(["calibrate", str(meas), "--gpu", "H100-SXM", "--model", "Llama-3-8B",
                   "--out", str(out)])
    if rc == 0:  # a readable subset: the profile reads back
        from sweep.study.profile import load_profile
        assert load_profile(out)["gpu"] == "H100-SXM"
    else:
        _one_refusal(capsys, rc, "m.csv", "--")
        assert not out.exists()


@pytest.mark.parametrize("cut", [40, 200, 400, 700, 1000])
def test_a_broken_validation_case_is_one_line(cut, tmp_path, capsys):
    case = sorted((Path(__file__).parents[1] / "validation" / "fit").glob("*.toml"))[0]
    broken = tmp_path / "case.toml"
    text = case.read_text()
    broken.write_text(text[:cut] + "\n" + text[cut:cut + 9] + "=\n" + text[cut + 9:])
    capsys.readouterr()
    _one_refusal(capsys, main(["validate", str(broken), "--out", str(tmp_path / "v"),
                               "--quiet"]), "case.toml")
    assert not (tmp_path / "v").exists()
