"""External clients measuring a live testbed's links: iperf3 (TCP goodput), iperf2 (UDP
delivery, as Mininet's tests measure it), irtt (RTT and one-way delay per direction: every
namespace shares one kernel clock, so one-way delays need no clock sync) and flent (its data
file). Each runs its server in the receiving host (recorded, stopped on the way out) and its
client in the sending one, and raises ``AssertionError`` with the tool's own words when the tool
failed (flent exits 0 on failures: its output is searched for ``ERROR:``).
"""

from __future__ import annotations

import glob
import gzip
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.net import procs

if TYPE_CHECKING:
    from testbed.live.network import Network

PORT = 5211
FLENT = str(Path(sys.executable).with_name("flent"))


def iperf3_goodput(tb: Network, src: str, dst: str, seconds: int, omit: int = 0) -> float:
    """One iperf3 TCP flow's goodput at the receiver (bit/s) over ``seconds``, after the first
    ``omit`` s left out (iperf3 runs ``-O`` on top of ``-t``: the flow lasts both)."""
    argv = ["iperf3", "-s", "-1", "-p", str(PORT), "--forceflush"]
    server = tb.popen(dst, argv, stdout=subprocess.PIPE, text=True)
    with procs.ready(server, f"iperf3 server on {dst}", "Server listening", substring=True):
        client = ["iperf3", "-c", dst, "-p", str(PORT), "-t", str(seconds), "-J"]
        r = tb.run(src, [*client, "-O", str(omit)], timeout=seconds + omit + 30)
    data = json.loads(r.stdout)
    assert "error" not in data, data["error"]
    return float(data["end"]["sum_received"]["bits_per_second"])


def udp_delivered(tb: Network, src: str, dst: str, rate: str, seconds: int) -> float:
    """The share of UDP datagrams sent at ``rate`` that arrived, as the iperf2 server counts
    them (iperf3 cannot set up a UDP test through heavy loss: its one set-up datagram is lost)."""
    with iperf2_udp_server(tb, dst, PORT) as server:
        client = ["iperf", "-c", dst, "-u", "-b", rate, "-t", str(seconds), "-p", str(PORT)]
        tb.run(src, client, timeout=seconds + 30)
        deadline = time.monotonic() + 10
        assert server.stdout is not None
        while time.monotonic() < deadline:
            m = re.search(r"(\d+)/\s*(\d+) \(", server.stdout.readline())
            if m:
                lost, total = map(int, m.groups())
                return 1 - lost / total
    raise AssertionError(f"the iperf server on {dst} reported no Lost/Total line")


def iperf2_udp_server(tb: Network, host: str, port: int = 5001) -> Any:
    """``with iperf2_udp_server(tb, host) as proc:`` an iperf2 UDP server on ``host`` (line
    buffered: its reports can be read as they come); flent's udp_flood uses the default port."""
    argv = ["stdbuf", "-oL", "iperf", "-s", "-u", "-p", str(port)]
    proc = tb.popen(host, argv, stdout=subprocess.PIPE, text=True)
    return procs.ready(proc, f"iperf server on {host}", "Server listening", substring=True)


def irtt_server(tb: Network, host: str) -> Any:
    """``with irtt_server(tb, host):`` an irtt server listening on ``host``'s address."""
    argv = ["irtt", "server", "-b", tb.hosts[host]]
    proc = tb.popen(host, argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return procs.ready(proc, f"irtt server on {host}", "starting IPv4 listener", substring=True)


def irtt(tb: Network, src: str, dst: str, out: Path, seconds: int = 3) -> dict[str, float]:
    """irtt every 10 ms for ``seconds``: median RTT, send (src -> dst) and receive (dst -> src)
    delay, in ms."""
    with irtt_server(tb, dst):
        argv = ["irtt", "client", "-i", "10ms", "-d", f"{seconds}s", "-Q", "-o", str(out)]
        r = tb.run(src, [*argv, tb.hosts[dst]], timeout=seconds + 30)
    assert r.returncode == 0, r.stdout + r.stderr
    stats = json.loads(out.read_text())["stats"]
    keys = {"rtt": "rtt", "send": "send_delay", "receive": "receive_delay"}
    return {k: stats[v]["median"] / 1e6 for k, v in keys.items()}


def flent(
    tb: Network, src: str, dst: str, test: str, out: Path, seconds: int = 5, delay: int = 1
) -> dict:
    """A flent test from ``src`` to ``dst`` (its servers must run); its data file (gzip JSON).
    ``delay``: flent's ``-d``, the seconds its tests with loaders (udp_flood, rrul) measure
    before and after the load. Raises ``AssertionError`` with flent's ``ERROR:`` lines when it
    failed."""
    argv = [FLENT, test, "-H", tb.hosts[dst], "-l", str(seconds), "-s", "0.2", "-d", str(delay)]
    r = tb.run(src, [*argv, "-D", str(out)], timeout=seconds + 2 * delay + 60)
    errors = [line for line in (r.stdout + r.stderr).splitlines() if "ERROR:" in line]
    assert not errors, errors
    (path,) = glob.glob(str(out / f"{test}-*.flent.gz"))
    with gzip.open(path, "rt") as f:
        return json.load(f)


def series_median(data: dict, name: str) -> float:
    """The median of one of a flent data file's series (gaps left out)."""
    values = [v for v in data["results"][name] if v is not None]
    if not values:
        raise AssertionError(f"flent series {name!r} is empty")
    return statistics.median(values)
