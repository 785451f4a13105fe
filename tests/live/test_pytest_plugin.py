"""The pytest plugin (testbed.testing.plugin) seen from a user's test suite, run with pytester in a
subprocess each (real namespaces and rank processes), plus pure tests of what run_ranks accepts.

Scenarios are tiny (2 clusters x 1 host, 100 Mbit/s, 5 ms): most of a case's time is the rank
processes importing torch and joining gloo.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.core.stats import quantile as _quantile
from testbed.net import probe as kernel
from testbed.net import registry
from testbed.testing.ranktest import (
    RankFunctionError,
    TimeStats,
    check_signature,
    describe_function,
)

pytest_plugins = ["pytester"]

TINY = """\
name: tiny
clusters:
  east: {hosts: 1}
  west: {hosts: 1}
wan:
  - between: [east, west]
    rate: 100mbit
    delay: 5ms
"""
INNER_TIMEOUT = 120  # seconds an inner pytest run may take before the outer test fails


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makefile(".yaml", tiny=TINY)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=INNER_TIMEOUT)


def rank_processes_of(run_dir: str) -> list[int]:
    """Pids whose command line names this call's directory (its spec.json): that call's ranks."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if run_dir in cmdline:
                pids.append(int(proc.name))
    return pids


# -- live: a user's suite ----------------------------------------------------------------------
@pytest.mark.live
def test_passing_rank_function(root, pytester):
    pytester.makepyfile(
        test_pass="""
        import pytest
        import torch
        import torch.distributed as dist

        def double(ctx, nbytes):
            t = torch.ones(nbytes // 4)
            with ctx.timer("all_reduce"):
                dist.all_reduce(t)
            assert float(t[0]) == ctx.world_size
            return ctx.rank * 2

        @pytest.mark.testbed("tiny.yaml", set={"wan[0].delay": "5ms"})
        def test_double(testbed):
            res = testbed.run_ranks(double, nbytes=64 << 10, iterations=3, warmup=1)
            assert res.ok, res.explain()
            assert res.returns == [0, 2]
            assert res.errors == {} and res.problems == []
            assert res.time.n == 3 and len(res.times) == 3
            assert 0 < res.time.p50 <= res.time.p95 <= res.time.max
            assert set(res.phases) == {"all_reduce"}
            assert 0 < res.predicted("all_reduce", "flat") < 1
            assert res.predicted("all_reduce", "flat", size=1 << 20) > res.predicted("all_reduce")
            assert [r.host for r in testbed.ranks] == ["east-h0", "west-h0"]
            assert [c.direction for c in res.links] == ["east->west", "west->east"]
            assert testbed.testbed.name.startswith("pt")
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1)


@pytest.mark.live
def test_a_users_training_step_keeps_its_state_and_gets_its_wan_bytes(root, pytester):
    pytester.makepyfile(
        test_train="""
        import pytest
        import torch
        import torch.distributed as dist

        STATE = {}  # a rank process runs every iteration: module state is the model's state

        def train_step(ctx, nbytes):
            if not STATE:
                STATE.update(w=torch.zeros(nbytes // 4), steps=0)
            g = torch.ones_like(STATE["w"])
            with ctx.timer("all_reduce"):
                dist.all_reduce(g)
            STATE["w"] -= 0.1 * g / ctx.world_size
            STATE["steps"] += 1
            return STATE["steps"]

        @pytest.mark.testbed("tiny.yaml", selfcheck=False)
        def test_train(testbed):
            res = testbed.run_ranks(train_step, nbytes=1 << 20, iterations=4)
            assert res.ok, res.explain()
            assert res.returns == [4, 4]
            assert len(res.wan_bytes) == 4
            # 2 ranks: an all-reduce of S sends S each way; wire bytes add headers and ACKs
            total = sum(res.wan_bytes)
            assert 4 * 2 * (1 << 20) <= total <= 1.2 * 4 * 2 * (1 << 20), res.wan_bytes
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=1)


@pytest.mark.live
@pytest.mark.timing
def test_a_users_collective_survives_a_partition_and_sees_its_events(root, pytester):
    # the plugin's user story: "my code survives a 2 s partition and finishes within 10 s of it
    # ending", written as a user writes it
    pytester.makepyfile(
        test_partition=r"""
        import time
        import pytest
        import torch
        import torch.distributed as dist

        def allreduce(ctx, nbytes):
            t = torch.ones(nbytes // 4)
            dist.all_reduce(t)
            return float(t[0])

        @pytest.mark.testbed("tiny.yaml", selfcheck=False)
        def test_survives(testbed):
            faults = [{"kind": "partition", "groups": [["east"], ["west"]],
                       "after": {"iteration": 1, "offset": "10ms"}, "duration": "2s"}]
            res = testbed.run_ranks(allreduce, 1 << 20, iterations=4, timeout=60, faults=faults)
            assert res.ok, res.explain()
            assert res.returns == [2.0, 2.0]
            actions = [e["action"] for e in res.events]
            assert actions == ["blackhole", "unblackhole"], res.events
            assert all(e["status"] == "applied" and not e["error"] for e in res.events)
            # the partition fell on iteration 1, which waited it out: it began 10 ms in (plus
            # the event's lateness) and lasted 2 s, so that op takes >= 2.01 s (timers: us)
            assert max(res.times) >= 2.0, res.times
            ends = [o.starts[-1] + o.seconds[-1] for o in res.outcomes]
            # the user story's 10 s: TCP resumes within one RTO step, < 2 s + rto0 after the
            # end (RESULTS.md "WAN faults", partition: recover 1.7-6.6 s), then 2 short ops
            assert max(ends) - res.faults_ended_at < 10, (ends, res.faults_ended_at)

        @pytest.mark.testbed("tiny.yaml", selfcheck=False)
        def test_bad_fault_is_refused_by_name(testbed):
            with pytest.raises(Exception, match=r"faults\[0\]\.link: no WAN link 'east-north'"):
                testbed.run_ranks(allreduce, 4, faults=[
                    {"kind": "blackhole", "link": "east-north", "at": "0s", "duration": "1s"}])
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=2)


@pytest.mark.live
def test_rank_that_raises_shows_its_rank_and_traceback(root, pytester):
    pytester.makepyfile(
        test_raises="""
        import pytest

        def explode(ctx):
            if ctx.rank == 1:
                raise ValueError("bad gradient on purpose")
            return ctx.rank

        @pytest.mark.testbed("tiny.yaml", selfcheck=False)
        def test_explode(testbed):
            res = testbed.run_ranks(explode)
            assert 1 in res.errors and "bad gradient on purpose" in res.errors[1]
            assert res.problems[0].startswith("rank 1 (west-h0) raised ValueError")
            assert res.ok
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*testbed: ranks and network*",
            "*rank 1 (west-h0) raised ValueError: bad gradient on purpose*",
            '*test_raises.py", line 5, in explode*',
            '*raise ValueError("bad gradient on purpose")*',
            "*network: testbed pt*",
        ]
    )


@pytest.mark.live
def test_rank_that_hangs_times_out_and_everything_is_torn_down(root, pytester):
    pytester.makepyfile(
        test_hang="""
        import time
        from pathlib import Path
        import pytest

        def hang(ctx):
            if ctx.rank == 1:
                time.sleep(3600)
            return ctx.rank

        @pytest.mark.testbed("tiny.yaml", selfcheck=False)
        def test_hang(testbed):
            Path("testbed-name").write_text(testbed.testbed.name)
            Path("testbed-prefix").write_text(testbed.testbed.record.prefix)
            res = testbed.run_ranks(hang, timeout=5)
            Path("run-dir").write_text(str(res.run_dir))
            assert res.returns[0] == 0
            assert res.ok, res
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*rank 1 (west-h0) did not finish within 5 s (in test_hang:hang, iteration 0)*",
            "*stack when stopped*",
            '*test_hang.py", line 7 in hang*',
        ]
    )
    name = (pytester.path / "testbed-name").read_text()
    prefix = (pytester.path / "testbed-prefix").read_text()
    run_dir = (pytester.path / "run-dir").read_text()
    assert name not in {r.name for r in registry.records()}
    assert registry.namespaces_with_prefix(prefix) == []
    assert rank_processes_of(run_dir) == []


@pytest.mark.live
def test_sigterm_while_a_network_is_up_stops_the_session_after_its_teardown(root, pytester):
    # a user's own test with a Network (no plugin fixture): SIGTERM, as a CI job's timeout sends
    pytester.makepyfile(
        test_stop="""
        import os, signal
        from pathlib import Path
        from testbed.api import Network

        def test_sigterm():
            with Network.from_file("tiny.yaml", name=f"sigterm-{os.getpid()}") as tb:
                Path("prefix").write_text(tb.record.prefix)
                os.kill(os.getpid(), signal.SIGTERM)
                tb.run("east-h0", ["sleep", "10"])

        def test_next():
            Path("next-ran").write_text("it must not")
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*Terminated: terminated by SIGTERM*", "*Interrupted: terminated by SIGTERM*"]
    )
    assert not (pytester.path / "next-ran").exists()
    prefix = (pytester.path / "prefix").read_text()
    assert registry.namespaces_with_prefix(prefix) == []
    assert not [r for r in registry.records() if r.prefix == prefix]


@pytest.mark.live
def test_skipped_when_the_kernel_lacks_what_the_scenario_needs(root, pytester):
    if kernel.probe().congestion_supported("dctcp"):
        pytest.skip("this kernel has dctcp: nothing to skip here")
    pytester.makefile(".yaml", dctcp=TINY + "tcp: {congestion: dctcp}\n")
    pytester.makepyfile(
        test_skip="""
        import pytest

        @pytest.mark.testbed("dctcp.yaml")
        def test_needs_dctcp(testbed):
            raise AssertionError("must not run")

        def test_fixture_without_marker(testbed):
            raise AssertionError("must not run")
        """
    )
    result = run_inner(pytester, "-rs")
    result.assert_outcomes(skipped=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*the `testbed` fixture needs a scenario*",
            "SKIPPED*unsupported on this kernel: dctcp*",
        ]
    )


def test_skipped_when_not_root(pytester):
    pytester.makeconftest("import os\nos.geteuid = lambda: 1000  # pretend: not root\n")
    pytester.makepyfile(
        test_user="""
        import pytest

        @pytest.mark.testbed("tiny.yaml")
        def test_needs_root(testbed):
            raise AssertionError("must not run")
        """
    )
    result = run_inner(pytester, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED*needs root*"])


@pytest.mark.live
def test_module_scoped_network_is_shared(root, pytester):
    pytester.makepyfile(
        test_module="""
        import pytest

        pytestmark = pytest.mark.testbed("tiny.yaml", scope="module", selfcheck=False)
        seen = []

        def test_first(testbed):
            seen.append(testbed.testbed.name)
            assert testbed.testbed.run("east-h0", ["ping", "-c1", "-W2", "west-h0"]).returncode == 0

        def test_second_sees_the_same_network(testbed):
            assert seen == [testbed.testbed.name]
            with pytest.raises(TypeError, match="lambda"):
                testbed.run_ranks(lambda ctx: 0)

        @pytest.mark.testbed("tiny.yaml", scope="module", set={"wan[0].delay": "1ms"},
                             selfcheck=False)
        def test_other_arguments_other_network(testbed):
            assert testbed.testbed.name not in seen
            assert testbed.plan.wan[0].delay == 0.001
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=3)
    assert not [r for r in registry.records() if not r.live() and r.name.startswith("pt")]


# a user's program as it is: rank 1 sends N bytes to rank 0 across the WAN over a plain TCP
# socket (torchrun's variables say where), both print their time as a JSON line
SEND_SCRIPT = """\
import json
import os
import socket
import sys
import time

rank, n = int(os.environ["RANK"]), int(sys.argv[1])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
print("hello from", socket.gethostname(), "rank", rank, flush=True)  # only log
t0 = time.perf_counter()
if rank == 0:
    conn, _ = socket.create_server((addr, port)).accept()
    got = 0
    while got < n:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        got += len(chunk)
    conn.sendall(b"k")
else:
    for _ in range(400):
        try:
            s = socket.create_connection((addr, port))
            break
        except OSError:
            time.sleep(0.05)
    s.sendall(b"x" * n)
    s.recv(1)
    got = n
print(json.dumps({"metric": "transfer_s", "value": time.perf_counter() - t0}), flush=True)
print(json.dumps({"metric": "received", "value": got, "rank": rank}), flush=True)
"""


@pytest.mark.live
def test_run_command_returns_what_run_ranks_does(root, pytester):
    pytester.makefile(".py", send=SEND_SCRIPT)
    pytester.makepyfile(
        test_command="""
        import pytest

        pytestmark = pytest.mark.testbed("tiny.yaml", scope="module", selfcheck=False)
        N = 1 << 20

        def test_a_program_across_the_wan(testbed):
            res = testbed.run_command(["python", "send.py", str(N)], timeout=60)
            assert res.ok, res.explain()
            assert [o.label for o in res.outcomes] == ["rank 0 (east-h0)", "rank 1 (west-h0)"]
            assert [o.status for o in res.outcomes] == ["ok", "ok"]
            assert [o.exit_code for o in res.outcomes] == [0, 0]
            assert all(len(o.seconds) == 1 and 0 < o.seconds[0] < 60 for o in res.outcomes)
            assert res.times == [max(o.seconds[0] for o in res.outcomes)]
            assert "hello from east-h0 rank 0" in res.stdout[0]  # its own hostname
            assert "hello from west-h0 rank 1" in res.stdout[1]
            assert sorted(res.metric("received")) == [N, N]
            assert len(res.metric("transfer_s")) == 2
            assert {r["process"] for r in res.metrics} == {"rank 0", "rank 1"}
            # the payload crossed the WAN once; TCP/IP headers (52 B per 1448 B segment, 3.6%)
            # and the reverse ACKs (66 B per two segments, 2.3%) add under 10%: 1.25 bounds it
            # with room for the connection's handshake and retransmissions
            assert len(res.wan_bytes) == 1
            assert N <= res.wan_bytes[0] <= 1.25 * N, res.wan_bytes
            assert "run_command(python send.py" in res.explain()

        def test_per_host_placeholders_and_a_failing_process(testbed):
            argv = ["python", "-c", "import sys; print('node {node_rank} of {nnodes}'); "
                    "sys.exit(3 if {node_rank} == 1 else 0)"]
            res = testbed.run_command(argv, per="host", timeout=60, on_failure="wait")
            assert not res.ok
            assert [o.label for o in res.outcomes] == ["host east-h0", "host west-h0"]
            assert [o.status for o in res.outcomes] == ["ok", "error"]
            assert res.outcomes[1].exit_code == 3
            assert res.outcomes[1].error_summary == "exited with code 3"
            assert "node 1 of 2" in res.outcomes[1].error
            assert res.problems[0].startswith("host west-h0 exited with code 3"), res.problems
            assert res.metrics == []

        def test_a_hung_process_is_named_at_the_timeout(testbed):
            argv = ["python", "-c", "import time; time.sleep(30 * {rank})"]
            res = testbed.run_command(argv, timeout=2)
            assert [o.status for o in res.outcomes] == ["ok", "timeout"]
            assert "rank 1 (west-h0) did not finish within 2s" in res.problems[0], res.problems

        def test_bad_input_is_refused_before_anything_runs(testbed):
            from testbed.core.errors import ScenarioError

            before = len(testbed.results)
            with pytest.raises(ScenarioError, match="unknown placeholder"):
                testbed.run_command(["python", "{rnak}"])
            with pytest.raises(ScenarioError, match="no-such-program"):
                testbed.run_command(["no-such-program"])
            assert len(testbed.results) == before
        """
    )
    result = run_inner(pytester)
    result.assert_outcomes(passed=4)


# -- pure: what can be sent to the ranks -------------------------------------------------------
def top_level(ctx, x):
    return x


class Holder:
    @staticmethod
    def static(ctx):
        return 0

    def method(self, ctx):
        return 0


def test_top_level_functions_and_static_methods_are_accepted():
    module = __name__
    assert describe_function(top_level) == (f"{module}:top_level", str(Path(__file__).resolve()))
    assert describe_function(Holder.static)[0] == f"{module}:Holder.static"


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda ctx: 0, "lambda"),
        (functools.partial(top_level, x=1), "not a plain function"),
        (Holder().method, "bound method"),
        (print, "not a plain function"),
    ],
)
def test_what_cannot_run_on_ranks_is_refused_with_a_reason(fn, message):
    with pytest.raises(RankFunctionError, match=message):
        describe_function(fn)


def test_closures_are_refused():
    y = 1

    def inner(ctx):
        return y

    with pytest.raises(RankFunctionError, match="nested function or closure"):
        describe_function(inner)


def test_time_stats():
    assert _quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    stats = TimeStats.of([0.3, 0.1, 0.2])
    assert (stats.p50, stats.max, stats.min, stats.n) == (0.2, 0.3, 0.1, 3)
    empty = TimeStats.of([])
    assert empty.n == 0 and not (empty.p50 <= 1.0)  # NaN: a timing assertion fails, not errors


def test_plugin_import_is_cheap():
    code = (
        "import sys, testbed.testing.plugin; print('torch' in sys.modules, 'pandas' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]


def _without_ctx(nbytes):
    return nbytes


def _with_ctx(ctx, nbytes):
    return nbytes


def test_a_rank_function_without_the_context_first_is_refused_before_any_process_starts():
    with pytest.raises(RankFunctionError, match=r"takes the rank context first"):
        check_signature(_without_ctx, (), {"nbytes": 1})
    check_signature(_with_ctx, (), {"nbytes": 1})
    with pytest.raises(RankFunctionError, match="cannot be called"):
        check_signature(_with_ctx, (1, 2), {})
