"""``sweep frontier``, ``sweep report`` and ``sweep export``: a results folder (a sweep's or a
capacity search's) read back as a Pareto frontier, a verdict in plain words, or its designs in
another tool's format."""
from __future__ import annotations

from pathlib import Path

from sweep.errors import UsageError, checked
from sweep.files import check_table, make_folder, out_file, out_folder, writable, write_all


def cmd_frontier(args) -> int:
    from sweep.analysis.figures import save_figure
    from sweep.analysis.frontier import frontier, frontier_figure
    from sweep.analysis.results import load_results

    if (Path(args.results) / "capacity.parquet").exists():
        return _capacity_frontier(args)
    args.x, args.y = args.x or "cost_per_mtok", args.y or "p95_ttft_s"
    res = checked(load_results, args.results)
    objectives = [args.x, args.y] + ([args.z] if args.z else [])
    front = checked(frontier, res.designs, objectives)
    out = _out(args)
    fig = frontier_figure(res.designs, args.x, args.y, res.brief, title=res.meta.get("name"))
    paths = save_figure(fig, out / "frontier.png", out / "frontier.svg", also=_table(front, out))
    shown = ["design"] + res.axes + [o.lstrip("-") for o in objectives] + ["p_pass"]
    with_cols = [c for c in dict.fromkeys(shown) if c in front.columns]
    print(front[with_cols].to_string(index=False) if len(front) else "no design to draw")
    print(f"{len(front)} of {len(res.designs)} designs on the frontier -> "
          f"{out / 'frontier.parquet'}, {', '.join(map(str, paths))}")
    return 0


def _capacity_frontier(args) -> int:
    """Max rate against $/hour (or the objectives given) of the designs that carry load."""
    from sweep.analysis.figures import save_figure
    from sweep.analysis.frontier import frontier, frontier_figure
    from sweep.analysis.results import load_capacity

    cap, _, meta = checked(load_capacity, args.results)
    x, y = args.x or "usd_per_hour", args.y or "-max_rate"
    objectives = [x, y] + ([args.z] if args.z else [])
    carrying = cap[cap["max_rate"] > 0].reset_index(drop=True)
    front = checked(frontier, carrying, objectives)
    out = _out(args)
    fig = frontier_figure(carrying, x, y, title=f"{meta.get('name')}: capacity of the "
                          f"{len(carrying)} designs that carry load")
    paths = save_figure(fig, out / "frontier.png", out / "frontier.svg", also=_table(front, out))
    shown = ["design"] + meta["axes"] + [o.lstrip("-") for o in objectives]
    print(front[[c for c in dict.fromkeys(shown) if c in front.columns]].to_string(index=False)
          if len(front) else "no design carries load")
    print(f"{len(front)} of {len(carrying)} designs on the frontier -> "
          f"{out / 'frontier.parquet'}, {', '.join(map(str, paths))}")
    return 0


def _out(args) -> Path:
    """The frontier's folder (``--out``, else the results folder), writable or refused."""
    out, flag = (Path(args.out), "--out") if args.out else (Path(args.results), "RESULTS")
    return make_folder(writable(out_folder(out, flag), flag), flag)


def _table(front, out: Path) -> dict:
    """The frontier's table, written with its plots, all or none."""
    return {out / "frontier.parquet": lambda fh: front.to_parquet(fh, index=False)}


def cmd_report(args) -> int:
    from sweep.analysis.capacity_report import render_capacity
    from sweep.analysis.report import render, verdict
    from sweep.analysis.results import load_capacity, load_mixed, load_results

    if args.out and not args.html:
        raise UsageError(f"--out: {args.out} names where the HTML report goes; allowed: --out "
                         "FILE with --html")
    if args.html:
        return _html_report(args)
    folder = Path(args.results)
    if (folder / "capacity.parquet").exists():
        cap, fleet, meta = checked(load_capacity, args.results)
        print(render_capacity(cap, fleet, meta, mixed=checked(load_mixed, args.results)))
        return 0
    if (folder / VALIDATION).exists() and not (folder / "runs.parquet").exists():
        from sweep.workflows.validation_report import render as render_validation

        print(render_validation(_validation(folder)))
        return 0
    res = checked(load_results, args.results)
    print(render(verdict(res.designs, res.brief), res.brief, res.axes))
    return 0


#: The table ``sweep validate`` writes into its folder.
VALIDATION = "validation.parquet"


def _html_report(args) -> int:
    """The folder's report as one HTML page, written whole to ``--out`` (default
    RESULTS/report.html)."""
    from sweep.analysis import html_report
    from sweep.analysis.results import load_capacity, load_mixed, load_results

    folder, flag = Path(args.results), "--out" if args.out else "RESULTS"
    if (folder / "capacity.parquet").exists():
        cap, fleet, meta = checked(load_capacity, folder)
        text = html_report.capacity_html(cap, fleet, meta, checked(load_mixed, folder))
    elif (folder / "runs.parquet").exists() or (folder / "parts").is_dir():
        res = checked(load_results, folder)
        text = html_report.study_html(res.designs, res.brief, res.axes, res.meta)
    elif (folder / VALIDATION).exists():
        text = html_report.validation_html(*_validation_summaries(_validation(folder)))
    else:
        raise UsageError(f"RESULTS: {folder} holds no results; allowed: a folder written by "
                         "'sweep run', 'sweep capacity' or 'sweep validate --out'")
    path = out_file(Path(args.out) if args.out else folder / "report.html", True, flag)
    make_folder(path.parent, flag)
    write_all({path: lambda fh: fh.write(text.encode())}, flag)
    print(f"report -> {path}")
    return 0


def _validation(folder: Path):
    """The comparison table of a ``sweep validate`` folder, refused in one line when it is not
    one."""
    import pandas as pd

    from sweep.workflows.validate import COLUMNS

    path = checked(check_table, folder / VALIDATION, "the validation.parquet of sweep validate")
    try:
        table = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"RESULTS: {path} cannot be read ({exc}); allowed: the folder "
                         "'sweep validate --out' wrote") from None
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise UsageError(f"RESULTS: {path} lacks the columns {', '.join(missing)}; allowed: "
                         "the folder 'sweep validate --out' wrote")
    return table


def _validation_summaries(table) -> tuple:
    """The table and the summaries ``sweep validate`` prints, titled."""
    from sweep.workflows.validation_report import by_gpu, by_load, summary

    return table, {"Errors per metric (%)": summary(table),
                   "By group, GPU and tensor-parallel degree (%)": by_gpu(table),
                   "By GPU, tensor-parallel degree and load (%)": by_load(table)}


def cmd_export(args) -> int:
    """The designs as vLLM benchmark records (JSON lines) or as CSV, written all or none."""
    import json

    from sweep.analysis.export import vllm_records
    from sweep.analysis.results import load_results

    res = checked(load_results, args.results)
    suffix = {"vllm": "jsonl", "csv": "csv"}[args.format]
    path = out_file(Path(args.out or Path(args.results) / f"export.{suffix}"), args.force)
    if args.format == "vllm":
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in vllm_records(res.designs))
        write_all({path: lambda fh: fh.write(text.encode())})
    else:
        write_all({path: lambda fh: res.designs.to_csv(fh, index=False)})
    print(f"{len(res.designs)} designs -> {path}")
    return 0
