"""The guest's initramfs: programs, the kernel's modules for a 9p root, and ``/init``.

Programs: a static busybox, this machine's or the ``busybox-static`` package fetched into the
cache (each program start costs ~10 ms under TCG, against ~100 ms for a dynamically linked
one), else this machine's ``sh``, ``mount``, ``mkdir``, ``switch_root`` and kmod with the
libraries ``ldd`` names. Modules: virtio/9p/overlay in load order from ``modules.dep``.
``/init``: ``guest/init.sh`` below its settings. Written here as an uncompressed "newc" cpio
archive, cached per kernel by the hash of its inputs.
"""

from __future__ import annotations

import hashlib
import io
import lzma
import os
import re
import shutil
import stat
import subprocess
import tempfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.core.files import atomic_write, locked
from testbed.vm.common import MSIZE, VmError, guest_script, shell_settings, which
from testbed.vm.elf import elf_is_static
from testbed.vm.kernel import Kernel, apt_download, cache_dir, run_tool

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


# -- the kernel's modules ---------------------------------------------------------------------
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


# -- the programs -----------------------------------------------------------------------------
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

    # busybox applets init.sh and stage2.sh use (busybox runs its applets without exec'ing)
    APPLETS = ("sh", "mount", "mkdir", "cp", "switch_root", "insmod")


def _static_busybox(log=print) -> str | None:
    """A statically linked busybox: this machine's, else the busybox-static package fetched
    and unpacked into the cache (never installed: it conflicts with Debian's busybox)."""
    bb = which("busybox")
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
            deb = apt_download("busybox-static", home)
            run_tool(["dpkg", "-x", str(deb), str(home / "root")], "unpacking busybox-static")
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
        found = next((p for p in map(which, candidates) if p), None)
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


# -- the archive ------------------------------------------------------------------------------
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
    """The initramfs's ``/init``: ``guest/init.sh`` below its settings.

    ``modules`` are file names in ``/modules``, in load order (names without blanks).
    """
    settings = [("MODULES", " ".join(modules)), ("MSIZE", str(msize))]
    settings.append(("BUSYBOX", "1" if busybox else ""))
    head = shell_settings("testbed vm: initramfs /init (testbed/vm/initramfs.py)", settings)
    return "\n".join(head) + "\n" + guest_script("init.sh")


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

        def write(part: Path) -> None:
            # Uncompressed: the kernel unpacks it faster than it would gunzip it under TCG.
            with open(part, "wb") as f:
                write_cpio(initramfs_plan(toolbox, plain, init), f)

        atomic_write(image, write)
    return image
