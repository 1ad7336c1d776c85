"""servesweep: Monte Carlo sweeps of LLM-serving designs on a vectorised JAX engine.

Start from a config (``configs/serve_a_model.toml`` is the "Serve a Model" brief)::

    import sweep
    res = sweep.run("configs/serve_a_model.toml")     # results/serve_a_model/, resumable
    print(sweep.verdict(res.designs, res.brief).passing)
    sweep.frontier(res.designs, ["cost_per_mtok", "p95_ttft_s"])

or from designs in Python::

    r = sweep.simulate([sweep.Design(), sweep.Design(batching="static")], sweep.Workload(),
                       seeds=4)
    r.metrics                                          # one row per design x seed

``sweep.load_results(folder)`` reads a results folder back. The levers and the rules are in
docs/config.md and docs/model.md.
"""
from sweep.version import __version__  # noqa: F401

__all__ = ["Design", "Workload", "simulate", "run", "load_results", "frontier", "verdict"]

# The function, not its module, under this name (a module of the same name is imported anyway).
from sweep.analysis.frontier import frontier  # noqa: E402


def run(config, out=None, seeds: int | None = None, resume: bool = False, force: bool = False,
        quiet: bool = True):
    """``sweep run`` from Python: simulate a config's grid into a results folder (default
    ``results/<name>``), resuming an interrupted run with ``resume``; returns its ``Results``.
    A bad config raises ``ValueError`` with the CLI's one-line message."""
    import contextlib
    import io

    from sweep.analysis.results import load_results as _load
    from sweep.cli import main
    from sweep.study.config import load_study

    study = load_study(config, seeds=seeds)
    folder = out or f"results/{study.name}"
    argv = ["run", str(config), "--out", str(folder)]
    argv += [*(["--seeds", str(seeds)] if seeds else []), *(["--resume"] if resume else []),
             *(["--force"] if force else []), *(["--quiet"] if quiet else [])]
    err = io.StringIO()
    with contextlib.redirect_stderr(err) if quiet else contextlib.nullcontext():
        code = main(argv)
    if code != 0:
        raise ValueError(err.getvalue().strip().splitlines()[-1] if err.getvalue().strip()
                         else f"sweep run exited with status {code}")
    return _load(folder)


def __getattr__(name):  # the heavier modules load on first use
    if name == "Design":
        from sweep.study.design import Design
        return Design
    if name == "Workload":
        from sweep.study.workload import Workload
        return Workload
    if name == "simulate":
        from sweep.api import simulate
        return simulate
    if name == "load_results":
        from sweep.analysis.results import load_results
        return load_results
    if name == "verdict":
        from sweep.analysis.report import verdict
        return verdict
    raise AttributeError(f"module 'sweep' has no attribute {name!r}")
