"""Benchmark: `testbed vm -- true`, boot to result. Median of 3 (the kernel package is cached).

sudo .venv/bin/python -m benchmarks.vm_boot [--write]
"""

from __future__ import annotations

import argparse
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._results import write_section

TESTBED = str(Path(sys.executable).with_name("testbed"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    walls, boots, accel = [], [], "?"
    for _ in range(3):
        t0 = time.monotonic()
        r = subprocess.run(
            [TESTBED, "vm", "--", "true"], capture_output=True, text=True, timeout=300
        )
        walls.append(time.monotonic() - t0)
        if r.returncode != 0:
            raise SystemExit(f"testbed vm failed: {r.stderr}")
        m = re.search(r"command started ([\d.]+) s after QEMU", r.stderr)
        boots.append(float(m.group(1)) if m else float("nan"))
        a = re.search(r"\), (kvm|tcg), ", r.stderr)
        accel = a.group(1) if a else accel
    day = time.strftime("%Y-%m-%d")
    text = (
        "\n".join(
            [
                f"## testbed vm boot to result ({platform.release()} host, {day})\n",
                f"`testbed vm -- true`, Debian's stock kernel from the cache, "
                f"accelerator: {accel}; median of 3.\n",
                "| QEMU start to command | whole `testbed vm -- true` |",
                "|---|---|",
                f"| {statistics.median(boots):.1f} s | {statistics.median(walls):.1f} s |",
            ]
        )
        + "\n"
    )
    print(text)
    if args.write:
        write_section("vm_boot.py", text)


if __name__ == "__main__":
    main()
