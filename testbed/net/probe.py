"""What this kernel and machine offer, found by trying.

Qdiscs are probed by adding each one to a veth inside a throwaway namespace (that also loads the
module on kernels that have modules); congestion controls from /proc and the module tree. Which
link backend that gives a scenario is ``testbed.link.choose``'s decision.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

QDISC_TRIALS = {
    "htb": "htb default 1",
    "bfifo": "bfifo limit 100000",
    "netem": "netem delay 1ms",
    "fq": "fq",
    "fq_codel": "fq_codel",
    "red": "red limit 400000 min 30000 max 90000 avpkt 1000 burst 55 probability 0.02 "
    "bandwidth 10mbit ecn",
    "tbf": "tbf rate 10mbit burst 32kbit latency 10ms",
    "plug": "plug",  # tc has no plug options: the kernel's defaults (a trace's held bins)
}


@dataclass
class KernelFeatures:
    release: str
    root: bool
    netns: bool
    qdiscs: dict[str, bool] = field(default_factory=dict)
    congestion_available: list[str] = field(default_factory=list)
    congestion_loadable: list[str] = field(default_factory=list)
    congestion_allowed: list[str] = field(default_factory=list)
    iptables: str | None = None
    nfqueue: bool = False
    torch: str | None = None
    notes: list[str] = field(default_factory=list)

    def has_qdisc(self, kind: str) -> bool:
        return self.qdiscs.get(kind, False)

    def congestion_supported(self, name: str) -> bool:
        return name in self.congestion_available or name in self.congestion_loadable

    @property
    def userspace_line_possible(self) -> bool:
        return self.nfqueue and self.iptables is not None


def _module_names(release: str, subdir: str, stem: str) -> list[str]:
    base = Path("/lib/modules") / release / "kernel" / subdir
    if not base.is_dir():
        return []
    return sorted(p.name.split(".")[0][len(stem) :] for p in base.glob(f"{stem}*.ko*"))


def _probe_qdiscs() -> tuple[dict[str, bool], list[str]]:
    # Imported here: kernel.py is used by pure callers (plan display) that never probe.
    from testbed.net import registry

    rec = registry.claim(f"probe-{os.getpid()}")
    ns = f"{rec.prefix}-probe"
    result: dict[str, bool] = {}
    notes: list[str] = []
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(
            ["ip", "-n", ns, "link", "add", "p0", "type", "veth", "peer", "name", "p1"],
            check=True,
            capture_output=True,
        )
        # One tc process per trial: batch mode stops at the first failure.
        for kind, args in QDISC_TRIALS.items():
            r = subprocess.run(
                ["tc", "-n", ns, "qdisc", "replace", "dev", "p0", "root", *args.split()],
                capture_output=True,
                text=True,
            )
            result[kind] = r.returncode == 0
    except (OSError, subprocess.CalledProcessError) as exc:
        notes.append(f"qdisc probe failed: {exc}")
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        rec.remove()
    return result, notes


@functools.cache
def probe() -> KernelFeatures:
    """Probe once per process (about 50 ms: one namespace, a handful of tc calls)."""
    release = platform.release()
    root = os.geteuid() == 0
    feats = KernelFeatures(release=release, root=root, netns=Path("/proc/self/ns/net").exists())
    proc = Path("/proc/sys/net/ipv4")
    try:
        feats.congestion_available = (proc / "tcp_available_congestion_control").read_text().split()
        feats.congestion_allowed = (proc / "tcp_allowed_congestion_control").read_text().split()
    except OSError:
        feats.notes.append("cannot read /proc/sys/net/ipv4/tcp_*_congestion_control")
    feats.congestion_loadable = _module_names(release, "net/ipv4", "tcp_")
    feats.iptables = shutil.which("iptables")
    targets = Path("/proc/net/ip_tables_targets")
    feats.nfqueue = (
        Path("/proc/net/netfilter/nfnetlink_queue").exists()
        and targets.exists()
        and "NFQUEUE" in targets.read_text().split()
    ) or bool(_module_names(release, "net/netfilter", "xt_NFQUEUE"))
    if root and shutil.which("tc") and shutil.which("ip"):
        feats.qdiscs, notes = _probe_qdiscs()
        feats.notes += notes
    else:
        feats.notes.append("qdiscs not probed: needs root and iproute2 (ip, tc)")
    import importlib.metadata  # slow to import (~50 ms): only when probing, never at CLI start-up

    try:
        feats.torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        feats.torch = None
    return feats
