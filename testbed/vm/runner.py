"""One guest run, start to end: check the host, prepare kernel, initramfs and job, choose the
accelerator, run QEMU with its console streamed here, and return the command's exit code.
QEMU is always gone when ``run`` returns or raises (normal end, error, timeout, Ctrl-C,
SIGTERM; ``kill -9`` of this process too, through PR_SET_PDEATHSIG)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.vm import qemu
from testbed.vm.common import (
    DEFAULT_BOOT_TIMEOUT_S,
    DEFAULT_CPUS,
    DEFAULT_MEMORY_MIB,
    DEFAULT_TIMEOUT_S,
    QEMU,
    VmError,
    which,
)
from testbed.vm.console import Console
from testbed.vm.initramfs import ensure_initramfs, find_toolbox
from testbed.vm.job import GuestJob, Share, guest_argv, guest_env, stage2_script
from testbed.vm.kernel import Kernel, cache_dir, ensure_kernel


@dataclass(frozen=True)
class VmOptions:
    """How to run the guest (``testbed vm``'s options)."""

    kernel: str | None = None  # package, concrete package or .deb; None: the distribution's
    memory_mib: int = DEFAULT_MEMORY_MIB
    cpus: int = DEFAULT_CPUS
    timeout: float = DEFAULT_TIMEOUT_S
    boot_timeout: float = DEFAULT_BOOT_TIMEOUT_S
    shares: tuple[str, ...] = ()  # read-write besides the current directory
    env: tuple[str, ...] = ()  # NAME=VALUE or NAME
    accel: str = "auto"  # auto | kvm | tcg
    verbose: bool = False  # show the boot messages


@dataclass
class GuestRun:
    """What a run came to: the command's exit code, times, accelerator and boot log."""

    exit_code: int
    boot_s: float  # QEMU started → the command started
    total_s: float  # QEMU started → QEMU exited
    accel: str
    kernel: Kernel | None = None
    boot_log: str = ""
    notes: list[str] = field(default_factory=list)


def _check_host() -> str:
    """QEMU's path, once this machine can run the guest at all."""
    if platform.machine() not in ("x86_64", "AMD64"):
        raise VmError(f"testbed vm boots x86_64 guests; this machine is {platform.machine()}")
    found = which(QEMU)
    if not found:
        raise VmError(f"{QEMU} is not installed (Debian/Ubuntu package qemu-system-x86)")
    if str(cache_dir()).startswith("/run/"):
        raise VmError(f"the VM cache {cache_dir()} must not be under /run (the guest's own /run)")
    return found


def _rw_dirs(cwd: str, shares: Sequence[str]) -> list[str]:
    """The current directory and each ``--share``, resolved, each once."""
    rw: list[str] = []
    for d in [cwd, *shares]:
        p = os.path.realpath(d)
        if not os.path.isdir(p):
            raise VmError(f"--share {d}: not a directory")
        if p == "/":
            raise VmError("refusing to share / read-write with the guest: run from a project dir")
        if p not in rw:
            rw.append(p)
    return rw


def _choose_accel(accel: str, k: Kernel, initramfs: Path, qemu_bin: str, log) -> tuple[str, list]:
    notes: list[str] = []
    if accel == "auto":
        ok, why = qemu.kvm_status(k, initramfs, qemu_bin)
        accel = "kvm" if ok else "tcg"
        notes.append(why)
    if accel == "tcg":
        log(
            f"vm: no KVM ({notes[-1] if notes else 'tcg requested'}): software emulation (TCG), "
            "10-30x slower than this machine: timings measured in the guest are not its own"
        )
    return accel, notes


def _job(
    command: list[str], cwd: str, env: list, shares: tuple[Share, ...], k: Kernel, out
) -> GuestJob:
    """This run's job; its console markers carry a random token, so no output can fake them."""
    term = out.isatty() if hasattr(out, "isatty") else False
    size = shutil.get_terminal_size((100, 40))
    return GuestJob(
        argv=tuple(command),
        cwd=cwd,
        env=tuple(env),
        shares=shares,
        modules=str(k.modules),
        modprobe=which("modprobe") or "/sbin/modprobe",
        token=secrets.token_hex(8),
        hostname=socket.gethostname() or "testbed-vm",
        tty=term,
        columns=size.columns,
        lines=size.lines,
    )


def _stream(proc: subprocess.Popen, console: Console, opts: VmOptions, t0: float) -> bytes:
    """Feed QEMU's stdout to the console until QEMU closes both pipes; QEMU's stderr."""
    qemu_err = bytearray()
    assert proc.stdout is not None and proc.stderr is not None  # started with both piped
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, "out")
    sel.register(proc.stderr, selectors.EVENT_READ, "err")
    open_streams = 2
    while open_streams:
        now = time.monotonic()
        if console.phase == "boot" and now - t0 > opts.boot_timeout:
            raise VmError(
                f"the guest did not start the command within {opts.boot_timeout:.0f} s"
                + console.tail()
            )
        if now - t0 > opts.timeout:
            raise VmError(f"timed out after {opts.timeout:.0f} s (--timeout); the guest is stopped")
        for key, _ in sel.select(timeout=1.0):
            data = os.read(key.fd, 65536)
            if not data:
                sel.unregister(key.fileobj)
                open_streams -= 1
            elif key.data == "out":
                console.feed(data)
            else:
                qemu_err += data
    console.close()
    return bytes(qemu_err)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@dataclass
class _Ended:
    """How QEMU ended: its exit status and stderr, when it started and how long it ran, and
    what stage 2 wrote to the job's ``exit`` file (empty if nothing)."""

    status: int | None
    qemu_err: bytes
    started: float
    total: float
    exit_file: str = ""


def _boot(cfg: qemu.VmConfig, qemu_bin: str, console: Console, opts: VmOptions) -> _Ended:
    """Run QEMU to its end, its console fed to ``console``; QEMU is gone when this returns."""
    proc = None
    old_term = None
    t0 = time.monotonic()
    try:
        with contextlib.suppress(ValueError):  # not the main thread: Ctrl-C only
            old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        proc = qemu.start(cfg, qemu_bin)
        qemu_err = _stream(proc, console, opts, t0)
        proc.wait(timeout=30)
        return _Ended(proc.returncode, qemu_err, t0, time.monotonic() - t0)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()  # only the QEMU this call started, by its pid
            proc.wait()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def _run_job(
    stage2: str, cfg: qemu.VmConfig, qemu_bin: str, console: Console, opts: VmOptions
) -> _Ended:
    """Boot with a fresh job directory holding ``stage2``; the directory is gone afterwards."""
    job_dir = tempfile.mkdtemp(prefix="testbed-vm-")
    try:
        (Path(job_dir) / "stage2.sh").write_text(stage2)
        ended = _boot(dataclasses.replace(cfg, job_dir=job_dir), qemu_bin, console, opts)
        exit_file = Path(job_dir) / "exit"
        ended.exit_file = exit_file.read_text().strip() if exit_file.exists() else ""
        return ended
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _exit_code(ended: _Ended, console: Console) -> int:
    """The command's exit code: the job's file, else the console's marker, else an error."""
    code = int(ended.exit_file) if ended.exit_file.isdigit() else console.exit_code
    if code is None:
        where = "before the command started" if console.phase == "boot" else "during the command"
        err = ended.qemu_err.decode(errors="replace").strip()
        raise VmError(
            f"the guest stopped {where} (QEMU exit status {ended.status})"
            + (f"; QEMU said: {err}" if err else "")
            + console.tail()
        )
    return code


def run(argv: Sequence[str], opts: VmOptions | None = None, out=None, log=None) -> GuestRun:
    """Boot a guest, run ``argv`` in the current directory there, return its exit code.

    The command's output (stdout and stderr, merged) goes to ``out`` (bytes) as it comes; this
    function's own messages go to ``log``. QEMU is always gone when this returns or raises.
    """
    opts = opts or VmOptions()
    out = out or sys.stdout.buffer
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    qemu_bin = _check_host()
    cwd = os.path.realpath(os.getcwd())
    rw = _rw_dirs(cwd, opts.shares)
    environment = guest_env(opts.env)
    command = guest_argv(argv, dict(environment)["PATH"])
    k = ensure_kernel(opts.kernel, log)
    toolbox = find_toolbox(log)
    initramfs = ensure_initramfs(k, toolbox)
    accel, notes = _choose_accel(opts.accel, k, initramfs, qemu_bin, log)
    shares = tuple(Share(f"share{i}", p) for i, p in enumerate(rw))
    # The command may want to know: timing claims do not hold under software emulation.
    environment = sorted([*environment, ("TESTBED_VM_ACCEL", accel)])
    job = _job(command, cwd, environment, shares, k, out)
    cfg = qemu.VmConfig(
        kernel=str(k.boot_image),
        initramfs=str(initramfs),
        job_dir="",  # made per run by _run_job
        shares=shares,
        memory_mib=opts.memory_mib,
        cpus=opts.cpus,
        accel=accel,
        privileged=os.geteuid() == 0,
    )
    log(
        f"vm: {k.package} ({k.release}), {accel}, {opts.cpus} CPU(s), {opts.memory_mib} MiB; "
        f"sharing {', '.join(rw)} read-write"
    )
    console = Console(job, out, opts.verbose)
    ended = _run_job(stage2_script(job, bool(toolbox.busybox)), cfg, qemu_bin, console, opts)
    code = _exit_code(ended, console)
    boot = (console.started_at or ended.started) - ended.started
    boot_log = console.boot.decode(errors="replace")
    return GuestRun(code, boot, ended.total, accel, k, boot_log, notes)
