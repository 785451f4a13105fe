"""Collectives with real gloo ranks as local processes on 127.0.0.1 (no namespaces, no root).

Each multi-rank test starts four ``traffic.rank`` processes, forked from a server that imported
torch once (``forked_ranks``: the import used to dominate the unit tier's time); every process
started is killed by its pid in the fixture's finalizer, whatever the test's outcome. Pure helpers
(layout, rounding, exact fills) are tested without processes.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forked_ranks
import pytest

torch = pytest.importorskip("torch")

from traffic import collectives as C  # noqa: E402
from traffic.context import RankContext, columns, topology  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ALL_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
ALL_ALGORITHMS = ["flat", "hierarchical", "hierarchical-2d"]


# --------------------------------------------------------------------------- harness


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_spec(placement: list[str], out_dir: Path, **overrides: Any) -> dict[str, Any]:
    """``placement[r]`` is rank r's cluster."""
    seen: dict[str, int] = {}
    ranks = []
    for r, cluster in enumerate(placement):
        i = seen[cluster] = seen.get(cluster, -1) + 1
        ranks.append({"rank": r, "host": f"{cluster}-h{i}", "cluster": cluster, "local_rank": 0})
    spec = {
        "master_addr": "127.0.0.1",
        "master_port": free_port(),
        "world_size": len(placement),
        "timeout_s": 10,
        "ranks": ranks,
        "collectives": ALL_COLLECTIVES,
        "algorithms": ALL_ALGORITHMS,
        "sizes": [64 * 1024, 1024 * 1024],
        "dtype": "float32",
        "warmup": 1,
        "iterations": 2,
        "out_dir": str(out_dir),
    }
    spec.update(overrides)
    return spec


@dataclass
class Run:
    spec: dict[str, Any]
    procs: list[forked_ranks.RankProcess]
    err_paths: list[Path]

    @property
    def out_dir(self) -> Path:
        return Path(self.spec["out_dir"])

    def wait(self, timeout: float = 60) -> list[int]:
        deadline = time.monotonic() + timeout
        return [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in self.procs]

    def stderr(self, rank: int) -> str:
        return self.err_paths[rank].read_text()

    def rows(self, rank: int | None = None) -> list[dict[str, Any]]:
        ranks = range(len(self.procs)) if rank is None else [rank]
        rows = []
        for r in ranks:
            path = self.out_dir / f"rank-{r}.jsonl"
            if path.exists():
                rows += [json.loads(line) for line in path.read_text().splitlines()]
        return rows


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    started: list[forked_ranks.RankProcess] = []

    def start(spec: dict[str, Any], env: dict[str, str] | None = None) -> Run:
        spec_path = tmp_path / "spec.json"
        spec_path.write_text(json.dumps(spec))
        full_env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_WORLD_SIZE",)}
        full_env.pop(C.INJECT_ENV, None)
        full_env.update(
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO) + os.pathsep + full_env.get("PYTHONPATH", ""),
            PYTHONWARNINGS="ignore::FutureWarning",
        )
        full_env.update(env or {})
        procs, errs = [], []
        for r in range(spec["world_size"]):
            err = tmp_path / f"stderr-{r}.txt"
            argv = ["--spec", str(spec_path), "--rank", str(r)]
            p = forked_ranks.start(argv, full_env, REPO, err)
            started.append(p)
            procs.append(p)
            errs.append(err)
        return Run(spec, procs, errs)

    yield start
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def expected_combinations(spec: dict[str, Any], equal_clusters: bool) -> set[tuple[str, str]]:
    runs = set()
    for coll in spec["collectives"]:
        for algo in spec["algorithms"]:
            exists = {
                "flat": True,
                "hierarchical": coll != "all_to_all",
                "hierarchical-2d": coll == "all_reduce" and equal_clusters,
            }[algo]
            if exists:
                runs.add((coll, algo))
    return runs


def assert_all_correct(run: Run, equal_clusters: bool) -> None:
    codes = run.wait()
    assert codes == [0] * len(codes), [run.stderr(r) for r in range(len(codes))]
    spec = run.spec
    measured = [row for row in run.rows() if "skipped" not in row]
    skipped = [row for row in run.rows() if "skipped" in row]
    assert measured and all(row["correct"] for row in measured)
    wanted = expected_combinations(spec, equal_clusters)
    per_rank = {
        (row["rank"], row["collective"], row["algorithm"], row["requested_size"])
        for row in measured
    }
    for rank in range(spec["world_size"]):
        for coll, algo in wanted:
            for size in spec["sizes"]:
                assert (rank, coll, algo, size) in per_rank, (rank, coll, algo, size)
    counts: dict[tuple[int, str, str, int], int] = {}
    for row in measured:
        key = (row["rank"], row["collective"], row["algorithm"], row["requested_size"])
        counts[key] = counts.get(key, 0) + 1
        assert row["size"] <= row["requested_size"]
        assert row["seconds"] > 0
    assert set(counts.values()) == {spec["iterations"]}
    # skip lines: rank 0 only, one per missing combination and size, each with a reason
    assert all(row["skipped"] for row in skipped)
    assert {(r["collective"], r["algorithm"]) for r in skipped} == {
        (c, a) for c in spec["collectives"] for a in spec["algorithms"]
    } - wanted
    assert len(skipped) == len({(r["collective"], r["algorithm"], r["size"]) for r in skipped})
    assert not any("skipped" in row for r in range(1, spec["world_size"]) for row in run.rows(r))


# --------------------------------------------------------------------------- real ranks


def test_two_clusters_contiguous(launch: Any, tmp_path: Path) -> None:
    run = launch(make_spec(["east", "east", "west", "west"], tmp_path / "out"))
    assert_all_correct(run, equal_clusters=True)
    rows = run.rows()
    reasons = {(r["collective"], r["algorithm"]): r["skipped"] for r in rows if "skipped" in r}
    assert reasons[("all_to_all", "hierarchical")] == "no hierarchical all_to_all"
    hier = [r for r in rows if r.get("algorithm") == "hierarchical" and r.get("rank") == 0]
    assert all("leaders_all_reduce" in r["phases"] for r in hier if r["collective"] == "all_reduce")
    flat_rs = [r for r in rows if r.get("collective") == "reduce_scatter" and "seconds" in r]
    assert all("note" in r for r in flat_rs if r["algorithm"] == "flat")


def test_two_clusters_interleaved(launch: Any, tmp_path: Path) -> None:
    # cluster of rank r = r % 2: blocks of hierarchical all_gather/reduce_scatter must be re-ordered
    run = launch(make_spec(["a", "b", "a", "b"], tmp_path / "out"))
    assert_all_correct(run, equal_clusters=True)


def test_unequal_clusters_bfloat16_odd_size(launch: Any, tmp_path: Path) -> None:
    # 2+1+1 ranks, interleaved, bfloat16 (exact only up to 256), a size of 50_001 elements
    spec = make_spec(["a", "b", "a", "c"], tmp_path / "out", sizes=[100_002], dtype="bfloat16")
    run = launch(spec)
    assert_all_correct(run, equal_clusters=False)
    rows = run.rows()
    skip = next(
        r
        for r in rows
        if r.get("algorithm") == "hierarchical-2d" and r["collective"] == "all_reduce"
    )
    assert "same number of ranks" in skip["skipped"] and "2+1+1" in skip["skipped"]
    measured = [r for r in rows if "seconds" in r]
    assert {r["dtype"] for r in measured} == {"bfloat16"}
    # rounded down to what the collective needs: all_reduce/broadcast any count, others /4
    sizes = {r["collective"]: r["size"] for r in measured}
    assert sizes == {
        "all_reduce": 100_002,
        "broadcast": 100_002,
        "all_gather": 100_000,
        "reduce_scatter": 100_000,
        "all_to_all": 100_000,
    }
    assert {r["count"] for r in measured if r["collective"] == "all_gather"} == {50_000}
    notes = {(r["collective"], r["algorithm"]): r.get("note") for r in measured}
    assert "all-gather-v" in notes[("all_gather", "hierarchical")]
    assert "all_reduce" in notes[("reduce_scatter", "flat")]


def test_wrong_result_exits_3_with_message(launch: Any, tmp_path: Path) -> None:
    spec = make_spec(
        ["a", "a", "b", "b"],
        tmp_path / "out",
        collectives=["all_reduce", "all_gather"],
        algorithms=["flat", "hierarchical"],
        sizes=[64 * 1024],
    )
    run = launch(spec, env={C.INJECT_ENV: "rank:2"})
    codes = run.wait()
    assert codes == [0, 0, 3, 0], run.stderr(2)
    err = run.stderr(2)
    assert "rank 2 (b-h0): WRONG all_reduce/flat/65536 B iteration 0: first bad index 8192" in err
    assert "WRONG all_gather/hierarchical/65536 B" in err
    rows = run.rows(2)
    assert rows and not any(r["correct"] for r in rows)
    assert {r["first_bad_index"] for r in rows} == {8192}
    assert all(r["correct"] for r in run.rows(0))


def test_killed_rank_fails_the_others_within_timeout(launch: Any, tmp_path: Path) -> None:
    spec = make_spec(
        ["a", "a", "b", "b"],
        tmp_path / "out",
        collectives=["all_reduce"],
        algorithms=["flat", "hierarchical"],
        sizes=[256 * 1024],
        iterations=1_000_000,
        timeout_s=10,
    )
    run = launch(spec)
    victim = run.out_dir / "rank-3.jsonl"
    deadline = time.monotonic() + 30
    while not (victim.exists() and victim.stat().st_size > 0):
        assert time.monotonic() < deadline, [run.stderr(r) for r in range(4)]
        assert all(p.poll() is None for p in run.procs), [run.stderr(r) for r in range(4)]
        time.sleep(0.05)
    os.kill(run.procs[3].pid, signal.SIGKILL)
    codes = run.wait(timeout=spec["timeout_s"] + 10)  # a hang guard: the ranks end on their own
    assert codes[:3] == [1, 1, 1]
    # each survivor failed on the operation its dead peer left (no wait for the next one)
    for rank in range(3):
        failed = [r for r in run.rows(rank) if r.get("outcome", "ok") != "ok"]
        assert len(failed) == 1 and failed[0]["error"], run.stderr(rank)
    assert "rank 0 (a-h0): Traceback" in run.stderr(0)
    assert run.rows(0)  # what was measured before the failure is kept


def test_rank_0_announces_every_timed_operation(launch: Any, tmp_path: Path) -> None:
    from testbed.experiment.clock import OriginClock

    with OriginClock() as clock:
        spec = make_spec(
            ["a", "a", "b", "b"],
            tmp_path / "out",
            collectives=["all_reduce", "broadcast"],
            algorithms=["flat"],
            sizes=[4096],
            iterations=3,
            events_socket=clock.path,
        )
        run = launch(spec)
        assert run.wait() == [0, 0, 0, 0], [run.stderr(r) for r in range(4)]
        # no timeout: only rank 0's "end" (or none, a hang) ends this wait for an op never run
        assert clock.wait_iteration(6) is None
        assert clock.ended  # rank 0 said the workload is over
        rows = {(r["rank"], r["op"]): r for r in run.rows() if "skipped" not in r}
    # ops are numbered across the run: all_reduce 0-2, broadcast 3-5
    assert sorted(clock.iterations) == list(range(6))
    assert {op for _, op in rows} == set(range(6))
    assert all(r["outcome"] == "ok" for r in rows.values())
    assert clock.origin == clock.iterations[0]
    announced = [clock.iterations[op] for op in range(6)]
    assert all(a.mono < b.mono for a, b in itertools.pairwise(announced))  # in order
    for op, at in enumerate(announced):
        # announced right before rank 0 takes the row's start: after the previous op's start,
        # before this one's (nothing else of rank 0's timeline in between)
        assert at.unix <= rows[(0, op)]["start"]
        if op > 0:
            assert rows[(0, op - 1)]["start"] <= at.unix


def test_a_blocked_operation_fails_at_the_timeout_with_gloos_text(
    launch: Any, tmp_path: Path
) -> None:
    """torch 2.13 gloo: the process group timeout bounds a collective whose peer stops
    answering (SIGSTOP: its sockets stay open, nothing is read); each rank writes the failed
    operation's row (outcome timeout or error, the full text) and exits 1."""
    timeout = 3
    spec = make_spec(
        ["a", "a", "b", "b"],
        tmp_path / "out",
        collectives=["all_reduce"],
        algorithms=["flat"],
        sizes=[64 * 1024],
        iterations=1_000_000,
        timeout_s=timeout,
    )
    run = launch(spec)
    victim = run.out_dir / "rank-3.jsonl"
    deadline = time.monotonic() + 60
    while not (victim.exists() and victim.stat().st_size > 0):
        assert time.monotonic() < deadline, [run.stderr(r) for r in range(4)]
        assert all(p.poll() is None for p in run.procs), [run.stderr(r) for r in range(4)]
        time.sleep(0.05)
    os.kill(run.procs[3].pid, signal.SIGSTOP)
    try:
        codes = [p.wait(timeout=timeout + 10) for p in run.procs[:3]]
    finally:
        os.kill(run.procs[3].pid, signal.SIGKILL)
    assert codes == [1, 1, 1]
    for rank in range(3):
        failed = [r for r in run.rows(rank) if r.get("outcome", "ok") != "ok"]
        assert len(failed) == 1, run.stderr(rank)
        (row,) = failed
        assert row["error"] and row["error_type"] and row["correct"] is False
        # the spec's timeout bounded the operation: gloo says so with the value it waited
        if row["outcome"] == "timeout":
            assert f"Timed out waiting {timeout * 1000}ms" in row["error"], row["error"]
    texts = [r["error"] for rank in range(3) for r in run.rows(rank) if r.get("error")]
    assert any("Timed out waiting" in t for t in texts), texts
    timed_out = [r for rank in range(3) for r in run.rows(rank) if r.get("outcome") == "timeout"]
    assert timed_out and all("Timed out waiting" in r["error"] for r in timed_out)


def test_bad_spec_exits_1_before_joining(launch: Any, tmp_path: Path) -> None:
    run = launch(make_spec(["a"], tmp_path / "out", collectives=["all_reduce", "gossip"]))
    assert run.wait() == [1]
    assert "rank 0 (a-h0): " in run.stderr(0) and "unknown collective" in run.stderr(0)


# --------------------------------------------------------------------------- pure helpers


def _ctx(placement: list[str], rank: int) -> RankContext:
    ranks = [{"rank": r, "host": f"h{r}", "cluster": c} for r, c in enumerate(placement)]
    clusters = topology(ranks)
    cols = columns(clusters)
    me = placement[rank]
    col = next((c for c in cols or [] if rank in c), None)
    return RankContext(
        rank=rank,
        world_size=len(placement),
        host=f"h{rank}",
        cluster=me,
        clusters=clusters,
        cluster_ranks=clusters[me],
        cluster_group=None,
        leader_ranks=tuple(rs[0] for rs in clusters.values()),
        leaders_group=None,
        column_ranks=col,
        column_group=object() if col else None,
    )


def test_topology_orders_clusters_by_leader() -> None:
    ranks = [{"rank": r, "cluster": c} for r, c in enumerate(["w", "e", "w", "x", "e"])]
    assert topology(ranks) == {"w": (0, 2), "e": (1, 4), "x": (3,)}
    assert columns(topology(ranks)) is None
    even = topology([{"rank": r, "cluster": "ab"[r % 2]} for r in range(6)])
    assert columns(even) == [(0, 1), (2, 3), (4, 5)]
    with pytest.raises(ValueError, match="in order"):
        topology([{"rank": 1, "cluster": "a"}])


def test_context_leaders_and_skips() -> None:
    ctx = _ctx(["a", "b", "a", "b"], 2)
    assert (ctx.leader, ctx.is_leader, ctx.index_in_cluster) == (0, False, 1)
    assert ctx.leader_ranks == (0, 1) and ctx.column_ranks == (2, 3)
    assert C.skip_reason(ctx, "all_reduce", "hierarchical-2d") is None
    assert C.skip_reason(ctx, "all_to_all", "hierarchical") == "no hierarchical all_to_all"
    odd = _ctx(["a", "b", "a", "c"], 0)
    assert "2+1+1" in str(C.skip_reason(odd, "all_reduce", "hierarchical-2d"))
    with ctx.timer("x"):
        pass
    with ctx.timer("x"):
        pass
    phases = ctx.take_phases()
    assert list(phases) == ["x"] and phases["x"] >= 0 and ctx.phases == {}


def test_counts_round_down_to_what_every_algorithm_needs() -> None:
    ctx = _ctx(["a", "a", "a", "b", "b", "b"], 0)  # n = 6, m = 3
    algos = ["flat", "hierarchical", "hierarchical-2d"]
    assert C.count_for(ctx, "all_reduce", algos, 1000, torch.float32) == 249  # 250 → /3
    assert C.count_for(ctx, "all_reduce", ["flat"], 1000, torch.float32) == 250
    assert C.count_for(ctx, "all_gather", algos, 1000, torch.float32) == 246  # /6
    assert C.count_for(ctx, "broadcast", algos, 3, torch.float32) == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [2, 4, 7, 32, 64])
def test_fills_are_exact(dtype: Any, n: int) -> None:
    params = C.pattern_params(n, dtype)
    a, b = params
    assert n * (a + b - 1) <= C.EXACT_LIMIT[dtype] and b >= 2
    numel, offset = 1000, 37
    total = sum(C.pattern(r, numel, offset, params, torch.float64) for r in range(n))
    assert torch.equal(C.reduced_pattern(n, numel, offset, params, dtype).double(), total)
    assert C.pattern(1, numel, offset, params, dtype).min() >= 1


def test_first_mismatch() -> None:
    x = torch.arange(10.0)
    y = x.clone()
    assert C.first_mismatch(x, y) is None
    y[7] = -1
    assert C.first_mismatch(x, y) == 7
