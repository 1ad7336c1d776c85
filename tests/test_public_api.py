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
    assert set(sweep.__all__) == {"Design", "Workload", "simulate", "run", "load_results",
                                  "frontier", "verdict"}
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
