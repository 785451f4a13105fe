"""Results -> DataFrames, cost models, comparisons, plots and reports. PURE: never imports
``testbed``.

``analysis.load(path)`` loads one results directory, a directory of them, or several paths
(:mod:`analysis.loader`); ``analysis.compare(base, new, tolerance)`` matches two loaded sets
(:mod:`analysis.compare`); ``analysis.write_report(results, out)`` writes report.html, report.md,
PNGs and CSVs (:mod:`analysis.report`, imported on first use because it loads matplotlib).
Tables: :mod:`analysis.tables`; figures: :mod:`analysis.plots`; α-β model: :mod:`analysis.model`;
nccl-tests metrics: :mod:`analysis.metrics`; pcap flows: :mod:`analysis.flows`; a changing WAN's
fault verdicts, RTO-series predictions and trace replay: :mod:`analysis.faults`
(``analysis.faults.analyse(results)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from analysis.compare import Comparison, compare
from analysis.loader import Results, ResultsError, load

if TYPE_CHECKING:  # imported on first use below (it loads matplotlib)
    from analysis.report import write_report

__all__ = ["Comparison", "Results", "ResultsError", "compare", "load", "write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from analysis.report import write_report

        return write_report
    raise AttributeError(f"module 'analysis' has no attribute {name!r}")
