"""A machine's ends of the VXLAN cables of a topology over several machines, and its underlay.

Each end is made in the machine's own namespace (the initial one on a real machine; a namespace
standing for a machine in the tests) and moved into its wire or gateway namespace under the
planned name (``testbed.plan.render.cable_batch``): the device keeps its UDP socket on the
underlay, where it was made. It goes with the namespace it was moved into, like a veth.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from testbed.core.errors import NetError
from testbed.net.batches import run_batches

if TYPE_CHECKING:
    from testbed.plan.model import NetworkPlan

PING_RTT = re.compile(r"time=([0-9.]+) ms")


@dataclass(frozen=True)
class Underlay:
    """Where this machine's part of a topology sits: its name, every machine's underlay
    address, and the namespace that stands for this machine (None: the initial one)."""

    machine: str
    addresses: dict[str, str] = field(default_factory=dict)
    netns: str | None = None

    def ip(self) -> list[str]:
        """``ip`` run in this machine's own namespace."""
        return ["ip", *(["-n", self.netns] if self.netns else [])]

    def exec(self, argv: list[str]) -> list[str]:
        return [*(["ip", "netns", "exec", self.netns] if self.netns else []), *argv]


def make(plan: NetworkPlan, underlay: Underlay) -> None:
    """This machine's cable ends, in their wire or gateway namespaces."""
    from testbed.plan.render import cable_batch

    try:
        lines = cable_batch(plan, underlay.machine, underlay.addresses)
    except (ValueError, KeyError) as exc:
        raise NetError(f"VXLAN cables on {underlay.machine}: {exc}") from None
    if lines:
        run_batches([(underlay.ip(), lines)])


def rtt(underlay: Underlay, peer: str, count: int = 10, interval: float = 0.05) -> list[float]:
    """Round-trip times (s) of ``count`` ICMP echoes from this machine to ``peer``'s underlay
    address (the kernel answers them: nothing runs on the peer)."""
    addr = str(ipaddress.IPv4Address(underlay.addresses[peer]))
    argv = ["ping", "-n", "-c", str(count), "-i", str(interval), "-W", "2", addr]
    r = subprocess.run(underlay.exec(argv), capture_output=True, text=True, timeout=30)
    got = [float(v) / 1e3 for v in PING_RTT.findall(r.stdout)]
    if not got:
        raise NetError(
            f"underlay: {underlay.machine} gets no echo from {peer} ({addr}): "
            f"{(r.stderr or r.stdout).strip()[-200:]}"
        )
    return got
