"""FRR in the gateways (``routing.mode: bgp``): its files, its daemons, waiting for its routes.

Each gateway gets a directory ``frr/<gateway>`` in its testbed's state directory
(``<state>/<prefix>``; a machine's part's ``<state>/<prefix>@<machine>``), owned by FRR's user,
which the daemons run as, with the configuration files :mod:`testbed.plan.frr` renders, and
every path a daemon would otherwise take from its build defaults: pid file, vty sockets, zebra's
API socket, bfdd's control socket, logs. So no two gateways share anything, nothing lands in
``/etc/frr`` or ``/var/run/frr`` (FRR's pathspace option ``-N`` would still create a directory
there; every path is given instead), and the testbed's teardown removes it all with the state
directory. The daemons run in the foreground (no ``-d``) through ``ip netns exec`` (which
execs them: the recorded pid is the daemon's) and are stopped like every process the testbed
starts: by recorded pid, and as processes living in its namespaces.

``start`` returns once every gateway's kernel holds its BGP routes to every other cluster over
all paths (``BgpSpeaker.expected``) and every BFD session is up, so traffic starts on a
converged network.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from testbed.core.errors import NetError, UnsupportedError
from testbed.net import registry
from testbed.plan.frr import daemons, frr_configs
from testbed.plan.model import BgpPlan, BgpSpeaker

FRR_LIB = Path(os.environ.get("TESTBED_FRR_DIR", "/usr/lib/frr"))
FRR_USER = "frr"
CONVERGE_TIMEOUT = 30.0  # seconds; sessions open within a few seconds of the daemons
POLL = 0.1


def missing() -> str | None:
    """Why ``routing.mode: bgp`` cannot run here, or None when FRR is installed."""
    absent = [d for d in ("zebra", "bgpd", "bfdd") if not (FRR_LIB / d).exists()]
    if absent:
        return (
            f"FRR is not installed ({', '.join(absent)} missing in {FRR_LIB}); "
            "scripts/setup.sh installs Debian's frr"
        )
    try:
        pwd.getpwnam(FRR_USER)
    except KeyError:
        return f"FRR's user {FRR_USER!r} does not exist (FRR from Debian's frr package creates it)"
    if shutil.which("vtysh") is None:
        return "FRR's vtysh is not installed"
    return None


def version() -> str:
    """FRR's version (``zebra --version``'s first line), for ``testbed doctor``."""
    r = subprocess.run([str(FRR_LIB / "zebra"), "--version"], capture_output=True, text=True)
    return (r.stdout.splitlines() or ["?"])[0].strip()


def gateway_dir(record: registry.Record, gateway: str) -> Path:
    """A gateway's FRR directory, in its testbed's (its machine's part's) state directory."""
    return record.state_dir / "frr" / gateway


def daemon_argv(daemon: str, directory: Path) -> list[str]:
    """One daemon's command line: every path in ``directory``, no TCP vty port."""
    argv = [
        str(FRR_LIB / daemon),
        "-f", str(directory / f"{daemon}.conf"),
        "-i", str(directory / f"{daemon}.pid"),
        "-z", str(directory / "zserv.api"),
        "--vty_socket", str(directory),
        "-P", "0",
    ]  # fmt: skip
    if daemon == "bfdd":
        argv += ["--bfdctl", str(directory / "bfdd.sock")]
    return argv


def vtysh(ns: str, directory: Path, *commands: str, timeout: float = 10.0) -> str:
    """Run vtysh ``commands`` against one gateway's daemons; their output."""
    argv = ["ip", "netns", "exec", ns, "vtysh", "--vty_socket", str(directory)]
    for c in commands:
        argv += ["-c", c]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return r.stdout + r.stderr


def write_configs(bgp: BgpPlan, record: registry.Record) -> dict[str, Path]:
    """Each gateway's directory with its files, owned by FRR's user; gateway -> directory."""
    user = pwd.getpwnam(FRR_USER)
    out = {}
    for s in bgp.speakers:
        d = gateway_dir(record, s.gateway)
        d.mkdir(parents=True, exist_ok=True)
        for name, text in frr_configs(bgp, s, d).items():
            (d / name).write_text(text)
        for path in (d, *d.iterdir()):
            os.chown(path, user.pw_uid, user.pw_gid)
        out[s.gateway] = d
    return out


def start(
    bgp: BgpPlan, record: registry.Record, timeout: float = CONVERGE_TIMEOUT, converge: bool = True
) -> None:
    """Start FRR in every gateway and wait until the routes are in the kernels (``converge``;
    a machine's part of a topology across machines does not: its sessions need the other
    machines' daemons, so the driver waits on every part's :func:`not_converged`)."""
    reason = missing()
    if reason:
        raise UnsupportedError(f"routing.mode bgp: {reason}")
    dirs = write_configs(bgp, record)
    for daemon in daemons(bgp):
        started = []
        for s in bgp.speakers:
            d = dirs[s.gateway]
            with open(d / f"{daemon}.out", "wb") as log:
                proc = subprocess.Popen(
                    ["ip", "netns", "exec", s.ns, *daemon_argv(daemon, d)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # a Ctrl-C of the terminal reaches the testbed only
                )
            started.append((proc.pid, f"frr {daemon} {s.gateway}"))
        record.add_processes(started)
        if daemon == "zebra":  # the others connect to its API socket at start
            _wait_for(
                lambda: all((dirs[s.gateway] / "zserv.api").exists() for s in bgp.speakers),
                timeout,
                lambda: "zebra did not open its API socket: " + _outputs(dirs, "zebra"),
            )
    if converge:
        _wait_for(
            lambda: not not_converged(bgp, record),
            timeout,
            lambda: not_converged_reason(bgp, record),
        )


def not_converged(bgp: BgpPlan, record: registry.Record) -> list[str]:
    """What the gateways of ``bgp`` still lack: a BGP route or path in a kernel, a BFD session
    up; [] once converged."""
    dirs = {s.gateway: gateway_dir(record, s.gateway) for s in bgp.speakers}
    return unconverged(bgp) or bfd_down(bgp, dirs)


def not_converged_reason(bgp: BgpPlan, record: registry.Record) -> str:
    """Why the gateways of ``bgp`` have not converged, with each one's sessions."""
    return (
        "BGP did not install every route or bring BFD up: "
        + "; ".join(not_converged(bgp, record))
        + "; sessions: "
        + " | ".join(_summary(s, gateway_dir(record, s.gateway)) for s in bgp.speakers)
    )


def kernel_routes(ns: str) -> dict[str, int]:
    """Subnet -> number of nexthops of the BGP routes in a namespace's kernel."""
    r = subprocess.run(
        ["ip", "-n", ns, "-j", "route", "show", "proto", "bgp"], capture_output=True, text=True
    )
    if r.returncode != 0:
        return {}
    return {
        route["dst"]: len(route.get("nexthops") or [route])
        for route in json.loads(r.stdout or "[]")
    }


def unconverged(bgp: BgpPlan) -> list[str]:
    """What the kernels lack of the expected BGP routes ("east-gw: 10.64.1.0/24 1 of 2 paths")."""
    out = []
    for s in bgp.speakers:
        have = kernel_routes(s.ns)
        for subnet, want in s.expected:
            got = have.get(subnet, 0)
            if got != want:
                out.append(f"{s.gateway}: {subnet} over {got} of {want} paths")
    return out


def bfd_down(bgp: BgpPlan, dirs: dict[str, Path]) -> list[str]:
    """The BFD sessions that are not up ("east-gw: BFD to 10.64.128.5 init"); none without BFD."""
    if bgp.bfd_interval_ms is None:
        return []
    out = []
    for s in bgp.speakers:
        try:
            peers = json.loads(vtysh(s.ns, dirs[s.gateway], "show bfd peers json") or "[]")
        except (subprocess.TimeoutExpired, ValueError):
            peers = []
        status = {p.get("peer"): p.get("status") for p in peers if isinstance(p, dict)}
        for n in s.neighbors:
            if status.get(n.address) != "up":
                out.append(f"{s.gateway}: BFD to {n.address} {status.get(n.address, 'absent')}")
    return out


def problems(record: registry.Record) -> list[str]:
    """Daemons of the testbed's FRR that are no longer running."""
    return [
        f"{what} has exited"
        for pid, start_time, what in record.processes
        if what.startswith("frr ") and not registry.process_alive(pid, start_time)
    ]


def _summary(s: BgpSpeaker, directory: Path) -> str:
    try:
        out = vtysh(s.ns, directory, "show bgp summary json")
        peers = json.loads(out).get("ipv4Unicast", {}).get("peers", {})
        states = ", ".join(f"{ip} {p.get('state')}" for ip, p in peers.items())
        return f"{s.gateway}: {states or 'no peers'}"
    except (subprocess.TimeoutExpired, ValueError, AttributeError):
        return f"{s.gateway}: vtysh did not answer"


def _outputs(dirs: dict[str, Path], daemon: str) -> str:
    texts = []
    for gw, d in dirs.items():
        try:
            text = (d / f"{daemon}.out").read_text().strip()
        except OSError:
            text = ""
        texts.append(f"{gw}: {text or 'no output'}")
    return "; ".join(texts)


def _wait_for(done: Callable[[], bool], timeout: float, why: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise NetError(why())
        time.sleep(POLL)
