"""The names a notebook needs, from ``import sweep``."""
import pytest

import sweep

TINY = """name = "api"
[hardware]
gpu = "H100-SXM"
[model]
name = "Llama-3.2-1B"
[workload]
num_requests = 20
[levers]
max_batch = [4, 8]
[brief]
p95_ttft_s = { max = 10.0 }
"""


def test_import_sweep_exports_what_a_notebook_needs():
    assert set(sweep.__all__) == {"Design", "Workload", "simulate", "run", "capacity",
                                  "validate", "calibrate", "merge", "report", "load_results",
                                  "frontier", "verdict", "plot_frontier", "plot_validation"}
    for name in sweep.__all__:
        assert callable(getattr(sweep, name)), name
    assert "sweep.run(" in sweep.__doc__


def test_run_writes_a_results_folder_and_refuses_a_bad_config(tmp_path):
    cfg = tmp_path / "api.toml"
    cfg.write_text(TINY)
    res = sweep.run(cfg, out=tmp_path / "out")
    assert len(res.designs) == 2 and (tmp_path / "out" / "runs.parquet").exists()
    v = sweep.verdict(res.designs, res.brief)
    assert len(v.passing) == 2
    assert len(sweep.frontier(res.designs, ["cost_per_mtok", "p95_ttft_s"])) >= 1
    again = sweep.load_results(tmp_path / "out")
    assert again.runs.equals(res.runs)
    bad = tmp_path / "bad.toml"
    bad.write_text(TINY.replace("max_batch = [4, 8]", "max_batch = 0"))
    with pytest.raises(ValueError) as e:
        sweep.run(bad, out=tmp_path / "bad-out")
    assert "levers.max_batch" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "bad-out").exists()


def test_capacity_validate_and_calibrate_run_from_python_and_refuse_in_one_line(tmp_path):
    from pathlib import Path

    cfg = tmp_path / "api.toml"
    cfg.write_text(TINY.replace("num_requests = 20", "num_requests = 20\narrival_rate = 2.0")
                   + "[run]\nseeds = 2\n[capacity]\ntarget_rate = 8.0\nfleets = 1\n")
    cap = sweep.capacity(cfg, out=tmp_path / "cap")
    assert len(cap.capacity) == 2 and (cap.capacity["max_rate"] > 0).all()
    assert len(cap.fleet) >= 1 and (tmp_path / "cap" / "capacity.parquet").exists()
    assert sweep.capacity(cfg, out=tmp_path / "cap", resume=True).kept
    with pytest.raises(ValueError) as e:
        sweep.capacity(cfg, out=tmp_path / "cap2", target_rate=-1.0)
    assert "--target-rate" in str(e.value) and "\n" not in str(e.value)

    case = sorted((Path(__file__).parents[1] / "validation" / "fit").glob("*.toml"))[0]
    v = sweep.validate(case, out=tmp_path / "val", seeds=1)
    assert set(v.table["case"]) == {case.stem} and "mean_e2e_s" in set(v.table["metric"])
    assert all(Path(p).exists() for p in v.paths)
    with pytest.raises(ValueError, match="no such file or folder"):
        sweep.validate(tmp_path / "none.toml", out=tmp_path / "val2")

    meas = tmp_path / "m.csv"
    meas.write_text("prefill_tokens,decode_seqs,context_tokens,seconds\n" + "".join(
        f"{p},{d},{d * 300},{(5 + p / 40 + d / 100) * 1e-3}\n"
        for p, d in ((0, 1), (0, 8), (512, 0), (128, 4), (0, 32))))
    cal = sweep.calibrate(meas, gpu="H100-SXM", model="Llama-3-8B")
    assert cal.profile == meas.with_suffix(".profile.toml") and cal.profile.exists()
    assert 0 < cal.factors["bandwidth_efficiency"] <= 1
    with pytest.raises(ValueError, match="--gpu: required"):
        sweep.calibrate(meas, model="Llama-3-8B", force=True)
