"""ELF files, read just enough: is a program static (for the initramfs's busybox), does a kernel
have a PVH entry, and the ELF kernel inside a compressed bzImage (QEMU boots it directly)."""

from __future__ import annotations

import lzma
import shutil
import struct
import subprocess
import zlib

PT_INTERP, PT_NOTE = 3, 4
XEN_ELFNOTE_PHYS32_ENTRY = 18


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
    return bool(segs) and all(t != PT_INTERP for t, _, _ in segs)


def elf_has_pvh_entry(data: bytes) -> bool:
    """True if a vmlinux carries XEN_ELFNOTE_PHYS32_ENTRY: QEMU can boot it directly (PVH)."""
    for p_type, off, size in _elf_segments(data):
        if p_type != PT_NOTE:
            continue
        pos, end = off, off + size
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", data, pos)
            name = data[pos + 12 : pos + 12 + namesz]
            if name == b"Xen\0" and ntype == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            pos += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def _decompress(kind: str, data: bytes) -> bytes:
    """``data`` decompressed, or b"" (a magic number may occur by chance: not an error)."""
    try:
        if kind == "xz":
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(data)
        if kind == "gz":
            return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
        if shutil.which("zstd"):
            return subprocess.run(
                ["zstd", "-dcq"], input=data, capture_output=True, timeout=120
            ).stdout
    except (lzma.LZMAError, zlib.error, subprocess.TimeoutExpired):
        pass
    return b""


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF kernel inside a bzImage (xz, gzip or, with the zstd program, zstd), or None."""
    for magic, kind in (
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
        (b"\x1f\x8b\x08\x00", "gz"),
    ):
        start = bzimage.find(magic)
        while start >= 0:
            out = _decompress(kind, bzimage[start:])
            if out[:4] == b"\x7fELF":
                return out
            start = bzimage.find(magic, start + 1)
    return None
