"""``workload: kind: command`` through ``testbed run`` on real namespaces: a plain Python program
(no torch), written here, runs unchanged on every rank of two clusters of two hosts and reports
what it got (placeholders, torchrun's variables, its hostname, what the other hosts' names
resolve to, the address it reaches the master from); bad input ends before any network with
exit 2 and the field named; one rank failing under ``on_failure: stop-all`` fails the run naming
it and its exit code, and leaves nothing running."""

from __future__ import annotations

import json
import socket
import textwrap
import time
from pathlib import Path

import pytest
from helpers import command_scenario, ended, write_scenario

import analysis
from testbed.cli import main

pytestmark = pytest.mark.live

TORCHRUN_VARIABLES = (
    "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE",
)  # fmt: skip
IFNAMES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
HOSTS = ("east-h0", "east-h1", "west-h0", "west-h1")

# What each process reports, into {run_dir}/probe-<RANK>.json; then a metric line, a plain line.
PROBE = textwrap.dedent(
    """
    import json, os, socket, sys, time
    names = ("rank", "local_rank", "world_size", "node_rank", "nnodes", "nproc_per_node",
             "master_addr", "master_port", "host", "cluster", "host_addr", "run_dir")
    got = dict(zip(names, sys.argv[1:]))
    env = {k: os.environ.get(k) for k in json.loads(os.environ["PROBE_VARIABLES"])}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((os.environ["MASTER_ADDR"], 9))  # no packet: the route's source address
        source = s.getsockname()[0]
    hosts = json.loads(os.environ["PROBE_HOSTS"])
    report = {
        "placeholders": got, "env": env, "hostname": socket.gethostname(),
        "resolved": {h: socket.gethostbyname(h) for h in hosts},
        "own": socket.gethostbyname(socket.gethostname()), "source": source,
        "cwd": os.getcwd(), "probe_env": os.environ.get("PROBE_ENV"),
    }
    with open(os.path.join(got["run_dir"], f"probe-{got['rank']}.json"), "w") as f:
        json.dump(report, f)
    print("a plain line, not a metric")
    print("{not json")
    print(json.dumps({"metric": "answer", "value": 40 + int(got["rank"]), "step": 1}))
    """
)

# Rank 3 fails after a moment; every other rank starts a child and waits far beyond the test.
FAILING = textwrap.dedent(
    """
    import os, subprocess, sys, time
    rank, run_dir = int(os.environ["RANK"]), sys.argv[1]
    if rank == 3:
        time.sleep(2.0)
        print("rank 3 gives up", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.path.join(run_dir, f"pids-{rank}"), "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    time.sleep(300)
    """
)


def test_a_plain_program_gets_its_placeholders_environment_hostname_and_metrics(
    root, tmp_path: Path, capsys
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "probe.py").write_text(PROBE)
    placeholders = [
        "{rank}", "{local_rank}", "{world_size}", "{node_rank}", "{nnodes}", "{nproc_per_node}",
        "{master_addr}", "{master_port}", "{host}", "{cluster}", "{host_addr}", "{run_dir}",
    ]  # fmt: skip
    workload = {
        "ranks_per_host": 2,
        "argv": ["python", "probe.py", *placeholders],
        "cwd": "work",
        "env": {
            "PROBE_VARIABLES": json.dumps([*TORCHRUN_VARIABLES, *IFNAMES, "OMP_NUM_THREADS"]),
            "PROBE_HOSTS": json.dumps(HOSTS),
            "PROBE_ENV": "rank-{rank}-of-{world_size}",
            "OMP_NUM_THREADS": "2",
        },
        "timeout": "60s",
    }
    expect = [{"where": {"metric_name": "answer"}, "metric": "p50", "relation": "==",
               "value": 43.5}]  # fmt: skip
    path = write_scenario(tmp_path, command_scenario("cmd", workload, hosts=2, expect=expect))
    code = main(["run", str(path), "--out", str(tmp_path / "results")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "expect[0] passed" in printed  # the metric's p50 (40..47) as an expectation

    (results,) = (tmp_path / "results").iterdir()
    res = analysis.load(results)
    (run_id,) = res.runs["run_id"]
    run_dir = results / "runs" / run_id
    ranks = res.ranks.set_index("rank")
    assert sorted(ranks.index) == list(range(8))
    reports = {r: json.loads((run_dir / f"probe-{r}.json").read_text()) for r in range(8)}
    nodes = list(dict.fromkeys(ranks.sort_index()["host"]))
    assert sorted(nodes) == sorted(HOSTS)
    # each host's address: what its own processes reach the master from
    address = {ranks.loc[r, "host"]: reports[r]["source"] for r in range(8)}
    master = address[ranks.loc[0, "host"]]
    for r, got in reports.items():
        host = ranks.loc[r, "host"]
        local = list(ranks.sort_index()["host"]).index(host)
        local_rank = r - local
        p, env = got["placeholders"], got["env"]
        assert p == {
            "rank": str(r), "local_rank": str(local_rank), "world_size": "8",
            "node_rank": str(nodes.index(host)), "nnodes": "4", "nproc_per_node": "2",
            "master_addr": master, "master_port": env["MASTER_PORT"], "host": host,
            "cluster": ranks.loc[r, "cluster"], "host_addr": address[host],
            "run_dir": str(run_dir.resolve()),
        }, r  # fmt: skip
        assert env == {
            "MASTER_ADDR": master, "MASTER_PORT": p["master_port"], "RANK": str(r),
            "LOCAL_RANK": str(local_rank), "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": str(nodes.index(host)), "ROLE_RANK": str(r), "ROLE_WORLD_SIZE": "8",
            "GROUP_WORLD_SIZE": "4", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0",
            "TP_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "2",
        }, r  # fmt: skip
        assert got["probe_env"] == f"rank-{r}-of-8" and got["cwd"] == str(tmp_path / "work")
        # its own hostname, resolving to its own address; every other host's name to theirs
        assert got["hostname"] == host and got["own"] == address[host]
        assert got["resolved"] == {h: address[h] for h in HOSTS}
    assert socket.gethostname() not in HOSTS  # the machine's own name is left as it was
    assert len(set(address.values())) == 4

    metrics = res.metrics.sort_values("rank")
    assert list(metrics["rank"]) == list(range(8)) and set(metrics["metric"]) == {"answer"}
    assert list(metrics["value"]) == [40.0 + r for r in range(8)]
    assert list(metrics["host"]) == [ranks.loc[r, "host"] for r in range(8)]
    assert all(json.loads(f) == {"step": 1} for f in metrics["fields"])
    assert metrics["time"].between(time.time() - 600, time.time()).all()  # when it was read
    log = (run_dir / "rank-5.log").read_text()
    assert "a plain line, not a metric" in log and "{not json" in log and '"answer"' in log
    summary = res.kind_summaries["command"]
    processes = summary[summary["process"].notna()]
    assert sorted(processes["process"]) == sorted(f"rank {r}" for r in range(8))
    assert (processes["exit_code"] == 0).all() and (processes["duration"] > 0).all()


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["python", "-c", "pass", "{rnak}"], "workload.argv[3]"),
        (["no-such-program-anywhere", "x"], "workload.argv[0]"),
        (["python", "absent.py"], "workload.argv[1]"),
    ],
)
def test_bad_input_exits_2_naming_the_field_before_any_network(
    root, tmp_path: Path, capsys, argv: list[str], field: str
) -> None:
    path = write_scenario(tmp_path, command_scenario("bad", {"argv": argv}, hosts=2))
    assert main(["run", str(path), "--out", str(tmp_path / "results")]) == 2
    printed = capsys.readouterr()
    assert f"{field}:" in printed.err, printed
    assert "Traceback" not in printed.err + printed.out
    assert not (tmp_path / "results").exists()


def test_a_failing_rank_stops_the_others_and_names_its_exit_code(
    root, tmp_path: Path, capsys
) -> None:
    (tmp_path / "fail.py").write_text(FAILING)
    workload = {"argv": ["python", "fail.py", "{run_dir}"], "timeout": "120s"}
    path = write_scenario(tmp_path, command_scenario("cmdfail", workload, hosts=2))
    assert main(["run", str(path), "--out", str(tmp_path / "results")]) == 1
    capsys.readouterr()
    (results,) = (tmp_path / "results").iterdir()
    manifest = json.loads((results / "manifest.json").read_text())
    ((run_id, run),) = manifest["runs"].items()
    assert run["status"] == "failed"
    reason = run["reason"]
    # the first failure first, with its exit code and its log's last line
    assert reason.startswith("rank 3 ("), reason
    assert "exited with code 3: " in reason.split(";")[0] and "rank 3 gives up" in reason
    stopped = reason.split("; ")[-1]
    assert stopped.startswith("stopped after rank 3 (") and "(on_failure: stop-all): " in stopped
    for r in (0, 1, 2):
        assert f"rank {r} (" in stopped
    codes = {p["process"]: p["exit_code"] for p in run["processes"]}
    assert codes["rank 3"] == 3 and all(codes[f"rank {r}"] != 0 for r in (0, 1, 2))
    run_dir = results / "runs" / run_id
    for r in (0, 1, 2):
        for pid in map(int, (run_dir / f"pids-{r}").read_text().split()):
            assert ended(pid), (r, pid)


# torchrun's workers all-reduce ELEMENTS float32 ones ITERATIONS times over gloo and print each
# all-reduce's time as a metric line (torchrun passes its workers' stdout through).
ALL_REDUCE = textwrap.dedent(
    """
    import json, os, socket, time
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    world, n = dist.get_world_size(), int(os.environ["ELEMENTS"])
    tensor = torch.ones(n)
    for _ in range(int(os.environ["ITERATIONS"])):
        t0 = time.time()
        dist.all_reduce(tensor)
        print(json.dumps({"metric": "all_reduce_s", "value": time.time() - t0}), flush=True)
    print(json.dumps({"metric": "sum", "value": tensor[0].item(), "rank": dist.get_rank(),
                      "hostname": socket.gethostname()}), flush=True)
    dist.destroy_process_group()
    """
)


def test_torchrun_per_host_runs_a_gloo_all_reduce_across_the_wan(
    root, tmp_path: Path, capsys
) -> None:
    elements, iterations = 1 << 20, 3
    (tmp_path / "allreduce.py").write_text(ALL_REDUCE)
    argv = [
        "torchrun", "--nnodes", "{nnodes}", "--node-rank", "{node_rank}",
        "--nproc-per-node", "{nproc_per_node}", "--master-addr", "{master_addr}",
        "--master-port", "{master_port}", "allreduce.py",
    ]  # fmt: skip
    workload = {
        "per": "host",
        "argv": argv,
        "env": {"ELEMENTS": str(elements), "ITERATIONS": str(iterations)},
        "timeout": "400s",
    }
    path = write_scenario(tmp_path, command_scenario("cmdtr", workload, hosts=2))
    code = main(["run", str(path), "--out", str(tmp_path / "results")])
    printed = capsys.readouterr().out
    assert code == 0, printed
    (results,) = (tmp_path / "results").iterdir()
    res = analysis.load(results)
    metrics = res.metrics
    sums = metrics[metrics["metric"] == "sum"]
    # four ranks, one per host; ones all-reduced three times: 4**3 everywhere
    assert len(sums) == 4 and (sums["value"] == 4.0**iterations).all()
    fields = [json.loads(f) for f in sums["fields"]]
    assert sorted(f["rank"] for f in fields) == [0, 1, 2, 3]
    # each worker has its host's name (torchrun's workers inherit the agent's), and its metric
    # rows are its agent's host's
    assert sorted(f["hostname"] for f in fields) == sorted(HOSTS)
    assert [f["hostname"] for f in fields] == list(sums["host"])
    assert (metrics["metric"] == "all_reduce_s").sum() == 4 * iterations
    summary = res.kind_summaries["command"]
    processes = summary[summary["process"].notna()]
    assert sorted(processes["process"]) == sorted(f"host {h}" for h in HOSTS)
    assert (processes["exit_code"] == 0).all()
    # c10d names every peer of its store (the hosts file has their dual-stack addresses too)
    for log in (results / "runs").glob("*/host-*.log"):
        assert "hostname of the client socket cannot be retrieved" not in log.read_text(), log

    # The WAN bytes: gloo's ring all-reduce (ranks 0..3 = east-h0, east-h1, west-h0, west-h1,
    # node order) crosses the WAN once each way (1->2, 3->0); each hop carries 2(n-1)/n of the
    # tensor per all-reduce, so each direction at least 1.5 x 4 MiB x 3 of payload. Above it:
    # the headers (66 B a 1448 B segment: 4.6%) and the ACKs of the other direction's data
    # (66 B per two segments: 2.3%), under 10%, and 1 MiB for the rendezvous, the store, gloo's
    # full mesh set-up and the barriers.
    payload = 2 * 3 / 4 * elements * 4 * iterations
    queues = res.queues
    assert not queues.empty
    for direction in ("east->west", "west->east"):
        counter = queues[queues["direction"] == direction]["bytes"].dropna()
        moved = counter.max() - counter.min()
        assert payload <= moved <= payload * 1.10 + (1 << 20), (direction, moved, payload)
