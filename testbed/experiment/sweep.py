"""The sweep (:class:`Experiment`): every point x repeat of a scenario is one run
(:func:`testbed.experiment.execute.execute`) into one results directory, new or resumed. A run's
rows go to the tables, its summary rows (the workload kind's, with the run's fault, DCQCN and
bulk metrics) and its status to the manifest; the scenario's expectations are checked against
the summaries. Tables are rewritten after every run (atomically), so an interrupted sweep keeps
what it measured and ``--resume`` skips the runs whose status is final. The results layout:
docs/results.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.model import Topology
from analysis.upgrade import upgrade
from testbed.config.expect import Check, check
from testbed.config.sweep import RunSpec
from testbed.core.errors import TestbedError
from testbed.core.results import DYNAMICS_TABLES, FORMAT_VERSION, TRACE_TABLES
from testbed.experiment.execute import RunInterrupted, execute
from testbed.experiment.ranks import require_torch
from testbed.experiment.results import ResultsDir, RunResult, versions
from testbed.experiment.run_metrics import metrics_of
from testbed.experiment.workloads import KINDS, RunRows, kind_of

FINAL = ("ok", "failed", "skipped")


class Experiment:
    """A sweep being run into one results directory (new, or resumed)."""

    def __init__(self, runs: list[RunSpec], source: str, out: str | Path, resume: bool) -> None:
        base = Path(source).parent if source else Path.cwd()
        for spec in runs:  # what the workload names is there, before a network is built
            if (workload := spec.scenario.rank_workload) is not None:
                kind_of(workload).check(spec.scenario, base, source or "<scenario>")
        require_torch()
        self.runs = runs
        self.source = source
        # the Ray cluster of the machines a placed scenario spans (testbed run --ray)
        self.ray_address: str | None = None
        if resume:
            self.results = ResultsDir(Path(out))
            if not self.results.manifest_path.exists():
                raise TestbedError(f"--resume {out}: no manifest.json there")
        else:
            self.results = ResultsDir.create(out, runs[0].scenario.name)
        self.manifest = self.results.read_manifest()
        self.manifest.setdefault("runs", {})
        self.manifest.update(
            {
                "scenario_file": source,
                "scenario": runs[0].scenario.model_dump(mode="json"),
                "kernel": os.uname().release,
                "versions": versions(),
                "started": self.manifest.get("started", time.time()),
            }
        )
        self.tables: dict[str, list[dict]] = {
            name: self._load_table(name)
            for name in (
                *dict.fromkeys(k.rows_table for k in KINDS.values()),
                "links",
                "network",
                "ranks",
                "delayline",
                *TRACE_TABLES,
                *DYNAMICS_TABLES,
            )
        }
        if resume:  # a directory of an older format: its summaries and network as they are now
            network = pd.DataFrame(self.tables["network"])
            self.manifest, upgraded = upgrade(self.manifest, {"network": network})
            self.tables["network"] = upgraded["network"].to_dict("records")
        self.manifest["format_version"] = FORMAT_VERSION
        self.summaries: list[dict] = list(self.manifest.get("summary", []))

    def _load_table(self, name: str) -> list[dict]:
        path = self.results.path / f"{name}.parquet"
        if path.exists():
            return pd.read_parquet(path).to_dict("records")
        return []

    def done(self, spec: RunSpec) -> bool:
        return self.manifest["runs"].get(spec.run_id, {}).get("status") in FINAL

    def record(self, spec: RunSpec, result: RunResult) -> list[dict]:
        params = {k: _scalar(v) for k, v in spec.params.items()}
        for table in self.tables.values():
            table[:] = [r for r in table if r.get("run_id") != spec.run_id]
        workload = spec.scenario.rank_workload
        kind = kind_of(workload) if workload is not None else None
        if kind is not None:
            self.tables[kind.rows_table] += [
                {"run_id": spec.run_id, "repeat": spec.repeat, **params, **row}
                for row in result.rows
            ]
        self.tables["links"] += [{**params, **row} for row in result.links]
        self.tables["network"] += [{**params, **row} for row in result.network]
        self.tables["ranks"] += [{**params, **row} for row in result.ranks]
        self.tables["delayline"] += [{**params, **row} for row in result.delayline]
        for name in TRACE_TABLES:
            self.tables[name] += [{**params, **row} for row in result.traces.get(name, [])]
        for name in DYNAMICS_TABLES:
            self.tables[name] += [{**params, **row} for row in result.dynamics.get(name, [])]
        summary = (
            kind.summarize(RunRows(result.rows, result.info, params, workload, result.traces))
            if kind is not None
            else []
        )
        for s in summary:
            s["kind"] = kind.name if kind is not None else "traffic"
        faults = metrics_of(spec, result)
        if faults and not summary:  # every operation failed: the fault metrics still count
            summary = [{**params, "kind": "traffic"}]
        for s in summary:
            s.update(run_id=spec.run_id, repeat=spec.repeat, **faults)
        self.summaries = [s for s in self.summaries if s.get("run_id") != spec.run_id] + summary
        if kind is not None:
            kind.finish(self.summaries, self.tables[kind.rows_table], list(spec.params))
        info = dict(result.info)
        if isinstance(info.get("topology"), Topology):  # the model's input, kept with the run
            info["topology"] = asdict(info["topology"])
        self.manifest["runs"][spec.run_id] = {
            "params": params,
            "repeat": spec.repeat,
            "status": result.status,
            "reason": result.reason,
            "skipped_combinations": result.skips,
            "resolved": spec.scenario.model_dump(mode="json"),
            # every cluster's TCP settings, its override applied (what the analysis shows)
            "tcp": {
                c: spec.scenario.cluster_tcp(c).model_dump(mode="json")
                for c in spec.scenario.clusters
            },
            **info,
        }
        self.manifest["summary"] = self.summaries
        self.flush()
        return summary

    def flush(self) -> None:
        for name, rows in self.tables.items():
            if rows:
                self.results.write_table(name, rows)
        statuses = [r["status"] for r in self.manifest["runs"].values()]
        if statuses and all(s == "skipped" for s in statuses):
            # Nothing was measured: that is not a success a CI job should accept.
            self.manifest["status"] = "skipped"
        elif statuses and all(s in ("ok", "skipped") for s in statuses):
            self.manifest["status"] = "ok"
        else:
            self.manifest["status"] = "failed"
        self.manifest["finished"] = time.time()
        self.results.update_manifest(**self.manifest)

    def check_expectations(self) -> list[Check]:
        """The scenario's ``expect`` entries against every summary row; kept in the manifest."""
        expectations = self.runs[0].scenario.expect
        if not expectations:
            return []
        runs = self.manifest["runs"]
        checks = check(
            list(expectations),
            self.summaries,
            {rid: r.get("resolved") or {} for rid, r in runs.items()},
            list(self.runs[0].params),
            skipped_runs=sum(r["status"] == "skipped" for r in runs.values()),
        )
        self.manifest["expectations"] = [asdict(c) for c in checks]
        self.results.update_manifest(**self.manifest)
        return checks

    def run(
        self,
        selfcheck_seconds: float = 1.0,
        on_start: Callable[[RunSpec], None] | None = None,
        on_done: Callable[[RunSpec, RunResult], None] | None = None,
    ) -> bool:
        """Run every pending run; True when all finished ok (or skipped). Ctrl-C propagates
        after the interrupted run is recorded."""
        for spec in self.runs:
            if self.done(spec):
                continue
            if on_start:
                on_start(spec)
            try:
                result = execute(
                    spec,
                    self.results.path / "runs" / spec.run_id,
                    selfcheck_seconds,
                    source=Path(self.source) if self.source else None,
                    ray_address=self.ray_address,
                )
            except RunInterrupted as stop:
                self.record(spec, stop.result)
                raise KeyboardInterrupt from None
            self.record(spec, result)
            if on_done:
                on_done(spec, result)
        return self.manifest["status"] == "ok"


def _scalar(value: Any) -> Any:
    """Sweep values become table columns: lists and mappings as compact text."""
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"))
    return value
