"""Report figures with matplotlib, one module per chart family. PURE: draws loaded results.

This package owns what each figure of a report shows: :mod:`~analysis.plots.collectives` (time
vs size, busbw vs rate, speed-up), :mod:`~analysis.plots.congestion` (goodput and time per
congestion control, throughput vs delay) and :mod:`~analysis.plots.traces` (queues, tcp_info),
all drawn with the shared look of :mod:`~analysis.plots.style`. Every ``plot_*`` function takes
a :class:`analysis.loader.Results` (and the :mod:`analysis.tables` table it needs) and returns a
:class:`Plot`, or None when the data for it does not exist. The other figure families
(``analysis.*_plots``) use the same style.
"""

from __future__ import annotations

from analysis.plots import collectives, congestion, traces
from analysis.plots.collectives import plot_busbw_vs_rate, plot_speedup, plot_time_vs_size
from analysis.plots.congestion import plot_congestion, plot_throughput_delay
from analysis.plots.style import STYLE, Plot, mark_event
from analysis.plots.traces import plot_queues, plot_tcp

PLOT_NAMES = collectives.PLOT_NAMES + congestion.PLOT_NAMES + traces.PLOT_NAMES

__all__ = [
    "PLOT_NAMES",
    "STYLE",
    "Plot",
    "mark_event",
    "plot_busbw_vs_rate",
    "plot_congestion",
    "plot_queues",
    "plot_speedup",
    "plot_tcp",
    "plot_throughput_delay",
    "plot_time_vs_size",
]
