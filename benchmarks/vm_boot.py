"""Benchmark: boot to command for `testbed vm` and, with `--vng`, for virtme-ng's `vng`.

Both boot the same cached Debian kernel under TCG and run `echo MARK`; the harness times the
launch of the program to the moment the marker reaches it (the common measure), and the whole
run. For `testbed vm` it also reports its own "QEMU start to command". Variants run interleaved
(A, B, A, B, ...) so a shared machine's load hits them alike; medians are printed.

sudo .venv/bin/python -m benchmarks.vm_boot [--rounds 3] [--vng [PATH]] [--write]

`vng` is GPL-2.0: it is only ever run as a separate program (`pip install virtme-ng` into a
throwaway venv and pass its `vng`), never imported.
"""

from __future__ import annotations

import argparse
import atexit
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._results import write_section

TESTBED = str(Path(sys.executable).with_name("testbed"))
MARK = "@@vm-boot-mark"


@dataclass
class Sample:
    to_command: float  # launch → the command's marker seen here
    whole: float  # launch → the program exited
    exit_code: int
    exit_expected: int
    qemu_to_command: float = math.nan  # testbed vm's own report
    seen_output: bool = False
    console_fallback: bool = False  # vng ran the command on the serial console (no udev)
    tmpfiles: float = math.nan  # vng's guest: seconds in systemd-tmpfiles (its kernel clock)


@dataclass
class Variant:
    name: str
    argv: Callable[[int], list[str]]  # exit code the command should return → argv
    samples: list[Sample] = field(default_factory=list)


def timed(argv: list[str], expected: int) -> Sample:
    """Run ``argv``; time the marker line and the end; stdout and stderr merged."""
    # vng runs its helpers (virtme-run, ...) from PATH: its own directory first.
    env = {**os.environ, "PATH": f"{Path(argv[0]).parent}:{os.environ.get('PATH', '')}"}
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    seen, text = math.nan, []
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        text.append(line)
        if math.isnan(seen) and line.rstrip("\r\n").endswith(MARK):
            seen = time.monotonic() - t0
    code = proc.wait(timeout=600)
    whole = time.monotonic() - t0
    out = "".join(text)
    if code != expected:
        print(f"{argv[0]}: exit {code}; last output:\n{out[-600:]}", file=sys.stderr)
    m = re.search(r"command started ([\d.]+) s after QEMU", out)
    return Sample(
        to_command=seen,
        whole=whole,
        exit_code=code,
        exit_expected=expected,
        qemu_to_command=float(m.group(1)) if m else math.nan,
        seen_output=not math.isnan(seen),
        console_fallback="starting script (console fallback)" in out,
        tmpfiles=_guest_span(out, "running systemd-tmpfiles", "basic initialization done"),
    )


def _guest_span(out: str, first: str, last: str) -> float:
    """Seconds between two of virtme-ng-init's messages, by the guest kernel's timestamps."""
    at = {}
    for what in (first, last):
        m = re.search(rf"\[\s*([\d.]+)\] virtme-ng-init: {re.escape(what)}", out)
        at[what] = float(m.group(1)) if m else math.nan
    return at[last] - at[first]


def vng_kernel_tree(kernel) -> Path:
    """A ``boot/`` + ``lib/modules`` tree holding the cached PVH vmlinux, which vng finds its
    modules from (it walks up from the image)."""
    tree = Path(tempfile.mkdtemp(prefix="vm-boot-vng-"))
    atexit.register(shutil.rmtree, tree, ignore_errors=True)  # symlinks only: the cache stays
    (tree / "boot").mkdir()
    (tree / "lib").mkdir()
    (tree / "boot" / f"vmlinux-{kernel.release}").symlink_to(kernel.vmlinux)
    (tree / "lib" / "modules").symlink_to(kernel.modules)
    return tree


def variants(vng: str | None) -> list[Variant]:
    def testbed_vm(code: int) -> list[str]:
        return [TESTBED, "vm", "--", "sh", "-c", f"echo {MARK}; exit {code}"]

    found = [Variant("testbed vm", testbed_vm)]
    if not vng:
        return found
    from testbed import vm  # the kernel cache only; vng itself is a separate program

    kernel = vm.ensure_kernel(None)
    busybox = vm.find_toolbox().busybox
    common = ["--disable-kvm", "--force-9p", "--rwdir", os.getcwd(), "--memory", "2G"]
    common += ["--cpus", "2", "--verbose"]  # --verbose: see the console fallback (see RESULTS)
    if busybox:
        common += ["--busybox", busybox]

    def vng_argv(image: Path) -> Callable[[int], list[str]]:
        return lambda code: [vng, "-r", str(image), *common, "--exec", f"echo {MARK}; exit {code}"]

    found.append(Variant("vng, bzImage (vmlinuz)", vng_argv(kernel.vmlinuz)))
    if kernel.vmlinux:
        image = vng_kernel_tree(kernel) / "boot" / f"vmlinux-{kernel.release}"
        found.append(Variant("vng, PVH vmlinux", vng_argv(image)))
    return found


def median(xs: list[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def med(xs: list[float]) -> str:
    m = median(xs)
    return "n/a" if math.isnan(m) else f"{m:.1f} s"


def verdicts(found: list[Variant]) -> list[str]:
    """The adoption rule for each vng variant: within 1.5x of testbed vm's boot to command, in
    the same rounds (so under the same load), and the exit code right every time."""
    base = median([s.to_command for s in found[0].samples])
    lines = [
        "Rule: adopt vng if its boot to command is within 1.5x of testbed vm's "
        "(measured in the same rounds) and the guest tests pass (they need the exit code).\n"
    ]
    for v in found[1:]:
        took = median([s.to_command for s in v.samples])
        codes = sum(s.exit_code == s.exit_expected for s in v.samples)
        ok = took / base <= 1.5 and codes == len(v.samples)
        lines.append(
            f"- {v.name}: {took / base:.1f}x ({took:.1f} / {base:.1f} s), exit code right "
            f"{codes}/{len(v.samples)}: **{'adopt' if ok else 'not adopted'}**"
        )
    if any(s.console_fallback for v in found for s in v.samples):
        lines.append(
            "\nvng's init found no /dev/virtio-ports/virtme.* (udev makes them; this host has no "
            "udev), so it ran the command on the serial console: the output appears only with "
            "`--verbose`, among the kernel's messages, and vng's exit status is not the command's."
        )
    return lines


def table(found: list[Variant], rounds: int) -> str:
    load = os.getloadavg()[0]
    day = time.strftime("%Y-%m-%d")
    lines = [
        f"## testbed vm boot to result ({platform.release()} host, {day})\n",
        "`echo MARK; exit N` in a guest booted from Debian's stock kernel in the cache, TCG; "
        f"variants interleaved, {rounds} rounds, medians; load average at the end "
        f"{load:.1f} on {os.cpu_count()} CPUs (a machine shared with other jobs).\n",
        "| variant | launch to command | QEMU start to command | whole run "
        "| exit code right | command output seen | systemd-tmpfiles (guest clock) |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in found:
        ok = sum(s.exit_code == s.exit_expected for s in v.samples)
        shown = sum(s.seen_output for s in v.samples)
        lines.append(
            f"| {v.name} | {med([s.to_command for s in v.samples])} "
            f"| {med([s.qemu_to_command for s in v.samples])} "
            f"| {med([s.whole for s in v.samples])} | {ok}/{len(v.samples)} "
            f"| {shown}/{len(v.samples)} | {med([s.tmpfiles for s in v.samples])} |"
        )
    if len(found) > 1:
        lines += ["", *verdicts(found)]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--vng",
        nargs="?",
        const="vng",
        help="also measure virtme-ng's vng (this program, default `vng` on PATH)",
    )
    p.add_argument("--write", action="store_true", help="update benchmarks/RESULTS.md")
    args = p.parse_args()
    vng = shutil.which(args.vng) if args.vng else None
    if args.vng and not vng:
        raise SystemExit(f"{args.vng}: not found (pip install virtme-ng into a throwaway venv)")
    found = variants(vng)
    for r in range(args.rounds):
        for i, v in enumerate(found):
            code = 3 * (r % 2) + i  # 0 and nonzero codes both checked
            s = timed(v.argv(code), code)
            v.samples.append(s)
            print(
                f"round {r + 1} {v.name}: command after {s.to_command:.1f} s, whole "
                f"{s.whole:.1f} s, exit {s.exit_code} (expected {code})",
                file=sys.stderr,
                flush=True,
            )
    text = table(found, args.rounds)
    print(text)
    if args.write:
        write_section("vm_boot.py", text)


if __name__ == "__main__":
    main()
