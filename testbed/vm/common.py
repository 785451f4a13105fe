"""What every part of ``testbed vm`` shares: its error, its defaults and the guest's paths."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable
from importlib import resources

from testbed.core.errors import TestbedError

QEMU = "qemu-system-x86_64"
DEFAULT_MEMORY_MIB = 2048
DEFAULT_CPUS = 2
DEFAULT_TIMEOUT_S = 7200.0
DEFAULT_BOOT_TIMEOUT_S = 300.0
MSIZE = 512000  # 9p message size: the largest the guest's virtio transport accepts
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_DIR = "/run/testbed-vm"  # in the guest: bin/busybox, job/ (the job share)
JOB_DIR_GUEST = f"{GUEST_DIR}/job"
VM_FAILED = 125  # exit code when the VM itself failed (as `docker run` does)


class VmError(TestbedError):
    """The VM could not be prepared, booted or run (the message says what to install or do)."""

    exit_code = VM_FAILED


def which(name: str) -> str | None:
    """``name`` on PATH, or in the sbin directories a non-login root shell may lack."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{GUEST_PATH}")


def guest_script(name: str) -> str:
    """A shell script shipped in ``testbed/vm/guest/`` (package data)."""
    return resources.files("testbed.vm").joinpath("guest", name).read_text(encoding="utf-8")


def shell_settings(title: str, settings: Iterable[tuple[str, str]]) -> list[str]:
    """The lines that start a guest script: ``#!/bin/sh``, what it is, then ``NAME=value`` with
    each value quoted for the shell (the script's body, a file here, uses the names)."""
    return ["#!/bin/sh", f"# {title}", *(f"{k}={shlex.quote(v)}" for k, v in settings)]
