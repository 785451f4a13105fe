"""``workload: kind: command`` without a network: its schema and placeholders, the files it
names (checked before any network), torchrun's variables per process, the metric lines, the
summary, and its launch with real processes on this machine (a stand-in network starts them
without namespaces): stdout lines to the log and the metrics file, stop-all stopping what a
process started, and the run's status naming the first process that failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ended, scenario

from testbed.config.command import CommandWorkload, missing_files, placeholders_in
from testbed.config.loading import parse_scenario
from testbed.config.sweep import load_runs
from testbed.core.errors import ScenarioError
from testbed.experiment.ranks import LaunchProcess, RankLaunch, RankSpec
from testbed.experiment.sweep import Experiment
from testbed.experiment.workloads import KINDS, RunRows
from testbed.experiment.workloads.command import (
    command_slots,
    hosts_file,
    log_tail,
    metric_row,
    service_launch,
)
from testbed.live.host_processes import listening
from testbed.plan.ranks import place_ranks
from testbed.plan.topology import build_plan


def command(**fields: Any) -> dict[str, Any]:
    return scenario(workload={"kind": "command", "argv": ["python", "-c", "pass"], **fields})


def error_of(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "s.yaml")
    assert caught.value.exit_code == 2
    return str(caught.value)


# -- the schema -----------------------------------------------------------------------------
def test_a_command_workload_validates_with_its_defaults_and_round_trips() -> None:
    sc = parse_scenario(command(env={"OMP_NUM_THREADS": "1"}, timeout="90s"), "s.yaml")
    w = sc.workload
    assert isinstance(w, CommandWorkload) and sc.rank_workload is w
    assert (w.per, w.cwd, w.on_failure, w.metrics_format, w.timeout) == (
        "rank",
        ".",
        "stop-all",
        "json-lines",
        90.0,
    )
    # the resolved scenario (the manifest's) says ``metrics`` as the scenario did
    dumped = sc.model_dump(mode="json")["workload"]
    assert dumped["metrics"] == "json-lines" and "metrics_format" not in dumped
    assert CommandWorkload.model_validate({**dumped, "timeout": "90s"}) == w


def test_an_unknown_placeholder_names_the_field_and_the_allowed_names() -> None:
    argv = ["python", "bench.py", "--rank", "{rnak}"]
    text = error_of(command(argv=argv))
    assert text.startswith("s.yaml: workload.argv[3]: ") and "unknown placeholder {rnak}" in text
    names = ("rank", "local_rank", "world_size", "node_rank", "nnodes", "nproc_per_node",
             "master_addr", "master_port", "host", "cluster", "host_addr", "run_dir")  # fmt: skip
    for name in names:
        assert f"{{{name}}}" in text
    assert "workload.env.X" in error_of(command(env={"X": "{nope}"}))
    assert "literal braces" in error_of(command(argv=["echo", "{rank"]))
    assert "bare name" in error_of(command(argv=["echo", "{rank:03d}"]))
    assert parse_scenario(command(argv=["echo", "{{literal}}", "{rank}"]), "s").workload


def test_per_host_has_no_rank_of_its_own() -> None:
    text = error_of(command(per="host", argv=["torchrun", "--node-rank", "{local_rank}"]))
    assert "workload.argv[2]" in text and "per: host has no {local_rank}" in text
    assert "{rank}" not in text.split("allowed:")[1]
    ok = ["torchrun", "--nnodes", "{nnodes}", "--node-rank", "{node_rank}"]
    assert parse_scenario(command(per="host", argv=ok), "s").workload


def test_placeholders_are_read_as_format_fields() -> None:
    assert placeholders_in("tcp://{master_addr}:{master_port}") == ["master_addr", "master_port"]
    assert placeholders_in("{{x}}") == []


# -- the files it names, before any network ---------------------------------------------------
def test_missing_program_and_script_are_found_relative_to_cwd(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "bench.py").write_text("print(1)\n")
    (tmp_path / "work" / "run.sh").write_text("#!/bin/sh\n")

    def problems(argv: list[str], cwd: str = "work") -> list[tuple[str, str]]:
        w = CommandWorkload.model_validate({"kind": "command", "argv": argv, "cwd": cwd})
        return missing_files(w, tmp_path)

    # python is found on the PATH a command gets (this interpreter's directory first)
    assert problems(["python", "bench.py", "--out", "out/x.json", "{rank}"]) == []
    assert problems(["./run.sh"]) == []
    missing = f"'nope.py': no such file in {tmp_path / 'work'}"
    assert problems(["python", "nope.py"]) == [("workload.argv[1]", missing)]
    ((field, message),) = problems(["no-such-program-here", "x"])
    assert field == "workload.argv[0]" and "is not on PATH" in message
    ((field, message),) = problems(["run.sh"])  # a file there, but not on PATH
    assert field == "workload.argv[0]" and "write ./run.sh" in message
    assert problems(["./gone.sh"])[0][0] == "workload.argv[0]"
    assert problems(["python"], cwd="absent")[0][0] == "workload.cwd"


def test_testbed_run_refuses_a_missing_file_before_it_makes_anything(tmp_path: Path) -> None:
    """The check runs when the sweep is set up, before a results directory or a network."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(command(argv=["python", "missing.py"])))
    out = tmp_path / "results"
    with pytest.raises(ScenarioError) as caught:
        Experiment(load_runs(str(path)), str(path), out, resume=False)
    assert caught.value.exit_code == 2
    assert (
        str(caught.value) == f"{path}: workload.argv[1]: 'missing.py': no such file in {tmp_path}"
    )
    assert not out.exists()


def test_wan_changes_on_the_workload_clock_need_metric_lines(tmp_path: Path) -> None:
    """``clock: workload`` starts them at rank 0's first metric line with a step: without
    metric lines (``metrics: none``) nothing would ever start them."""
    faults = [{"kind": "blackhole", "link": "east-west", "at": "2s", "duration": "1s"}]
    for more, wanted in (
        ({"faults": faults}, None),
        ({"faults": faults, "workload": {"metrics": "none"}}, "clock: 'workload' starts"),
        ({"workload": {"metrics": "none"}}, None),
    ):
        path = tmp_path / "s.yaml"
        data = command(**more.get("workload", {}))
        path.write_text(
            yaml.safe_dump({**data, **{k: v for k, v in more.items() if k != "workload"}})
        )
        runs = load_runs(str(path))
        try:
            KINDS["command"].check(runs[0].scenario, tmp_path, str(path))
        except ScenarioError as exc:
            assert wanted is not None and f"{path}: {wanted}" in str(exc)
        else:
            assert wanted is None
    data = {**command(metrics="none"), "faults": faults, "clock": "wall"}
    path.write_text(yaml.safe_dump(data))
    KINDS["command"].check(load_runs(str(path))[0].scenario, tmp_path, str(path))


def test_rank_0s_metric_lines_with_a_step_are_the_runs_clock(tmp_path: Path) -> None:
    """Each line with an integer ``step`` announces that step to the clock (traffic.announce's
    socket, read here by the run's OriginClock); other lines and other steps' types do not."""
    from testbed.experiment.clock import OriginClock
    from testbed.experiment.workloads.command import _appender, announced_step
    from traffic.announce import Announcer

    labels = {"process": "rank 0", "rank": 0, "host": "east-h0"}
    assert announced_step(metric_row(b'{"metric": "m", "step": 4}', 0.0, labels) or {}) == 4
    for line in (
        b'{"metric": "m"}',
        b'{"metric": "m", "step": true}',
        b'{"metric": "m", "step": 1.5}',
    ):
        row = metric_row(line, 0.0, labels)
        assert row is not None and announced_step(row) is None
    with OriginClock(from_iterations=True) as clock:
        each = _appender(tmp_path / "rank-0.jsonl", labels, Announcer(clock.path))
        each(b"text\n", 1.0)
        each(b'{"metric": "loss", "value": 1}\n', 1.0)
        assert clock.wait_origin(timeout=0.3) is None
        before = time.time()
        each(b'{"metric": "loss", "value": 1, "step": 1}\n', 1.0)
        each(b'{"metric": "loss", "value": 1, "step": 2}\n', 1.0)
        origin = clock.wait_origin(timeout=5)
        assert origin is not None and origin.unix >= before
        second = clock.wait_iteration(2, timeout=5)
        assert second is not None and second.unix >= origin.unix
    assert len((tmp_path / "rank-0.jsonl").read_text().splitlines()) == 3


# -- services ---------------------------------------------------------------------------------
def service(**fields: Any) -> dict[str, Any]:
    return {"name": "lighthouse", "host": "east-h0", "argv": ["torchft_lighthouse"],
            "ready": {"port": 29510}, **fields}  # fmt: skip


def test_a_service_validates_and_names_its_field_when_it_does_not() -> None:
    w = parse_scenario(command(services=[service()]), "s.yaml").workload
    assert isinstance(w, CommandWorkload)
    (s,) = w.services
    assert (s.timeout, s.cwd, s.env, s.log) == (60.0, None, {}, "service-lighthouse.log")
    assert s.ready.describe() == "port 29510 listening"
    both = error_of(command(services=[service(ready={"port": 1, "log": "x"})]))
    assert "workload.services[0].ready: exactly one of port: N or log: REGEX" in both
    assert "exactly one" in error_of(command(services=[service(ready={})]))
    assert "workload.services[0].ready.log: '(': not a regex" in error_of(
        command(services=[service(ready={"log": "("})])
    )
    twice = error_of(command(services=[service(), service(host="west-h0")]))
    assert "workload.services[1].name: 'lighthouse' twice" in twice
    assert "workload.services[0].name" in error_of(command(services=[service(name="a/b")]))
    assert "workload.services[0].timeout" in error_of(command(services=[service(timeout="0s")]))
    # a service has the per-host placeholders, not a rank's or a node's
    text = error_of(command(services=[service(argv=["x", "--rank", "{rank}"])]))
    assert "workload.services[0].argv[2]: " in text and "a service has no {rank}" in text
    assert "{node_rank}" not in text.split("allowed:")[1]
    assert "workload.services[0].env.P" in error_of(
        command(services=[service(env={"P": "{nope}"})])
    )
    ok = ["x", "--bind", "{host_addr}:29510", "--world", "{world_size}", "--dir", "{run_dir}"]
    assert parse_scenario(command(services=[service(argv=ok)]), "s.yaml").workload


def test_a_service_on_an_unknown_host_or_missing_is_refused_before_any_network(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.yaml"
    for more, field, message in (
        ({"host": "north-h0"}, "host", "no host 'north-h0'; hosts are: east-h0, east-h1, "
         "west-h0, west-h1"),
        ({"argv": ["no-such-service-program"]}, "argv[0]", "'no-such-service-program' is not on"),
        ({"argv": ["python", "serve.py"], "cwd": "."}, "argv[1]", "'serve.py': no such file in"),
    ):  # fmt: skip
        path.write_text(yaml.safe_dump(command(services=[service(**more)])))
        out = tmp_path / "results"
        with pytest.raises(ScenarioError) as caught:
            Experiment(load_runs(str(path)), str(path), out, resume=False)
        assert caught.value.exit_code == 2
        assert f"{path}: workload.services[0].{field}: {message}" in str(caught.value)
        assert not out.exists()
    (tmp_path / "serve.py").write_text("")
    path.write_text(yaml.safe_dump(command(services=[service(argv=["python", "serve.py"])])))
    KINDS["command"].check(load_runs(str(path))[0].scenario, tmp_path, str(path))


def test_a_service_gets_its_hosts_variables_placeholders_and_env_not_a_rank(tmp_path: Path) -> None:
    argv = ["serve", "{host}", "{cluster}", "{host_addr}", "{master_addr}:{master_port}",
            "{world_size}", "{nnodes}", "{nproc_per_node}", "{run_dir}"]  # fmt: skip
    w, plan, ranks = plan_and_ranks(
        ranks_per_host=2,
        env={"A": "workload's on {host}", "B": "rank {rank}", "C": "node {node_rank}", "T": "w"},
        services=[service(host="west-h1", argv=argv, env={"TOKEN": "{host}-t", "T": "s"})],
    )
    host = next(h for h in plan.hosts if h.name == "west-h1")
    got, env = service_launch(w, w.services[0], host, ranks, "10.0.0.1", 29500, tmp_path)
    assert got == ["serve", "west-h1", "west", host.address, "10.0.0.1:29500", "8", "4", "2",
                   str(tmp_path)]  # fmt: skip
    assert env == {
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "2", "GROUP_WORLD_SIZE": "4", "ROLE_WORLD_SIZE": "8",
        "GLOO_SOCKET_IFNAME": host.ifname, "NCCL_SOCKET_IFNAME": host.ifname,
        "TP_SOCKET_IFNAME": host.ifname, "TOKEN": "west-h1-t",
        # the workload's env, but what names a rank's or a node's placeholder; its own wins
        "A": "workload's on west-h1", "T": "s",
    }  # fmt: skip


def test_a_port_counts_as_ready_once_it_listens_in_the_process_namespace() -> None:
    """``listening`` reads the namespace's socket tables through a process of it: here this
    process's own (the machine's namespace) and a listener it opens."""
    import socket

    with socket.socket(socket.AF_INET6) as s:
        s.bind(("::", 0))
        port = s.getsockname()[1]
        assert not listening(os.getpid(), port)  # bound, not listening
        s.listen()
        assert listening(os.getpid(), port)
        own = os.stat(f"/proc/{os.getpid()}/ns/net").st_ino
        assert listening(os.getpid(), port, own)
        assert not listening(os.getpid(), port, own + 1)  # not yet in the namespace wanted
    with socket.socket(socket.AF_INET) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert listening(os.getpid(), s.getsockname()[1])
    assert not listening(2**22 + 7, 1)  # no such process


def test_a_log_tail_is_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "service-x.log"
    log.write_text("".join(f"line {i}\n\n" for i in range(8)))
    assert log_tail(log) == "line 3 | line 4 | line 5 | line 6 | line 7"
    assert log_tail(tmp_path / "absent.log") == ""


# -- torchrun's variables ---------------------------------------------------------------------
def plan_and_ranks(**fields: Any):
    sc = parse_scenario(command(**fields), "s.yaml")
    plan = build_plan(sc, "t0-unit", 1)
    w = sc.workload
    assert isinstance(w, CommandWorkload)
    return w, plan, place_ranks(plan, w.ranks_per_host, w.placement)


def test_per_rank_gets_torchruns_variables(tmp_path: Path) -> None:
    w, plan, ranks = plan_and_ranks(ranks_per_host=2)
    slots = command_slots(w, list(plan.hosts), ranks, "10.0.0.1", 29500, tmp_path)
    assert [s.key for s in slots] == list(range(8))
    hosts = [s.host for s in slots]
    nodes = list(dict.fromkeys(hosts))
    for s in slots:
        e = s.env
        node = nodes.index(s.host)
        local = hosts[: s.key].count(s.host)
        assert e["RANK"] == e["ROLE_RANK"] == str(s.key)
        assert e["LOCAL_RANK"] == str(local) and e["GROUP_RANK"] == str(node)
        assert e["WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == "8"
        assert e["LOCAL_WORLD_SIZE"] == "2" and e["GROUP_WORLD_SIZE"] == "4"
        assert (e["MASTER_ADDR"], e["MASTER_PORT"]) == ("10.0.0.1", "29500")
        host = next(h for h in plan.hosts if h.name == s.host)
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
            assert e[name] == host.ifname
        assert s.values["rank"] == s.key and s.values["local_rank"] == local
        assert s.values["host_addr"] == host.address and s.values["cluster"] == host.cluster
        assert s.log == f"rank-{s.key}.log" and s.what == f"rank {s.key} ({s.host})"
    # torchrun's static layout: a node's ranks are consecutive (by-cluster placement)
    for s in slots:
        assert int(s.env["RANK"]) == 2 * int(s.env["GROUP_RANK"]) + int(s.env["LOCAL_RANK"])


def test_per_host_gets_the_node_variables_only(tmp_path: Path) -> None:
    w, plan, ranks = plan_and_ranks(per="host", ranks_per_host=3, argv=["torchrun", "x.py"])
    slots = command_slots(w, list(plan.hosts), ranks, "10.0.0.1", 29500, tmp_path)
    assert [s.host for s in slots] == [h.name for h in plan.hosts]
    for node, s in enumerate(slots):
        assert not {"RANK", "LOCAL_RANK", "ROLE_RANK"} & set(s.env)
        assert s.env["GROUP_RANK"] == str(node) and s.env["WORLD_SIZE"] == "12"
        assert s.env["LOCAL_WORLD_SIZE"] == "3" and s.env["GROUP_WORLD_SIZE"] == "4"
        assert s.values["nproc_per_node"] == 3 and s.values["nnodes"] == 4
        assert s.log == f"host-{s.host}.log" and s.what == f"host {s.host}"
    text = hosts_file(list(plan.hosts))
    for h in plan.hosts:
        assert f"\n{h.address}\t{h.name}\n" in text
        assert f"\n::ffff:{h.address}\t{h.name}\n" in text  # a dual-stack listener's peer
    assert text.startswith("127.0.0.1\tlocalhost\n")


# -- metric lines and the summary -------------------------------------------------------------
def test_a_metric_line_becomes_a_row_and_anything_else_stays_log() -> None:
    labels = {"process": "rank 1", "rank": 1, "host": "east-h1"}
    row = metric_row(b'{"metric": "step", "value": 0.25, "step": 3}\n', 100.0, labels)
    assert row == {**labels, "time": 100.0, "metric": "step", "value": 0.25,
                   "fields": '{"step": 3}'}  # fmt: skip
    timed = metric_row(b'{"metric": "x", "value": "high", "time": 5}', 100.0, labels)
    assert timed is not None and timed["time"] == 5.0 and timed["value"] is None
    assert json.loads(timed["fields"]) == {"value": "high"}
    for line in (b"plain text\n", b"[1, 2]\n", b'{"value": 1}\n', b"{broken\n", b"\xff\xfe\n", b""):
        assert metric_row(line, 1.0, labels) is None


def test_the_summary_has_a_row_per_process_and_per_metric() -> None:
    kind = KINDS["command"]
    processes = [
        {"process": "rank 0", "host": "east-h0", "exit_code": 0, "duration": 1.5, "stopped": None,
         "log": "rank-0.log"},
        {"process": "rank 1", "host": "west-h0", "exit_code": 3, "duration": 0.5, "stopped": None,
         "log": "rank-1.log"},
    ]  # fmt: skip
    rows = [{"metric": "loss", "value": v, "rank": i % 2} for i, v in enumerate([4.0, 1.0, 2.0])]
    rows.append({"metric": "loss", "value": None})
    rows.append({"metric": "name", "value": None})
    summary = kind.summarize(RunRows(rows, {"processes": processes}, {"p": 1}, None))
    assert summary[:2] == [
        {"p": 1, **{k: v for k, v in p.items() if k != "log"}} for p in processes
    ]
    assert summary[2:] == [{"p": 1, "metric_name": "loss", "p50": 2.0, "samples": 3}]
    shown = kind.table([{**s, "kind": "command"} for s in summary], ["p"])
    assert shown is not None
    frame = shown[1]
    assert list(frame["process / metric"]) == ["rank 0", "rank 1", "loss"]
    assert list(frame["status"]) == ["ok", "exit 3", "3 lines"]
    assert {m.name for m in kind.schema.metrics} >= {"exit_code", "duration", "p50"}


# -- the launch, with real processes here ------------------------------------------------------
class LocalNetwork:
    """Starts the processes on this machine (no namespaces); records what it started."""

    def __init__(self) -> None:
        self.started: list[str] = []

    def popen(self, host: str, argv: list[str], what: str = "", **kwargs: Any) -> subprocess.Popen:
        self.started.append(what)
        return subprocess.Popen(argv, **kwargs)

    def problems(self) -> list[str]:
        return []


class Held:
    """What the kind reads of a session: its launch and a process's log."""

    def __init__(self, launch: RankLaunch) -> None:
        self.launch = launch

    def log(self, key: int) -> str:
        return self.launch.log(key)


def run_processes(
    tmp_path: Path, programs: list[str], on_failure: str = "stop-all", timeout: str = "30s"
):
    kind = KINDS["command"]
    fields = {"kind": "command", "argv": ["python"], "on_failure": on_failure, "timeout": timeout}
    workload = CommandWorkload.model_validate(fields)
    spec = RankSpec("127.0.0.1", 1, len(programs), 60, [], str(tmp_path))
    lines: dict[int, list[tuple[bytes, float]]] = {}
    described = [
        LaunchProcess(
            key, f"h{key}", [sys.executable, "-c", program],
            {**os.environ, "PYTHONUNBUFFERED": "1"},
            f"rank-{key}.log", f"rank {key} (h{key})",
            stdout_line=lambda line, t, key=key: lines.setdefault(key, []).append((line, t)),
            group=True, stop_signal=signal.SIGTERM,
        )
        for key, program in enumerate(programs)
    ]  # fmt: skip
    network: Any = LocalNetwork()
    launch = RankLaunch(network, [], spec, tmp_path, "unused", processes=described)
    problems = launch.run(
        kind.deadlines(workload).run, failure_grace=kind.deadlines(workload).failure_grace
    )
    session: Any = Held(launch)
    return launch, problems + kind.problems(session, workload), lines, kind.run_info(session)


def test_stdout_lines_reach_the_log_and_the_metric_reader(tmp_path: Path) -> None:
    program = (
        "import json, sys\n"
        "print('hello'); print(json.dumps({'metric': 'm', 'value': 2}))\n"
        "print('to stderr', file=sys.stderr)\n"
    )
    launch, problems, lines, info = run_processes(tmp_path, [program, program])
    assert problems == [] and launch.codes == {0: 0, 1: 0} and launch.fired is None
    for key in (0, 1):
        log = launch.log(key)
        assert "hello" in log and '"metric": "m"' in log and "to stderr" in log
        assert [line for line, _ in lines[key]] == [b"hello\n", b'{"metric": "m", "value": 2}\n']
    assert [p["exit_code"] for p in info["processes"]] == [0, 0]
    assert all(p["duration"] is not None and p["duration"] > 0 for p in info["processes"])


def test_stop_all_stops_the_rest_and_what_they_started(tmp_path: Path) -> None:
    """Rank 1 exits 3: the others are stopped at once (failure grace 0), and so is the child
    each started (their process group)."""
    sleeper = (
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "open(os.path.join({out!r}, f'child-{key}'), 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    # rank 1 fails once both others have started their child (no race with a slow start-up)
    children = [str(tmp_path / f"child-{k}") for k in (0, 2)]
    failing = (
        "import os, sys, time\n"
        f"while not all(os.path.exists(p) for p in {children!r}):\n"
        "    time.sleep(0.05)\n"
        "print('bad input'); sys.exit(3)\n"
    )
    programs = [
        sleeper.format(out=str(tmp_path), key=0),
        failing,
        sleeper.format(out=str(tmp_path), key=2),
    ]
    started = time.monotonic()
    launch, problems, _, info = run_processes(tmp_path, programs)
    assert time.monotonic() - started < 20  # not the 30 s deadline nor the children's 60 s
    assert launch.fired is not None and launch.fired.deadline == "failure_grace"
    assert launch.codes[1] == 3 and launch.stopped == {0: "stopped", 2: "stopped"}
    assert problems[0] == "rank 1 (h1) exited with code 3"  # the runner adds a rank's log tail
    assert problems[1:] == [
        "stopped after rank 1 (h1) failed (on_failure: stop-all): rank 0 (h0), rank 2 (h2)"
    ]
    for key in (0, 2):
        child = int((tmp_path / f"child-{key}").read_text())
        assert ended(child)
        assert launch.codes[key] == -signal.SIGTERM  # asked to end, as torchrun asks its workers
    assert [p["stopped"] for p in info["processes"]] == ["stopped", None, "stopped"]


def test_wait_lets_the_others_finish_and_a_signal_is_named(tmp_path: Path) -> None:
    killed = "import os, signal, time; time.sleep(0.3); os.kill(os.getpid(), signal.SIGSEGV)"
    slow = "import time; time.sleep(2)"
    launch, problems, _, _ = run_processes(tmp_path, [killed, slow], on_failure="wait")
    assert launch.codes == {0: -signal.SIGSEGV, 1: 0} and launch.stopped == {}
    assert problems == ["rank 0 (h0) was killed by signal SIGSEGV"]


def test_the_workload_deadline_stops_a_process_and_names_it(tmp_path: Path) -> None:
    launch, problems, _, _ = run_processes(tmp_path, ["import time; time.sleep(60)"], timeout="1s")
    assert launch.fired is not None and launch.fired.deadline == "run"
    assert problems == ["rank 0 (h0) did not finish within 1s (workload.timeout)"]
