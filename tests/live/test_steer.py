"""Steering a testbed that ``testbed up`` left running, through the CLI as a user would, each
command its own process: ``testbed link`` changes a WAN link's delay (ping's RTT follows, both
directions and one), ``testbed fault`` blackholes a link for 1 s (ping loses about that long,
then recovers) or until ``--end``, both recorded in the testbed's event log; ``testbed launch``
runs a 2-rank program with the command kind's environment and logs, and names the rank that
failed; bad input exits 2 naming the argument."""

from __future__ import annotations

import json
import re
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import ctrl_c_default, unique_name

from testbed.net import registry

pytestmark = pytest.mark.live

CLI = [sys.executable, "-m", "testbed.cli"]
DELAY = 0.010  # s one way, as configured
RTT_SLACK = 0.003  # s a ping's median RTT may be off the configured one (stacks, compensation)


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One host per cluster, a 100 Mbit/s WAN with 10 ms one way, up until the module ends."""
    import os

    if os.geteuid() != 0:
        pytest.skip("needs root: network namespaces and qdiscs")
    path = tmp_path_factory.mktemp("steer") / "steer.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "steer",
                "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
                "wan": [{"between": ["east", "west"], "rate": "100mbit", "delay": "10ms"}],
            }
        )
    )
    name = unique_name("steer")
    up = cli("up", str(path), "--name", name, timeout=120)
    assert up.returncode == 0, up.stderr
    try:
        yield name
    finally:
        down = cli("down", name)
        assert down.returncode == 0, down.stderr


def rtts(name: str, count: int = 5) -> list[float]:
    """Ping's RTTs (s) from east-h0 to west-h0."""
    r = cli("exec", name, "east-h0", "--", "ping", "-c", str(count), "-i", "0.1", "west-h0")
    assert r.returncode == 0, r.stdout + r.stderr
    return [float(m) / 1e3 for m in re.findall(r"time=([\d.]+) ms", r.stdout)]


def near(got: list[float], want: float) -> bool:
    return abs(statistics.median(got) - want) < RTT_SLACK


def event_log(name: str) -> list[dict[str, Any]]:
    rec = registry.find(name)
    path = rec.state_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_link_set_delay_changes_ping_rtt_and_is_logged(live: str) -> None:
    before = rtts(live)
    assert near(before, 2 * DELAY), before
    r = cli("link", live, "east-west", "set", "delay=40ms")
    assert r.returncode == 0, r.stdout + r.stderr
    both = rtts(live)
    assert near(both, 0.080), both
    # one direction: 5 ms there, still 40 ms back
    r = cli("link", live, "east-west", "set", "delay=5ms", "--direction", "east->west")
    assert r.returncode == 0, r.stdout + r.stderr
    one = rtts(live)
    assert near(one, 0.045), one
    r = cli("link", live, "east-west", "restore")
    assert r.returncode == 0, r.stdout + r.stderr
    again = rtts(live)
    assert near(again, 2 * DELAY), again
    commands = [
        f"testbed link {live} east-west set delay=40ms",
        f"testbed link {live} east-west set delay=5ms --direction 'east->west'",
        f"testbed link {live} east-west restore",
    ]
    rows = [row for row in event_log(live) if row["command"] in commands]
    assert [row["status"] for row in rows] == ["applied"] * len(rows)
    assert {row["command"] for row in rows} == set(commands)
    west = [row["delay_s"] for row in rows if row["direction"] == "east->west"]
    assert west == pytest.approx([0.040, 0.005, DELAY]), west


def test_blackhole_for_1s_loses_then_recovers(live: str) -> None:
    interval, count = 0.05, 200  # 10 s of pings: the fault command's start-up, 1 s, recovery
    ping = subprocess.Popen(
        [*CLI, "exec", live, "east-h0", "--", "ping", "-D", "-c", str(count), "-i",
         str(interval), "-W", "1", "west-h0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        time.sleep(1.0)  # the ping runs before the fault
        r = cli("fault", live, "blackhole", "east-west", "--for", "1s")
        assert r.returncode == 0, r.stdout + r.stderr
        out, _ = ping.communicate(timeout=30)
    finally:
        ping.kill()
    replies = {int(seq): float(at) for at, seq in re.findall(r"\[([\d.]+)\] .*icmp_seq=(\d+)", out)}
    lost = sorted(set(range(1, count + 1)) - set(replies))
    assert lost and lost == list(range(lost[0], lost[-1] + 1)), lost  # one outage
    assert max(replies) == count and lost[-1] < count - 10, "the pings after it got through"
    rows = [row for row in event_log(live) if row["command"].endswith("--for 1s")]
    assert [(row["action"], row["status"]) for row in rows] == [
        ("blackhole", "applied"),
        ("unblackhole", "applied"),
    ]
    on, off = rows[0]["applied_unix"], rows[1]["applied_unix"]
    # its end is an event on the runner's clock, 1 s after its start
    assert rows[1]["scheduled_mono"] - rows[0]["scheduled_mono"] == pytest.approx(1.0)
    # Nothing came back while it was on: a reply received after it started had crossed the
    # wire before (one way, 10 ms, plus the host's receive path).
    during = sorted(t for t in replies.values() if on + DELAY + RTT_SLACK < t < off)
    assert not during, (on, off, during)
    # and the first ping sent after its end came back: within a ping interval and an RTT, plus
    # ping's own lateness on a busy machine (a few intervals)
    after = min(t for t in replies.values() if t > off)
    assert after - off < 4 * interval + 2 * DELAY, (off, after)


def test_fault_without_for_stays_until_end(live: str) -> None:
    r = cli("fault", live, "link_down", "east-west")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--end" in r.stdout
    down = cli("exec", live, "east-h0", "--", "ping", "-c", "2", "-W", "1", "west-h0")
    assert down.returncode != 0
    r = cli("fault", live, "link_down", "east-west", "--end")
    assert r.returncode == 0, r.stdout + r.stderr
    assert rtts(live, 2)
    again = cli("fault", live, "link_down", "east-west", "--end")
    assert again.returncode == 2 and "no link_down on 'east-west' is in force" in again.stderr


def test_ctrl_c_lifts_a_fault_with_for_at_once(live: str) -> None:
    fault = subprocess.Popen(
        [*CLI, "fault", live, "blackhole", "east-west", "--for", "60s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_default,
    )  # fmt: skip
    try:
        assert fault.stdout is not None
        for line in fault.stdout:
            if line.startswith("applied blackhole"):
                break
        fault.send_signal(signal.SIGINT)
        rest, _ = fault.communicate(timeout=30)
    finally:
        fault.kill()
    assert fault.returncode == 130, rest
    assert rtts(live, 2)
    rows = [row for row in event_log(live) if row["command"].endswith("--for 60s")]
    assert [(row["action"], row["status"]) for row in rows] == [
        ("blackhole", "applied"),
        ("unblackhole", "undone"),
        ("unblackhole", "skipped"),
    ]


PROBE = textwrap.dedent(
    """
    import json, os, socket, sys
    print(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']} on {socket.gethostname()}"
          f" args {' '.join(sys.argv[1:])}", flush=True)
    print(json.dumps({"metric": "answer", "value": 40 + int(os.environ["RANK"])}), flush=True)
    sys.exit(int(sys.argv[2]) if os.environ["RANK"] == "1" else 0)
    """
)


def test_launch_two_ranks_logs_and_failure(live: str, tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    args = ["--out", str(tmp_path / "runs"), "--cwd", str(tmp_path)]
    r = cli("launch", live, *args, "--", "python", "probe.py", "{host}", "0", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    logs = re.search(r"logs: (\S+)", r.stdout)
    assert logs, r.stdout
    run_dir = Path(logs[1])
    assert "[rank-0] rank 0 of 2 on east-h0 args east-h0 0" in r.stdout  # followed live
    assert (run_dir / "rank-1.log").read_text().startswith("rank 1 of 2 on west-h0 args west-h0")
    rows = [json.loads(x) for x in (run_dir / "rank-1.jsonl").read_text().splitlines()]
    assert [(row["metric"], row["value"]) for row in rows] == [("answer", 41.0)]
    failed = cli("launch", live, *args, "--", "python", "probe.py", "{host}", "3", timeout=120)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "rank 1 (west-h0) exited with code 3" in failed.stdout


def test_launch_keeps_the_events_applied_while_it_ran(live: str, tmp_path: Path) -> None:
    go = tmp_path / "go"  # the program runs until the change was applied
    (tmp_path / "wait.py").write_text(
        f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
    )
    args = ["--out", str(tmp_path / "runs"), "--cwd", str(tmp_path), "--follow", "none"]
    running = subprocess.Popen(
        [*CLI, "launch", live, *args, "--", "python", "wait.py"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert running.stdout is not None
        logs = re.search(r"logs: (\S+)", running.stdout.readline())
        assert logs
        r = cli("link", live, "east-west", "set", "rate=50mbit")
        assert r.returncode == 0, r.stdout + r.stderr
        go.touch()
        rest, _ = running.communicate(timeout=60)
    finally:
        running.kill()
        cli("link", live, "east-west", "set", "rate=100mbit")
    assert running.returncode == 0, rest
    rows = [json.loads(x) for x in (Path(logs[1]) / "events.jsonl").read_text().splitlines()]
    assert {(row["command"], row["rate_bps"]) for row in rows} == {
        (f"testbed link {live} east-west set rate=50mbit", 50_000_000)
    }


SLOW = textwrap.dedent(
    """
    import os, time
    print(f"first from rank {os.environ['RANK']}", flush=True)
    time.sleep(2)
    print(f"second from rank {os.environ['RANK']}", flush=True)
    """
)


def test_run_streams_rank_0s_output_as_it_comes(root: None, tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    path = tmp_path / "slow.yaml"
    path.write_text(
        json.dumps(
            {
                "name": "follow",
                "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
                "wan": [{"between": ["east", "west"], "rate": "100mbit"}],
                "workload": {"kind": "command", "argv": ["python", "slow.py"], "timeout": "60s"},
            }
        )
    )
    run = subprocess.Popen(
        [*CLI, "run", str(path), "--out", str(tmp_path / "results"), "--selfcheck", "0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen: dict[str, float] = {}
    lines = []
    try:
        assert run.stdout is not None
        for line in run.stdout:
            lines.append(line)
            for what in ("first", "second"):
                if f"[rank-0] {what} from rank 0" in line:
                    seen[what] = time.monotonic()
        run.wait(timeout=60)
    finally:
        run.kill()
    out = "".join(lines)
    assert run.returncode == 0, out
    # printed while it ran: the program slept 2 s between the two lines
    assert seen["second"] - seen["first"] > 1.5, (seen, out)
    assert "from rank 1" not in out  # the default follows rank 0 alone


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["link", "nosuch", "east-west", "set", "delay=1ms"], "NAME: no live testbed 'nosuch'"),
        (["link", "{}", "east-south", "set", "delay=1ms"], "LINK: no WAN link 'east-south'"),
        (["link", "{}", "east-west", "set", "speed=1"], "unknown field 'speed'; fields: rate"),
        (["link", "{}", "east-west", "set", "delay=fast"], "delay=fast: 'fast' is not a"),
        (["link", "{}", "east-west", "set", "delay=1ms", "--direction", "a->b"],
         "--direction 'a->b': allowed: east->west, west->east"),
        (["fault", "{}", "meteor", "east-west"], "KIND: 'meteor' is not a fault applied now"),
        (["fault", "{}", "blackhole", "east-west", "--for", "2"], "--for: '2' is not a dur"),
        (["launch", "{}", "--", "python", "probe.py", "{rnak}"], "unknown placeholder {rnak}"),
        (["launch", "{}", "--", "no-such-program"], "ARGV[0]: 'no-such-program' is not on"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_it(live: str, args: list[str], said: str) -> None:
    r = cli(*[a.replace("{}", live) if a == "{}" else a for a in args])
    assert r.returncode == 2, r.stdout + r.stderr
    assert said in r.stderr, r.stderr
