"""``testbed vm``'s options and verb, shared by the CLI and ``python -m testbed.vm``."""

from __future__ import annotations

import argparse
import re
import sys

from testbed.core.errors import TestbedError
from testbed.vm.common import DEFAULT_CPUS, DEFAULT_MEMORY_MIB, DEFAULT_TIMEOUT_S, VmError
from testbed.vm.runner import VmOptions, run


def parse_memory(text: str) -> int:
    """``2048``, ``2048M``, ``2G`` → MiB."""
    m = re.fullmatch(r"(\d+)\s*([MmGg]i?[Bb]?)?", text.strip())
    if not m:
        raise VmError(f"--memory {text!r}: give MiB (2048) or a size with M or G (2G)")
    mib = int(m.group(1)) * (1024 if m.group(2) and m.group(2)[0] in "Gg" else 1)
    if mib < 256:
        raise VmError(f"--memory {text}: the guest needs at least 256 MiB")
    return mib


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``testbed vm`` (shared by the CLI and ``python -m testbed.vm``)."""
    p.add_argument(
        "--kernel",
        metavar="PACKAGE",
        help="kernel package (default: linux-image-amd64, or linux-image-generic on Ubuntu), "
        "a concrete one like linux-image-6.1.0-50-amd64, or a .deb file",
    )
    p.add_argument(
        "--memory",
        default=str(DEFAULT_MEMORY_MIB),
        help="guest memory, MiB or 2G (default: %(default)s MiB)",
    )
    p.add_argument(
        "--cpus", type=int, default=DEFAULT_CPUS, help="guest CPUs (default: %(default)s)"
    )
    p.add_argument(
        "--share",
        action="append",
        default=[],
        metavar="DIR",
        help="also share DIR read-write (the current directory always is)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="pass an environment variable to the command",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"stop the guest after this many seconds (default {DEFAULT_TIMEOUT_S:.0f})",
    )
    p.add_argument(
        "--accel",
        choices=("auto", "kvm", "tcg"),
        default="auto",
        help="auto: KVM if a guest really boots on it (tried once, remembered), else TCG "
        "(default: %(default)s)",
    )
    p.add_argument("--verbose", action="store_true", help="show the guest's boot messages")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def cmd(args: argparse.Namespace) -> int:
    """``testbed vm``: run the command in a guest, return its exit code."""
    argv = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if args.cpus < 1:
        raise VmError("--cpus must be at least 1")
    opts = VmOptions(
        kernel=args.kernel,
        memory_mib=parse_memory(args.memory),
        cpus=args.cpus,
        timeout=args.timeout,
        shares=tuple(args.share),
        env=tuple(args.env),
        accel=args.accel,
        verbose=args.verbose,
    )
    result = run(argv, opts)
    print(
        f"vm: exit code {result.exit_code}; the command started {result.boot_s:.1f} s after "
        f"QEMU, the guest was gone after {result.total_s:.1f} s ({result.accel})",
        file=sys.stderr,
    )
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m testbed.vm",
        description="run one command inside a throwaway QEMU guest booted with a stock kernel",
    )
    add_arguments(p)
    args = p.parse_args(argv)
    try:
        return cmd(args)
    except TestbedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; the guest is stopped", file=sys.stderr)
        return 130
