"""The one quantile of the project: linear interpolation between closest ranks.

This is numpy's and pandas' default (``numpy.quantile(..., method="linear")``,
``Series.quantile``) and ``statistics.quantiles(..., method="inclusive")``, so a p50/p95/p99 means
the same whether the runner, the plugin, the self-check or a pandas report computed it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def quantile(values: Iterable[float], q: float) -> float:
    """The ``q``-quantile (0 <= q <= 1) of a non-empty collection."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not within [0, 1]")
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
