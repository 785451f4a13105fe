"""Collectives run inside rank processes: flat and hierarchical algorithms, inputs and checks.

Shaped like nccl-tests: one shared harness (:mod:`~traffic.collectives.harness`, :func:`measure`)
and one small table entry per collective (:mod:`~traffic.collectives.table`) that states its
byte-count semantics, how to fill its inputs (:mod:`~traffic.collectives.inputs`), the exact
expected result and one function per algorithm (:mod:`~traffic.collectives.algorithms`).
Standard library, torch and ``testbed.core`` only: this runs inside the namespaces.
"""

from __future__ import annotations

from traffic.collectives.harness import (
    INJECT_ENV,
    Prepared,
    Result,
    injected_fault,
    measure,
    prepare,
    validate,
)
from traffic.collectives.inputs import (
    DTYPES,
    EXACT_LIMIT,
    Buffers,
    CollectiveError,
    first_mismatch,
    pattern,
    pattern_params,
    reduced_pattern,
)
from traffic.collectives.table import (
    COLLECTIVES,
    Collective,
    count_for,
    element_count,
    note_for,
    skip_reason,
)

__all__ = [
    "COLLECTIVES",
    "DTYPES",
    "EXACT_LIMIT",
    "INJECT_ENV",
    "Buffers",
    "Collective",
    "CollectiveError",
    "Prepared",
    "Result",
    "count_for",
    "element_count",
    "first_mismatch",
    "injected_fault",
    "measure",
    "note_for",
    "pattern",
    "pattern_params",
    "prepare",
    "reduced_pattern",
    "skip_reason",
    "validate",
]
