"""One rank running a user's function, started by :mod:`testbed.testing.ranktest` inside a host.

    python -m traffic.user_rank --spec SPEC.json --rank R

This module owns the rank side of ``RankTestbed.run_ranks`` (the pytest plugin's way of running
user communication code on every rank). The spec, the files it writes and the exit status:
``HELP`` (``--help`` prints it after this).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from testbed.core.files import atomic_write_bytes
from traffic.announce import Announcer
from traffic.entry import DONE, SETUP, STARTING, log_lines, rank_args, rank_start, write_state
from traffic.exit_codes import EXIT_ERROR, EXIT_OK

# The command's help after the docstring (argparse prints both).
HELP = """\
This module owns the rank side of ``RankTestbed.run_ranks`` (the pytest plugin's way of running
user communication code on every rank). The spec carries what :mod:`traffic.rank` reads
(``master_addr``, ``master_port``, ``world_size``, ``ranks``, ``timeout_s``, ``out_dir``) plus::

    {"function": "mypkg.comms:my_allreduce",   # module:qualname of a top-level function
     "function_file": "/src/mypkg/comms.py",   # to load it by path when the name does not import
     "args_file": "/run/dir/args.pkl",         # pickle of (args, kwargs)
     "sys_path": ["/src", ...],                # the caller's sys.path, so its modules import here
     "iterations": 1, "warmup": 0}

The rank joins torch.distributed (:func:`traffic.context.setup`), then for each of ``warmup +
iterations`` iterations: a world barrier, then ``fn(ctx, *args, **kwargs)`` timed with
``perf_counter`` and the phases the function timed with ``ctx.timer(name)``. The last
iteration's return value is kept.

Files it writes into ``out_dir``:

* ``rank-R.state``: where the rank is right now (traffic.entry's rank-status protocol: JSON
  ``{"state", "iteration", "since"}``; states ``starting``, ``setup``, ``barrier``, ``fn``,
  ``final-barrier``, ``done``), replaced atomically on every change, so the launcher can say
  where a rank hung.
* ``rank-R.result.pkl``: a pickled dict, written atomically once the function ran (before the
  final barrier, so a rank whose peers died still reports what it returned)::

      {"rank", "host", "cluster", "status": "ok" | "error", "seconds": [timed iterations],
       "starts": [unix time each timed iteration began], "warmup_seconds": [...],
       "phases": [{name: seconds} per timed iteration],
       "returned": pickle bytes of the last return value | None,
       "where": "import" | "setup" | "barrier" | "fn" | "return" | "final-barrier" | None,
       "iteration": int | None, "error": traceback text, "error_type", "error_message",
       "error_time": unix time}

  ``where`` says whose code failed: ``fn`` is the user's function, ``return`` its return value
  (not picklable), ``import`` loading it or its arguments; the others are the harness's own
  torch.distributed calls, which usually fail because another rank failed first.

Exit status: 0 ok; 1 an exception anywhere (traceback in the result and on stderr, prefixed
``rank R (host):``; the process leaves with ``os._exit`` so a hung gloo thread cannot keep it
alive). ``SIGUSR1`` dumps every thread's stack to stderr: the launcher sends it to a rank that
did not finish in time before killing it, so the log shows where it hung.
"""


class _Failure(Exception):
    """An error with the stage it happened in; the original is its ``__cause__``."""

    def __init__(self, where: str, iteration: int | None, exc: BaseException, frames_to_skip=0):
        super().__init__(str(exc))
        self.where = where
        self.iteration = iteration
        self.exc = exc
        self.frames_to_skip = frames_to_skip


class _Files:
    """The state (traffic.entry's protocol) and result files of one rank."""

    def __init__(self, out_dir: Path, rank: int) -> None:
        self.out_dir, self.rank = out_dir, rank
        self.result_path = out_dir / f"rank-{rank}.result.pkl"

    def state(self, state: str, iteration: int | None = None) -> None:
        write_state(self.out_dir, self.rank, state, iteration)

    def result(self, result: dict[str, Any]) -> None:
        # atomic: the launcher reads it back and must never read half of one
        atomic_write_bytes(self.result_path, pickle.dumps(result))


def _load_module(name: str, file: str | None) -> ModuleType:
    """Import ``name`` like the caller did; fall back to loading ``file`` under that name (for
    ``__main__`` and pytest's importlib import mode, whose names are not importable)."""
    if name != "__main__":
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not file or not (exc.name and name.startswith(exc.name)):
                raise
    if not file:
        raise ImportError(f"cannot import {name!r} and no source file is known")
    alias = "__testbed_main__" if name == "__main__" else name
    spec = importlib.util.spec_from_file_location(alias, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module  # before exec: pickles of its classes must resolve
    spec.loader.exec_module(module)
    return module


def resolve(function: str, file: str | None = None) -> Callable[..., Any]:
    """'pkg.mod:Outer.fn' -> the function object."""
    name, _, qualname = function.partition(":")
    obj: Any = _load_module(name, file)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{function} is not callable")
    return obj


def _prepare(spec: dict[str, Any]) -> tuple[Callable[..., Any], tuple, dict[str, Any]]:
    for entry in reversed(spec.get("sys_path", [])):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    fn = resolve(spec["function"], spec.get("function_file"))
    args, kwargs = pickle.loads(Path(spec["args_file"]).read_bytes())
    return fn, tuple(args), dict(kwargs)


def _run(spec: dict[str, Any], rank: int, files: _Files, result: dict[str, Any]) -> None:
    """Everything that can fail, each stage wrapped so the failure says where it happened."""
    try:
        fn, args, kwargs = _prepare(spec)
    except Exception as exc:
        raise _Failure("import", None, exc) from exc
    files.state(SETUP)
    try:
        # torch is imported here, not at module import: a bad spec fails fast and cheaply
        import torch.distributed as dist

        from traffic.context import setup

        ctx = setup(spec, rank)
    except Exception as exc:
        raise _Failure("setup", None, exc) from exc
    warmup, iterations = int(spec.get("warmup", 0)), int(spec.get("iterations", 1))
    returned: Any = None
    # run_ranks(faults=...): rank 0 announces each timed iteration (the events' clock)
    announcer = Announcer.from_spec(spec, rank)
    try:
        for i in range(warmup + iterations):
            files.state("barrier", i)
            try:
                # the nccl-tests convention: every rank starts the timed operation together
                dist.barrier()
            except Exception as exc:
                raise _Failure("barrier", i, exc) from exc
            files.state("fn", i)
            ctx.take_phases()  # phases belong to one iteration
            if i >= warmup:
                announcer.start(i - warmup)
            started = time.time()
            t0 = time.perf_counter()
            try:
                returned = fn(ctx, *args, **kwargs)
            except BaseException as exc:  # SystemExit from the user's code is its failure too
                raise _Failure("fn", i, exc, frames_to_skip=1) from exc
            seconds = time.perf_counter() - t0
            phases = ctx.take_phases()
            if i < warmup:
                result["warmup_seconds"].append(seconds)
            else:
                result["seconds"].append(seconds)
                result["starts"].append(started)
                result["phases"].append(phases)
    finally:
        announcer.end()
    try:
        result["returned"] = pickle.dumps(returned)
    except Exception as exc:
        what = type(returned).__name__
        err = TypeError(f"the function returned a {what} that cannot be pickled: {exc}")
        raise _Failure("return", iterations + warmup - 1, err) from exc
    result["status"] = "ok"
    files.result(result)
    files.state("final-barrier")
    try:
        # wait for every rank before leaving: rank 0 hosts the store the others still use
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        raise _Failure("final-barrier", None, exc) from exc
    files.state(DONE)


def _format(failure: _Failure) -> str:
    exc = failure.exc
    tb: TracebackType | None = exc.__traceback__
    # Start the traceback at the user's function, not at this harness.
    for _ in range(failure.frames_to_skip):
        if tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def main(argv: list[str] | None = None) -> int:
    args = rank_args("python -m traffic.user_rank", f"{__doc__}\n{HELP}", argv)
    label = f"rank {args.rank}"
    files: _Files | None = None
    result: dict[str, Any] = {"rank": args.rank, "status": "error"}
    try:
        start = rank_start(args)
        spec, label, out_dir = start.spec, start.label, start.out_dir
        me = spec["ranks"][args.rank]
        files = _Files(out_dir, args.rank)
        files.state(STARTING)
        result.update(
            host=me["host"],
            cluster=me["cluster"],
            seconds=[],
            starts=[],
            warmup_seconds=[],
            phases=[],
            returned=None,
            where=None,
            iteration=None,
        )
        _run(spec, args.rank, files, result)
    except BaseException as exc:
        failure = exc if isinstance(exc, _Failure) else _Failure("setup", None, exc)
        text = _format(failure)
        log_lines(label, text)
        result.update(
            status="error",
            where=failure.where,
            iteration=failure.iteration,
            error=text,
            error_type=type(failure.exc).__name__,
            error_message=str(failure.exc),
            error_time=time.time(),
        )
        with contextlib.suppress(Exception):
            if files is not None:
                files.result(result)
                files.state(DONE)
        sys.stderr.flush()
        os._exit(EXIT_ERROR)
    print(f"{label}: done", file=sys.stderr, flush=True)
    sys.stderr.flush()
    sys.stdout.flush()
    # os._exit: gloo's background threads must not keep a finished rank alive
    os._exit(EXIT_OK)


if __name__ == "__main__":
    sys.exit(main())
