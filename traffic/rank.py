"""One rank of a collective benchmark, started by the runner inside a host's namespace.

    python -m traffic.rank --spec SPEC.json --rank R

The spec (one JSON file shared by all ranks, written by the runner)::

    {"master_addr": "10.64.0.10", "master_port": 29500, "world_size": 4, "timeout_s": 300,
     "ranks": [{"rank": 0, "host": "east-h0", "cluster": "east", "local_rank": 0}, ...],
     "collectives": ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"],
     "algorithms": ["flat", "hierarchical", "hierarchical-2d"],
     "sizes": [1048576, 16777216], "dtype": "float32", "warmup": 1, "iterations": 5,
     "out_dir": "/path/to/run/ranks"}

``ranks[i]`` describes rank i; ``master_addr`` must be rank 0's address (rank 0 hosts the store).
The launcher sets ``GLOO_SOCKET_IFNAME`` (the namespace's NIC) and ``OMP_NUM_THREADS=1`` and must
not set ``LOCAL_WORLD_SIZE`` (some gloo builds then bypass the network).

Output: ``{out_dir}/rank-{R}.jsonl``, one line per timed iteration, flushed as written::

    {"rank", "host", "cluster", "world_size", "collective", "algorithm", "size",
     "requested_size", "count", "dtype", "iteration", "start", "seconds", "correct", "phases"}

``start`` is the unix time (``time.time()``, the clock of every trace table) the timed operation
began on this rank.

plus ``"note"`` where the algorithm needs one and ``"first_bad_index"``, ``"got"``,
``"expected"`` when wrong. ``size`` is the bytes actually used (nccl-tests semantics, see
:mod:`traffic.collectives`), ``phases`` the seconds this rank spent in each step of a hierarchical
algorithm. Rank 0 also writes ``{"collective", "algorithm", "size", "requested_size",
"skipped": reason}`` for combinations that do not exist. Progress goes to stderr.

Exit status: 0 all results correct; 3 some result wrong (the run is finished first, each wrong
combination named on stderr); 1 any exception (traceback on stderr prefixed ``rank R (host):``;
the process leaves with ``os._exit`` so a hung gloo thread cannot keep it alive).
``SIGUSR1`` dumps every thread's stack to stderr (for hangs).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import torch
import torch.distributed as dist

from traffic import collectives as C

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_WRONG = 3


@dataclass
class RankContext:
    """What a rank knows about its place in the emulated topology, with its process groups.

    Built once per process by :func:`setup` (every rank creates every group, in the same order,
    as torch requires). Rank functions receive it and may use the groups directly:

    * ``rank``, ``world_size``, ``host``, ``cluster``: this process and where it runs.
    * ``clusters``: every cluster's ranks (ascending), clusters ordered by their leader's rank.
    * ``cluster_ranks``, ``cluster_group``: this cluster's ranks and their process group.
      ``index_in_cluster`` is this rank's position in ``cluster_ranks``.
    * ``leader``, ``is_leader``: the cluster's leader is its lowest rank (rank 0 always leads).
    * ``leader_ranks``, ``leaders_group``: one rank per cluster; every rank holds the handle,
      only leaders may use it.
    * ``column_ranks``, ``column_group``: the ``index_in_cluster``-th rank of every cluster
      (for 2-D algorithms); None unless all clusters have the same number of ranks.
    * ``timer(name)``: context manager adding the body's duration to ``phases[name]``;
      ``take_phases()`` returns and clears them (the harness calls it around each operation).

    Group-relative calls take global ranks, as torch.distributed does:
    ``dist.reduce(t, dst=ctx.leader, group=ctx.cluster_group)``.
    """

    rank: int
    world_size: int
    host: str
    cluster: str
    clusters: dict[str, tuple[int, ...]]
    cluster_ranks: tuple[int, ...]
    cluster_group: Any
    leader_ranks: tuple[int, ...]
    leaders_group: Any
    column_ranks: tuple[int, ...] | None = None
    column_group: Any | None = None
    local_rank: int = 0
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def leader(self) -> int:
        return self.cluster_ranks[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == self.leader

    @property
    def index_in_cluster(self) -> int:
        return self.cluster_ranks.index(self.rank)

    @contextlib.contextmanager
    def timer(self, name: str) -> Iterator[None]:
        """``with ctx.timer("leaders_all_reduce"): ...`` records the seconds under that name."""
        with C.phase_timer(self.phases, name):
            yield

    def take_phases(self) -> dict[str, float]:
        taken, self.phases = self.phases, {}
        return taken

    @property
    def label(self) -> str:
        return f"rank {self.rank} ({self.host})"


def topology(ranks: list[dict[str, Any]]) -> dict[str, tuple[int, ...]]:
    """Cluster name → ranks (ascending), clusters ordered by lowest rank. Pure."""
    for i, r in enumerate(ranks):
        if r["rank"] != i:
            raise ValueError(f"spec ranks[{i}] has rank {r['rank']}; ranks must be listed in order")
    members: dict[str, list[int]] = {}
    for r in ranks:
        members.setdefault(r["cluster"], []).append(r["rank"])
    ordered = sorted(members.items(), key=lambda kv: kv[1][0])
    return {name: tuple(rs) for name, rs in ordered}


def columns(clusters: dict[str, tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """The j-th rank of every cluster, for each j; None when cluster sizes differ. Pure."""
    sizes = {len(rs) for rs in clusters.values()}
    if len(sizes) != 1:
        return None
    (m,) = sizes
    return [tuple(rs[j] for rs in clusters.values()) for j in range(m)]


def setup(spec: dict[str, Any], rank: int) -> RankContext:
    """Join the process group and create the cluster, leaders and column groups."""
    world = int(spec["world_size"])
    ranks = spec["ranks"]
    if len(ranks) != world:
        raise ValueError(f"spec lists {len(ranks)} ranks for world_size {world}")
    if "LOCAL_WORLD_SIZE" in os.environ:
        raise RuntimeError("LOCAL_WORLD_SIZE is set: gloo may bypass the network; unset it")
    clusters = topology(ranks)
    cols = columns(clusters)
    timeout = timedelta(seconds=float(spec.get("timeout_s", 300)))
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{spec['master_addr']}:{int(spec['master_port'])}",
        rank=rank,
        world_size=world,
        timeout=timeout,
    )
    # every rank creates every group in the same order; new_group needs its own timeout
    me = ranks[rank]
    cluster_group = None
    for name, rs in clusters.items():
        g = dist.new_group(list(rs), timeout=timeout)
        if name == me["cluster"]:
            cluster_group = g
    leader_ranks = tuple(rs[0] for rs in clusters.values())
    leaders_group = dist.new_group(list(leader_ranks), timeout=timeout)
    column_ranks = column_group = None
    for col in cols or []:
        g = dist.new_group(list(col), timeout=timeout)
        if rank in col:
            column_ranks, column_group = col, g
    return RankContext(
        rank=rank,
        world_size=world,
        host=me["host"],
        cluster=me["cluster"],
        clusters=clusters,
        cluster_ranks=clusters[me["cluster"]],
        cluster_group=cluster_group,
        leader_ranks=leader_ranks,
        leaders_group=leaders_group,
        column_ranks=column_ranks,
        column_group=column_group,
        local_rank=int(me.get("local_rank", 0)),
    )


def teardown() -> None:
    """Wait for every rank, then leave the process group."""
    dist.barrier()
    dist.destroy_process_group()


def _log(ctx_label: str, msg: str) -> None:
    print(f"{ctx_label}: {msg}", file=sys.stderr, flush=True)


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def run(ctx: RankContext, spec: dict[str, Any], out: IO[str]) -> list[str]:
    """Run every collective × size × algorithm of the spec; returns the wrong-result messages."""
    colls = list(spec["collectives"])
    algos = list(spec["algorithms"])
    dtype_name = spec.get("dtype", "float32")
    dtype = C.validate(colls, algos, dtype_name)
    warmup, iterations = int(spec.get("warmup", 1)), int(spec.get("iterations", 5))
    wrong: list[str] = []
    for coll in colls:
        for requested in spec["sizes"]:
            requested = int(requested)
            count = C.count_for(ctx, coll, algos, requested, dtype)
            runnable: list[str] = []
            for algo in algos:
                reason = C.skip_reason(ctx, coll, algo)
                if reason is None and count == 0:
                    reason = f"size {requested} B is smaller than the {coll} needs"
                if reason is None:
                    runnable.append(algo)
                elif ctx.rank == 0:
                    skip = {"collective": coll, "algorithm": algo, "size": requested}
                    skip.update(requested_size=requested, skipped=reason)
                    _write(out, skip)
            if not runnable:
                continue
            prepared = C.prepare(ctx, coll, count, dtype)
            size = count * prepared.source.element_size()
            for algo in runnable:
                note = C.note_for(ctx, coll, algo)
                times = []
                first_bad = None
                results = C.measure(ctx, coll, algo, count, prepared, warmup, iterations)
                for res in results:
                    rec: dict[str, Any] = {
                        "rank": ctx.rank,
                        "host": ctx.host,
                        "cluster": ctx.cluster,
                        "world_size": ctx.world_size,
                        "collective": coll,
                        "algorithm": algo,
                        "size": size,
                        "requested_size": requested,
                        "count": count,
                        "dtype": dtype_name,
                        "iteration": res.iteration,
                        "start": res.start,
                        "seconds": res.seconds,
                        "correct": res.correct,
                        "phases": res.phases,
                    }
                    if note:
                        rec["note"] = note
                    if not res.correct:
                        rec.update(first_bad_index=res.bad_index, got=res.got, expected=res.want)
                        if first_bad is None:
                            first_bad = (
                                f"WRONG {coll}/{algo}/{size} B iteration {res.iteration}: "
                                f"first bad index {res.bad_index} (got {res.got}, "
                                f"expected {res.want})"
                            )
                            _log(ctx.label, first_bad)
                    _write(out, rec)
                    times.append(res.seconds)
                if first_bad:
                    wrong.append(first_bad)
                if times:
                    med = sorted(times)[len(times) // 2]
                    _log(
                        ctx.label,
                        f"{coll} {algo} {size} B: median {med * 1e3:.2f} ms, "
                        f"algbw {size / med / 1e9 * 8:.3f} Gbit/s"
                        + ("" if first_bad is None else " WRONG"),
                    )
            del prepared
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m traffic.rank",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--spec", required=True, type=Path, help="spec JSON shared by all ranks")
    parser.add_argument("--rank", required=True, type=int)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    label = f"rank {args.rank}"
    out: IO[str] | None = None
    try:
        spec = json.loads(args.spec.read_text())
        label = f"rank {args.rank} ({spec['ranks'][args.rank]['host']})"
        out_dir = Path(spec["out_dir"])
        out_dir.mkdir(parents=True, exist_ok=True)
        out = (out_dir / f"rank-{args.rank}.jsonl").open("w")
        C.validate(spec["collectives"], spec["algorithms"], spec.get("dtype", "float32"))
        ctx = setup(spec, args.rank)
        _log(label, f"joined: world {ctx.world_size}, cluster {ctx.cluster} {ctx.cluster_ranks}")
        wrong = run(ctx, spec, out)
        teardown()
        out.close()
    except BaseException:
        lines = traceback.format_exc().rstrip().splitlines()
        print("\n".join(f"{label}: {line}" for line in lines), file=sys.stderr)
        with contextlib.suppress(Exception):
            if out is not None:
                out.flush()
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    if wrong:
        _log(label, f"{len(wrong)} wrong result(s); exiting {EXIT_WRONG}")
        return EXIT_WRONG
    _log(label, "done")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
