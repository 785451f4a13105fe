"""The report figures' shared look: the :class:`Plot` a figure function returns, the style, panels,
colours, legends and axis labels. PURE (matplotlib without pyplot; of testbed only its core).

Every ``plot_*`` function of :mod:`analysis.plots` and of the other ``*_plots`` modules draws under
:data:`STYLE` with these helpers, so all figures share titles, units on every axis, legends that
move beside the axes once they would hide the data, and log scales where values span decades.
Figures are made without pyplot (no global state, no display needed: PNGs are rendered by Agg).
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatterSciNotation
from matplotlib.typing import LineStyleType, RcKeyType

from testbed.core.units import format_duration, format_size

STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 200,  # twice the figure's: sharp on high-density screens and when zoomed
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 7,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES: tuple[LineStyleType, ...] = ("-", "--", ":", "-.")
MAX_PANELS = 12  # beyond this a figure is unreadable; the caption says what was left out


@dataclass
class Plot:
    """One figure: ``name`` (file stem), ``title``, ``caption`` (what it shows, how to read it)
    and ``stamp``: what it was measured on (scenario, WAN, backend, date), drawn under the title
    so that the image alone says where its numbers come from."""

    name: str
    title: str
    caption: str
    figure: Figure
    stamp: str = ""

    def full_title(self) -> str:
        return f"{self.title}: {self.stamp}" if self.stamp else self.title

    def png(self) -> bytes:
        """The figure as a PNG at twice its size in points, the title and stamp in its
        metadata (``Title``) as well."""
        with mpl.rc_context(STYLE):
            if self.stamp:
                heading = self.figure.get_suptitle() or self.title
                first = heading.split("\n", 1)[0]
                size = STYLE["axes.titlesize"]
                # as many characters as the figure is wide (a character ~0.6 of the font size)
                width = max(40, int(self.figure.get_figwidth() * 72 / (size * 0.6)))
                stamp = "\n".join(textwrap.wrap(self.stamp, width, break_on_hyphens=False))
                self.figure.suptitle(f"{first}\n{stamp}", fontsize=size)
            buf = io.BytesIO()
            self.figure.savefig(buf, format="png", metadata={"Title": self.full_title()})
        return buf.getvalue()


@contextmanager
def _style() -> Iterator[None]:
    with mpl.rc_context(STYLE):
        yield


def _figure(panels: int, ncols: int, width: float = 4.6, height: float = 3.4) -> tuple[Figure, Any]:
    ncols = max(1, min(ncols, panels))
    nrows = math.ceil(panels / ncols)
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


def _colours(keys: list[Any]) -> dict[Any, Any]:
    cmap = mpl.colormaps["tab10"]
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


def _size_text(n: float, _pos: Any = None) -> str:
    return format_size(n, "g")


def _time_text(seconds: float, _pos: Any = None) -> str:
    return format_duration(seconds, "g")


class _PlainLogFormatter(LogFormatterSciNotation):
    """Log-axis labels as plain text ('60 ms', '6') instead of 6×10^-2, on exactly the ticks
    matplotlib's own log formatter would label (it decides which minor ticks get one)."""

    def __init__(self, fmt: Any) -> None:
        super().__init__(labelOnlyBase=False)
        self._fmt = fmt

    def __call__(self, x: float, pos: Any = None) -> str:
        return self._fmt(x) if super().__call__(x, pos) else ""


def _plain_log(axis: Any, fmt: Any = None) -> None:
    fmt = fmt or (lambda v, _p=None: f"{v:g}")
    axis.set_major_formatter(_PlainLogFormatter(fmt))
    axis.set_minor_formatter(_PlainLogFormatter(fmt))


def mark_event(ax: Any, x: float, text: str, colour: str, y: float = 1.0) -> None:
    """A vertical line at ``x`` labelled ``text`` along it (a schedule step, a fault)."""
    ax.axvline(x, color=colour, ls="--", lw=0.8, alpha=0.7)
    ax.annotate(
        text,
        (x, y),
        xycoords=("data", "axes fraction"),
        rotation=90,
        va="top",
        ha="right",
        fontsize=6,
        color=colour,
    )


def _legend(ax: Any, **kw: Any) -> None:
    """A legend inside the axes while it is short, beside them once it would hide the data."""
    handles, _ = ax.get_legend_handles_labels()
    count = len(kw.get("handles") or handles)
    if count > 6:
        kw.update(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    ax.legend(**kw)


def _spans_decade(values: pd.Series | list[float]) -> bool:
    vals = [v for v in values if v is not None and not pd.isna(v) and v > 0]
    return bool(vals) and max(vals) / min(vals) >= 10
