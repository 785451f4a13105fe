"""The guest's kernel: a distribution package resolved, fetched, unpacked and indexed once into a
cache reused between runs.

``linux-image-amd64`` → ``linux-image-6.1.0-N-amd64`` (``apt-cache depends``, remembered for a
week), ``apt-get download``, ``dpkg -x``, ``depmod``, and the kernel decompressed to an ELF
``vmlinux`` when it has a PVH entry (QEMU boots that directly; decompressing a bzImage under
software emulation takes seconds). Cache: ``/var/cache/multicluster-testbed/kernels/<package>/``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.core.files import atomic_write_bytes, atomic_write_text, locked
from testbed.vm.common import VmError
from testbed.vm.elf import elf_has_pvh_entry, extract_vmlinux

DEFAULT_KERNEL_PACKAGES = ("linux-image-amd64", "linux-image-generic")  # Debian, Ubuntu
RESOLVE_MAX_AGE_S = 7 * 86400  # how long a metapackage's resolution is trusted
CONCRETE_KERNEL = re.compile(r"^linux-image-(unsigned-)?\d")


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
    """A kernel package unpacked in the cache, ready to boot."""

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


def _fresh_resolution(metas: Sequence[str]) -> str | None:
    """A recent resolution whose kernel is cached (``apt-cache depends`` takes seconds)."""
    for meta in metas:
        with contextlib.suppress(OSError):
            memo = _remembered(meta)
            concrete = memo.read_text().strip()
            fresh = time.time() - memo.stat().st_mtime < RESOLVE_MAX_AGE_S
            if fresh and (cache_dir() / "kernels" / concrete / "kernel.json").exists():
                return concrete
    return None


def _apt_depends(meta: str) -> list[str]:
    try:
        r = subprocess.run(
            ["apt-cache", "depends", meta], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_apt_depends(r.stdout) if r.returncode == 0 else []


def resolve_kernel_package(name: str | None) -> str:
    """``--kernel`` (or the distribution's default metapackage) → a concrete kernel package."""
    if name and (name.endswith(".deb") or CONCRETE_KERNEL.match(name)):
        return name
    metas = [name] if name else list(DEFAULT_KERNEL_PACKAGES)
    concrete = _fresh_resolution(metas)
    if concrete:
        return concrete
    for meta in metas:
        deps = _apt_depends(meta)
        if deps:
            with contextlib.suppress(OSError):
                _remembered(meta).parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(_remembered(meta), deps[0] + "\n")
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


def run_tool(argv: Sequence[str], what: str, **kw) -> subprocess.CompletedProcess:
    """Run a preparation step; a VmError saying ``what`` failed and how, if it does."""
    try:
        r = subprocess.run(list(argv), capture_output=True, text=True, **kw)
    except FileNotFoundError as exc:
        raise VmError(f"{what}: {argv[0]} is not installed") from exc
    if r.returncode != 0:
        detail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise VmError(f"{what}: `{shlex.join(argv)}` failed: {' / '.join(detail)}")
    return r


def apt_download(package: str, dest: Path) -> Path:
    """``apt-get download`` ``package`` into ``dest``; the .deb file."""
    argv = ["apt-get", "download", "-q", package]
    if os.geteuid() == 0:
        argv[1:1] = ["-o", "APT::Sandbox::User=root"]  # download straight into a root-only dir
    run_tool(argv, f"downloading kernel package {package}", cwd=dest, timeout=1800)
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
    atomic_write_text(k.home / "kernel.json", json.dumps(info, indent=1) + "\n")


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


def _unpack(deb: Path, root: Path) -> None:
    run_tool(["dpkg", "-x", str(deb), str(root)], f"unpacking {deb.name}", timeout=600)


def _unpack_kernel(package: str, local: Path | None, pdir: Path) -> Kernel:
    """Fetch (unless ``local``), unpack and index the kernel package into ``pdir``."""
    root = pdir / "root"
    deb = local.resolve() if local else apt_download(package, pdir)
    _unpack(deb, root)
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
                _unpack(apt_download(extra, pdir), root)
        mods = _find_modules_root(root)
    if not (mods / release).is_dir():
        raise VmError(f"{deb.name} holds no modules for {release}")
    if mods == root / "usr/lib/modules" and not (root / "lib").exists():
        (root / "lib").symlink_to("usr/lib")  # depmod -b looks in <base>/lib/modules
    run_tool(
        ["depmod", "-b", str(root), release],
        "indexing the kernel's modules (needs depmod: Debian package kmod)",
        timeout=600,
    )
    for deb_file in pdir.glob("*.deb"):
        deb_file.unlink()  # the unpacked tree is what is used; keep the cache small
    return Kernel(package, release, vmlinuz, mods, pdir)


def ensure_kernel(package: str | None, log=print) -> Kernel:
    """The unpacked kernel of ``package``, fetched and prepared once into the cache."""
    package = resolve_kernel_package(package)
    local = Path(package) if package.endswith(".deb") else None
    key = local.name.removesuffix(".deb") if local else package
    pdir = cache_dir() / "kernels" / key
    with locked(pdir.parent / f"{key}.lock"):
        k = _load_kernel(pdir / "kernel.json")
        if k:
            return k
        log(f"vm: fetching kernel package {package} into {pdir} (once; reused afterwards)")
        shutil.rmtree(pdir, ignore_errors=True)
        pdir.mkdir(parents=True)
        k = _with_vmlinux(_unpack_kernel(package, local, pdir))
        _save_kernel(k)
        return k
