"""Can ``/dev/kvm`` run a guest at all? A one-instruction guest (``hlt``), standard library only.

Run as a separate program (``python kvm_probe.py``, by its path: it imports nothing of the
testbed) because a broken KVM may hang the calling process; the caller gives it a timeout.
Exit status 0: the vCPU ran and stopped at the ``hlt``; otherwise the reason on stderr.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import struct
import sys

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_GET_VCPU_MMAP_SIZE = 0xAE04
KVM_SET_USER_MEMORY_REGION = 0x4020AE46
KVM_CREATE_VCPU = 0xAE41
KVM_RUN = 0xAE80
KVM_EXIT_HLT = 5
HLT = 0xF4
GUEST_BASE, GUEST_SIZE = 0xFFFF0000, 0x10000  # the last 64 KiB below 4 GiB
RESET_VECTOR = 0xFFF0  # offset of 0xFFFFFFF0, where a reset x86 CPU starts


def main() -> str | int:
    fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    if fcntl.ioctl(fd, KVM_GET_API_VERSION) != 12:
        return "unexpected KVM API version"
    vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
    mem = mmap.mmap(-1, GUEST_SIZE)
    mem[RESET_VECTOR] = HLT
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    region = struct.pack("=IIQQQ", 0, 0, GUEST_BASE, GUEST_SIZE, addr)
    fcntl.ioctl(vm, KVM_SET_USER_MEMORY_REGION, region)
    cpu = fcntl.ioctl(vm, KVM_CREATE_VCPU, 0)
    run = mmap.mmap(cpu, fcntl.ioctl(fd, KVM_GET_VCPU_MMAP_SIZE, 0))
    fcntl.ioctl(cpu, KVM_RUN, 0)
    reason = struct.unpack_from("=I", run, 8)[0]  # struct kvm_run.exit_reason
    return 0 if reason == KVM_EXIT_HLT else f"KVM exit reason {reason}, not HLT"


if __name__ == "__main__":
    sys.exit(main())
