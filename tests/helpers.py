"""Helpers shared by the test files (imported as ``helpers``; pytest advises against importing
conftest): unique testbed names of this run, a small default scenario, and delay steps under a
packet stream (the live tests of both link backends), the initial namespace's state (a testbed
leaves it as it was), waiting for a line of a process's output, and an owner script killed
before ``testbed clean`` (what a crashed user's script leaves behind)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

RUN_TAG = f"t{os.getpid()}"


def unique_name(stem: str = "") -> str:
    return f"{RUN_TAG}-{stem + '-' if stem else ''}{secrets.token_hex(2)}"


def scenario(**overrides: Any) -> dict[str, Any]:
    """Two clusters of two hosts and one WAN link; keys in ``overrides`` replace the defaults."""
    data: dict[str, Any] = {
        "name": "test",
        "clusters": {"east": {"hosts": 2}, "west": {"hosts": 2}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit"}],
    }
    data.update(overrides)
    return data


def command_scenario(
    name: str, workload: dict[str, Any], hosts: int = 1, **more: Any
) -> dict[str, Any]:
    """Two clusters of ``hosts`` hosts, a 100 Mbit/s 5 ms WAN, and a command workload."""
    return {
        "name": f"{RUN_TAG}-{name}"[:32],
        "clusters": {"east": {"hosts": hosts}, "west": {"hosts": hosts}},
        "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}],
        "workload": {"kind": "command", **workload},
        **more,
    }


def write_scenario(tmp_path: Path, data: dict[str, Any]) -> Path:
    """``data`` as ``tmp_path``/scenario.yaml."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def two_path_scenario(routing: dict[str, Any]) -> dict[str, Any]:
    """``scenario()`` with one WAN link of two paths (100 Mbit/s; 5 and 10 ms) and ``routing``."""
    paths = [{"rate": "100mbit", "delay": "5ms"}, {"rate": "100mbit", "delay": "10ms"}]
    return scenario(wan=[{"between": ["east", "west"], "paths": paths}], routing=routing)


def delay_steps(
    tb: Any, direction: str, port: int, first: float = 0.030, then: float = 0.010
) -> tuple[int, list[tuple[int, float]], dict[str, int]]:
    """Send a datagram about every ms across ``direction`` of a live testbed for 0.45 s while
    its delay goes ``first`` -> ``then`` (at 0.15 s) -> ``first`` (at 0.30 s), through the link
    backend's ``set_impairments`` (compensated like the bring-up). Returns the number sent, the
    (sequence, kernel receive time) of each arrival in arrival order, and the first sequence
    number sent after each step ("down", "up"). The direction's delay is restored after."""
    import dataclasses
    import socket
    import struct
    import threading
    import time

    from testbed.net import netns

    d = next(d for d in tb.plan.wan if d.name == direction)
    comp = tb.compensation_of(d.name)
    offset = comp.compensation_s if comp else 0.0
    src, dst = f"{d.src}-h0", f"{d.dst}-h0"
    addr = tb.hosts[dst]

    def receiver() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS: kernel receive times
        s.bind((addr, port))
        return s

    rx, tx = netns.run_in(
        [
            (tb.namespace(dst), receiver),
            (tb.namespace(src), lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
        ]
    )
    got: list[tuple[int, float]] = []

    def collect() -> None:
        rx.settimeout(1.0)
        try:
            while True:
                data, anc, _, _ = rx.recvmsg(64, socket.CMSG_SPACE(16))
                sec, nsec = struct.unpack("@qq", anc[0][2][:16])
                got.append((int.from_bytes(data[:4], "big"), sec + nsec * 1e-9))
        except (TimeoutError, OSError):
            return

    def delay(seconds: float) -> None:
        imp = dataclasses.replace(d.impairment, delay=seconds - offset)
        tb.backend.set_impairments({d.name: imp})

    delay(first)
    t = threading.Thread(target=collect)
    t.start()
    steps: dict[str, int] = {}
    seq = 0
    start = time.monotonic()

    def step() -> None:  # beside the sender, which keeps its pace while a step is applied
        for name, at, value in (("down", 0.15, then), ("up", 0.30, first)):
            time.sleep(max(0.0, start + at - time.monotonic()))
            steps[name] = seq
            delay(value)

    stepper = threading.Thread(target=step)
    stepper.start()
    try:
        while time.monotonic() < start + 0.45:
            tx.sendto(seq.to_bytes(4, "big"), (addr, port))
            seq += 1
            time.sleep(0.001)
        stepper.join()
        t.join()
    finally:
        delay(d.delay)
        rx.close()
        tx.close()
    return seq, got, steps


def hold_and_release(
    tb: Any, direction: str, port: int, hold: float = 1.0
) -> tuple[int, list[tuple[int, float]], float, float]:
    """Send a datagram every 10 ms across ``direction`` (a direction that replays a trace) for
    0.2 s, then hold it (``set_rate`` 0: a trace's zero-rate bin) for ``hold`` seconds while
    sending on, then release it at its rate and send 0.2 s more. Returns the number sent, the
    (sequence, kernel receive time) of each arrival in arrival order, and the times of the hold
    and the release, on the receive times' clock (realtime)."""
    import socket
    import struct
    import threading
    import time

    from testbed.net import netns

    d = next(d for d in tb.plan.wan if d.name == direction)
    assert d.traced, f"{direction} replays no trace"
    src, dst = f"{d.src}-h0", f"{d.dst}-h0"
    addr = tb.hosts[dst]

    def receiver() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS: kernel receive times
        s.bind((addr, port))
        return s

    rx, tx = netns.run_in(
        [
            (tb.namespace(dst), receiver),
            (tb.namespace(src), lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM)),
        ]
    )
    got: list[tuple[int, float]] = []

    def collect() -> None:
        rx.settimeout(1.5)
        try:
            while True:
                data, anc, _, _ = rx.recvmsg(64, socket.CMSG_SPACE(16))
                sec, nsec = struct.unpack("@qq", anc[0][2][:16])
                got.append((int.from_bytes(data[:4], "big"), sec + nsec * 1e-9))
        except (TimeoutError, OSError):
            return

    t = threading.Thread(target=collect)
    t.start()
    seq = 0
    times: dict[str, float] = {}

    def send_for(seconds: float) -> None:
        nonlocal seq
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            tx.sendto(seq.to_bytes(4, "big") + bytes(996), (addr, port))
            seq += 1
            time.sleep(0.01)

    try:
        send_for(0.2)
        times["hold"] = time.time()  # the receive times' clock (SO_TIMESTAMPNS: realtime)
        tb.backend.set_rate({d.name: (0, d.buffer)})
        send_for(hold)
        times["release"] = time.time()
        tb.backend.set_rate({d.name: (d.rate, d.buffer)})
        send_for(0.2)
        t.join()
    finally:
        tb.backend.set_rate({d.name: (d.rate, d.buffer)})
        rx.close()
        tx.close()
    return seq, got, times["hold"], times["release"]


def root_namespace_state() -> dict:
    """What the initial namespace holds (links, qdiscs, iptables rules): a testbed adds none."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    qdiscs = subprocess.run(["tc", "qdisc"], capture_output=True, text=True).stdout
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    return {
        "links": sorted(line.split(":")[1].strip() for line in links.splitlines()),
        "qdiscs": qdiscs,
        "rules": [line for line in rules.splitlines() if not line.startswith("#")],
    }


def veths_sharing_their_peers_index(namespaces: list[str]) -> list[dict[str, Any]]:
    """The veth ends in ``namespaces`` whose interface index equals their peer's (the kernel
    then takes the end for a device of its own and brings its carrier back on its slow path,
    up to 1 s with no queue: plan.render.VETH_INDEX)."""
    out = []
    for ns in namespaces:
        r = subprocess.run(["ip", "-n", ns, "-j", "-d", "link", "show"], capture_output=True,
                           text=True, check=True)  # fmt: skip
        for link in json.loads(r.stdout):
            kind = link.get("linkinfo", {}).get("info_kind")
            if kind == "veth" and link.get("link_index") == link["ifindex"]:
                out.append({"ns": ns, **link})
    return out


def wait_for_line(proc: subprocess.Popen, text: str, timeout: float) -> str:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return "".join(seen)
    raise AssertionError(f"{text!r} not printed; got: {''.join(seen)}")


@contextlib.contextmanager
def owner_script(code: str, timeout: float) -> Iterator[tuple[subprocess.Popen, list[str]]]:
    """Run the Python script ``code``, which builds something and prints ``READY field...``;
    yield the process and the fields of that line; the process is killed after."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc, wait_for_line(proc, "READY", timeout).splitlines()[-1].split()[1:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def kill_owner(proc: subprocess.Popen) -> None:
    """SIGKILL: the owner gets no chance to tear anything down."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def testbed_clean() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "clean"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout + r.stderr


def skip_without_mininet() -> None:
    """Skip the calling test, saying what is missing, where the Mininet engine cannot run."""
    import pytest

    from testbed.core.errors import TestbedError
    from testbed.net.engines import MininetEngine

    try:
        MininetEngine().check()
    except TestbedError as exc:
        pytest.skip(str(exc))


def sent_bytes(tb, port: str) -> int:
    """Bytes the HTB class of east's gateway port ``port`` (a path's bottleneck) has sent."""
    return class_counters(tb, port)[0]


def class_counters(tb, port: str) -> tuple[int, int]:
    """(bytes sent, bytes queued now) of the HTB class of east's gateway port ``port``."""
    ns = f"{tb.record.prefix}-east-gw"
    out = subprocess.run(
        ["tc", "-s", "-n", ns, "class", "show", "dev", port], capture_output=True, text=True
    ).stdout
    sent = int(re.search(r"Sent (\d+) bytes", out).group(1))
    backlog = re.search(r"backlog (\d+)b", out)
    return sent, int(backlog.group(1)) if backlog else 0


def flows_over_paths(
    tb, seconds: int = 3, parallel: int = 16, port: int = 5303
) -> tuple[dict[str, int], float]:
    """``parallel`` TCP flows (iperf3) east-h0 -> west-h0 over a link of two paths: bytes per
    path (east's gateway ports p0-west, p1-west), goodput (bit/s). With an L4 hash over two
    paths all ``parallel`` flows land on one path with probability 2^(1-parallel): 16 flows
    make that 3e-5 per call (8 made it 1/128, and CI once met it)."""
    ports = ("p0-west", "p1-west")
    before = {p: sent_bytes(tb, p) for p in ports}
    server = tb.popen("west-h0", ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        argv = ["iperf3", "-c", "west-h0", "-p", str(port), "-t", str(seconds), "-P",
                str(parallel), "-J"]  # fmt: skip
        r = tb.run("east-h0", argv, timeout=seconds + 30)
    finally:
        server.wait(timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    rate = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
    return {p: sent_bytes(tb, p) - before[p] for p in ports}, rate


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie not reaped yet does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ended(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` stops running within ``within`` seconds: a process just sent SIGKILL is
    still ``R`` while the kernel tears it down (tens of ms for a Python process on a busy host),
    so a check right after the kill races with its exit. The limit is a deadline, not a bound."""
    deadline = time.monotonic() + within
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def ctrl_c_default() -> None:
    """A ``preexec_fn`` for a CLI a test will send SIGINT: the terminal's default disposition.
    A process started with SIGINT ignored keeps it ignored (Python installs its handler only
    when it was not): a suite started in the background (`make test &`) and pytest-xdist's
    workers pass it on ignored, where a user's shell would not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
