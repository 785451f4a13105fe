"""testbed compare for CI: refuses a results set compared with itself (exit 2, says why), warns
when the two sides' resolved network, backend or CPU flag differ, writes its verdict to a file
and prints JSON with --json (docs/json.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from analysis.compare import compare, comparison_json, differences
from analysis.loader import load
from testbed.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "results"
COLLECTIVES = FIXTURES / "collectives"


def _copy(dst: Path, edit) -> Path:
    shutil.copytree(COLLECTIVES, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    edit(manifest)
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _rerun(manifest: dict) -> None:
    manifest["started"] += 3600  # a later run of the same scenario, the same numbers


def test_the_same_directory_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(COLLECTIVES), str(COLLECTIVES / ".." / "collectives")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "same directory" in err


def test_an_identical_copy_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(COLLECTIVES, tmp_path / "copy")
    assert main(["compare", str(COLLECTIVES), str(tmp_path / "copy")]) == 2
    assert "identical results" in capsys.readouterr().err
    assert not (tmp_path / "copy" / "compare.txt").exists()


def _changed(manifest: dict) -> None:
    _rerun(manifest)
    run = manifest["runs"]["p000-r0"]
    run["backend"] = "kernel"
    run["cpu_saturated"] = False
    manifest["runs"]["p001-r0"]["resolved"]["wan"][0]["delay"] = 0.04


def test_differences_name_network_backend_and_cpu_flag(tmp_path: Path) -> None:
    other = _copy(tmp_path / "other", _changed)
    warnings = differences(load(COLLECTIVES), load(other))
    assert any(
        w.startswith("network differs at wan[0].rate=100mbit east->west: delay 5 ms -> 40 ms")
        for w in warnings
    ), warnings
    assert "backend differs at wan[0].rate=50mbit: BASE userspace, NEW kernel" in warnings
    assert any(w.startswith("CPU flag differs at wan[0].rate=50mbit: BASE's run") for w in warnings)
    same = _copy(tmp_path / "same", _rerun)
    assert differences(load(COLLECTIVES), load(same)) == []


def test_the_verb_warns_and_writes_its_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = _copy(tmp_path / "other", _changed)
    assert main(["compare", str(COLLECTIVES), str(other)]) == 0
    out = capsys.readouterr().out
    assert "warning: backend differs at wan[0].rate=50mbit" in out
    assert "OK: 16 matched (16 same)" in out
    verdict = (other / "compare.txt").read_text().splitlines()
    assert verdict[0].startswith("OK: 16 matched (16 same)")
    assert any(line.startswith("warning: network differs") for line in verdict)
    assert f"verdict: {other / 'compare.txt'}" in out


def test_json_shape_and_a_json_verdict_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = _copy(tmp_path / "same", _rerun)
    target = tmp_path / "ci" / "verdict.json"
    code = main(["compare", str(COLLECTIVES), str(same), "--json", "--verdict", str(target)])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)  # stdout is the JSON alone
    assert doc == json.loads(target.read_text())
    assert doc["version"] == 1 and doc["verdict"] == "ok" and doc["kind"] == "collectives"
    assert doc["matched"] == 16 and doc["counts"]["same"] == 16 and doc["counts"]["regressed"] == 0
    assert doc["params"] == ["wan[0].rate"] and doc["warnings"] == []
    row = doc["rows"][0]
    assert set(row) == {"wan[0].rate", "collective", "algorithm", "size", "base_time_p50",
                        "new_time_p50", "ratio", "base_busbw", "new_busbw", "busbw_ratio",
                        "verdict"}  # fmt: skip
    assert doc["base"] == str(COLLECTIVES) and doc["new"] == str(same)
    cmp = compare(load(COLLECTIVES), load(same))
    assert comparison_json(cmp)["rows"] == doc["rows"]
