"""``testbed vm``: run one command inside a throwaway QEMU guest booted with a stock kernel.

For kernels without ``sch_netem``, ``fq``, ``red`` or ``tcp_dctcp`` (the project's development VM,
many container hosts): the guest runs a distribution kernel that has them all as modules, while
its userland is this machine's own filesystem, so the same venv, scenarios and paths work inside.

This module owns everything of the VM, in the order a run needs it:

* the kernel: resolve a package (``linux-image-amd64`` → ``linux-image-6.1.0-N-amd64``), fetch
  it with ``apt-get download``, unpack it with ``dpkg -x``, run ``depmod`` on the tree and
  decompress the kernel to an ELF ``vmlinux`` (QEMU boots that directly through its PVH entry;
  decompressing a bzImage under software emulation takes seconds), once, into a cache reused
  between runs (``/var/cache/multicluster-testbed/kernels/<package>/``);
* the initramfs: a static busybox, this machine's or the ``busybox-static`` package fetched
  into the cache (each program start costs ~10 ms under TCG, against ~100 ms for a dynamically
  linked one), else this machine's ``sh``, ``mount``, ``mkdir``, ``switch_root`` and kmod with
  the libraries ``ldd`` names; the kernel's virtio/9p/overlay modules in load order; an
  ``/init`` that mounts the host's ``/`` read-only over 9p under a tmpfs overlay and switches
  to it. Written as a cpio archive here, cached per kernel and inputs;
* the job: a per-run directory shared with the guest holding ``stage2.sh`` (mounts, the kernel's
  modules over ``/lib/modules``, ``lo`` up, congestion controls allowed in the init namespace,
  environment, ``cd``, the command) and, afterwards, the command's exit code;
* the accelerator: KVM only when a real guest boots on it (tried once per machine and
  remembered), else TCG; QEMU's argv (a pure function); running QEMU with the guest's console
  streamed to stdout, and always killing QEMU on the way out.

The host's filesystem is shared read-only, so nothing the guest does touches the host, except in
the read-write shares: the current directory (results) and any ``--share`` directory.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import hashlib
import io
import json
import lzma
import os
import platform
import re
import secrets
import selectors
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core.errors import TestbedError
from testbed.core.files import atomic_write_bytes, locked

QEMU = "qemu-system-x86_64"
DEFAULT_KERNEL_PACKAGES = ("linux-image-amd64", "linux-image-generic")  # Debian, Ubuntu
DEFAULT_MEMORY_MIB = 2048
DEFAULT_CPUS = 2
DEFAULT_TIMEOUT_S = 7200.0
DEFAULT_BOOT_TIMEOUT_S = 300.0
RESOLVE_MAX_AGE_S = 7 * 86400  # how long a metapackage's resolution is trusted
KVM_TRIAL_TIMEOUT_S = 20.0  # a KVM guest reaches /init in about a second
MSIZE = 512000  # 9p message size: the largest the guest's virtio transport accepts
# Loaded by the initramfs, in dependency order, unless the kernel has them built in.
INITRAMFS_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "overlay")
# Without a static busybox: this machine's programs (name in the initramfs -> candidates here).
HOST_BINARIES = {
    "sh": ("dash", "sh", "bash"),
    "mount": ("mount",),
    "mkdir": ("mkdir",),
    "switch_root": ("switch_root",),
    "insmod": ("kmod", "insmod"),  # kmod acts as insmod when called by that name
}
# Allowed in the guest's init namespace (FIELD-NOTES: a namespace may only pick allowed ones).
CONGESTION_CONTROLS = ("reno", "cubic", "bbr", "dctcp", "htcp", "vegas", "westwood", "bic")
# Environment passed to the command: these names and every TESTBED_* one (plus --env).
_ENV_WORDS = """HOME USER LOGNAME LANG LANGUAGE TZ TERM NO_COLOR FORCE_COLOR CI VIRTUAL_ENV
PYTHONPATH PYTHONUNBUFFERED PYTHONDONTWRITEBYTECODE PYTEST_ADDOPTS OMP_NUM_THREADS
OPENBLAS_CORETYPE OPENBLAS_L2_SIZE"""
ENV_PASSED = frozenset(_ENV_WORDS.split())
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_DIR = "/run/testbed-vm"  # in the guest: bin/busybox, job/ (the job share)
JOB_DIR_GUEST = f"{GUEST_DIR}/job"
VERBS = {"validate", "plan", "up", "exec", "ls", "down", "clean", "doctor", "run"}  # a hint only
VM_FAILED = 125  # exit code when the VM itself failed (as `docker run` does)


class VmError(TestbedError):
    """The VM could not be prepared, booted or run (the message says what to install or do)."""

    exit_code = VM_FAILED


# -- ELF --------------------------------------------------------------------------------------
def _elf_segments(data: bytes) -> list[tuple[int, int, int]]:
    """(p_type, offset, size) of each program header of a 64-bit little-endian ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    segs = []
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        segs.append((p_type, p_offset, p_filesz))
    return segs


def elf_is_static(data: bytes) -> bool:
    """True for an ELF executable without a program interpreter (statically linked)."""
    segs = _elf_segments(data)
    return bool(segs) and all(t != 3 for t, _, _ in segs)  # PT_INTERP


def elf_has_pvh_entry(data: bytes) -> bool:
    """True if a vmlinux carries XEN_ELFNOTE_PHYS32_ENTRY: QEMU can boot it directly (PVH)."""
    for p_type, off, size in _elf_segments(data):
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = off, off + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name = data[pos + 12 : pos + 12 + namesz]
            if name == b"Xen\0" and ntype == 18:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF kernel inside a bzImage (xz, gzip or, with the zstd program, zstd), or None."""
    for magic, kind in (
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\x1f\x8b\x08\x00", "gz"),
    ):
        start = bzimage.find(magic)
        while start >= 0:
            try:
                if kind == "xz":
                    out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(bzimage[start:])
                elif kind == "gz":
                    out = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(bzimage[start:])
                elif shutil.which("zstd"):
                    out = subprocess.run(
                        ["zstd", "-dcq"], input=bzimage[start:], capture_output=True, timeout=120
                    ).stdout
                else:
                    out = b""
            except (lzma.LZMAError, zlib.error, subprocess.TimeoutExpired):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            start = bzimage.find(magic, start + 1)
    return None


# -- the kernel -------------------------------------------------------------------------------
def cache_dir() -> Path:
    """Where kernels and initramfs images are kept between runs (``TESTBED_VM_CACHE`` wins)."""
    if os.environ.get("TESTBED_VM_CACHE"):
        return Path(os.environ["TESTBED_VM_CACHE"]).absolute()
    if os.geteuid() == 0:
        return Path("/var/cache/multicluster-testbed")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "multicluster-testbed"


@dataclass(frozen=True)
class Kernel:
    package: str
    release: str  # `uname -r` inside the guest
    vmlinuz: Path
    modules: Path  # the unpacked lib/modules; the guest bind-mounts it over /lib/modules
    home: Path  # this kernel's cache directory (the unpacked tree, initramfs images)
    vmlinux: Path | None = None  # the decompressed ELF kernel, when it has a PVH entry

    @property
    def tree(self) -> Path:
        return self.modules / self.release

    @property
    def boot_image(self) -> Path:
        return self.vmlinux if self.vmlinux and self.vmlinux.exists() else self.vmlinuz


CONCRETE_KERNEL = re.compile(r"^linux-image-(unsigned-)?\d")


def parse_apt_depends(text: str) -> list[str]:
    """Concrete kernel packages a metapackage depends on, from ``apt-cache depends`` output."""
    found = []
    for line in text.splitlines():
        m = re.match(r"^\s*\|?(?:Pre)?Depends:\s*(\S+)", line)
        if m and CONCRETE_KERNEL.match(m.group(1)) and m.group(1) not in found:
            found.append(m.group(1))
    return found


def _remembered(name: str) -> Path:
    return cache_dir() / "resolved" / name


def resolve_kernel_package(name: str | None) -> str:
    """``--kernel`` (or the distribution's default metapackage) → a concrete kernel package."""
    if name and (name.endswith(".deb") or CONCRETE_KERNEL.match(name)):
        return name
    metas = [name] if name else DEFAULT_KERNEL_PACKAGES
    # `apt-cache depends` takes seconds: a recent answer whose kernel is cached is reused.
    for meta in metas:
        with contextlib.suppress(OSError):
            memo = _remembered(meta)
            concrete = memo.read_text().strip()
            fresh = time.time() - memo.stat().st_mtime < RESOLVE_MAX_AGE_S
            if fresh and (cache_dir() / "kernels" / concrete / "kernel.json").exists():
                return concrete
    for meta in metas:
        try:
            r = subprocess.run(
                ["apt-cache", "depends", meta], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            r = None
        deps = parse_apt_depends(r.stdout) if r and r.returncode == 0 else []
        if deps:
            memo = _remembered(meta)
            with contextlib.suppress(OSError):
                memo.parent.mkdir(parents=True, exist_ok=True)
                memo.write_text(deps[0] + "\n")
            return deps[0]
        # Offline or without package lists: the one this machine resolved last time.
        with contextlib.suppress(OSError):
            return _remembered(meta).read_text().strip()
    if name:
        return name  # not a metapackage apt knows: let `apt-get download` decide
    raise VmError(
        "cannot find a kernel package: apt knows none of "
        f"{', '.join(DEFAULT_KERNEL_PACKAGES)} (run `apt-get update`, or pass --kernel PACKAGE "
        "or --kernel FILE.deb)"
    )


def _run(argv: Sequence[str], what: str, **kw) -> subprocess.CompletedProcess:
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    except FileNotFoundError as exc:
        raise VmError(f"{what}: {argv[0]} is not installed") from exc
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise VmError(f"{what}: `{shlex.join(argv)}` failed: {' / '.join(detail)}")
    return r


def _apt_download(package: str, dest: Path) -> Path:
    argv = ["apt-get", "download", "-q", package]
    if os.geteuid() == 0:
        argv[1:1] = ["-o", "APT::Sandbox::User=root"]  # download straight into a root-only dir
    _run(argv, f"downloading kernel package {package}", cwd=dest, timeout=1800)
    debs = sorted(dest.glob(f"{package}_*.deb"))
    if not debs:
        raise VmError(f"apt-get download {package} left no .deb in {dest}")
    return debs[-1]


def _find_modules_root(root: Path) -> Path:
    for d in (root / "lib/modules", root / "usr/lib/modules"):
        if d.is_dir() and any(d.iterdir()):
            return d
    return root / "lib/modules"


def _has_module(tree: Path, name: str) -> bool:
    return any(tree.glob(f"kernel/**/{name}.ko*"))


def _save_kernel(k: Kernel) -> None:
    info = {
        "package": k.package,
        "release": k.release,
        "vmlinuz": str(k.vmlinuz),
        "modules": str(k.modules),
        "vmlinux": str(k.vmlinux) if k.vmlinux else "",  # "": looked, none with a PVH entry
    }
    (k.home / "kernel.json").write_text(json.dumps(info, indent=1) + "\n")


def _load_kernel(meta: Path) -> Kernel | None:
    try:
        info = json.loads(meta.read_text())
        k = Kernel(
            info["package"],
            info["release"],
            Path(info["vmlinuz"]),
            Path(info["modules"]),
            meta.parent,
            Path(info["vmlinux"]) if info.get("vmlinux") else None,
        )
    except (OSError, ValueError, KeyError):
        return None
    if not (k.vmlinuz.exists() and (k.tree / "modules.dep").exists()):
        return None
    if "vmlinux" not in info or (k.vmlinux and not k.vmlinux.exists()):
        k = _with_vmlinux(k)
        _save_kernel(k)
    return k


def _with_vmlinux(k: Kernel) -> Kernel:
    """``k`` with its decompressed ELF kernel, if the kernel has a PVH entry QEMU can boot."""
    elf = extract_vmlinux(k.vmlinuz.read_bytes())
    if not (elf and elf_has_pvh_entry(elf)):
        return dataclasses.replace(k, vmlinux=None)
    path = k.home / "vmlinux"
    atomic_write_bytes(path, elf)
    return dataclasses.replace(k, vmlinux=path)


def ensure_kernel(package: str | None, log=print) -> Kernel:
    """The unpacked kernel of ``package``, fetched and prepared once into the cache."""
    package = resolve_kernel_package(package)
    local = Path(package) if package.endswith(".deb") else None
    key = local.name.removesuffix(".deb") if local else package
    pdir = cache_dir() / "kernels" / key
    meta = pdir / "kernel.json"
    with locked(pdir.parent / f"{key}.lock"):
        k = _load_kernel(meta)
        if k:
            return k
        log(f"vm: fetching kernel package {package} into {pdir} (once; reused afterwards)")
        shutil.rmtree(pdir, ignore_errors=True)
        pdir.mkdir(parents=True)
        root = pdir / "root"
        deb = local.resolve() if local else _apt_download(package, pdir)
        _run(["dpkg", "-x", str(deb), str(root)], f"unpacking {deb.name}", timeout=600)
        images = sorted((root / "boot").glob("vmlinuz-*"))
        if not images:
            raise VmError(f"{deb.name} holds no /boot/vmlinuz-*: is it a kernel image package?")
        vmlinuz = images[-1]
        release = vmlinuz.name.removeprefix("vmlinuz-")
        mods = _find_modules_root(root)
        if not _has_module(mods / release, "9p") and not local:
            # Ubuntu ships most modules in separate packages.
            for extra in (f"linux-modules-{release}", f"linux-modules-extra-{release}"):
                with contextlib.suppress(VmError):
                    d = _apt_download(extra, pdir)
                    _run(["dpkg", "-x", str(d), str(root)], f"unpacking {d.name}", timeout=600)
            mods = _find_modules_root(root)
        if not (mods / release).is_dir():
            raise VmError(f"{deb.name} holds no modules for {release}")
        if mods == root / "usr/lib/modules" and not (root / "lib").exists():
            (root / "lib").symlink_to("usr/lib")  # depmod -b looks in <base>/lib/modules
        _run(
            ["depmod", "-b", str(root), release],
            "indexing the kernel's modules (needs depmod: Debian package kmod)",
            timeout=600,
        )
        for deb_file in pdir.glob("*.deb"):
            deb_file.unlink()  # the unpacked tree is what is used; keep the cache small
        k = _with_vmlinux(Kernel(package, release, vmlinuz, mods, pdir))
        _save_kernel(k)
        return k


# -- the initramfs ----------------------------------------------------------------------------
def parse_modules_dep(text: str) -> dict[str, list[str]]:
    """``modules.dep`` → {module path: [paths it needs]}, paths relative to the module tree."""
    deps = {}
    for line in text.splitlines():
        if ":" in line:
            mod, _, rest = line.partition(":")
            deps[mod.strip()] = rest.split()
    return deps


def module_name(path: str) -> str:
    """``kernel/net/9p/9pnet_virtio.ko.xz`` → ``9pnet_virtio`` (``-`` and ``_`` are the same)."""
    return re.sub(r"\.ko(\.(xz|zst|gz))?$", "", path.rsplit("/", 1)[-1]).replace("-", "_")


def module_load_order(
    wanted: Iterable[str], deps: Mapping[str, list[str]], builtin: Iterable[str] = ()
) -> list[str]:
    """Module paths to insmod, dependencies first; built-in modules need nothing.

    Raises VmError naming a module that is neither a module nor built in.
    """
    by_name = {module_name(p): p for p in deps}
    built = {module_name(p) for p in builtin}
    order: list[str] = []

    def visit(path: str, trail: tuple[str, ...]) -> None:
        if path in order or path in trail:
            return
        for dep in deps.get(path, []):
            visit(dep, (*trail, path))
        order.append(path)

    for name in wanted:
        name = name.replace("-", "_")
        if name in built:
            continue
        if name not in by_name:
            raise VmError(f"the guest kernel has no module {name!r} (nor is it built in)")
        visit(by_name[name], ())
    return order


def parse_ldd(text: str) -> list[str]:
    """Absolute library paths from ``ldd`` output (the vDSO and missing ones are skipped)."""
    libs = []
    for line in text.splitlines():
        m = re.search(r"=>\s*(/\S+)", line) or re.match(r"^\s*(/\S+)\s+\(", line)
        if m and m.group(1) not in libs:
            libs.append(m.group(1))
    return libs


@dataclass(frozen=True)
class Toolbox:
    """The initramfs's programs: one static busybox, or this machine's binaries and libraries."""

    busybox: str | None = None
    binaries: tuple[tuple[str, str], ...] = ()  # (name in /bin, file here)
    libraries: tuple[str, ...] = ()

    # busybox applets the init and stage 2 use (busybox runs its applets without exec'ing)
    APPLETS = ("sh", "mount", "mkdir", "cp", "switch_root", "insmod")


@dataclass(frozen=True)
class CpioEntry:
    """One member of the initramfs: a directory, a file (from ``source`` or ``data``), a symlink
    (``data`` is the target) or a character device (``rdev``)."""

    path: str  # inside the archive, without a leading "/"
    mode: int  # st_mode: type and permission bits
    data: bytes = b""
    source: str | None = None
    rdev: tuple[int, int] = (0, 0)


def init_script(modules: Sequence[str], busybox: bool, msize: int = MSIZE) -> str:
    """The initramfs's ``/init``: modules, the 9p root under a tmpfs overlay, the job, stage 2.

    ``modules`` are file names in ``/modules``, in load order. With ``testbed.probe`` on the
    kernel command line it only reports that it runs (the KVM trial). Any failure powers off;
    the host then shows the console output.
    """
    p9 = f"trans=virtio,version=9p2000.L,msize={msize}"
    off = "echo o > /proc/sysrq-trigger; while :; do :; done"
    shell = f"{GUEST_DIR}/bin/busybox sh" if busybox else "/bin/sh"
    lines = [
        "#!/bin/sh",
        "# testbed vm: initramfs /init (generated by testbed/vm.py)",
        "export PATH=/bin",
        f'fail() {{ echo "testbed-vm: boot failed: $*"; {off}; }}',
        "mount -t devtmpfs devtmpfs /dev",
        "mount -t proc proc /proc",
        "read -r cmdline < /proc/cmdline",
        f'case " $cmdline " in *" testbed.probe "*) echo "testbed-vm: probe ok"; {off};; esac',
        "mount -t sysfs sysfs /sys",
        "mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs /run",
    ]
    lines += [f'insmod /modules/{m} || fail "insmod {m}"' for m in modules]
    lines += [
        f'mount -t 9p -o {p9},ro,cache=loose root /lower || fail "9p root"',
        "mount -t tmpfs -o mode=0755 tmpfs /rw && mkdir /rw/upper /rw/work || fail tmpfs",
        "mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot"
        ' || fail "overlay root"',
        f"mkdir -p {JOB_DIR_GUEST} {GUEST_DIR}/bin",
        f'mount -t 9p -o {p9} job {JOB_DIR_GUEST} || fail "9p job"',
    ]
    if busybox:  # busybox's switch_root moves no mounts: move them first
        lines.append(f"cp /bin/busybox {GUEST_DIR}/bin/busybox")
        lines += [f"mount --move /{d} /newroot/{d}" for d in ("dev", "proc", "sys", "run")]
    lines += [
        # util-linux's switch_root moves /dev, /proc, /sys and /run (with the job) itself.
        f"exec switch_root /newroot {shell} {JOB_DIR_GUEST}/stage2.sh",
        "",
    ]
    return "\n".join(lines)


def initramfs_plan(
    toolbox: Toolbox, modules: Sequence[tuple[str, str]], init: str
) -> list[CpioEntry]:
    """Everything the initramfs holds, as a list of members; pure (nothing is read here).

    ``modules``: (file name in ``/modules``, an uncompressed .ko here), in load order.
    """
    dirs = {"bin", "dev", "proc", "sys", "run", "lower", "rw", "newroot", "modules"}
    files: list[CpioEntry] = []
    if toolbox.busybox:
        files.append(CpioEntry("bin/busybox", stat.S_IFREG | 0o755, source=toolbox.busybox))
        for applet in Toolbox.APPLETS:
            files.append(CpioEntry(f"bin/{applet}", stat.S_IFLNK | 0o777, data=b"busybox"))
    for name, src in sorted(toolbox.binaries):
        files.append(CpioEntry(f"bin/{name}", stat.S_IFREG | 0o755, source=src))
    for lib in sorted(set(toolbox.libraries)):
        rel = lib.lstrip("/")
        files.append(CpioEntry(rel, stat.S_IFREG | 0o755, source=lib))
        parts = rel.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for name, src in modules:
        files.append(CpioEntry(f"modules/{name}", stat.S_IFREG | 0o644, source=src))
    entries = [CpioEntry(d, stat.S_IFDIR | 0o755) for d in sorted(dirs)]
    entries.append(CpioEntry("dev/console", stat.S_IFCHR | 0o600, rdev=(5, 1)))
    entries.append(CpioEntry("dev/null", stat.S_IFCHR | 0o666, rdev=(1, 3)))
    entries.append(CpioEntry("init", stat.S_IFREG | 0o755, data=init.encode()))
    return entries + files


def write_cpio(entries: Iterable[CpioEntry], out: io.BufferedIOBase) -> None:
    """Write ``entries`` as a "newc" cpio archive (what the kernel unpacks as initramfs)."""

    def member(name: str, mode: int, data: bytes, ino: int, rdev=(0, 0)) -> None:
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(raw), 0)
        head = b"070701" + b"".join(b"%08X" % f for f in fields) + raw
        out.write(head + b"\0" * (-len(head) % 4))
        out.write(data + b"\0" * (-len(data) % 4))

    ino = 1
    for e in entries:
        data = e.data
        if e.source is not None:
            data = Path(e.source).read_bytes()
        member(e.path, e.mode, data, ino, e.rdev)
        ino += 1
    member("TRAILER!!!", 0, b"", 0)


def _which(name: str) -> str | None:
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:{GUEST_PATH}")


def _static_busybox(log=print) -> str | None:
    """A statically linked busybox: this machine's, else the busybox-static package fetched
    and unpacked into the cache (never installed: it conflicts with Debian's busybox)."""
    bb = _which("busybox")
    if bb and elf_is_static(Path(bb).read_bytes()):
        return os.path.realpath(bb)
    try:
        return _cached_busybox(cache_dir() / "busybox-static", log)
    except OSError as exc:  # e.g. a cache this user cannot write
        log(f"vm: no static busybox ({exc}); using this machine's programs (slower boot)")
        return None


def _cached_busybox(home: Path, log) -> str | None:
    with locked(home.with_suffix(".lock")):
        found = sorted(home.glob("root/**/bin/busybox"))
        if found:
            return str(found[0])
        log("vm: fetching busybox-static into the cache (once; the guest boots faster with it)")
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        try:
            deb = _apt_download("busybox-static", home)
            _run(["dpkg", "-x", str(deb), str(home / "root")], "unpacking busybox-static")
            deb.unlink()
        except VmError as exc:
            log(f"vm: no static busybox ({exc}); using this machine's programs (slower boot)")
            return None
        found = [
            p for p in sorted(home.glob("root/**/bin/busybox")) if elf_is_static(p.read_bytes())
        ]
        return str(found[0]) if found else None


def find_toolbox(log=print) -> Toolbox:
    """A static busybox (this machine's or a cached one), else the machine's own programs
    with their libraries."""
    bb = _static_busybox(log)
    if bb:
        return Toolbox(busybox=bb)
    binaries = []
    for name, candidates in HOST_BINARIES.items():
        found = next((p for p in map(_which, candidates) if p), None)
        if not found:
            pkg = {"insmod": "kmod", "switch_root": "util-linux", "mkdir": "coreutils"}
            raise VmError(
                f"the VM's initramfs needs `{name}` (Debian package {pkg.get(name, name)}), "
                "or a static busybox (package busybox-static)"
            )
        binaries.append((name, os.path.realpath(found)))
    libs: list[str] = []
    for _, src in binaries:
        r = subprocess.run(["ldd", src], capture_output=True, text=True)
        libs += [lib for lib in parse_ldd(r.stdout) if lib not in libs]
    return Toolbox(binaries=tuple(binaries), libraries=tuple(libs))


def _read_module(path: Path) -> bytes:
    """The bytes of a kernel module, decompressed (insmod in the initramfs gets plain .ko)."""
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return zlib.decompress(data, 16 + zlib.MAX_WBITS)
    if path.suffix == ".zst":
        try:
            r = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            raise VmError(f"decompressing {path.name} needs zstd (Debian package zstd)") from exc
        return r.stdout
    return data


def ensure_initramfs(kernel: Kernel, toolbox: Toolbox | None = None) -> Path:
    """Build (or reuse) the initramfs for ``kernel``; cached by the hash of its inputs."""
    toolbox = toolbox or find_toolbox()
    deps = parse_modules_dep((kernel.tree / "modules.dep").read_text())
    builtin_file = kernel.tree / "modules.builtin"
    builtin = builtin_file.read_text().split() if builtin_file.exists() else []
    order = module_load_order(INITRAMFS_MODULES, deps, builtin)
    names = [f"{i:02d}-{module_name(p)}.ko" for i, p in enumerate(order)]
    init = init_script(names, busybox=bool(toolbox.busybox))
    inputs = [init, kernel.release, *order]
    sources = [toolbox.busybox] if toolbox.busybox else [s for _, s in toolbox.binaries]
    for p in [*sources, *toolbox.libraries]:
        st = os.stat(p)
        inputs.append(f"{p}:{st.st_size}:{st.st_mtime_ns}")
    digest = hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16]
    image = kernel.home / f"initramfs-{digest}.cpio"
    if image.exists():
        return image
    with tempfile.TemporaryDirectory(dir=kernel.home) as tmp:
        plain = []
        for name, rel in zip(names, order, strict=True):
            dst = Path(tmp) / name
            dst.write_bytes(_read_module(kernel.tree / rel))
            plain.append((name, str(dst)))
        part = Path(tmp) / "initramfs.cpio"
        # Uncompressed: the kernel unpacks it faster than it would gunzip it under TCG.
        with open(part, "wb") as f:
            write_cpio(initramfs_plan(toolbox, plain, init), f)
        part.rename(image)
    return image


# -- the job and QEMU's argv ------------------------------------------------------------------
@dataclass(frozen=True)
class Share:
    """A host directory the guest mounts at the same path."""

    tag: str  # 9p mount tag (at most 31 bytes)
    host_path: str
    readonly: bool = False


@dataclass(frozen=True)
class GuestJob:
    argv: tuple[str, ...]  # argv[0] is an absolute path (busybox's sh prefers its applets)
    cwd: str
    env: tuple[tuple[str, str], ...]
    shares: tuple[Share, ...]
    modules: str  # this machine's path of the unpacked lib/modules (read through the 9p root)
    token: str  # marks the console lines the host looks for
    hostname: str = "testbed-vm"
    tty: bool = False  # give the command the console as its terminal (else a pipe)
    columns: int = 100
    lines: int = 40
    congestion: tuple[str, ...] = CONGESTION_CONTROLS
    modprobe: str = "/sbin/modprobe"  # this machine's kmod (the kernel calls it too)

    @property
    def start_marker(self) -> str:
        return f"@@testbed-vm:{self.token}:start"

    @property
    def exit_marker(self) -> str:
        return f"@@testbed-vm:{self.token}:exit="


def stage2_script(job: GuestJob, busybox: bool, msize: int = MSIZE) -> str:
    """Stage 2 runs as PID 1 on the host's (overlaid) root: mounts, network, the command.

    Its helpers are busybox applets when the initramfs had busybox (``$BB mount``), else the
    host's programs; the command itself always runs this machine's programs.
    """
    q = shlex.quote
    bb = "$BB " if busybox else ""
    p9 = f"trans=virtio,version=9p2000.L,msize={msize}"
    lines = [
        "#!/bin/sh",
        "# testbed vm: stage 2 (generated by testbed/vm.py), PID 1 on the host's root",
        f"export PATH={q(GUEST_PATH)}",
        f"BB={GUEST_DIR}/bin/busybox" if busybox else "BB=",
        f"JOB={JOB_DIR_GUEST}",
        f"finish() {{ {bb}sync; echo o > /proc/sysrq-trigger; {bb}sleep 60; }}",
        'fail() { echo "testbed-vm: $*"; finish; }',
        "echo 3 > /proc/sys/kernel/printk",  # errors only on the console from here on
        # The kernel's modules, through the read-only 9p root. /tmp stays the host's (under
        # the overlay): the project or its venv may live there, e.g. in a CI checkout.
        f"{bb}mkdir -p /lib/modules",
        f"{bb}mount --bind {q(job.modules)} /lib/modules || fail 'no kernel modules'",
        f"{bb}mkdir -p /dev/pts /dev/shm",
        f"{bb}mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts",
        f"{bb}mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm",
    ]
    for s in sorted(job.shares, key=lambda s: s.host_path.count("/")):
        opts = f"{p9},ro" if s.readonly else p9
        lines += [
            f"{bb}mkdir -p {q(s.host_path)}",
            f"{bb}mount -t 9p -o {opts} {s.tag} {q(s.host_path)}"
            f" || fail {q('mounting ' + s.host_path)}",
        ]
    lines += [
        f"echo {q(job.hostname)} > /proc/sys/kernel/hostname",
        f"{bb}ip link set lo up",
        # The allowed list is global and set in the init namespace; writing it does not load
        # modules and an unknown name fails the whole write: load, then add one at a time.
        f"{q(job.modprobe)} -q -a "
        + " ".join(f"tcp_{cc}" for cc in job.congestion)
        + " 2>/dev/null",
        "allowed=",
        f"for cc in {' '.join(job.congestion)}; do",
        # (no leading space: the kernel stops at an empty name and allows nothing)
        '  try="${allowed:+$allowed }$cc"',
        '  echo "$try" > /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null'
        ' && allowed="$try"',
        "done",
    ]
    lines += [f"export {k}={q(v)}" for k, v in job.env]
    cmd = shlex.join(job.argv)
    lines += [
        f"cd {q(job.cwd)} || fail {q('no directory ' + job.cwd)}",
        f"{bb}stty cols {job.columns} rows {job.lines} 2>/dev/null",
        f"echo {q(job.start_marker)}",
    ]
    if job.tty:
        lines += [f"{cmd} </dev/null", "rc=$?"]
    else:  # not a terminal, like the host's stdout
        lines += [
            f"{{ {cmd} </dev/null; echo $? > {GUEST_DIR}/rc; }} 2>&1 | {bb}cat",
            f"read -r rc < {GUEST_DIR}/rc",
        ]
    lines += [
        'echo "$rc" > "$JOB/exit"',
        f'echo "{job.exit_marker}$rc"',
        "finish",
        "",
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class VmConfig:
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


# -- the accelerator --------------------------------------------------------------------------
_KVM_PROBE = r"""
import ctypes, fcntl, mmap, os, struct, sys
fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
if fcntl.ioctl(fd, 0xAE00) != 12: sys.exit("unexpected KVM API version")
vm = fcntl.ioctl(fd, 0xAE01, 0)                      # KVM_CREATE_VM
mem = mmap.mmap(-1, 0x10000)
mem[0xFFF0] = 0xF4                                     # hlt at the reset vector
addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
fcntl.ioctl(vm, 0x4020AE46, struct.pack("=IIQQQ", 0, 0, 0xFFFF0000, 0x10000, addr))
cpu = fcntl.ioctl(vm, 0xAE41, 0)                     # KVM_CREATE_VCPU
run = mmap.mmap(cpu, fcntl.ioctl(fd, 0xAE04, 0))     # KVM_GET_VCPU_MMAP_SIZE
fcntl.ioctl(cpu, 0xAE80, 0)                           # KVM_RUN
reason = struct.unpack_from("=I", run, 8)[0]
sys.exit(0 if reason == 5 else f"KVM exit reason {reason}, not HLT")
"""


def _kvm_basic() -> tuple[bool, str]:
    if not os.path.exists("/dev/kvm"):
        return False, "no /dev/kvm"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not accessible to this user"
    try:
        r = subprocess.run(
            [sys.executable, "-c", _KVM_PROBE], capture_output=True, text=True, timeout=20
        )
    except subprocess.TimeoutExpired:
        return False, "a one-instruction guest on /dev/kvm hung"
    if r.returncode != 0:
        lines = r.stderr.strip().splitlines()
        return False, f"/dev/kvm cannot run a guest ({lines[-1] if lines else 'failed'})"
    return True, "/dev/kvm runs a guest"


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
            ok = b"testbed-vm: probe ok" in r.stdout
            err = r.stderr.decode(errors="replace").strip().splitlines()
            why = (
                "a guest boots on /dev/kvm"
                if ok
                else f"a guest fails on /dev/kvm ({err[0] if err else 'no output'})"
            )
        except subprocess.TimeoutExpired:  # subprocess.run killed QEMU
            ok, why = False, f"a guest on /dev/kvm did not boot within {KVM_TRIAL_TIMEOUT_S:.0f} s"
    with contextlib.suppress(OSError):
        memo_file.write_text(json.dumps({"key": key, "ok": ok, "why": why}) + "\n")
    return ok, why


# -- running ----------------------------------------------------------------------------------
def guest_env(extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list:
    """The command's environment: ENV_PASSED, TESTBED_*, and ``NAME=VALUE``/``NAME`` extras."""
    environ = os.environ if environ is None else environ
    env = {k: v for k, v in environ.items() if k in ENV_PASSED or k.startswith("TESTBED_")}
    env.pop("TESTBED_VM_CACHE", None)
    for item in extra:
        name, eq, value = item.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise VmError(f"--env {item!r}: not NAME=VALUE or NAME")
        if eq:
            env[name] = value
        elif name in environ:
            env[name] = environ[name]
    # This installation's scripts first: `testbed`, `python` and friends resolve as here.
    env["PATH"] = f"{Path(sys.executable).parent}:{environ.get('PATH', '')}:{GUEST_PATH}"
    return sorted(env.items())


def guest_argv(argv: Sequence[str], path: str) -> list[str]:
    """The command with its program as an absolute path, found in ``path`` like a shell would
    (``testbed`` is this installation's, whatever ``path`` says)."""
    argv = list(argv)
    if not argv:
        raise VmError("nothing to run: testbed vm [OPTIONS] -- COMMAND [ARGS...]")
    if "/" in argv[0]:
        return argv
    mine = Path(sys.executable).with_name(argv[0])
    found = (
        str(mine) if argv[0] == "testbed" and mine.exists() else shutil.which(argv[0], path=path)
    )
    if not found:
        hint = f"; for the testbed's own verb: -- testbed {argv[0]}" if argv[0] in VERBS else ""
        err = VmError(f"{argv[0]}: command not found in the guest's PATH{hint}")
        err.exit_code = 127
        raise err
    return [found, *argv[1:]]


def parse_memory(text: str) -> int:
    """``2048``, ``2048M``, ``2G`` → MiB."""
    m = re.fullmatch(r"(\d+)\s*([MmGg]i?[Bb]?)?", text.strip())
    if not m:
        raise VmError(f"--memory {text!r}: give MiB (2048) or a size with M or G (2G)")
    mib = int(m.group(1)) * (1024 if m.group(2) and m.group(2)[0] in "Gg" else 1)
    if mib < 256:
        raise VmError(f"--memory {text}: the guest needs at least 256 MiB")
    return mib


def _die_with_parent() -> None:
    """In QEMU's child: SIGKILL it if this process dies, however it dies (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


@dataclass
class GuestRun:
    exit_code: int
    boot_s: float  # QEMU started → the command started
    total_s: float  # QEMU started → QEMU exited
    accel: str
    kernel: Kernel | None = None
    boot_log: str = ""
    notes: list[str] = field(default_factory=list)


class _Console:
    """Splits the guest console into boot log, the command's output and the exit marker."""

    def __init__(self, job: GuestJob, out, verbose: bool) -> None:
        self.out, self.verbose = out, verbose
        self.phase = "boot"  # boot | command | done
        self.pending = b""
        self.boot = bytearray()
        self.exit_code: int | None = None
        self.started_at: float | None = None
        self.start = job.start_marker.encode()
        self.exit = job.exit_marker.encode()

    def _emit(self, data: bytes) -> None:
        # The guest's serial line ends lines with \r\n; a terminal here adds its own \r.
        data = data.replace(b"\r\n", b"\n")
        self.out.write(data)
        self.out.flush()

    def feed(self, data: bytes) -> None:
        self.pending += data
        while b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
            self._line(line + b"\n")
        # A partial line is shown at once (progress bars), unless it may become the marker.
        if self.phase == "command" and self.pending and not self._maybe_marker(self.pending):
            cut = len(self.pending) - self.pending.endswith(b"\r")  # a \r may precede a \n
            self._emit(self.pending[:cut])
            self.pending = self.pending[cut:]

    def _maybe_marker(self, part: bytes) -> bool:
        if self.exit in part:
            return True
        return any(part.endswith(self.exit[:i]) for i in range(1, len(self.exit)))

    def _line(self, line: bytes) -> None:
        text = line.strip()
        if self.phase == "boot":
            if text.endswith(self.start):  # after whatever the firmware left on the line
                self.phase, self.started_at = "command", time.monotonic()
                return
            self.boot += line
            if self.verbose:
                self._emit(line)
        elif self.phase == "command":
            if self.exit in text:
                if not text.startswith(self.exit):  # the command's last line had no newline
                    self._emit(line[: line.index(self.exit)] + b"\n")
                with contextlib.suppress(ValueError):
                    self.exit_code = int(text.partition(self.exit)[2])
                self.phase = "done"
                return
            self._emit(line)
        elif self.verbose:
            self._emit(line)

    def close(self) -> None:
        if self.pending and self.phase == "command":
            self._emit(self.pending)
        self.pending = b""


def run(
    argv: Sequence[str],
    *,
    kernel: str | None = None,
    memory_mib: int = DEFAULT_MEMORY_MIB,
    cpus: int = DEFAULT_CPUS,
    timeout: float = DEFAULT_TIMEOUT_S,
    boot_timeout: float = DEFAULT_BOOT_TIMEOUT_S,
    shares: Sequence[str] = (),
    env: Sequence[str] = (),
    accel: str = "auto",
    verbose: bool = False,
    out=None,
    log=None,
) -> GuestRun:
    """Boot a guest, run ``argv`` in the current directory there, return its exit code.

    The command's output (stdout and stderr, merged) goes to ``out`` (bytes) as it comes; this
    function's own messages go to ``log``. QEMU is always gone when this returns or raises.
    """
    out = out or sys.stdout.buffer
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if platform.machine() not in ("x86_64", "AMD64"):
        raise VmError(f"testbed vm boots x86_64 guests; this machine is {platform.machine()}")
    qemu = _which(QEMU)
    if not qemu:
        raise VmError(f"{QEMU} is not installed (Debian/Ubuntu package qemu-system-x86)")
    cwd = os.path.realpath(os.getcwd())
    rw: list[str] = []
    for d in [cwd, *shares]:
        p = os.path.realpath(d)
        if not os.path.isdir(p):
            raise VmError(f"--share {d}: not a directory")
        if p == "/":
            raise VmError("refusing to share / read-write with the guest: run from a project dir")
        if p not in rw:
            rw.append(p)
    environment = guest_env(env)
    command = guest_argv(argv, dict(environment)["PATH"])
    if str(cache_dir()).startswith("/run/"):
        raise VmError(f"the VM cache {cache_dir()} must not be under /run (the guest's own /run)")
    k = ensure_kernel(kernel, log)
    toolbox = find_toolbox(log)
    initramfs = ensure_initramfs(k, toolbox)
    notes: list[str] = []
    if accel == "auto":
        ok, why = kvm_status(k, initramfs, qemu)
        accel = "kvm" if ok else "tcg"
        notes.append(why)
    if accel == "tcg":
        log(
            f"vm: no KVM ({notes[-1] if notes else 'tcg requested'}): software emulation (TCG), "
            "10-30x slower than this machine: timings measured in the guest are not its own"
        )
    term = out.isatty() if hasattr(out, "isatty") else False
    size = shutil.get_terminal_size((100, 40))
    shares_t = tuple(Share(f"share{i}", p) for i, p in enumerate(rw))
    # The command may want to know: timing claims do not hold under software emulation.
    environment = sorted([*environment, ("TESTBED_VM_ACCEL", accel)])
    job = GuestJob(
        argv=tuple(command),
        cwd=cwd,
        env=tuple(environment),
        shares=shares_t,
        modules=str(k.modules),
        modprobe=_which("modprobe") or "/sbin/modprobe",
        token=secrets.token_hex(8),
        hostname=socket.gethostname() or "testbed-vm",
        tty=term,
        columns=size.columns,
        lines=size.lines,
    )
    job_dir = tempfile.mkdtemp(prefix="testbed-vm-")
    (Path(job_dir) / "stage2.sh").write_text(stage2_script(job, busybox=bool(toolbox.busybox)))
    cfg = VmConfig(
        kernel=str(k.boot_image),
        initramfs=str(initramfs),
        job_dir=job_dir,
        shares=shares_t,
        memory_mib=memory_mib,
        cpus=cpus,
        accel=accel,
        privileged=os.geteuid() == 0,
    )
    log(
        f"vm: {k.package} ({k.release}), {accel}, {cpus} CPU(s), {memory_mib} MiB; "
        f"sharing {', '.join(rw)} read-write"
    )
    console = _Console(job, out, verbose)
    proc = None
    qemu_err = bytearray()
    t0 = time.monotonic()
    total = 0.0
    old_term = None
    try:
        with contextlib.suppress(ValueError):  # not the main thread: Ctrl-C only
            old_term = signal.signal(signal.SIGTERM, _raise_interrupt)
        proc = subprocess.Popen(
            qemu_argv(cfg, qemu),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches only us, and we stop QEMU
            preexec_fn=_die_with_parent,
        )
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        open_streams = 2
        while open_streams:
            now = time.monotonic()
            if console.phase == "boot" and now - t0 > boot_timeout:
                raise VmError(
                    f"the guest did not start the command within {boot_timeout:.0f} s"
                    + _tail(console.boot)
                )
            if now - t0 > timeout:
                raise VmError(f"timed out after {timeout:.0f} s (--timeout); the guest is stopped")
            for key, _ in sel.select(timeout=1.0):
                data = os.read(key.fileobj.fileno(), 65536)
                if not data:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif key.data == "out":
                    console.feed(data)
                else:
                    qemu_err += data
        console.close()
        proc.wait(timeout=30)
        total = time.monotonic() - t0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()  # only the QEMU this call started, by its pid
            proc.wait()
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
        exit_file = Path(job_dir) / "exit"
        code_from_file = exit_file.read_text().strip() if exit_file.exists() else ""
        shutil.rmtree(job_dir, ignore_errors=True)
    code = int(code_from_file) if code_from_file.isdigit() else console.exit_code
    if code is None:
        where = "before the command started" if console.phase == "boot" else "during the command"
        err = qemu_err.decode(errors="replace").strip()
        raise VmError(
            f"the guest stopped {where} (QEMU exit status {proc.returncode})"
            + (f"; QEMU said: {err}" if err else "")
            + _tail(console.boot)
        )
    boot = (console.started_at or t0) - t0
    return GuestRun(code, boot, total, accel, k, console.boot.decode(errors="replace"), notes)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _tail(boot: bytes | bytearray, n: int = 15) -> str:
    """The console's last lines before the guest gave up (a kernel panic's trace left out)."""
    text = bytes(boot).decode(errors="replace").replace("\r", "")
    head, panic, rest = text.partition("Kernel panic")
    if panic:
        text = head + panic + rest.split("\n", 1)[0]
    lines = text.strip().splitlines()[-n:]
    return "; console:\n  " + "\n  ".join(lines) if lines else ""


# -- the command line -------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``testbed vm`` (shared by the CLI and ``python -m testbed.vm``)."""
    p.add_argument(
        "--kernel",
        metavar="PACKAGE",
        help="kernel package (default: linux-image-amd64, or linux-image-generic on Ubuntu), "
        "a concrete one like linux-image-6.1.0-50-amd64, or a .deb file",
    )
    p.add_argument("--memory", default=str(DEFAULT_MEMORY_MIB), help="guest memory, MiB or 2G")
    p.add_argument("--cpus", type=int, default=DEFAULT_CPUS, help="guest CPUs")
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
        help="auto: KVM if a guest really boots on it (tried once, remembered), else TCG",
    )
    p.add_argument("--verbose", action="store_true", help="show the guest's boot messages")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def cmd(args: argparse.Namespace) -> int:
    """``testbed vm``: run the command in a guest, return its exit code."""
    argv = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if args.cpus < 1:
        raise VmError("--cpus must be at least 1")
    result = run(
        argv,
        kernel=args.kernel,
        memory_mib=parse_memory(args.memory),
        cpus=args.cpus,
        timeout=args.timeout,
        shares=args.share,
        env=args.env,
        accel=args.accel,
        verbose=args.verbose,
    )
    print(
        f"vm: exit code {result.exit_code}; the command started {result.boot_s:.1f} s after "
        f"QEMU, the guest was gone after {result.total_s:.1f} s ({result.accel})",
        file=sys.stderr,
    )
    return result.exit_code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.vm", description=__doc__.splitlines()[0])
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
