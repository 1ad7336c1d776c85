"""Mixed fleets: the cheapest combination of replica counts over the designs that carry load,
simulated whole behind the capacity-weighted router (engine and twin agreement: test_topology)."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest

from sweep.cli import main
from sweep.workflows.mixed_fleets import cheapest_mixes
from tests.helpers import capacity_refused
from tests.test_capacity import TINY

#: Three GPUs at one seat tier: one H100 carries ~76 requests/s, an A100 ~50, an L40S ~33.
MIX = (TINY.replace('gpu = "H100-SXM"', 'gpu = ["H100-SXM", "A100-80GB", "L40S"]')
       .replace("max_batch = [8, 32]", "max_batch = 8") + "mixed_fleets = true\n")


def _brute_force(options, target, k):
    need = target * (1 - 1e-9)
    out = []
    for counts in itertools.product(*[range(math.ceil(target / c) + 1) for c, _ in options]):
        total = sum(n * c for n, (c, _) in zip(counts, options))
        if total < need or any(n and total - options[j][0] >= need
                               for j, n in enumerate(counts)):
            continue  # short of the target, or one replica more than it needs
        out.append((sum(n * u for n, (_, u) in zip(counts, options)), sum(counts), counts))
    return sorted(out)[:k]


def test_the_cheapest_mixes_are_those_of_an_exhaustive_search():
    rng = np.random.default_rng(20261202)
    for _ in range(120):
        m = int(rng.integers(1, 5))
        options = [(float(rng.choice([rng.uniform(0.5, 6), rng.integers(1, 6)])),
                    float(rng.choice([rng.uniform(1, 9), rng.integers(1, 9)]))) for _ in range(m)]
        target, k = float(rng.uniform(1, 20)), int(rng.integers(1, 6))
        got = cheapest_mixes(options, target, k)
        want = _brute_force(options, target, k)
        assert [c for c, _ in got] == pytest.approx([c for c, _, _ in want], rel=1e-12)
        for cost, counts in got:
            assert sum(n * c for n, (c, _) in zip(counts, options)) >= target * (1 - 1e-9)
            assert cost == pytest.approx(sum(n * u for n, (_, u) in zip(counts, options)))


def test_a_mixed_fleet_is_no_dearer_than_one_design_and_meets_the_brief_whole(tmp_path, capsys):
    """At 110 requests/s, one design needs 2 H100s or 4 L40S ($4/hour); an H100 with an A100
    carries it for less. The mixes found are simulated whole and meet the brief there."""
    cfg = tmp_path / "mix.toml"
    cfg.write_text(MIX)
    out = tmp_path / "out"
    assert main(["capacity", str(cfg), "--out", str(out), "--target-rate", "110",
                 "--quiet"]) == 0
    text = capsys.readouterr().out
    cap = pd.read_parquet(out / "capacity.parquet").set_index("design")
    fleet = pd.read_parquet(out / "fleet.parquet")
    mixed = pd.read_parquet(out / "mixed_fleet.parquet")
    single = fleet[fleet["confirmed"]]["fleet_usd_per_hour"].min()
    assert len(mixed) and mixed["confirmed"].iloc[0]
    assert "Mixed fleet: " in text
    for _, mix in mixed.groupby("mix"):
        assert mix["design"].nunique() == len(mix) >= 2
        usd = float(mix["fleet_usd_per_hour"].iloc[0])
        assert usd == pytest.approx(sum(r.replicas * cap.loc[r.design, "usd_per_hour"]
                                        for r in mix.itertuples()))
        assert usd <= single + 1e-9
        carried = mix["replicas"].to_numpy() * cap.loc[mix["design"], "max_rate"].to_numpy()
        assert carried.sum() >= 110 * (1 - 1e-9)
        np.testing.assert_allclose(mix["share"], carried / carried.sum(), rtol=1e-12)
        assert mix["confirmed"].iloc[0] == (mix["p_pass"].iloc[0] >= 0.9)
    # Each mix's simulations are the search's rows of design -1 - mix, at the target.
    search = pd.read_parquet(out / "search.parquet")
    ran = search[search["design"] < 0]
    assert sorted(set(-1 - ran["design"])) == sorted(set(mixed["mix"]))
    assert (ran["arrival_rate"] == 110).all() and (ran["requests"] == 40).all()
    assert not ran["unstable"].any()
    assert main(["report", str(out)]) == 0
    assert "Mixed fleet: " in capsys.readouterr().out


@pytest.mark.parametrize("edit, key", [
    (lambda t: t.replace("mixed_fleets = true", "mixed_fleets = 1"), "capacity.mixed_fleets"),
    (lambda t: t, "capacity.mixed_fleets"),  # no target to size fleets for
])
def test_bad_mixed_fleet_input_is_one_line_and_writes_nothing(tmp_path, capsys, edit, key):
    capacity_refused(tmp_path, capsys, edit(MIX), key)


def test_the_report_names_each_fleets_design_with_its_own_replicas():
    """A fleet of 3 copies of a 2-replica design reads "3 x (replicas=2 ...)", and a mix's
    designs are named the same way, with their shares."""
    from sweep.analysis.capacity_report import render_capacity

    cap = pd.DataFrame(dict(design=[0, 1], gpu=["H100-SXM", "L40S"], replicas=[2, 1],
                            max_rate=[150.0, 33.0], max_rate_low=[150.0, 33.0],
                            max_rate_high=[153.0, 34.0], usd_per_hour=[4.0, 1.0],
                            cost_per_mtok_at_max=[0.2, 0.17], binding=["queueing"] * 2,
                            why=["", ""], calibration=["fitted"] * 2))
    fleet = pd.DataFrame(dict(design=[0], replicas=[3], confirmed=[True],
                              fleet_usd_per_hour=[12.0], cost_per_mtok=[0.2], note=[""]))
    mixed = pd.DataFrame(dict(mix=[0, 0], design=[0, 1], replicas=[2, 3], share=[0.75, 0.25],
                              confirmed=[True] * 2, p_pass=[1.0] * 2,
                              fleet_usd_per_hour=[11.0] * 2, cost_per_mtok=[0.18] * 2,
                              p95_ttft_s=[0.02] * 2, note=[""] * 2))
    meta = dict(axes=["gpu", "replicas"], capacity={"confidence": 0.9}, seeds=[0, 1],
                brief=[{"key": "p95_ttft_s", "min": None, "max": 0.3}], target_rate=400.0)
    text = " ".join(render_capacity(cap, fleet, meta, mixed=mixed).split())
    assert "3 x (gpu=H100-SXM replicas=2), $12.00/hour" in text
    assert ("Mixed fleet: 2 x (gpu=H100-SXM replicas=2, 75% of the load) + 3 x (gpu=L40S "
            "replicas=1, 25% of the load), $11.00/hour ($1.00/hour less than one design's)") in text
