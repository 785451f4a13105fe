"""Realize a NetworkPlan in the kernel and tear it down: the only module that builds topology.

Building runs the rendered ``ip`` batch in the initial namespace (namespaces, veth pairs); then,
side by side, one ``tc`` batch per namespace with qdiscs, the ``/etc/netns/<ns>/hosts`` and
``resolv.conf`` files that ``ip netns exec`` mounts (a thread), and each namespace's links,
addresses and routes as rtnetlink requests (:mod:`testbed.net.rtnl`, a worker thread: no process
per namespace) followed by its sysctls. Teardown stops the testbed's processes (recorded pids,
and any process living in its namespaces), deletes its namespaces (which removes every veth,
bridge, qdisc and iptables rule inside them) and its files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.core.errors import NetError, UnsupportedError
from testbed.core.nsenter import ETC_NETNS
from testbed.net import cables, netns, registry
from testbed.net.batches import start_batches, wait_batches
from testbed.net.registry import Record

if TYPE_CHECKING:
    from testbed.net.cables import Underlay
    from testbed.net.engines import Engine
    from testbed.net.probe import KernelFeatures
    from testbed.plan.model import NetworkPlan

INIT_ALLOWED_CC = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
ALLOWED_CC_BACKUP = "allowed_congestion.orig"
# No namespace reaches a name server (the initial namespace's is on no emulated path): without
# this file a lookup of a name not in hosts waits out the resolver's timeout (5 s: flent looks
# up one.one.one.one before each ping runner); with no server listed it fails at once.
RESOLV_CONF = "# the testbed's network reaches no name server: its names are in /etc/hosts\n"


def ensure_congestion_allowed(wanted: tuple[str, ...], feats: KernelFeatures) -> None:
    """A non-initial namespace may only select algorithms in the init namespace's allowed list."""
    missing = [c for c in wanted if not feats.congestion_supported(c)]
    if missing:
        raise UnsupportedError(
            f"tcp.congestion: unsupported on this kernel: {', '.join(missing)} "
            f"(available: {', '.join(feats.congestion_available)}); "
            "`testbed doctor` lists what this kernel has"
        )
    # Under the registry lock, like claim() and restore: otherwise a testbed extending the list
    # while the last other one restores it can leave the list grown with no backup to restore.
    with registry.locked():
        allowed = INIT_ALLOWED_CC.read_text().split()
        needed = [c for c in wanted if c not in allowed]
        if not needed:
            return
        backup = registry.STATE_DIR / ALLOWED_CC_BACKUP
        if not backup.exists():
            backup.write_text(" ".join(allowed))
        try:
            INIT_ALLOWED_CC.write_text(" ".join(allowed + needed))
        except OSError as exc:
            raise UnsupportedError(
                f"cannot allow congestion control {', '.join(needed)} in namespaces: {exc.strerror}"
            ) from None


def restore_congestion_allowed() -> None:
    """Put back the init namespace's allowed list once no testbed needs it any more."""
    backup = registry.STATE_DIR / ALLOWED_CC_BACKUP
    with registry.locked():
        if backup.exists() and not registry.records():
            with contextlib.suppress(OSError):
                INIT_ALLOWED_CC.write_text(backup.read_text())
            backup.unlink(missing_ok=True)


def write_hosts_files(plan: NetworkPlan) -> None:
    """One hosts file and one resolv.conf (:data:`RESOLV_CONF`) for the testbed, hard-linked
    into every namespace's directory: a link is one system call, a new file three (164
    namespaces at 8 clusters x 16 hosts)."""
    files = {"hosts": plan.hosts_file(), "resolv.conf": RESOLV_CONF}
    first: dict[str, str] = {}
    for ns in plan.namespaces:
        d = os.path.join(ETC_NETNS, ns.name)
        os.makedirs(d, exist_ok=True)
        for name, text in files.items():
            path = os.path.join(d, name)
            if name in first:
                try:
                    os.link(first[name], path)
                    continue
                except OSError:  # a stale file of a crashed run: write this one anew
                    pass
            with open(path, "w") as f:
                f.write(text)
            first.setdefault(name, path)


def build(
    plan: NetworkPlan,
    rec: Record,
    feats: KernelFeatures,
    tc: dict[str, list[str]],
    engine: Engine,
    namespaces_made: Callable[[], None] | None = None,
    underlay: Underlay | None = None,
) -> None:
    """Create every kernel object of ``plan``, with ``tc``'s qdiscs (namespace -> batch lines,
    which the link backend renders). The record must already be saved (for clean).
    ``engine`` makes the namespaces and veth pairs (testbed.net.engines);
    ``namespaces_made`` is called once they exist, before anything is configured in them (the
    link backend starts its slow parts then, side by side). With ``underlay``, ``plan`` is
    this machine's part of a topology over several: its VXLAN cable ends are made right after
    the namespaces (testbed.net.cables)."""
    from testbed.net import rtnl
    from testbed.plan.render import ip_ops

    ensure_congestion_allowed(plan.congestion, feats)
    rec.namespaces = [ns.name for ns in plan.namespaces]
    rec.hosts = plan.names()
    rec.save()
    engine.create(plan, rec)
    if underlay is not None:
        cables.make(plan, underlay)
    if namespaces_made is not None:
        namespaces_made()
    # Side by side from here (2+ cores; each mostly waits in the kernel): the qdiscs (they need
    # the interfaces only, not their addresses), the hosts files (needed only once commands
    # run) in a thread, and links, addresses and routes (rtnl's worker thread), then sysctls.
    tc_jobs = start_batches([(["tc", "-n", ns], lines) for ns, lines in tc.items()])
    hosts_error: list[OSError] = []
    hosts = threading.Thread(
        target=_collect_error(lambda: write_hosts_files(plan), hosts_error), name="hosts-files"
    )
    hosts.start()
    try:
        rtnl.apply(ip_ops(plan))
        try:
            netns.write_sysctls({ns.name: ns.sysctls for ns in plan.namespaces})
        except OSError as exc:
            raise NetError(f"writing sysctls failed: {exc}") from None
    except BaseException:
        hosts.join()  # nothing of the build outlives its failure, whose error is the first
        with contextlib.suppress(NetError):
            wait_batches(tc_jobs)
        raise
    hosts.join()
    wait_batches(tc_jobs)
    if hosts_error:
        raise NetError(f"writing the hosts files failed: {hosts_error[0]}")


def _collect_error(fn: Callable[[], None], errors: list[OSError]) -> Callable[[], None]:
    def run() -> None:
        try:
            fn()
        except OSError as exc:
            errors.append(exc)

    return run


def stop_processes(rec: Record, grace: float = 2.0) -> None:
    """SIGTERM the testbed's processes, SIGKILL what is left after ``grace`` seconds.

    Targets are the recorded (pid, start time) pairs and the processes living in the testbed's
    namespaces; nothing is ever found by name."""
    targets = {pid for pid, start, _ in rec.processes if registry.process_alive(pid, start)} | set(
        netns.pids_in(rec.namespaces)
    )
    targets.discard(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 1.0)
        while targets and time.monotonic() < deadline:
            _reap(targets)  # our own children first: they would linger as zombies otherwise
            targets = {p for p in targets if registry.process_start(p) is not None}
            if targets:
                time.sleep(0.02)
        if not targets:
            return


def _reap(pids: set[int]) -> None:
    """Collect our own exited children so they do not linger as zombies."""
    for pid in list(pids):
        with contextlib.suppress(ChildProcessError, OSError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                pids.discard(pid)


def destroy(rec: Record) -> None:
    """Remove everything of one testbed: processes, namespaces, files, then its record."""
    # Imported here, like in build(): `testbed --help` and `ls` import this module but need
    # no batch text (nor the plan's dataclasses, ~50 ms of import).
    from testbed.plan.render import teardown_batch

    rec.phase = "down"
    namespaces = set(rec.namespaces)
    if not rec.machine:  # a part owns only its own (the record has them before they exist)
        namespaces |= set(registry.namespaces_with_prefix(rec.prefix))
    namespaces = sorted(namespaces)
    rec.namespaces = namespaces
    stop_processes(rec)
    existing = [ns for ns in namespaces if (netns.NETNS_DIR / ns).exists()]
    if existing:
        r = subprocess.run(
            ["ip", "-batch", "-", "-force"],
            input="\n".join(teardown_batch(existing)) + "\n",
            capture_output=True,
            text=True,
        )
        left = [ns for ns in existing if (netns.NETNS_DIR / ns).exists()]
        if left:
            raise NetError(f"could not delete namespaces {left}: {r.stderr.strip()}")
    for ns in namespaces:
        shutil.rmtree(ETC_NETNS / ns, ignore_errors=True)
    shutil.rmtree(rec.state_dir, ignore_errors=True)
    rec.remove()
    restore_congestion_allowed()


def clean(include_persistent: bool = False) -> list[str]:
    """Remove every testbed without a live owner (and, if asked, the persistent ones too).

    Returns the prefixes removed. Objects of live testbeds (another test run, a `testbed up`
    network) are left alone unless ``include_persistent``."""
    removed = []
    by_prefix = {r.prefix: r for r in registry.records()}
    targets = registry.orphan_prefixes()
    if include_persistent:
        targets |= {
            r.prefix
            for r in by_prefix.values()
            if r.persistent and not registry.process_alive(r.owner_pid, r.owner_start)
        }
    for prefix in sorted(targets):
        # every machine's part of it recorded here, then whatever else has its prefix
        for part in [r for r in registry.records() if r.prefix == prefix and r.machine]:
            destroy(part)
        rec = by_prefix.get(prefix)
        if rec is None or rec.machine:
            rec = Record(name=prefix, prefix=prefix, slot=0, owner_pid=0, owner_start=None)
        destroy(rec)
        removed.append(prefix)
    for leftover in ETC_NETNS.glob("mctb*"):
        m = registry.NAMESPACE.match(leftover.name)
        if m and m.group(1) in targets:
            shutil.rmtree(leftover, ignore_errors=True)
    restore_congestion_allowed()
    return removed
