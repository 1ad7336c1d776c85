"""The user's files and the disk: ``--force`` removes only what servesweep wrote; a read-only
destination is refused before anything runs, and a full disk ends a command in one line with the
folder as it was. Real read-only and full filesystems are small tmpfs mounts, where this machine
permits mounting (else those tests are skipped, saying why)."""
from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from sweep.analysis import ownership
from sweep.analysis.results import load_capacity, load_mixed, write_results
from sweep.cli import main

REPO = Path(__file__).parents[1]
PASSES = REPO / "configs" / "calibration" / "h100_llama3_8b_passes.csv"
CASE = sorted((REPO / "validation" / "fit").glob("*.toml"))[0]


def _one_line(capsys, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and len(err) <= 300 + len("sweep calibrate: error: "), err
    assert "Traceback" not in err and all(n in err for n in needles), err
    return err


def _tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def mount(tmp_path):
    """``mount(size, read_only)``: a fresh tmpfs folder of ``size``; skipped where this machine
    does not permit mounting."""
    points = []

    def make(size: str, read_only: bool = False) -> Path:
        point = tmp_path / f"mnt-{uuid.uuid4().hex[:8]}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(point)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"mounting a tmpfs is not permitted here: {done.stderr.strip()}")
        points.append(point)
        return point

    yield make
    for point in points:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _read_only(point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)


# --- what servesweep owns ------------------------------------------------------------------------

def test_clear_removes_only_servesweeps_entries(tmp_path):
    for name in ("runs.parquet", "designs.parquet", ".servesweep", ".runs.parquet.tmp-h-1",
                 "notes.txt", "frontier.png", "runs.parquet.bak"):
        (tmp_path / name).write_text("x")
    for folder in ("parts", "capacity-parts", "analysis"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "a").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "analysis")
    ownership.clear(tmp_path)
    assert _tree(tmp_path) == ["analysis", "analysis/a", "link", "notes.txt", "runs.parquet.bak"]


@pytest.mark.parametrize("swap", [True, False])
def test_replacing_results_keeps_the_users_files(tmp_path, monkeypatch, swap):
    """In one atomic swap, or entry by entry where the system has none: servesweep's entries
    are the new ones, the user's are the same files (not copies) as before."""
    out, new = tmp_path / "out", tmp_path / ".out.new"
    for folder, text in ((out, "old"), (new, "new")):
        (folder / "parts").mkdir(parents=True)
        (folder / "parts" / "manifest.json").write_text(text)
        (folder / "runs.parquet").write_text(text)
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.py").write_text("mine")
    (out / "notes.txt").write_text("mine")
    inode = (out / "notes.txt").stat().st_ino
    if not swap:
        monkeypatch.setattr(ownership, "_exchange", lambda a, b: False)
    ownership.replace_folder(new, out, last="runs.parquet")
    assert _tree(out) == ["analysis", "analysis/plot.py", "notes.txt", "parts",
                          "parts/manifest.json", "runs.parquet"]
    assert (out / "runs.parquet").read_text() == "new" == (out / "parts/manifest.json").read_text()
    assert (out / "notes.txt").stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# --- read-only and full filesystems --------------------------------------------------------------

def test_a_read_only_destination_is_refused_before_anything_runs(mount, small_run, tmp_path,
                                                                  capsys):
    cfg, done = small_run
    point = mount("4m")
    os.system(f"cp -r {done} {point}/done")
    (point / "partial").mkdir()
    os.system(f"cp -r {done}/parts {point}/partial/")
    _read_only(point)
    before = _tree(point)
    for argv in (["run", str(cfg), "--out", str(point / "done"), "--force"],
                 ["run", str(cfg), "--out", str(point / "partial"), "--resume",
                  "--per-request"],
                 ["run", str(cfg), "--out", str(point / "new")],
                 ["frontier", str(point / "done")],
                 ["frontier", str(done), "--out", str(point / "front")],
                 ["merge", str(point / "partial")],
                 ["calibrate", str(PASSES), "--gpu", "H100-SXM", "--model", "Llama-3-8B",
                  "--out", str(point / "h100.toml")],
                 ["validate", str(CASE), "--out", str(point / "validation")]):
        assert main(argv + ["--quiet"] * (argv[0] == "run")) == 2, argv
        _one_line(capsys, "Read-only file system", str(point))
    assert _tree(point) == before


def test_a_full_disk_ends_in_one_line_with_nothing_left(mount, small_run, small_study, capsys):
    cfg, done = small_run
    point = mount("64k")
    assert main(["run", str(cfg), "--out", str(point / "out"), "--quiet"]) == 2
    _one_line(capsys, "No space left on device", "nothing was left behind")
    assert_empty = sorted(os.listdir(point))
    assert assert_empty == []
    (point / "mine.txt").write_text("kept")
    assert main(["frontier", str(done), "--out", str(point / "front")]) == 2
    _one_line(capsys, "No space left on device")
    assert _tree(point) == ["front", "mine.txt"] and not list((point / "front").iterdir())


# --- what servesweep writes, it reads back -------------------------------------------------------

def test_fleet_tables_without_a_row_are_read_back(tmp_path):
    """A search where no design carries load writes empty fleet tables that its readers take."""
    from sweep.workflows.capacity_tables import fleets
    from sweep.workflows.mixed_fleets import mixed_fleets

    cap = pd.DataFrame({"design": [0, 1], "max_rate": [0.0, 0.0], "usd_per_hour": [2.0, 4.0],
                        "cost_per_mtok_at_max": [float("nan")] * 2, "max_batch": [8, 16]})
    study = SimpleNamespace(seeds=[0, 1], capacity={"fleets": 2}, brief=[])
    runner = lambda jobs, seeds: None  # noqa: E731 (nothing to run: no design carries load)
    fleet = fleets(study, cap, [], runner, 5.0, [])
    mixed = mixed_fleets(study, cap, [], runner, 5.0, [])
    assert fleet.empty and mixed.empty
    meta = {"kind": "capacity", "name": "x", "axes": ["max_batch"], "brief": [],
            "target_rate": 5.0, "seeds": [0, 1], "capacity": {"confidence": 0.9}, "slo": None}
    table = cap.assign(max_rate_low=0.0, max_rate_high=0.0, binding="p95_ttft_s", why="")
    write_results(tmp_path, {"capacity": table,
                             "fleet": fleet, "mixed_fleet": mixed}, meta, last="capacity")
    assert load_capacity(tmp_path)[1].empty and load_mixed(tmp_path).empty


def test_a_mount_point_results_folder_is_rerun_in_place(mount, small_run):
    """A results folder that is itself a mount point cannot be swapped: its rerun is built
    inside it and moved into place entry by entry, the user's files kept."""
    cfg, done = small_run
    point = mount("16m")
    args = ["run", str(cfg), "--out", str(point), "--per-request", "--quiet", "--force"]
    assert main(args) == 0  # (the folder exists: --force, as it is empty)
    (point / "notes.txt").write_text("mine")
    assert main(args) == 0
    assert (point / "notes.txt").read_text() == "mine"
    assert not (point / ownership.INSIDE).exists()
    pd.testing.assert_frame_equal(pd.read_parquet(point / "runs.parquet"),
                                  pd.read_parquet(done / "runs.parquet"))
