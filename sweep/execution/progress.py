"""Progress of a sweep: simulations and designs done, shown as a bar or as log lines (the
commands), or as a progress bar that is a widget in a notebook (the Python API)."""
from __future__ import annotations

import math
import sys
import time
from typing import Callable

from sweep.study.config import Study

#: ``progress(done, total, designs done, designs, seconds)``.
Progress = Callable[[int, int, int, int, float], None]


class Tally:
    """Progress over a share ``mine`` (its simulations' ``point`` and ``seed``): simulations
    and designs done, the ones in ``skip`` (saved before) counted as done."""

    def __init__(self, study: Study, mine: list, skip):
        self.points = {s.point for s in mine}
        self.left = [0] * len(study.points)  # simulations of each point still to run
        for s in mine:
            self.left[s.point] += (s.point, s.seed) not in skip
        self.total = len(mine)
        self.done = self.total - sum(self.left)
        self.t0 = time.perf_counter()

    def add(self, points) -> None:
        """One finished simulation of each of ``points``."""
        for point in points:
            self.left[point] -= 1
            self.done += 1

    def report(self, progress: Progress | None) -> None:
        if progress:
            progress(self.done, self.total, sum(1 for i in self.points if self.left[i] == 0),
                     len(self.points), time.perf_counter() - self.t0)


def default_progress(stream=None) -> Progress:
    """A one-line bar on a terminal; plain log lines (at most ~20) otherwise; on ``stream``,
    by default the standard error of the moment (not of import time)."""
    stream = sys.stderr if stream is None else stream
    tty = stream.isatty()
    last = [-1]

    def show(done: int, total: int, designs: int, designs_total: int, elapsed: float) -> None:
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else math.inf
        msg = (f"{designs}/{designs_total} designs, {done}/{total} simulations, "
               f"{rate:,.1f} sims/s, {eta:,.0f} s left")
        if tty:
            filled = int(30 * done / total)
            stream.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {msg}   ")
            if done == total:
                stream.write("\n")
        else:
            step = int(20 * done / total)
            if step != last[0] or done == total:
                last[0] = step
                stream.write(msg + "\n")
        stream.flush()

    return show


def bar_progress() -> Progress:
    """tqdm's bar: a widget in a notebook, a line on a terminal (``tqdm.auto`` tells them apart
    by the frontend, which a stream cannot). A new total (a capacity search's next round of
    probes) starts a new bar."""
    from tqdm.auto import tqdm

    bar = [None]

    def show(done: int, total: int, designs: int, designs_total: int, elapsed: float) -> None:
        if bar[0] is None or bar[0].total != total or done < bar[0].n:
            if bar[0] is not None:
                bar[0].close()
            bar[0] = tqdm(total=total, unit="sim", dynamic_ncols=True)
        bar[0].n = done
        bar[0].set_postfix_str(f"{designs}/{designs_total} designs", refresh=False)
        bar[0].refresh()
        if done == total:
            bar[0].close()

    return show
