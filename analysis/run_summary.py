"""A run's summary rows, computed from what its results directory holds: its rows and its
manifest entry (world size, the model's topology, the CPU verdict). PURE.

The runner's workload kinds call these with the rows they write; :func:`recompute` gives the
same rows back from a loaded results directory (a test holds the two equal), so a summary, and
the prediction in it, can always be reproduced from the directory alone.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from analysis.model import TERMS, Link, Topology, predict_terms, unsupported
from analysis.summary import summary_rows


def topology_from(value: Topology | dict[str, Any] | None) -> Topology | None:
    """The model's topology as the runner kept it (the object, or its JSON in a manifest)."""
    if value is None or isinstance(value, Topology):
        return value
    fields = {f.name for f in dataclasses.fields(Topology)}
    data = {k: v for k, v in value.items() if k in fields}
    data["clusters"] = tuple((c, int(m)) for c, m in data.get("clusters", ()))
    data["links"] = tuple(Link(**link) for link in data.get("links", ()))
    return Topology(**data)


def collectives_summary(
    rows: list[dict], info: dict[str, Any], params: dict[str, Any]
) -> list[dict]:
    """The run's summary rows (:func:`analysis.summary.summarize`: slowest rank per iteration,
    p50/p95, algbw/busbw at p50, the model's prediction), its terms as ``model_<term>`` columns
    (analysis.model.predict_terms), the sweep ``params`` in front and the run's CPU verdict
    behind. Operations that failed (``outcome`` error|timeout) are not timings: left out."""
    rows = [r for r in rows if r.get("outcome", "ok") == "ok" and r.get("iteration", 0) >= 0]
    if not rows:
        return []
    n = info.get("world_size") or len({r["rank"] for r in rows})
    topo = topology_from(info.get("topology"))

    cache: dict[tuple[str, str, int], dict[str, float] | None] = {}

    def split(coll: str, algo: str, size: int) -> dict[str, float] | None:
        """The prediction's terms (analysis.model.predict_terms; they sum to predict), once per
        point: replaying gloo's ring is the costly part."""
        if (coll, algo, size) not in cache:
            if topo is not None and unsupported(coll, algo, topo) is None:
                cache[(coll, algo, size)] = predict_terms(coll, algo, size, topo)
            else:
                cache[(coll, algo, size)] = None
        return cache[(coll, algo, size)]

    def model(coll: str, algo: str, size: int, _ranks: int) -> float | None:
        got = split(coll, algo, size)
        return sum(got.values()) if got else None

    def terms(row: dict) -> dict[str, float | None]:
        got = split(row["collective"], row["algorithm"], int(row["size"]))
        return {f"model_{t}": got[t] if got else None for t in TERMS}

    saturated = bool(info.get("cpu_saturated", False))
    return [
        {**params, **row, **terms(row), "cpu_saturated": saturated}
        for row in summary_rows(rows, ranks=n, predict=model)
    ]


def recompute(manifest_run: dict[str, Any], rows: pd.DataFrame) -> list[dict]:
    """A collectives run's summary rows from its results directory: its collectives.parquet
    rows (``rows``, without the ``results`` column) and its manifest entry."""
    params = dict(manifest_run.get("params") or {})
    drop = ["results", "run_id", "repeat", *params]
    clean = rows.drop(columns=[c for c in drop if c in rows.columns])
    records = [{k: v for k, v in r.items() if not _missing(v)} for r in clean.to_dict("records")]
    return collectives_summary(records, manifest_run, params)


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)
