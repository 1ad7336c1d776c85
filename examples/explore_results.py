"""Notebook-style tour of a study's results: load them, find the frontier, read the verdict,
and draw a latency histogram. Each block is a notebook cell.

Run after `sweep run configs/serve_a_model.toml --per-request`:
    python examples/explore_results.py results/serve_a_model
"""
import sys
from pathlib import Path

from matplotlib.figure import Figure

from sweep.analysis.frontier import frontier, plot_frontier
from sweep.analysis.report import render, verdict
from sweep.analysis.results import load_results


def main(results_dir: str, out_dir: str | None = None) -> dict:
    out = Path(out_dir or results_dir)
    out.mkdir(parents=True, exist_ok=True)

    # %% Load: one row per design x seed (runs), per design (designs), per request (requests).
    res = load_results(results_dir)
    designs = res.designs
    print(f"{len(designs)} designs, {len(res.runs)} runs; brief: "
          + ", ".join(f"{lim.key} in [{lim.min}, {lim.max}]" for lim in res.brief))

    # %% The cost-latency frontier, with the brief's limits drawn in.
    front = frontier(designs, ["cost_per_mtok", "p95_ttft_s"])
    print(front[["design", *res.axes, "cost_per_mtok", "p95_ttft_s", "p_pass"]].to_string(
        index=False))
    plot_frontier(designs, "cost_per_mtok", "p95_ttft_s", res.brief, out / "tour_frontier.png")

    # %% The verdict, as `sweep report` prints it.
    v = verdict(designs, res.brief)
    print(render(v, res.brief, res.axes))

    # %% Time-to-first-token histogram: the starting design vs the cheapest passing one.
    pick = [int(v.baseline["design"])]
    if len(v.passing):
        pick.append(int(v.passing.iloc[0]["design"]))
    if res.requests is None:
        raise SystemExit("no requests.parquet: rerun `sweep run` with --per-request")
    req = res.requests
    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    for d in dict.fromkeys(pick):
        r = req[req["design"] == d]
        ttft = (r["first_token_s"].fillna(r["arrival_s"].max()) - r["arrival_s"]).clip(lower=1e-4)
        ax.hist(ttft, bins=60, alpha=0.6, label=f"design {d}")
    ax.set_xscale("log")
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("requests")
    ax.legend()
    fig.savefig(out / "tour_ttft_histogram.png", dpi=120)
    return {"frontier": front, "verdict": v, "designs": pick}


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "results/serve_a_model")
