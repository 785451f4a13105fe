"""``workload: kind: command`` services and bad input, through ``testbed run`` on real
namespaces: services start first, in order, and are stopped at the end with what they started;
a service that never gets ready ends the run naming it, its condition, its timeout and its log;
one rank that hangs while the others exit 0 is named by the timeout; stdout that is not JSON
under ``metrics: json-lines`` is only log; Ctrl-C mid-run leaves no process behind and keeps the
results, marked interrupted. Each run is a few seconds of workload on two one-host clusters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import alive, command_scenario, ctrl_c_default, ended, write_scenario

import analysis
from testbed.cli import main

pytestmark = pytest.mark.live

SELFCHECK = "0.3"  # s of bulk TCP per WAN direction: the links are not what these tests test

# A service: listens on the port in argv[1], answers each connection with its hostname; starts
# a child first and writes both pids to {run_dir}/server-pids.
SERVER = textwrap.dedent(
    """
    import os, socket, subprocess, sys, time
    port, run_dir = int(sys.argv[1]), sys.argv[2]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(run_dir, "server-pids"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    print("warming up", flush=True)
    time.sleep(0.5)  # the ranks must not start before the port listens
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    s.listen()
    while True:
        conn, peer = s.accept()
        with conn:
            print(f"served {peer[0]}", flush=True)
            conn.sendall(socket.gethostname().encode())
    """
)

# A second service, ready by its log; writes its pid and the time it started.
NOTARY = textwrap.dedent(
    """
    import os, sys, time
    with open(os.path.join(sys.argv[1], "notary-pid"), "w") as f:
        f.write(f"{os.getpid()} {time.time()}")
    print("notary: ready to sign", flush=True)
    time.sleep(300)
    """
)

# A rank: asks the service (by its host's name) once; prints what it got as a metric line.
CLIENT = textwrap.dedent(
    """
    import json, os, socket, sys, time
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10) as s:
        got = s.recv(100).decode()
    print(json.dumps({"metric": "served", "value": 1, "by": got, "at": time.time()}))
    """
)


def run(tmp_path: Path, path: Path) -> int:
    return main(["run", str(path), "--out", str(tmp_path / "results"), "--selfcheck", SELFCHECK])


def the_run(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    (results,) = (tmp_path / "results").iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    ((run_id, entry),) = manifest["runs"].items()
    return results, run_id, entry


def test_services_start_first_in_order_and_are_stopped_at_the_end(
    root, tmp_path: Path, capsys
) -> None:
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "notary.py").write_text(NOTARY)
    (tmp_path / "client.py").write_text(CLIENT)
    port = 29510
    services = [
        {"name": "server", "host": "east-h0", "argv": ["python", "server.py", str(port),
         "{run_dir}"], "ready": {"port": port}, "timeout": "20s"},
        {"name": "notary", "host": "west-h0", "argv": ["python", "notary.py", "{run_dir}"],
         "ready": {"log": "^notary: ready"}, "timeout": "20s"},
    ]  # fmt: skip
    workload = {
        "argv": ["python", "client.py", "east-h0", str(port)],
        "ranks_per_host": 2,
        "services": services,
        "timeout": "30s",
    }
    path = write_scenario(tmp_path, command_scenario("svc", workload))
    code = run(tmp_path, path)
    printed = capsys.readouterr().out
    assert code == 0, printed
    results, run_id, entry = the_run(tmp_path)
    run_dir = results / "runs" / run_id

    # every rank reached the service by its host's name and was answered by that host
    res = analysis.load(results)
    served = res.metrics[res.metrics["metric"] == "served"]
    assert len(served) == 4
    assert {json.loads(f)["by"] for f in served["fields"]} == {"east-h0"}
    server_log = (run_dir / "service-server.log").read_text()
    assert server_log.startswith("warming up") and server_log.count("served ") == 4
    # in order: the notary started after the server was ready, the ranks after the notary
    rows = {s["service"]: s for s in entry["services"]}
    assert list(rows) == ["server", "notary"]
    assert rows["server"]["ready_s"] >= 0.5  # its port listened only after its 0.5 s sleep
    assert all(s["stopped"] and s["log"] == f"service-{n}.log" for n, s in rows.items())
    _, notary_started = (run_dir / "notary-pid").read_text().split()
    first_rank = min(json.loads(f)["at"] for f in served["fields"])
    assert float(notary_started) < first_rank
    # stopped at the end, with what they started (the server's child: its process group)
    pids = [int(p) for p in (run_dir / "server-pids").read_text().split()]
    pids.append(int((run_dir / "notary-pid").read_text().split()[0]))
    for pid in pids:
        assert ended(pid), pid


def test_a_service_that_never_gets_ready_ends_the_run_naming_it(
    root, tmp_path: Path, capsys
) -> None:
    never = "print('listening soon', flush=True); import time; time.sleep(300)"
    services = [{"name": "lighthouse", "host": "east-h0", "argv": ["python", "-c", never],
                 "ready": {"port": 29599}, "timeout": "2s"}]  # fmt: skip
    workload = {"argv": ["python", "-c", "pass"], "services": services, "timeout": "30s"}
    path = write_scenario(tmp_path, command_scenario("svcnever", workload))
    started = time.monotonic()
    assert run(tmp_path, path) == 1
    capsys.readouterr()
    assert time.monotonic() - started < 60
    results, run_id, entry = the_run(tmp_path)
    assert entry["status"] == "failed"
    assert entry["reason"] == (
        "service lighthouse (east-h0) was not ready within 2s (workload.services[0].timeout; "
        "ready: port 29599 listening): listening soon"
    )
    # the workload never started
    assert not list((results / "runs" / run_id).glob("rank-*.log"))


def test_a_service_that_fails_while_the_workload_runs_fails_the_run(
    root, tmp_path: Path, capsys
) -> None:
    crash = "import time; print('up', flush=True); time.sleep(1); print('lost it'); exit(3)"
    services = [{"name": "store", "host": "west-h0", "argv": ["python", "-c", crash],
                 "ready": {"log": "^up$"}}]  # fmt: skip
    workload = {"argv": ["python", "-c", "import time; time.sleep(3)"], "services": services}
    path = write_scenario(tmp_path, command_scenario("svccrash", workload))
    assert run(tmp_path, path) == 1
    capsys.readouterr()
    _, _, entry = the_run(tmp_path)
    # the workload itself finished well; the service's failure is the run's
    assert all(p["exit_code"] == 0 for p in entry["processes"])
    assert entry["reason"] == (
        "service store (west-h0) exited with code 3 while the workload ran: up | lost it"
    )
    (row,) = entry["services"]
    assert (row["exit_code"], row["stopped"]) == (3, False)


def test_an_unknown_service_host_is_a_scenario_error(root, tmp_path: Path, capsys) -> None:
    services = [{"name": "s", "host": "north-h0", "argv": ["python", "-c", "pass"],
                 "ready": {"port": 1}}]  # fmt: skip
    workload = {"argv": ["python", "-c", "pass"], "services": services}
    path = write_scenario(tmp_path, command_scenario("svchost", workload))
    assert run(tmp_path, path) == 2
    err = capsys.readouterr().err
    assert "workload.services[0].host: no host 'north-h0'; hosts are: east-h0, west-h0" in err
    assert not (tmp_path / "results").exists()


# Rank 3 hangs; the others exit 0 at once.
HANGING = "import os, time\nif os.environ['RANK'] == '3':\n    print('rank 3 waits', flush=True)\n    time.sleep(300)\n"  # noqa: E501


def test_one_hung_rank_is_named_by_the_timeout(root, tmp_path: Path, capsys) -> None:
    (tmp_path / "hang.py").write_text(HANGING)
    workload = {"argv": ["python", "hang.py"], "ranks_per_host": 2, "timeout": "4s"}
    path = write_scenario(tmp_path, command_scenario("hang", workload))
    assert run(tmp_path, path) == 1
    capsys.readouterr()
    _, _, entry = the_run(tmp_path)
    assert entry["status"] == "failed"
    # only the hung rank, with its host, the limit and its log's last line
    assert entry["reason"] == (
        "rank 3 (west-h0) did not finish within 4s (workload.timeout): rank 3 waits"
    ), entry["reason"]
    codes = {p["process"]: (p["exit_code"], p["stopped"]) for p in entry["processes"]}
    assert codes == {
        "rank 0": (0, None), "rank 1": (0, None), "rank 2": (0, None),
        "rank 3": (-signal.SIGTERM, "timeout"),
    }  # fmt: skip


# Lines that are not metric lines: text, broken JSON, JSON that is no object or has no
# "metric", bytes that are not UTF-8, a long line, a last line without its newline; then one
# metric line between them, whose value is no number.
NOISY = textwrap.dedent(
    r"""
    import json, sys
    out = sys.stdout.buffer
    out.write(b"step 1 loss 0.5\n{not json\n[1, 2, 3]\n\"metric\"\n")
    out.write(json.dumps({"value": 3}).encode() + b"\n")
    out.write(b"\xff\xfe not utf-8 \xc3\n" + b"x" * 200000 + b"\n")
    out.write(json.dumps({"metric": "loss", "value": 0.25, "step": 1}).encode() + b"\n")
    out.write(json.dumps({"metric": "phase", "value": "warmup"}).encode() + b"\n")
    out.write(b"the end, no newline")
    """
)


def test_stdout_that_is_not_json_is_log_and_not_an_error(root, tmp_path: Path, capsys) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    workload = {"argv": ["python", "noisy.py"], "metrics": "json-lines", "timeout": "30s"}
    path = write_scenario(tmp_path, command_scenario("noisy", workload))
    code = run(tmp_path, path)
    printed = capsys.readouterr().out
    assert code == 0, printed
    results, run_id, entry = the_run(tmp_path)
    assert entry["status"] == "ok"
    res = analysis.load(results)
    metrics = res.metrics.sort_values(["rank", "metric"])
    assert list(zip(metrics["rank"], metrics["metric"], strict=True)) == [
        (0, "loss"), (0, "phase"), (1, "loss"), (1, "phase"),
    ]  # fmt: skip
    loss = metrics[metrics["metric"] == "loss"]
    assert list(loss["value"]) == [0.25, 0.25]
    phase = metrics[metrics["metric"] == "phase"]
    assert phase["value"].isna().all()
    assert [json.loads(f) for f in phase["fields"]] == [{"value": "warmup"}] * 2
    log = (results / "runs" / run_id / "rank-1.log").read_bytes()
    for kept in (b"{not json\n", b"\xff\xfe not utf-8", b"x" * 200000, b"the end, no newline"):
        assert kept in log


# Each rank starts a child and writes both pids, then runs far beyond the test.
LINGERING = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(sys.argv[1], f"pids-{os.environ['RANK']}"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    print("running", flush=True)
    time.sleep(300)
    """
)


def test_ctrl_c_mid_run_ends_every_process_and_keeps_the_results(root, tmp_path: Path) -> None:
    (tmp_path / "linger.py").write_text(LINGERING)
    (tmp_path / "notary.py").write_text(NOTARY)
    services = [{"name": "notary", "host": "west-h0", "argv": ["python", "notary.py",
                 "{run_dir}"], "ready": {"log": "ready to sign"}}]  # fmt: skip
    workload = {"argv": ["python", "linger.py", "{run_dir}"], "services": services,
                "timeout": "120s"}  # fmt: skip
    path = write_scenario(tmp_path, command_scenario("ctrlc", workload))
    out = tmp_path / "results"
    cli = [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out)]
    proc = subprocess.Popen(
        [*cli, "--selfcheck", SELFCHECK], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=ctrl_c_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        pid_files: list[Path] = []
        while time.monotonic() < deadline and len(pid_files) < 2:
            time.sleep(0.1)
            pid_files = list(out.glob("*/runs/*/pids-*"))
        assert len(pid_files) == 2, "the ranks did not start"
        time.sleep(0.3)  # the files are written: the pids are in them
        pids = [int(p) for f in pid_files for p in f.read_text().split()]
        (notary,) = out.glob("*/runs/*/notary-pid")
        pids.append(int(notary.read_text().split()[0]))
        assert all(alive(pid) for pid in pids)
        proc.send_signal(signal.SIGINT)
        printed, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, printed
    for pid in pids:
        assert ended(pid), pid
    results, run_id, entry = the_run(tmp_path)
    assert entry["status"] == "interrupted" and entry["reason"] == "interrupted by the user"
    run_dir = results / "runs" / run_id
    for r in (0, 1):
        assert "running" in (run_dir / f"rank-{r}.log").read_text()
    assert "ready to sign" in (run_dir / "service-notary.log").read_text()
