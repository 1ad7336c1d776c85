"""The plots as matplotlib figures: drawn outside pyplot, shown by a notebook as they are, and
written to the same bytes on every run."""
from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sweep.files import write_all


class NotebookFigure(Figure):
    """A ``Figure`` on the Agg canvas, never registered with pyplot (nothing is left open, no
    backend is switched). IPython shows one as its PNG even where no matplotlib backend was set
    up (no ``%matplotlib inline``, no pyplot)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        FigureCanvasAgg(self)

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png")
        return buf.getvalue()


def figure_files(fig: Figure, path_png, path_svg=None) -> dict:
    """``{path: write(binary file)}`` of ``fig`` as a PNG (and an SVG when ``path_svg`` is
    given). The SVG's ids come from a fixed salt and it carries no date, so that the same
    figure is the same bytes on every run."""
    import matplotlib

    def svg(fh):
        with matplotlib.rc_context({"svg.hashsalt": "servesweep"}):
            fig.savefig(fh, format="svg", metadata={"Date": None})

    files = {Path(path_png): lambda fh: fig.savefig(fh, format="png")}
    if path_svg is not None:
        files[Path(path_svg)] = svg
    return files


def save_figure(fig: Figure, path_png, path_svg=None, also: dict | None = None
                ) -> tuple[str, ...]:
    """Write ``fig`` as a PNG (and an SVG when ``path_svg`` is given, see ``figure_files``)
    with the files of ``also`` (``{path: write(binary file)}``), all or none, creating their
    folders; returns the plots' paths, as strings: ``(png,)`` or ``(png, svg)``."""
    plots = figure_files(fig, path_png, path_svg)
    for path in plots:
        path.parent.mkdir(parents=True, exist_ok=True)
    write_all({**(also or {}), **plots})
    return tuple(map(str, plots))
