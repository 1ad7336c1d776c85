"""A sweep killed at any moment (SIGKILL, Ctrl-C) resumes to the same dataset as an uninterrupted
run; --strict refuses truncated simulations; output folders are never clobbered or half written.

The kill tests run the real command in a subprocess and stop it once it has saved a part; the
study is many tiny simulations in chunks of one lane, so the run has dozens of parts.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweep.analysis.ownership import staging
from sweep.analysis.results import ResultsError, load_results
from sweep.cli import main

REPO = Path(__file__).parents[1]
TOTAL = 16 * 40  # the small study of tests/conftest.py, 40 seeds each
SEEDS = ["--seeds", "40"]
ARGS = [*SEEDS, "--chunk-size", "1", "--per-request", "--quiet"]


@pytest.fixture(scope="module")
def reference(swept, small_study):
    """The config, and an uninterrupted run of it."""
    return swept(small_study, *ARGS)


def _start(cfg, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "sweep.cli", "run", str(cfg), "--out",
                             str(out), *ARGS, *extra], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _runs_parts(out):
    return sorted((out / "parts").glob("runs-*.parquet")) if (out / "parts").exists() else []


def _wait_for_parts(proc, out, n):
    """Poll until ``out`` holds at least ``n`` saved chunks (the process must still run; a
    generous deadline turns a hang into a failure)."""
    deadline = time.monotonic() + 600
    while len(_runs_parts(out)) < n:
        assert proc.poll() is None, proc.communicate()
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"no part {n} after 600 s: {proc.communicate()}")
        time.sleep(0.005)


def _assert_same_dataset(a, b):
    ra, rb = load_results(a), load_results(b)
    pd.testing.assert_frame_equal(ra.runs, rb.runs)
    pd.testing.assert_frame_equal(ra.designs, rb.designs)
    pd.testing.assert_frame_equal(ra.requests, rb.requests)


def test_killed_twice_then_resumed_equals_an_uninterrupted_run(reference, tmp_path):
    cfg, whole = reference
    out = tmp_path / "out"
    stamps = {}
    for kill_after in (1, 3):  # SIGKILL once parts exist, resume, SIGKILL again
        proc = _start(cfg, out, "--resume")
        _wait_for_parts(proc, out, len(stamps) + kill_after)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (out / "runs.parquet").exists()  # killed mid-sweep, not after
        for p in _runs_parts(out):
            stamps.setdefault(p, p.stat().st_mtime_ns)
    assert 0 < len(stamps) and sum(len(pd.read_parquet(p)) for p in stamps) < TOTAL
    assert main(["run", str(cfg), "--out", str(out), *ARGS, "--resume"]) == 0
    # Saved chunks were kept, not recomputed; together the parts hold each simulation once.
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert sum(len(pd.read_parquet(p)) for p in _runs_parts(out)) == TOTAL
    _assert_same_dataset(whole, out)
    assert not list((out / "parts").glob(".*.tmp-*"))


def test_a_forced_rerun_killed_halfway_leaves_the_finished_results(reference, tmp_path):
    """--force reruns beside finished results and replaces them only once complete."""
    cfg, whole = reference
    out = tmp_path / "out"
    shutil.copytree(whole, out)
    proc = _start(cfg, out, "--force")
    _wait_for_parts(proc, staging(out), 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    _assert_same_dataset(whole, out)
    assert _runs_parts(staging(out))  # the killed rerun's work, beside


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_the_chunk_in_flight_and_says_how_to_resume_in_one_line(
        sig, reference, tmp_path):
    cfg, whole = reference
    out = tmp_path / "out"
    proc = _start(cfg, out)
    _wait_for_parts(proc, out, 1)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 128 + sig, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"--out {out} --resume" in lines[0], err
    assert not (out / "runs.parquet").exists()
    saved = sum(len(pd.read_parquet(p)) for p in _runs_parts(out))
    assert 0 < saved < TOTAL and f"{saved} of {TOTAL} simulations saved" in lines[0]
    assert main(["run", str(cfg), "--out", str(out), *ARGS, "--resume"]) == 0
    _assert_same_dataset(whole, out)


def test_resume_of_another_config_is_refused(reference, small_study, tmp_path, capsys):
    cfg, whole = reference
    other = tmp_path / "other.toml"
    other.write_text(small_study.replace("num_requests = 40", "num_requests = 39"))
    before = sorted(p.name for p in whole.rglob("*"))
    assert main(["run", str(other), "--out", str(whole), *ARGS, "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--force" in err[0] and "another config" in err[0]
    assert sorted(p.name for p in whole.rglob("*")) == before
    # Without --per-request the same config is another sweep too.
    assert main(["run", str(cfg), "--out", str(whole), *SEEDS, "--resume", "--quiet"]) == 2


def test_resume_of_a_finished_run_only_rewrites_the_tables(reference, capsys):
    cfg, whole = reference
    parts = sorted(p.name for p in (whole / "parts").iterdir())
    runs = load_results(whole).runs
    assert main(["run", str(cfg), "--out", str(whole), *ARGS, "--resume"]) == 0
    assert sorted(p.name for p in (whole / "parts").iterdir()) == parts
    pd.testing.assert_frame_equal(load_results(whole).runs, runs)
    assert main(["merge", str(whole)]) == 0
    assert f"{TOTAL} simulations" in capsys.readouterr().out


def test_an_unfinished_run_is_not_loaded_as_results(reference, tmp_path, capsys):
    cfg, whole = reference
    out = tmp_path / "partial"
    (out / "parts").mkdir(parents=True)
    for p in [whole / "parts" / "manifest.json", whole / "parts" / "grid.parquet",
              *_runs_parts(whole)[:2]]:
        (out / "parts" / p.name).write_bytes(p.read_bytes())
    with pytest.raises(ResultsError, match="--resume"):
        load_results(out)
    assert main(["report", str(out)]) == 2
    assert main(["merge", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "missing" in err[1] and "--resume" in err[1]
    assert not (out / "runs.parquet").exists()


TRUNCATING = """
name = "cut"
[model]
name = "Llama-3-8B"
[workload]
arrival_rate = 40.0
num_requests = 40
prompt_tokens = { dist = "exponential", mean = 256 }
output_tokens = { dist = "exponential", mean = 16 }
[levers]
max_batch = 8
[run]
seeds = 2
max_steps = 3
"""


def test_strict_refuses_truncated_simulations(tmp_path, capsys):
    cfg = tmp_path / "cut.toml"
    cfg.write_text(TRUNCATING)
    assert main(["run", str(cfg), "--out", str(tmp_path / "strict"), "--strict", "--quiet"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "step bound" in err[0] and "--strict" in err[0]
    assert not (tmp_path / "strict" / "runs.parquet").exists()
    # Without --strict the rows are kept, flagged, and the report says so.
    assert main(["run", str(cfg), "--out", str(tmp_path / "lax"), "--quiet"]) == 0
    assert "WARNING: truncated" in capsys.readouterr().out
    assert load_results(tmp_path / "lax").runs["truncated"].all()
    assert main(["merge", str(tmp_path / "lax"), "--strict"]) == 3
    # --force starts over: the old parts go, the new run's take their place (built beside);
    # the user's own files stay, in finished results and in unfinished ones alike.
    stale = tmp_path / "lax" / "parts" / "runs-p00000-000099.parquet"
    stale.write_bytes(b"")
    for folder in (tmp_path / "lax", tmp_path / "strict"):
        (folder / "analysis").mkdir()
        (folder / "analysis" / "plot.py").write_text("print('mine')\n")
        (folder / "notes.txt").write_text("mine\n")
        assert main(["run", str(cfg), "--out", str(folder), "--force", "--quiet"]) == 0
        assert (folder / "notes.txt").read_text() == "mine\n"
        assert (folder / "analysis" / "plot.py").read_text() == "print('mine')\n"
        assert (folder / ".servesweep").is_file()
    assert not stale.exists() and len(load_results(tmp_path / "lax").runs) == 2
    assert not staging(tmp_path / "lax").exists()
    precious = tmp_path / "precious"
    (precious / "notes").mkdir(parents=True)
    assert main(["run", str(cfg), "--out", str(precious), "--force", "--quiet"]) == 2
    assert "not a servesweep results folder" in capsys.readouterr().err
    assert (precious / "notes").exists()


def test_foreign_and_old_parquet_files_are_refused(tmp_path):
    df = pd.DataFrame({"design": [0], "seed": [0]})
    df.to_parquet(tmp_path / "runs.parquet")
    with pytest.raises(ResultsError, match="not a servesweep results file"):
        load_results(tmp_path)
    table = pa.Table.from_pandas(df).replace_schema_metadata(
        {b"servesweep": json.dumps({"schema_version": 0}).encode()})
    pq.write_table(table, tmp_path / "runs.parquet")
    with pytest.raises(ResultsError, match="schema version 0"):
        load_results(tmp_path)


def test_an_output_folder_that_cannot_be_created_is_one_line(reference, tmp_path, capsys):
    cfg, _ = reference
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert main(["run", str(cfg), "--out", str(blocker / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lies under" in err[0] and "not a folder" in err[0]
    assert blocker.read_text() == "not a folder"


def test_leftovers_of_a_kill_are_ignored(reference, tmp_path):
    """A kill between a chunk's two files leaves a requests part without its runs part, and a
    kill mid-write a temporary file: neither reaches the tables, and the temporary goes."""
    from sweep.analysis.results import next_part

    _, whole = reference
    out = tmp_path / "copy"
    (out / "parts").mkdir(parents=True)
    for p in (whole / "parts").iterdir():
        (out / "parts" / p.name).write_bytes(p.read_bytes())
    last = max(int(p.stem.rsplit("-", 1)[1]) for p in _runs_parts(out))
    orphan = out / "parts" / f"requests-p00000-{last + 1:06d}.parquet"
    orphan.write_bytes((whole / "parts" / "requests-p00000-000001.parquet").read_bytes())
    temp = out / "parts" / f".runs-p00000-{last + 2:06d}.parquet.tmp-host-1"
    temp.write_bytes(b"half a file")
    assert main(["merge", str(out)]) == 0
    _assert_same_dataset(whole, out)
    assert next_part(out, 0) == last + 2 and not temp.exists()
