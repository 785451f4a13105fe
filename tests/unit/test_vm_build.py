"""`testbed vm` (testbed.vm), pure: nothing boots, no root.

QEMU's argv, the initramfs (its plan, the cpio bytes, the /init script) and the job's stage 2
script are built from made-up inputs, the guest scripts shipped as files are checked, and console
output is fed to the splitter. The tests that boot a guest are in tests/guest/test_vm.py.
"""

from __future__ import annotations

import ast
import gzip
import io
import lzma
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testbed import vm

# --- QEMU's argv -------------------------------------------------------------------------------


def config(**kw) -> vm.VmConfig:
    base = {
        "kernel": "/cache/vmlinux",
        "initramfs": "/cache/initramfs.cpio",
        "job_dir": "/tmp/testbed-vm-job",
        "shares": (vm.Share("share0", "/work/project"),),
    }
    return vm.VmConfig(**{**base, **kw})


def option(argv: list[str], flag: str) -> list[str]:
    """Every value given to ``flag`` in ``argv``."""
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_qemu_argv_tcg_boots_the_kernel_with_shares() -> None:
    argv = vm.qemu_argv(config(memory_mib=3072, cpus=3))
    assert argv[0] == vm.QEMU
    for flag in ("-nographic", "-no-reboot", "-nodefaults"):
        assert flag in argv
    assert option(argv, "-accel") == ["tcg"]
    assert option(argv, "-cpu") == ["max"]
    assert option(argv, "-m") == ["3072"]
    assert option(argv, "-smp") == ["3"]
    assert option(argv, "-serial") == ["stdio"]
    assert option(argv, "-kernel") == ["/cache/vmlinux"]
    assert option(argv, "-initrd") == ["/cache/initramfs.cpio"]
    append = option(argv, "-append")[0].split()
    assert {"console=ttyS0", "panic=-1", "cryptomgr.notests"} <= set(append)
    fsdevs = {
        dict(kv.split("=", 1) for kv in f.split(",")[1:])["id"]: f for f in option(argv, "-fsdev")
    }
    devices = option(argv, "-device")
    tags = dict(re.match(r"virtio-9p-pci,fsdev=(\w+),mount_tag=(\w+)", d).groups() for d in devices)
    assert sorted(tags.values()) == ["job", "root", "share0"]
    by_tag = {tag: fsdevs[fs] for fs, tag in tags.items()}
    # the host's root is read-only; the job and the project come back read-write
    assert "path=/," in by_tag["root"] and "readonly=on" in by_tag["root"]
    assert "path=/tmp/testbed-vm-job," in by_tag["job"] and "readonly" not in by_tag["job"]
    assert "path=/work/project," in by_tag["share0"] and "readonly" not in by_tag["share0"]
    assert all("security_model=passthrough" in f for f in fsdevs.values())


def test_qemu_argv_kvm_and_unprivileged() -> None:
    argv = vm.qemu_argv(config(accel="kvm", privileged=False))
    assert option(argv, "-accel") == ["kvm"]
    assert option(argv, "-cpu") == ["host"]
    assert all("security_model=none" in f for f in option(argv, "-fsdev"))


# --- the kernel package and its modules --------------------------------------------------------


def test_apt_depends_of_a_metapackage() -> None:
    text = (
        "linux-image-amd64\n"
        "  Depends: linux-image-6.1.0-50-amd64\n"
        "  Recommends: firmware-linux-free\n"
    )
    assert vm.parse_apt_depends(text) == ["linux-image-6.1.0-50-amd64"]
    assert vm.parse_apt_depends("linux-image-6.1.0-50-amd64\n  Depends: kmod\n") == []
    assert vm.resolve_kernel_package("linux-image-6.1.0-50-amd64") == "linux-image-6.1.0-50-amd64"
    assert vm.resolve_kernel_package("/tmp/k.deb") == "/tmp/k.deb"


V, P9 = "kernel/drivers/virtio", "kernel/net/9p"
MODULES_DEP = f"""\
kernel/fs/overlayfs/overlay.ko:
kernel/fs/9p/9p.ko: {P9}/9pnet.ko kernel/fs/fscache/fscache.ko kernel/fs/netfs/netfs.ko
kernel/fs/fscache/fscache.ko: kernel/fs/netfs/netfs.ko
kernel/fs/netfs/netfs.ko:
{V}/virtio_pci.ko: {V}/virtio_ring.ko {V}/virtio.ko
{V}/virtio.ko: {V}/virtio_ring.ko
{V}/virtio_ring.ko:
{P9}/9pnet.ko:
{P9}/9pnet_virtio.ko.xz: {P9}/9pnet.ko {V}/virtio_ring.ko {V}/virtio.ko
"""


def test_module_load_order_puts_dependencies_first() -> None:
    deps = vm.parse_modules_dep(MODULES_DEP)
    order = vm.module_load_order(["virtio_pci", "9pnet-virtio", "9p", "overlay"], deps)
    names = [vm.module_name(p) for p in order]
    assert sorted(names) == sorted(set(names)), "each module once"
    for path in order:  # everything a module needs is loaded before it
        for dep in deps[path]:
            assert order.index(dep) < order.index(path)
    assert set(names) == {
        "virtio_ring",
        "virtio",
        "virtio_pci",
        "9pnet",
        "9pnet_virtio",
        "netfs",
        "fscache",
        "9p",
        "overlay",
    }


def test_module_load_order_skips_builtins_and_names_missing_modules() -> None:
    deps = vm.parse_modules_dep(MODULES_DEP)
    builtin = ["kernel/drivers/virtio/virtio_pci.ko", "kernel/fs/overlayfs/overlay.ko"]
    names = [
        vm.module_name(p) for p in vm.module_load_order(["virtio_pci", "overlay"], deps, builtin)
    ]
    assert names == []
    with pytest.raises(vm.VmError, match="no module 'sch_netem'"):
        vm.module_load_order(["sch_netem"], deps)


def test_parse_ldd() -> None:
    text = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
        "\tlibgone.so.1 => not found\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n"
    )
    assert vm.parse_ldd(text) == [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib64/ld-linux-x86-64.so.2",
    ]


# --- ELF: static binaries, the PVH entry, vmlinux inside a bzImage ------------------------------


def elf(segments: list[tuple[int, bytes]]) -> bytes:
    """A minimal ELF64 image with the given (p_type, contents) program segments."""
    phoff, phentsize = 64, 56
    data_at = phoff + phentsize * len(segments)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 32, phoff)
    struct.pack_into("<HH", header, 54, phentsize, len(segments))
    phdrs, body = b"", b""
    for p_type, contents in segments:
        phdrs += struct.pack("<IIQQQQQQ", p_type, 0, data_at + len(body), 0, 0, len(contents), 0, 0)
        body += contents
    return bytes(header) + phdrs + body


def note(name: bytes, ntype: int, desc: bytes) -> bytes:
    pad = lambda b: b + b"\0" * (-len(b) % 4)  # noqa: E731
    return struct.pack("<III", len(name), len(desc), ntype) + pad(name) + pad(desc)


def test_elf_static_and_pvh_entry() -> None:
    assert vm.elf_is_static(elf([(1, b"code")]))
    assert not vm.elf_is_static(elf([(3, b"/lib64/ld-linux-x86-64.so.2\0"), (1, b"code")]))
    assert not vm.elf_is_static(b"#!/bin/sh\n")
    pvh = elf([(4, note(b"GNU\0", 3, b"id") + note(b"Xen\0", 18, b"\0\0\0\x01"))])
    assert vm.elf_has_pvh_entry(pvh)
    assert not vm.elf_has_pvh_entry(elf([(4, note(b"Xen\0", 6, b"linux\0"))]))


def test_extract_vmlinux_from_xz_and_gzip_images() -> None:
    kernel = elf([(1, b"kernel text" * 100)])
    setup = b"MZ\x00boot sector and setup code\x00" * 10
    assert vm.extract_vmlinux(setup + lzma.compress(kernel) + b"trailer") == kernel
    assert vm.extract_vmlinux(setup + gzip.compress(kernel)) == kernel
    assert vm.extract_vmlinux(setup) is None


# --- the initramfs -----------------------------------------------------------------------------


def read_cpio(data: bytes) -> dict[str, tuple[int, bytes, tuple[int, int]]]:
    """A "newc" archive → {name: (mode, data, (rdev major, minor))}."""
    members, pos = {}, 0
    while True:
        assert data[pos : pos + 6] == b"070701"
        f = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        mode, size, rdev, namesize = f[1], f[6], (f[9], f[10]), f[11]
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        if name == "TRAILER!!!":
            return members
        members[name] = (mode, data[pos : pos + size], rdev)
        pos += size
        pos += -pos % 4


def test_initramfs_with_busybox(tmp_path: Path) -> None:
    box = tmp_path / "busybox"
    box.write_bytes(b"\x7fELF static busybox")
    ko = tmp_path / "9p.ko"
    ko.write_bytes(b"module bytes")
    init = vm.init_script(["00-9p.ko"], busybox=True)
    plan = vm.initramfs_plan(vm.Toolbox(busybox=str(box)), [("00-9p.ko", str(ko))], init)
    out = io.BytesIO()
    vm.write_cpio(plan, out)
    members = read_cpio(out.getvalue())
    mode, data, _ = members["init"]
    assert stat.S_ISREG(mode) and mode & 0o111 and data.decode() == init
    mode, _, rdev = members["dev/console"]
    assert stat.S_ISCHR(mode) and rdev == (5, 1)
    assert members["bin/busybox"][1] == b"\x7fELF static busybox"
    for applet in ("sh", "mount", "insmod", "switch_root"):
        mode, target, _ = members[f"bin/{applet}"]
        assert stat.S_ISLNK(mode) and target == b"busybox"
    assert members["modules/00-9p.ko"][1] == b"module bytes"
    for d in ("proc", "sys", "run", "lower", "rw", "newroot"):
        assert stat.S_ISDIR(members[d][0])


def test_initramfs_with_host_binaries_keeps_library_paths() -> None:
    box = vm.Toolbox(
        binaries=(("sh", "/usr/bin/dash"), ("insmod", "/usr/bin/kmod")),
        libraries=("/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"),
    )
    plan = {e.path: e for e in vm.initramfs_plan(box, [], vm.init_script([], busybox=False))}
    assert plan["bin/sh"].source == "/usr/bin/dash"
    assert plan["bin/insmod"].source == "/usr/bin/kmod"
    assert plan["lib64/ld-linux-x86-64.so.2"].source == "/lib64/ld-linux-x86-64.so.2"
    for d in ("lib", "lib/x86_64-linux-gnu", "lib64"):
        assert stat.S_ISDIR(plan[d].mode)


def shell_syntax_ok(script: str) -> None:
    sh = shutil.which("dash") or shutil.which("sh")
    r = subprocess.run([sh, "-n"], input=script, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def setting(script: str, name: str) -> str:
    """The value a generated script's head gives ``name`` (``NAME=value``, shell-quoted)."""
    m = re.search(rf"^{name}=(.*)$", script, re.MULTILINE)
    assert m, f"{name} is not set"
    return shlex.split(m.group(1))[0] if m.group(1) else ""


def test_guest_scripts_are_shipped_files() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert "guest/*.sh" in pyproject["tool"]["setuptools"]["package-data"]["testbed.vm"]
    guest = Path(vm.__file__).with_name("guest")
    for name in ("init.sh", "stage2.sh"):
        text = (guest / name).read_text()
        assert text.startswith("#!/bin/sh\n")
        shell_syntax_ok(text)


@pytest.mark.parametrize("busybox", [True, False])
def test_init_script(busybox: bool) -> None:
    init = vm.init_script(["00-virtio.ko", "01-9p.ko"], busybox=busybox)
    shell_syntax_ok(init)
    lines = init.splitlines()
    # the modules, in load order, each insmod'ed or the boot fails
    assert setting(init, "MODULES").split() == ["00-virtio.ko", "01-9p.ko"]
    loop = lines.index("for m in $MODULES; do")
    assert lines[loop + 1].strip() == 'insmod "/modules/$m" || fail "insmod $m"'
    assert re.search(r"mount -t 9p -o \S*\bro\b\S* root /lower", init)
    assert "upperdir=/rw/upper" in init and "lowerdir=/lower" in init
    assert setting(init, "MSIZE") == str(vm.MSIZE)
    assert '-o "trans=virtio,version=9p2000.L,msize=$MSIZE" job ' + vm.JOB_DIR_GUEST in init
    assert lines[-1].startswith("exec switch_root /newroot ")
    assert lines[-1].endswith(f"{vm.JOB_DIR_GUEST}/stage2.sh")
    # busybox's switch_root moves no mounts; util-linux's does
    assert setting(init, "BUSYBOX") == ("1" if busybox else "")
    moves = init[init.index('if [ -n "$BUSYBOX" ]; then') : init.index("\nfi\n")]
    assert 'mount --move "/$d" "/newroot/$d"' in moves and "dev proc sys run" in moves


def job(**kw) -> vm.GuestJob:
    base = {
        "argv": ("/venv/bin/testbed", "run", "it's.yaml"),
        "cwd": "/work/my project",
        "env": (("HOME", "/root"), ("TESTBED_X", "a b")),
        "shares": (
            vm.Share("share1", "/work/my project/out"),
            vm.Share("share0", "/work/my project"),
        ),
        "modules": "/var/cache/x/root/lib/modules",
        "token": "t0k",
    }
    return vm.GuestJob(**{**base, **kw})


@pytest.mark.parametrize("busybox", [True, False])
@pytest.mark.parametrize("tty", [True, False])
def test_stage2_script(busybox: bool, tty: bool) -> None:
    script = vm.stage2_script(job(tty=tty), busybox=busybox)
    shell_syntax_ok(script)
    assert setting(script, "BB") == (f"{vm.GUEST_DIR}/bin/busybox" if busybox else "")
    assert setting(script, "KMODULES") == "/var/cache/x/root/lib/modules"
    assert '$BB mount --bind "$KMODULES" /lib/modules' in script
    # shares mounted parents first, at their own paths
    outer = script.index("share share0 '/work/my project'\n")
    inner = script.index("share share1 '/work/my project/out'\n")
    assert outer < inner
    assert setting(script, "MSIZE") == str(vm.MSIZE)
    assert '$BB mount -t 9p -o "trans=virtio,version=9p2000.L,msize=$MSIZE${3:+,$3}" "$1" "$2"' in (
        script
    )
    assert script.index("job_shares() {") < script.index("\njob_shares\n")  # defined, then run
    assert "ip link set lo up" in script
    assert "dctcp" in setting(script, "CONGESTION").split()
    assert 'mods="$mods tcp_$cc"' in script and "tcp_allowed_congestion_control" in script
    assert "export TESTBED_X='a b'" in script
    assert setting(script, "CWD") == "/work/my project" and 'cd "$CWD"' in script
    assert "/venv/bin/testbed run 'it'\"'\"'s.yaml'\n" in script  # job_command's body
    assert "job_command </dev/null" in script
    assert setting(script, "START_MARKER") == "@@testbed-vm:t0k:start"
    assert setting(script, "EXIT_MARKER") == "@@testbed-vm:t0k:exit="
    assert script.index('echo "$START_MARKER"') < script.index('echo "$EXIT_MARKER$rc"')
    assert setting(script, "TTY") == ("1" if tty else "0")  # a pipe unless on a terminal
    piped = script.split('if [ "$TTY" = 1 ]; then')[-1].split("else")[1]
    assert "| $BB cat" in piped
    assert "echo o > /proc/sysrq-trigger" in script


def test_stage2_script_without_shares_or_environment_is_valid_shell() -> None:
    shell_syntax_ok(vm.stage2_script(job(shares=(), env=()), busybox=True))


def test_stage2_functions_run_the_job(tmp_path: Path) -> None:
    """The generated head of stage 2 (settings and functions, no body) run by sh here: the
    shares in order, the environment, and the command with its exit status."""
    command = ("/bin/sh", "-c", 'echo "$TESTBED_X" > out; exit 4')
    script = vm.stage2_script(job(argv=command), busybox=True)
    head = script.split("\n#!/bin/sh\n")[0]  # the body, guest/stage2.sh, starts with its own
    probe = (
        head
        + '\nshare() { echo "share $*" >> shares; }\njob_shares\njob_env\n'
        + "job_command; echo $? > rc\n"
    )
    subprocess.run(["sh", "-c", probe], cwd=tmp_path, check=True)
    assert (tmp_path / "shares").read_text().splitlines() == [
        "share share0 /work/my project",
        "share share1 /work/my project/out",
    ]
    assert (tmp_path / "out").read_text() == "a b\n"
    assert (tmp_path / "rc").read_text() == "4\n"


def test_allowed_congestion_list_grows_without_a_leading_space(tmp_path: Path) -> None:
    """The loop of stage 2, against a stand-in for the sysctl that refuses unknown names."""
    script = vm.stage2_script(job(congestion=("reno", "nope", "dctcp")), busybox=False)
    start = script.index("allowed=")
    loop = script[start : script.index("done\n", start) + 5]
    sysctl = tmp_path / "allowed"
    fake = (
        f"CONGESTION={shlex.quote(setting(script, 'CONGESTION'))}\n"
        f'write() {{ case "$1" in *nope*|\' \'*) return 1;; esac; echo "$1" > {sysctl}; }}\n'
        + loop.replace(
            'echo "$try" > /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null',
            'write "$try"',
        )
    )
    subprocess.run(["sh", "-c", fake], check=True)
    assert sysctl.read_text().strip() == "reno dctcp"


# --- console, environment, command -------------------------------------------------------------


class Sink(io.BytesIO):
    def isatty(self) -> bool:
        return False


def test_console_separates_boot_output_and_exit_code() -> None:
    j = job()
    out = Sink()
    con = vm.Console(j, out, verbose=False)
    stream = (
        b"\x1bc\x1b[?7lSeaBIOS\r\nBooting from ROM..@@testbed-vm:t0k:start\r\n"
        b"hello\r\nprogress 10%\rprogress 20%"
        b"\r\nno newline@@testbed-vm:t0k:exit=3\r\n[ 9.1] reboot: Power down\r\n"
    )
    for i in range(0, len(stream), 7):  # arbitrary chunk boundaries
        con.feed(stream[i : i + 7])
    con.close()
    assert out.getvalue() == b"hello\nprogress 10%\rprogress 20%\nno newline\n"
    assert con.exit_code == 3
    assert b"SeaBIOS" in con.boot and con.started_at is not None


def test_guest_env_and_argv(tmp_path: Path) -> None:
    environ = {"HOME": "/root", "SSH_AUTH_SOCK": "/x", "TESTBED_STATE_DIR": "/s", "PATH": "/p"}
    env = dict(vm.guest_env(["A=1", "HOME"], environ))
    assert env["A"] == "1" and env["HOME"] == "/root" and env["TESTBED_STATE_DIR"] == "/s"
    assert "SSH_AUTH_SOCK" not in env
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)
    with pytest.raises(vm.VmError):
        vm.guest_env(["1BAD=x"], environ)
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert vm.guest_argv(["tool", "-x"], str(tmp_path)) == [str(tool), "-x"]
    assert vm.guest_argv(["./rel"], "") == ["./rel"]
    if Path(sys.executable).with_name("testbed").exists():
        assert vm.guest_argv(["testbed", "doctor"], "")[0] == str(
            Path(sys.executable).with_name("testbed")
        )
    with pytest.raises(vm.VmError) as exc:
        vm.guest_argv(["no-such-program-here"], str(tmp_path))
    assert exc.value.exit_code == 127


def test_parse_memory() -> None:
    assert vm.parse_memory("2048") == 2048
    assert vm.parse_memory("3G") == 3072
    assert vm.parse_memory("512MiB") == 512
    for bad in ("lots", "100"):
        with pytest.raises(vm.VmError):
            vm.parse_memory(bad)


def test_kvm_probe_is_a_standalone_program() -> None:
    """It runs by its path in a child that may hang on a broken KVM: nothing of the testbed."""
    source = vm.qemu.KVM_PROBE.read_text()
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "ctypes", "fcntl", "mmap", "os", "struct", "sys"}
    assert 'if __name__ == "__main__":' in source
