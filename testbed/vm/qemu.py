"""QEMU: its command line (a pure function), starting it so that it never outlives us, and the
choice of accelerator (KVM only when a real guest boots on it, tried once and remembered)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from testbed.core.files import atomic_write_text
from testbed.vm.common import DEFAULT_CPUS, DEFAULT_MEMORY_MIB, QEMU
from testbed.vm.job import Share
from testbed.vm.kernel import Kernel, cache_dir

KVM_TRIAL_TIMEOUT_S = 20.0  # a KVM guest reaches /init in about a second
KVM_PROBE = Path(__file__).with_name("kvm_probe.py")


@dataclass(frozen=True)
class VmConfig:
    """What QEMU boots and shares (``qemu_argv`` turns it into a command line)."""

    kernel: str  # vmlinux (PVH) or vmlinuz
    initramfs: str
    job_dir: str  # host directory shared as JOB_DIR_GUEST
    shares: tuple[Share, ...] = ()
    memory_mib: int = DEFAULT_MEMORY_MIB
    cpus: int = DEFAULT_CPUS
    accel: str = "tcg"  # kvm | tcg
    privileged: bool = True  # QEMU runs as root: 9p keeps owners ("passthrough")
    # cryptomgr.notests: the crypto self-tests alone take seconds under TCG
    cmdline: tuple[str, ...] = (
        "console=ttyS0",
        "quiet",
        "loglevel=3",
        "panic=-1",
        "cryptomgr.notests",
    )


def qemu_argv(cfg: VmConfig, qemu: str = QEMU) -> list[str]:
    """QEMU's command line for ``cfg``; pure. The console is the serial port on stdout."""
    model = "passthrough" if cfg.privileged else "none"
    argv = [
        qemu,
        "-nographic",
        "-nodefaults",
        "-no-user-config",
        "-no-reboot",
        "-machine",
        "q35",
        "-accel",
        cfg.accel,
        "-cpu",
        "host" if cfg.accel == "kvm" else "max",
        "-m",
        str(cfg.memory_mib),
        "-smp",
        str(cfg.cpus),
        "-serial",
        "stdio",
        "-kernel",
        cfg.kernel,
        "-initrd",
        cfg.initramfs,
        "-append",
        " ".join(cfg.cmdline),
    ]
    exports = [Share("root", "/", readonly=True), Share("job", cfg.job_dir), *cfg.shares]
    for i, s in enumerate(exports):
        path = s.host_path.replace(",", ",,")  # QEMU's escape for a comma in an option value
        fsdev = f"local,id=fs{i},path={path},security_model={model},multidevs=remap"
        if s.readonly:
            fsdev += ",readonly=on"
        argv += ["-fsdev", fsdev, "-device", f"virtio-9p-pci,fsdev=fs{i},mount_tag={s.tag}"]
    return argv


def _die_with_parent() -> None:
    """In QEMU's child: SIGKILL it if this process dies, however it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def start(cfg: VmConfig, qemu: str = QEMU) -> subprocess.Popen:
    """QEMU running ``cfg``, its console (stdout) and messages (stderr) as pipes; it dies with
    this process, and Ctrl-C reaches only this process (which then stops it)."""
    return subprocess.Popen(
        qemu_argv(cfg, qemu),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )


def _kvm_basic() -> tuple[bool, str]:
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user"
    try:
        r = subprocess.run(
            [sys.executable, str(KVM_PROBE)], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return False, "a one-instruction guest on /dev/kvm hung"
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return False, f"/dev/kvm cannot run a guest ({lines[-1] if lines else 'failed'})"
    return True, "/dev/kvm runs a guest"


def _kvm_boot_trial(kernel: Kernel, initramfs: Path, qemu: str) -> tuple[bool, str]:
    """Boot the initramfs on KVM to its ``/init`` (which only says so: ``testbed.probe``)."""
    with tempfile.TemporaryDirectory(prefix="testbed-vm-kvm-") as job:
        cfg = VmConfig(
            kernel=str(kernel.boot_image),
            initramfs=str(initramfs),
            job_dir=job,
            memory_mib=512,
            cpus=1,
            accel="kvm",
            cmdline=("console=ttyS0", "quiet", "panic=-1", "testbed.probe"),
        )
        try:
            r = subprocess.run(
                qemu_argv(cfg, qemu),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=KVM_TRIAL_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:  # subprocess.run killed QEMU
            return False, f"a guest on /dev/kvm did not boot within {KVM_TRIAL_TIMEOUT_S:.0f} s"
    if b"testbed-vm: probe ok" in r.stdout:
        return True, "a guest boots on /dev/kvm"
    err = r.stderr.decode(errors="replace").strip().splitlines()
    return False, f"a guest fails on /dev/kvm ({err[0] if err else 'no output'})"


def kvm_status(kernel: Kernel, initramfs: Path, qemu: str) -> tuple[bool, str]:
    """(usable, why). A one-instruction guest, then a real boot to ``/init`` on KVM: nested
    virtualization may run the first and hang or abort the second. The boot trial's verdict is
    remembered per host kernel, QEMU and guest kernel (``<cache>/kvm.json``)."""
    ok, why = _kvm_basic()
    if not ok:
        return ok, why
    qst = os.stat(qemu)
    key = f"{platform.release()}|{qemu}:{qst.st_size}:{qst.st_mtime_ns}|{kernel.release}"
    memo_file = cache_dir() / "kvm.json"
    with contextlib.suppress(OSError, ValueError):
        memo = json.loads(memo_file.read_text())
        if memo.get("key") == key:
            return memo["ok"], memo["why"]
    ok, why = _kvm_boot_trial(kernel, initramfs, qemu)
    with contextlib.suppress(OSError):
        atomic_write_text(memo_file, json.dumps({"key": key, "ok": ok, "why": why}) + "\n")
    return ok, why
