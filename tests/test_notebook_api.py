"""What a notebook does with ``import sweep``: plots returned as figures (written only when
saved, to the same bytes as the CLI's files), ``merge`` and ``report`` returning data, and bad
arguments refused in one line."""
import shutil

import pandas as pd
import pytest
from matplotlib.figure import Figure

import sweep
from sweep.analysis.figures import figure_files, save_figure
from sweep.cli import main
from sweep.workflows.validation_report import plot

TINY = """name = "notebook"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 20
arrival_rate = 2.0
[levers]
max_batch = [4, 8]
[run]
seeds = 1
[brief]
p95_ttft_s = { max = 10.0 }
"""

#: Two cases of two metrics each, as ``sweep validate`` tabulates them.
VALIDATION = pd.DataFrame({
    "case": ["a", "a", "b", "b"], "group": ["fit", "fit", "holdout", "holdout"],
    "metric": ["mean_e2e_s", "p95_ttft_s"] * 2, "measured": [2.0, 0.30, 4.0, 0.5],
    "predicted": [2.2, 0.25, 3.5, 0.6]})


@pytest.fixture(scope="module")
def tiny(swept):
    """(config file, results folder) of a 2-design, 1-seed sweep."""
    return swept(TINY, "--quiet")


def _files(folder) -> list:
    return sorted(p.relative_to(folder) for p in folder.rglob("*"))


def test_plots_are_figures_and_nothing_is_written_until_saved(tiny, tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    _, out = tiny
    before = _files(out)
    monkeypatch.chdir(tmp_path)
    res = sweep.load_results(out)
    open_before = plt.get_fignums()
    fig = sweep.plot_frontier(res.designs, "cost_per_mtok", "p95_ttft_s", brief=res.brief)
    val = sweep.plot_validation(VALIDATION)
    assert isinstance(fig, Figure) and isinstance(val, Figure)
    assert "p95_ttft_s" in fig.axes[0].get_ylabel()
    assert plt.get_fignums() == open_before  # nothing left open in pyplot
    assert fig._repr_png_()[:8] == b"\x89PNG\r\n\x1a\n"  # a notebook shows it, pyplot or not
    assert list(tmp_path.iterdir()) == [] and _files(out) == before
    paths = save_figure(fig, tmp_path / "f.png", tmp_path / "f.svg")
    assert paths == (str(tmp_path / "f.png"), str(tmp_path / "f.svg"))
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_cli_writes_what_the_figures_save(tiny, tmp_path):
    _, out = tiny
    assert main(["frontier", str(out), "--out", str(tmp_path / "cli")]) == 0
    res = sweep.load_results(out)
    fig = sweep.plot_frontier(res.designs, "cost_per_mtok", "p95_ttft_s", res.brief,
                              title=res.meta["name"])
    save_figure(fig, tmp_path / "api" / "frontier.png", tmp_path / "api" / "frontier.svg")
    for name in ("frontier.png", "frontier.svg"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "api" / name).read_bytes()
    # The validation report's plot: the public figure, saved the same way, is the same bytes.
    plot(VALIDATION, tmp_path / "v.png", tmp_path / "v.svg")
    for path, write in figure_files(sweep.plot_validation(VALIDATION), tmp_path / "w.png",
                                    tmp_path / "w.svg").items():
        with open(path, "wb") as fh:
            write(fh)
    for suffix in ("png", "svg"):
        assert ((tmp_path / f"v.{suffix}").read_bytes()
                == (tmp_path / f"w.{suffix}").read_bytes())


def test_the_api_shows_progress_as_a_bar(tiny, tmp_path, capsys):
    """``quiet=False`` draws tqdm's bar (a widget in a notebook): it ends at every simulation
    and names the designs done; the results are the quiet run's."""
    cfg, out = tiny
    res = sweep.run(cfg, out=tmp_path / "loud", quiet=False)
    err = capsys.readouterr().err
    assert "2/2 [" in err and "2/2 designs" in err and "sim" in err
    pd.testing.assert_frame_equal(res.runs, sweep.load_results(out).runs)


def test_merge_and_report_return_data(tiny, tmp_path):
    cfg, out = tiny
    whole = sweep.load_results(out)
    parts = tmp_path / "parts"
    shutil.copytree(out, parts)
    for name in ("runs.parquet", "designs.parquet"):
        (parts / name).unlink()
    merged = sweep.merge(parts)
    pd.testing.assert_frame_equal(merged.runs, whole.runs)
    pd.testing.assert_frame_equal(merged.designs, whole.designs)
    assert (parts / "runs.parquet").exists()

    v = sweep.report(out)
    assert len(v.passing) == 2 and int(v.baseline["design"]) == 0 and v.families == []
    cap_cfg = tmp_path / "cap.toml"
    cap_cfg.write_text(TINY + "[capacity]\ntarget_rate = 4.0\nfleets = 1\n")
    sweep.capacity(cap_cfg, out=tmp_path / "cap")
    cap = sweep.report(tmp_path / "cap")
    assert len(cap.capacity) == 2 and len(cap.fleet) >= 1 and cap.meta["target_rate"] == 4.0


@pytest.mark.parametrize("call, error, needle", [
    (lambda d, t: sweep.merge(3), TypeError, "folder: must be a path"),
    (lambda d, t: sweep.merge(t / "none"), ValueError, "not a resumable sweep"),
    (lambda d, t: sweep.merge(t, strict="yes"), TypeError, "strict: must be True"),
    (lambda d, t: sweep.report(None), TypeError, "folder: must be a path"),
    (lambda d, t: sweep.report(t / "none"), ValueError, "no runs.parquet"),
    (lambda d, t: sweep.plot_frontier(d.to_dict(), "cost_per_mtok", "p95_ttft_s"), TypeError,
     "designs: must be a pandas DataFrame"),
    (lambda d, t: sweep.plot_frontier(d, "cost_per_mtok", ["p95_ttft_s"]), TypeError,
     "y: must be a str"),
    (lambda d, t: sweep.plot_frontier(d, "cost", "p95_ttft_s"), ValueError, "'cost' is not a"),
    (lambda d, t: sweep.plot_frontier(d, "cost_per_mtok", "p95_ttft_s", brief=["p95_ttft_s"]),
     TypeError, "brief[0]: must be a Limit"),
    (lambda d, t: sweep.plot_validation(d), ValueError, "table: no column 'case'"),
    (lambda d, t: sweep.plot_validation("validation.parquet"), TypeError,
     "table: must be a pandas DataFrame"),
])
def test_bad_arguments_are_refused_in_one_line(tiny, tmp_path, call, error, needle):
    _, out = tiny
    designs = sweep.load_results(out).designs
    before = _files(out)
    with pytest.raises(error) as e:
        call(designs, tmp_path)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert _files(out) == before
