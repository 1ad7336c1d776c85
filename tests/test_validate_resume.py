"""An interrupted ``sweep validate`` resumes from the simulations it saved, to the same report."""
from __future__ import annotations

import pandas as pd
import pytest

import sweep.execution.runner as runner
from sweep.cli import main
from tests.test_validate import OVERLOADED, TINY
from sweep.workflows.validate import validate
from sweep.workflows.validation_parts import PARTS_FOLDER


def _cases(root):
    """The two tiny cases, two simulations a chunk, so that a validation saves as it goes."""
    (root / "cases").mkdir()
    for name, text in (("tiny", TINY), ("overloaded", OVERLOADED)):
        (root / "cases" / f"{name}.toml").write_text(
            text.replace("[run]\n", "[run]\nchunk_size = 2\n"))
    return root / "cases"


def test_an_interrupted_validation_resumes_to_the_same_report(tmp_path, monkeypatch, capsys):
    cases, out = _cases(tmp_path), tmp_path / "out"
    reports = []

    def interrupt(*args):
        reports.append(args)
        if len(reports) == 2:  # the first chunk is saved; stop before the second is
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        validate([cases], out, progress=interrupt)
    saved = sorted((out / PARTS_FOLDER).rglob("runs-*.parquet"))
    assert len(saved) == 1 and not (out / "validation.parquet").exists()

    skipped = []
    real = runner.iter_chunks

    def spying(study, *args, skip=frozenset(), **kw):
        skipped.append(len(skip))
        return real(study, *args, skip=skip, **kw)

    monkeypatch.setattr(runner, "iter_chunks", spying)
    assert main(["validate", str(cases), "--out", str(out), "--resume", "--quiet"]) == 0
    assert skipped[0] == 2 and not (out / PARTS_FOLDER).exists()
    monkeypatch.setattr(runner, "iter_chunks", real)
    assert main(["validate", str(cases), "--out", str(tmp_path / "fresh"), "--quiet"]) == 0
    capsys.readouterr()
    pd.testing.assert_frame_equal(pd.read_parquet(out / "validation.parquet"),
                                  pd.read_parquet(tmp_path / "fresh" / "validation.parquet"))


def test_without_resume_the_saved_simulations_are_simulated_again(tmp_path, monkeypatch):
    cases, out = _cases(tmp_path), tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        validate([cases], out, progress=lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
    skipped = []
    real = runner.iter_chunks
    monkeypatch.setattr(runner, "iter_chunks",
                        lambda study, *a, skip=frozenset(), **kw: (
                            skipped.append(len(skip)), real(study, *a, skip=skip, **kw))[1])
    # a changed case is not resumed either
    (cases / "tiny.toml").write_text((cases / "tiny.toml").read_text().replace("5.0", "6.0"))
    validate([cases], out, resume=True)
    assert skipped and not any(skipped)
