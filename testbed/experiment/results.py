"""Results: what one run gives back (:class:`RunResult`) and the directory on disk, one per
invocation, with ``manifest.json`` and Parquet tables (:class:`ResultsDir`).

Every file is written atomically (temporary file + rename), so a crash never leaves half a table,
and the manifest is rewritten as the run progresses so a failed run keeps what it measured.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.core.files import atomic_write, atomic_write_text


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in ("multicluster-testbed", "torch", "pydantic", "pandas"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


@dataclass
class RunResult:
    run_id: str
    status: str  # ok | failed | skipped | interrupted
    reason: str = ""
    rows: list[dict] = field(default_factory=list)  # rank-iteration rows
    skips: list[dict] = field(default_factory=list)
    links: list[dict] = field(default_factory=list)
    network: list[dict] = field(default_factory=list)  # the WAN as built, per direction
    ranks: list[dict] = field(default_factory=list)  # where each rank ran
    delayline: list[dict] = field(default_factory=list)
    traces: dict[str, list[dict]] = field(default_factory=dict)  # tcp, queues, flows
    dynamics: dict[str, list[dict]] = field(default_factory=dict)  # events, flows_goodput
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class ResultsDir:
    path: Path

    @classmethod
    def create(cls, root: str | Path, scenario: str) -> ResultsDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{scenario}-{stamp}"
        n = 1
        while path.exists():
            n += 1
            path = Path(root) / f"{scenario}-{stamp}-{n}"
        path.mkdir(parents=True)
        return cls(path)

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def read_manifest(self) -> dict[str, Any]:
        if self.manifest_path.exists():
            return json.loads(self.manifest_path.read_text())
        return {}

    def _save_manifest(self, data: dict[str, Any]) -> None:
        text = json.dumps(data, indent=2, default=str)
        atomic_write_text(self.manifest_path, text)

    def update_manifest(self, **fields: Any) -> None:
        data = self.read_manifest()
        data.update(fields)
        data["finished"] = time.time()
        self._save_manifest(data)

    def write_table(self, name: str, rows: list[dict[str, Any]]) -> Path:
        path = self.path / f"{name}.parquet"
        frame = pd.DataFrame(rows)
        atomic_write(path, lambda p: frame.to_parquet(p, index=False))
        return path
