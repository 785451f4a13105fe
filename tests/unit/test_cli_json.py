"""--json on ls and doctor: one JSON object on stdout, the shape docs/json.md documents."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from testbed.cli import main
from testbed.net import registry


def test_ls_json_lists_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(registry, "STATE_DIR", tmp_path)
    assert main(["ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"version": 1, "testbeds": []}
    rec = registry.Record(
        name="h7-json", prefix="mctbh7", slot=7, owner_pid=os.getpid(),
        owner_start=registry.process_start(os.getpid()), phase="up",
        created=time.time() - 5, backend="userspace",
        hosts={"east-h0": "10.0.0.1", "east-gw": "10.0.0.254"},
    )  # fmt: skip
    rec.save()
    assert main(["ls", "--json"]) == 0
    (got,) = json.loads(capsys.readouterr().out)["testbeds"]
    assert got["name"] == "h7-json" and got["prefix"] == "mctbh7"
    assert got["state"] == "up" and got["live"] is True and got["persistent"] is False
    assert got["hosts"] == {"east-h0": "10.0.0.1"}  # gateways are not hosts
    assert got["owner_pid"] == os.getpid() and 4 < got["age_s"] < 60
    assert set(got) == {"name", "prefix", "state", "live", "engine", "backend", "hosts",
                        "persistent", "owner_pid", "age_s", "scenario"}  # fmt: skip


def test_doctor_json_is_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "scenarios/quickstart.yaml", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == 1 and doc["kernel"] == os.uname().release
    assert set(doc["congestion"]) == {"reno", "cubic", "bbr", "dctcp"}
    assert all(isinstance(v, bool) for v in doc["qdiscs"].values()) and "htb" in doc["qdiscs"]
    backend = doc["backend"]
    assert backend["scenario"] == "scenarios/quickstart.yaml" and backend["requested"] == "auto"
    assert backend["reason"] and (backend["chosen"] is not None or not doc["nfqueue"])
    assert set(doc["engines"]) == {"native", "mininet"}
    assert set(doc["routing"]["bgp"]) >= {"available"}
    assert isinstance(doc["notes"], list) and isinstance(doc["missing_for_vm"], list)
