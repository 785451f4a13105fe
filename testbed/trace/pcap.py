"""Headers-only, size-capped packet capture inside namespaces (one tcpdump per interface).

This module owns starting, supervising and stopping the ``tcpdump`` processes that write pcap
files of WAN interfaces, and turning tcpdump's closing statistics into a dict per capture. It does
not parse the files: ``analysis.flows`` does, without importing the network layer.

    im = tb.plan.wan[0].impairment
    specs = [CaptureSpec(im.ns, im.ingress_if, out / "in.pcap", "east->west@to-east")]
    with PcapCapture(specs, record=tb.record) as cap:
        ...                      # traffic
    cap.stats                    # [{label, path, packets, dropped_by_kernel, bytes, truncated}]

The size cap is a packet count (``-c N``), which keeps a run's beginning where tcpdump's ``-C``
would keep its end; why that and each other tcpdump option: docs/traces.md, "Packet capture".
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core.errors import TestbedError
from testbed.net import procs

if TYPE_CHECKING:
    from testbed.net.registry import Record

RECORD_OVERHEAD = 16  # bytes of the pcap record header in front of every captured packet
FILE_HEADER = 24  # bytes of the pcap file header
START_TIMEOUT = 10.0  # s until tcpdump must say "listening on"
STOP_TIMEOUT = 10.0  # s after SIGINT until tcpdump must have exited (then SIGKILL)
STAT = re.compile(r"^(\d+) packets? (captured|received by filter|dropped by kernel)", re.M)


class CaptureError(TestbedError):
    """A packet capture could not start (bad interface, namespace, or tcpdump missing)."""


@dataclass
class CaptureSpec:
    """One interface to capture: ``label`` names it in results, e.g. "east->west@to-east"."""

    ns: str
    ifname: str
    path: Path
    label: str


@dataclass
class _Running:
    spec: CaptureSpec
    proc: subprocess.Popen
    stderr: bytes  # what was read before "listening on"; the rest is read at stop


class PcapCapture:
    """tcpdump on each of ``specs``; a context manager (start on enter, stop on exit)."""

    def __init__(
        self,
        specs: list[CaptureSpec],
        snaplen: int = 128,
        max_bytes: int = 64 << 20,
        record: Record | None = None,
        *,
        buffer_kib: int = 4096,
    ) -> None:
        if snaplen < 68:
            raise CaptureError(f"snaplen {snaplen} is too small for Ethernet+IPv4+TCP; use >= 68")
        self.specs = list(specs)
        self.snaplen = snaplen
        self.max_bytes = max_bytes
        # The cap as a packet count (see the module docstring): each record is <= snaplen + 16.
        self.max_packets = max_bytes // (snaplen + RECORD_OVERHEAD)
        if self.max_packets < 1:
            raise CaptureError(
                f"max_bytes {max_bytes} holds no packet of snaplen {snaplen}; "
                f"use at least {snaplen + RECORD_OVERHEAD}"
            )
        self.record = record
        self.buffer_kib = buffer_kib  # kernel ring per capture (-B); libpcap's default is 2 MiB
        self.running: list[_Running] = []
        self.stats: list[dict[str, Any]] = []

    # -- lifecycle -------------------------------------------------------------------------
    def argv(self, spec: CaptureSpec) -> list[str]:
        return [
            "ip", "netns", "exec", spec.ns,
            "tcpdump", "-n", "-i", spec.ifname, "-s", str(self.snaplen),
            "-w", str(spec.path), "-Z", "root", "-U", "-c", str(self.max_packets),
            "-B", str(self.buffer_kib), "--immediate-mode", "--time-stamp-precision=nano",
        ]  # fmt: skip

    @property
    def pids(self) -> list[int]:
        return [r.proc.pid for r in self.running]

    def start(self) -> None:
        """Start every capture and return once each is listening; on failure stop them all."""
        if self.running:
            raise CaptureError("capture already started")
        try:
            for spec in self.specs:
                self._start_one(spec)
        except BaseException:
            self.stop()
            raise

    def _start_one(self, spec: CaptureSpec) -> None:
        spec.path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            spec.path.unlink()  # a stale file from an earlier run must not pass for this one
        try:
            proc = subprocess.Popen(
                self.argv(spec), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise CaptureError(f"cannot run {exc.filename!r}: is iproute2 installed?") from None
        run = _Running(spec, proc, b"")
        self.running.append(run)  # before anything can fail, so stop() finds it
        if self.record is not None:
            self.record.add_process(proc.pid, f"tcpdump {spec.label}"[:80])
        assert proc.stderr is not None
        # tcpdump's "listening on" line is its READY; what follows (its closing statistics)
        # stays in the pipe for stop()'s communicate().
        got = procs.wait_ready(
            proc, "listening on", START_TIMEOUT, stream=proc.stderr, substring=True
        )
        run.stderr = got.output.encode()
        if got.timed_out:
            raise CaptureError(
                f"tcpdump on {spec.ns}/{spec.ifname} did not start listening within "
                f"{START_TIMEOUT:.0f} s: {got.output.strip()}"
            )
        if not got:  # tcpdump (or ip netns exec) exited
            proc.wait()
            msg = got.output.strip() or "no message"
            raise CaptureError(
                f"tcpdump on {spec.ns}/{spec.ifname} failed (exit {proc.returncode}): {msg}"
            )

    def stop(self) -> list[dict[str, Any]]:
        """SIGINT every capture by its pid, wait, and return one stats dict per capture.

        Keys: ``label, ns, ifname, path, pid``; ``packets`` (written to the file),
        ``received_by_filter`` and ``dropped_by_kernel`` (tcpdump's closing lines; drops mean the
        ring overflowed and the file misses packets), ``bytes`` (file size), ``max_packets``,
        ``truncated`` (the cap was reached: the file misses the *end* of the run), ``returncode``
        and ``stderr`` (tcpdump's messages, only when its statistics are missing).
        """
        for run in self.running:
            if run.proc.poll() is None:  # Popen knows whether it reaped the pid: never a stranger
                run.proc.send_signal(signal.SIGINT)
        stats = [self._finish(run) for run in self.running]
        self.running = []
        self.stats = stats
        return stats

    def _finish(self, run: _Running) -> dict[str, Any]:
        try:
            _, rest = run.proc.communicate(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            _, rest = run.proc.communicate()
        text = (run.stderr + (rest or b"")).decode(errors="replace")
        counts = {kind: int(n) for n, kind in STAT.findall(text)}
        try:
            size = run.spec.path.stat().st_size
        except FileNotFoundError:
            size = 0
        captured = counts.get("captured", 0)
        return {
            "label": run.spec.label,
            "ns": run.spec.ns,
            "ifname": run.spec.ifname,
            "path": str(run.spec.path),
            "pid": run.proc.pid,
            "packets": captured,
            "received_by_filter": counts.get("received by filter", 0),
            "dropped_by_kernel": counts.get("dropped by kernel", 0),
            "bytes": size,
            "max_packets": self.max_packets,
            # tcpdump exits by itself once -c packets are written: the cap was reached.
            "truncated": captured >= self.max_packets,
            "returncode": run.proc.returncode,
            "stderr": "" if counts else text.strip()[-500:],  # only when the stats are missing
        }

    def __enter__(self) -> PcapCapture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running:
            self.stop()
