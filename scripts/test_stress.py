#!/usr/bin/env python3
"""The flake hunt: run the ``timing``-marked tests N times beside a one-core background load and
tabulate each test's outcomes (``make test-stress``).

The load is Debian's ``stress-ng --cpu 1`` (scripts/setup.sh installs it), started here and ended
by its recorded pid, on Ctrl-C too (its own ``--timeout`` ends it should this script be killed).
Each run writes JUnit XML; a test that failed twice on a saturated host is an xfail whose reason
starts with "host saturated" (tests/timing.py) and is counted apart from failures. ``outcomes``
and ``table`` are pure (tests/unit/test_stress_table.py). Exit 1 when any test failed.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARGS = ["-m", "timing", "tests/live", "tests/acceptance"]
HOST_SATURATED = "host saturated"
COLUMNS = ("passed", "failed", "xfail_host", "reran", "skipped")


def node_id(classname: str, name: str) -> str:
    """pytest's node id from JUnit's classname (``tests.live.test_x`` or ``...test_x.TestY``)."""
    parts = classname.split(".")
    cls = [parts.pop()] if parts and parts[-1][:1].isupper() else []
    return "::".join(["/".join(parts) + ".py", *cls, name])


def outcomes(junit_xml: str) -> list[tuple[str, str, bool]]:
    """(test id, outcome, reran) of each test case in one run's JUnit XML; outcome is passed,
    failed (a failure or an error), xfail_host (failed twice on a saturated host) or skipped
    (a skip or another xfail); reran: the timing plugin ran it a second time."""
    out = []
    for case in ET.fromstring(junit_xml).iter("testcase"):
        tid = node_id(case.get("classname", ""), case.get("name", ""))
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif skipped is not None:
            host = skipped.get("type") == "pytest.xfail" and skipped.get("message", "").startswith(
                HOST_SATURATED
            )
            outcome = "xfail_host" if host else "skipped"
        else:
            outcome = "passed"
        reran = any(
            p.get("name") == "timing_attempts" and p.get("value") != "1"
            for p in case.iter("property")
        )
        out.append((tid, outcome, reran))
    return out


def table(runs: list[list[tuple[str, str, bool]]]) -> tuple[str, bool]:
    """The table over all runs (worst failure rate first) and whether any test failed."""
    counts: dict[str, Counter[str]] = {}
    for run in runs:
        for tid, outcome, reran in run:
            c = counts.setdefault(tid, Counter())
            c["runs"] += 1
            c[outcome] += 1
            c["reran"] += reran

    def rate(c: Counter[str]) -> float:
        return c["failed"] / c["runs"]

    rows = sorted(counts.items(), key=lambda kv: (-rate(kv[1]), kv[0]))
    width = max([len("test"), *(len(t) for t in counts)])
    head = ("runs", "passed", "failed", "xfail(host saturated)", "reran", "skipped", "fail rate")
    lines = [f"{'test':<{width}}  " + "  ".join(head)]
    for tid, c in rows:
        cells = [c["runs"], *(c[k] for k in COLUMNS)]
        nums = "  ".join(f"{v:>{len(h)}}" for v, h in zip(cells, head, strict=False))
        lines.append(f"{tid:<{width}}  {nums}  {rate(c):>{len(head[-1])}.0%}")
    return "\n".join(lines), any(c["failed"] for c in counts.values())


def start_load(cpus: int, seconds: int) -> subprocess.Popen[bytes]:
    exe = shutil.which("stress-ng")
    if exe is None:
        sys.exit("test-stress: stress-ng is missing; scripts/setup.sh installs it")
    # --timeout: the load ends by itself even if this script is killed before it can end it
    argv = [exe, "--cpu", str(cpus), "--timeout", f"{seconds}s", "--quiet"]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


def stop_load(proc: subprocess.Popen[bytes]) -> None:
    """End the load by its recorded pid (stress-ng's parent ends its workers on SIGTERM)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--load-cpus", type=int, default=1, help="stress-ng --cpu N (default 1)")
    ap.add_argument("--out", type=Path, help="where the JUnit XML goes (default results/)")
    ap.add_argument("pytest_args", nargs="*", help=f"default: {' '.join(DEFAULT_ARGS)}")
    args = ap.parse_args(argv)
    pytest_args = args.pytest_args or DEFAULT_ARGS
    if args.pytest_args and "-m" not in pytest_args:
        pytest_args = ["-m", "timing", *pytest_args]
    out = args.out or ROOT / "results" / "test-stress" / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    load = start_load(args.load_cpus, seconds=args.runs * 3600)
    print(f"test-stress: stress-ng --cpu {args.load_cpus} (pid {load.pid}); XML in {out}")
    runs = []
    interrupted = False
    try:
        for i in range(1, args.runs + 1):
            xml = out / f"run-{i}.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rx"]
            print(f"test-stress: run {i}/{args.runs}: pytest {' '.join(pytest_args)}", flush=True)
            subprocess.run([*cmd, f"--junitxml={xml}", *pytest_args], cwd=ROOT, check=False)
            if not xml.exists():
                print(f"test-stress: run {i} wrote no JUnit XML", file=sys.stderr)
                return 1
            runs.append(outcomes(xml.read_text()))
    except KeyboardInterrupt:
        print(f"test-stress: interrupted after {len(runs)} complete run(s)", file=sys.stderr)
        interrupted = True
    finally:
        stop_load(load)
    text, failed = table(runs)
    print(text)
    return 130 if interrupted else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
