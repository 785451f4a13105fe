"""One rank of a collective benchmark, started by the runner inside a host's namespace.

    python -m traffic.rank --spec SPEC.json --rank R

The spec, its output rows and the exit status: ``HELP`` (``--help`` prints it after this).
"""

from __future__ import annotations

import json
from typing import IO, Any

from testbed.core.stats import quantile
from traffic import collectives as C
from traffic.announce import Announcer
from traffic.context import RankContext, setup, teardown
from traffic.entry import (
    DONE,
    RUNNING,
    SETUP,
    STARTING,
    exit_on_error,
    leave,
    log,
    rank_args,
    rank_start,
    rows_path,
    write_state,
)
from traffic.exit_codes import EXIT_ERROR, EXIT_OK, EXIT_WRONG

# The command's help after the docstring (argparse prints both).
HELP = """\
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
     "requested_size", "count", "dtype", "iteration", "op", "start", "seconds", "correct",
     "phases", "outcome"}

``start`` is the unix time (``time.time()``, the clock of every trace table) the timed operation
began on this rank; ``op`` numbers the timed operations across the run (0 = the first one).
``outcome`` is ``ok``, or ``error``/``timeout`` for an operation that raised (then also
``error_type`` and ``error``, the full text; a failed warm-up operation has a negative
``iteration`` and no ``op``): the rank writes that row and exits with the error (gloo closes
every pair of the group after a failure, so nothing after it could run).

With ``"events_socket": PATH`` in the spec, rank 0 announces the start of every timed operation
on that UNIX datagram socket (traffic.announce), for the runner's event timeline.

plus ``"note"`` where the algorithm needs one and ``"first_bad_index"``, ``"got"``,
``"expected"`` when wrong. ``size`` is the bytes actually used (nccl-tests semantics, see
:mod:`traffic.collectives`), ``phases`` the seconds this rank spent in each step of a hierarchical
algorithm. Rank 0 also writes ``{"collective", "algorithm", "size", "requested_size",
"skipped": reason}`` for combinations that do not exist. Progress goes to stderr; where the rank
is goes to ``{out_dir}/rank-{R}.state`` (traffic.entry's protocol: ``starting``, ``setup``,
``running`` once joined, ``done``), which the launcher reads.

Exit status: 0 all results correct; 3 some result wrong (the run is finished first, each wrong
combination named on stderr); 1 any exception (traceback on stderr prefixed ``rank R (host):``).
Either way the process leaves with ``os._exit`` (traffic.entry's ``leave``): a hung gloo thread
cannot keep it alive, and a finished rank skips tearing torch down.
``SIGUSR1`` dumps every thread's stack to stderr (for hangs).
"""


def _write(out: IO[str], record: dict[str, Any]) -> None:
    out.write(json.dumps(record) + "\n")
    out.flush()


def run(
    ctx: RankContext, spec: dict[str, Any], out: IO[str], announcer: Announcer | None = None
) -> list[str]:
    """Run every collective × size × algorithm of the spec; returns the wrong-result messages.

    Timed operations are numbered across the whole run (``op``: 0 = the first timed one, what a
    fault's ``after: {iteration: K}`` counts); rank 0 announces each one's start
    (traffic.announce). An operation that fails is written with its outcome, then its
    exception propagates (the process group is dead after a gloo error)."""
    done = 0  # timed operations of the combinations before this one

    def announce(i: int) -> None:
        if announcer is not None:
            announcer.start(done + i)

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
                results = C.measure(ctx, coll, algo, count, prepared, warmup, iterations, announce)
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
                        "op": done + res.iteration if res.iteration >= 0 else None,
                        "start": res.start,
                        "seconds": res.seconds,
                        "correct": res.correct,
                        "phases": res.phases,
                        "outcome": res.outcome,
                    }
                    if res.outcome != "ok":
                        rec.update(error_type=res.error_type, error=res.error)
                        _write(out, rec)
                        continue
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
                            log(ctx.label, first_bad)
                    _write(out, rec)
                    times.append(res.seconds)
                done += iterations
                if first_bad:
                    wrong.append(first_bad)
                if times:
                    med = quantile(times, 0.5)
                    log(
                        ctx.label,
                        f"{coll} {algo} {size} B: median {med * 1e3:.2f} ms, "
                        f"algbw {size / med / 1e9 * 8:.3f} Gbit/s"
                        + ("" if first_bad is None else " WRONG"),
                    )
            del prepared
    return wrong


def main(argv: list[str] | None = None) -> int:
    args = rank_args("python -m traffic.rank", f"{__doc__}\n{HELP}", argv)
    label = f"rank {args.rank}"
    out: IO[str] | None = None
    announcer = Announcer(None)
    try:
        start = rank_start(args)
        spec, label = start.spec, start.label
        write_state(start.out_dir, args.rank, STARTING)  # before its rows file: see has_joined
        announcer = Announcer.from_spec(spec, args.rank)
        out = rows_path(start.out_dir, args.rank).open("w")
        C.validate(spec["collectives"], spec["algorithms"], spec.get("dtype", "float32"))
        write_state(start.out_dir, args.rank, SETUP)
        ctx = setup(spec, args.rank)
        write_state(start.out_dir, args.rank, RUNNING)
        log(label, f"joined: world {ctx.world_size}, cluster {ctx.cluster} {ctx.cluster_ranks}")
        wrong = run(ctx, spec, out, announcer)
        announcer.end()
        teardown()
        out.close()
        write_state(start.out_dir, args.rank, DONE)
    except BaseException:
        announcer.end()
        exit_on_error(label, out, EXIT_ERROR)
    if wrong:
        log(label, f"{len(wrong)} wrong result(s); exiting {EXIT_WRONG}")
        return EXIT_WRONG
    log(label, "done")
    return EXIT_OK


if __name__ == "__main__":
    leave(main())
