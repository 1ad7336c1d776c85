"""servesweep: Monte Carlo sweeps of LLM-serving designs on a vectorised JAX engine.

Start from a config (``configs/serve_a_model.toml`` is the Serve a Model study)::

    import sweep
    res = sweep.run("configs/serve_a_model.toml")     # results/serve_a_model/, resumable
    print(sweep.verdict(res.designs, res.brief).passing)
    sweep.frontier(res.designs, ["cost_per_mtok", "p95_ttft_s"])

or from designs in Python::

    r = sweep.simulate([sweep.Design(), sweep.Design(batching="static")], sweep.Workload(),
                       seeds=4)
    r.metrics                                          # one row per design x seed

``sweep.capacity(config)``, ``sweep.validate(cases)``, ``sweep.calibrate(measurements, ...)``,
``sweep.merge(folder)`` and ``sweep.report(folder)`` are the other commands, each returning its
tables. ``sweep.load_results(folder)`` reads a results folder back. ``sweep.plot_frontier(...)``
and ``sweep.plot_validation(table)`` return matplotlib figures and write nothing (save one with
``fig.savefig(path)``). The levers and the rules are in docs/config.md and docs/model.md.

Each refuses a bad argument before anything runs or is written, with a one-line ``ValueError``
naming it (the CLI's message for the same key), a ``TypeError`` for a value of the wrong type.
"""
from sweep.version import __version__  # noqa: F401

__all__ = ["Design", "Workload", "simulate", "run", "capacity", "validate", "calibrate",
           "merge", "report", "load_results", "frontier", "verdict", "plot_frontier",
           "plot_validation"]

# The function, not its module, under this name (a module of the same name is imported anyway).
from sweep.analysis.frontier import frontier  # noqa: E402


def run(config, out=None, seeds: int | None = None, resume: bool = False, force: bool = False,
        quiet: bool = True, **options):
    """``sweep run`` from Python: simulate a config's grid into a results folder (default
    ``results/<name>``), resuming an interrupted run with ``resume``; returns its ``Results``.
    A bad config raises ``ValueError`` with the CLI's one-line message. ``options``: those of
    ``sweep.execution.study_run.run`` (``chunk_size``, ``per_request``, ``processes``, ...)."""
    from sweep.execution.progress import bar_progress
    from sweep.execution.study_run import run as run_config

    _path("config", config)
    _path("out", out, optional=True)
    _flags(resume=resume, force=force, quiet=quiet)
    return run_config(config, out, seeds=seeds, resume=resume, force=force,
                      progress=None if quiet else bar_progress(), **options).results


def capacity(config, out=None, seeds: int | None = None, target_rate: float | None = None,
             resume: bool = False, force: bool = False, quiet: bool = True):
    """``sweep capacity`` from Python: each design's capacity within the brief and the cheapest
    fleets for ``target_rate``; returns a ``CapacityOutcome`` (``.capacity``, ``.fleet`` and,
    with ``[capacity] mixed_fleets``, ``.mixed`` tables, ``.meta``). A bad config raises
    ``ValueError`` with the CLI's one-line message."""
    from sweep.errors import got
    from sweep.execution.progress import bar_progress
    from sweep.workflows.capacity_study import capacity as search

    _path("config", config)
    _path("out", out, optional=True)
    _flags(resume=resume, force=force, quiet=quiet)
    if target_rate is not None and (isinstance(target_rate, bool)
                                    or not isinstance(target_rate, (int, float))):
        raise TypeError(f"target_rate: must be a number of requests/s, got {got(target_rate)}")
    return search(config, out, seeds=seeds, target_rate=target_rate, resume=resume,
                  force=force, progress=None if quiet else bar_progress())


def validate(cases, out=None, seeds: int | None = None, quiet: bool = True):
    """``sweep validate`` from Python: predictions against measured runs; returns a
    ``Validation`` (``.table``, ``.text``, ``.paths``)."""
    import os
    from collections.abc import Iterable

    from sweep.errors import got
    from sweep.execution.progress import bar_progress
    from sweep.workflows.validate import validate as compare

    if isinstance(cases, (str, os.PathLike)):
        paths = [cases]
    elif isinstance(cases, Iterable) and not isinstance(cases, (bytes, dict)):
        paths = list(cases)
    else:
        raise TypeError(f"cases: must be a path or a list of them, got {got(cases)}")
    for i, p in enumerate(paths):
        _path(f"cases[{i}]", p)
    _path("out", out, optional=True)
    _flags(quiet=quiet)
    return compare(paths, out, seeds, progress=None if quiet else bar_progress())


def calibrate(measurements, out=None, **options):
    """``sweep calibrate`` from Python: fit the factors to measurements and write the profile;
    returns a ``Calibration`` (``.profile``, ``.factors``). ``options``: ``gpu``, ``model``,
    ``gpus``, ``weight_bits``, ``kv_bits``, ``measured_model``, ``duration``, ``seeds``,
    ``force``, as the command's flags."""
    from sweep.workflows.calibration import calibrate as fit

    _path("measurements", measurements)
    _path("out", out, optional=True)
    return fit(measurements, out, **options)


def merge(folder, strict: bool = False):
    """``sweep merge`` from Python: join the parts every process of a run saved in ``folder``
    into its final tables; returns the ``Results``. ``strict``: refuse a run whose simulations
    hit their step bound, as ``--strict``."""
    from sweep.execution.study_run import merge as join

    _path("folder", folder)
    _flags(strict=strict)
    return join(folder, strict)


def report(folder):
    """``sweep report`` from Python: the verdict it prints, as data. Of a study's results folder
    the ``Verdict`` (``.passing`` cheapest first with ``p_pass``, ``.baseline`` and
    ``.baseline_misses``, ``.families`` of failing designs by the limits they miss,
    ``.failures``, ``.truncated``); of a capacity search's a ``CapacityOutcome`` read back
    (``.capacity``, ``.fleet`` and ``.mixed`` tables, ``.meta``)."""
    from pathlib import Path

    from sweep.analysis.report import verdict
    from sweep.analysis.results import load_capacity, load_mixed, load_results
    from sweep.workflows.capacity_study import CapacityOutcome

    _path("folder", folder)
    if (Path(folder) / "capacity.parquet").exists():
        cap, fleet, meta = load_capacity(folder)
        return CapacityOutcome(cap, fleet, meta, Path(folder), mixed=load_mixed(folder))
    res = load_results(folder)
    return verdict(res.designs, res.brief)


def plot_frontier(designs, x: str, y: str, brief=(), title: str | None = None):
    """The plot ``sweep frontier`` writes, as a ``matplotlib.figure.Figure``: every design of
    ``designs`` (``x`` against ``y``; prefix ``-`` to maximise one), the Pareto frontier, the
    designs that meet ``brief`` (a ``Results``'s ``.brief``) and its limits. Nothing is written
    and nothing is left open in pyplot; a notebook shows it as a cell's value,
    ``fig.savefig(path)`` saves it."""
    from sweep.analysis.frontier import frontier_figure
    from sweep.study.sections import Limit

    _table("designs", designs)
    for name, value in (("x", x), ("y", y)):
        _text(name, value)
    _text("title", title, optional=True)
    brief = _listed("brief", brief)
    for i, lim in enumerate(brief):
        if not isinstance(lim, Limit):
            raise TypeError(f"brief[{i}]: must be a Limit (as in a Results's .brief), got "
                            f"{type(lim).__name__}")
    return frontier_figure(designs, x, y, brief, title)


def plot_validation(table):
    """The plot ``sweep validate`` writes, predicted against measured, of a ``Validation``'s
    ``.table``, as a ``matplotlib.figure.Figure``; nothing written, nothing left open."""
    from sweep.errors import listed
    from sweep.workflows.validation_report import validation_figure

    _table("table", table)
    need = ("case", "group", "metric", "measured", "predicted")
    for column in need:
        if column not in table.columns:
            raise ValueError(f"table: no column {column!r}; allowed: the table of "
                             f"sweep.validate(...), with {listed(need)}")
    return validation_figure(table)


def _path(name: str, value, optional: bool = False) -> None:
    """A path argument that is not one, refused naming the argument."""
    import os

    from sweep.errors import got

    if not (isinstance(value, (str, os.PathLike)) or optional and value is None):
        raise TypeError(f"{name}: must be a path (str or os.PathLike"
                        f"{', or None' if optional else ''}), got "
                        f"{'None' if value is None else got(value)}")


def _flags(**flags) -> None:
    from sweep.errors import got

    for name, value in flags.items():
        if not isinstance(value, bool):
            raise TypeError(f"{name}: must be True or False, got {got(value)}")


def _table(name: str, value) -> None:
    import pandas as pd

    from sweep.errors import got

    if not isinstance(value, pd.DataFrame):
        raise TypeError(f"{name}: must be a pandas DataFrame, got "
                        f"{'None' if value is None else got(value)}")


def _text(name: str, value, optional: bool = False) -> None:
    from sweep.errors import got

    if not (isinstance(value, str) or optional and value is None):
        raise TypeError(f"{name}: must be a str{' or None' if optional else ''}, got "
                        f"{'None' if value is None else got(value)}")


def _listed(name: str, value) -> list:
    """A list argument given as any iterable (not a string, mapping or table)."""
    from collections.abc import Iterable, Mapping

    import pandas as pd

    from sweep.errors import got

    if value is None:
        return []
    if (isinstance(value, (str, bytes, Mapping, pd.DataFrame))
            or not isinstance(value, Iterable)):
        raise TypeError(f"{name}: must be a list, got {got(value)}")
    return list(value)


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
