"""``testbed vm``: run one command inside a throwaway QEMU guest booted with a stock kernel.

For kernels without ``sch_netem``, ``fq``, ``red`` or ``tcp_dctcp``: the guest runs a
distribution kernel that has them all as modules, while its userland is this machine's own
filesystem (shared read-only), so the same venv, scenarios and paths work inside; only the current
directory and any ``--share`` directory are writable.

The package, in the order a run needs it (docs/vm.md tells the story): ``kernel`` and ``elf``
(fetch, cache and read a distribution kernel), ``initramfs`` (busybox or this machine's programs,
modules, ``/init``), ``job`` (the command as stage 2), ``qemu`` (argv, start, accelerator;
``kvm_probe``), ``console`` (boot log, output, exit code), ``runner`` (one run) and ``cli``.
"""

from __future__ import annotations

from testbed.vm.cli import add_arguments, cmd, main, parse_memory
from testbed.vm.common import (
    DEFAULT_BOOT_TIMEOUT_S,
    DEFAULT_CPUS,
    DEFAULT_MEMORY_MIB,
    DEFAULT_TIMEOUT_S,
    GUEST_DIR,
    GUEST_PATH,
    JOB_DIR_GUEST,
    MSIZE,
    QEMU,
    VM_FAILED,
    VmError,
)
from testbed.vm.console import Console
from testbed.vm.elf import elf_has_pvh_entry, elf_is_static, extract_vmlinux
from testbed.vm.initramfs import (
    INITRAMFS_MODULES,
    CpioEntry,
    Toolbox,
    ensure_initramfs,
    find_toolbox,
    init_script,
    initramfs_plan,
    module_load_order,
    module_name,
    parse_ldd,
    parse_modules_dep,
    write_cpio,
)
from testbed.vm.job import (
    CONGESTION_CONTROLS,
    ENV_PASSED,
    GuestJob,
    Share,
    guest_argv,
    guest_env,
    stage2_script,
)
from testbed.vm.kernel import (
    DEFAULT_KERNEL_PACKAGES,
    Kernel,
    cache_dir,
    ensure_kernel,
    parse_apt_depends,
    resolve_kernel_package,
)
from testbed.vm.qemu import VmConfig, kvm_status, qemu_argv
from testbed.vm.runner import GuestRun, VmOptions, run

__all__ = [
    "CONGESTION_CONTROLS",
    "DEFAULT_BOOT_TIMEOUT_S",
    "DEFAULT_CPUS",
    "DEFAULT_KERNEL_PACKAGES",
    "DEFAULT_MEMORY_MIB",
    "DEFAULT_TIMEOUT_S",
    "ENV_PASSED",
    "GUEST_DIR",
    "GUEST_PATH",
    "INITRAMFS_MODULES",
    "JOB_DIR_GUEST",
    "MSIZE",
    "QEMU",
    "VM_FAILED",
    "Console",
    "CpioEntry",
    "GuestJob",
    "GuestRun",
    "Kernel",
    "Share",
    "Toolbox",
    "VmConfig",
    "VmError",
    "VmOptions",
    "add_arguments",
    "cache_dir",
    "cmd",
    "elf_has_pvh_entry",
    "elf_is_static",
    "ensure_initramfs",
    "ensure_kernel",
    "extract_vmlinux",
    "find_toolbox",
    "guest_argv",
    "guest_env",
    "init_script",
    "initramfs_plan",
    "kvm_status",
    "main",
    "module_load_order",
    "module_name",
    "parse_apt_depends",
    "parse_ldd",
    "parse_memory",
    "parse_modules_dep",
    "qemu_argv",
    "resolve_kernel_package",
    "run",
    "stage2_script",
    "write_cpio",
]
