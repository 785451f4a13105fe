"""The start every rank entry point shares: its arguments (``--spec FILE --rank N``, as the
launcher ``testbed.experiment.ranks`` passes them), the spec, the rank's label and output
directory, how it logs, and the rank-status protocol: ``rank-R.state`` (:func:`write_state`,
read by the launcher with :func:`read_state` and :func:`has_joined`). No torch here: a rank
reports that it is starting before torch is imported."""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

from testbed.core.files import atomic_write_bytes


@dataclass
class RankStart:
    """What a rank entry point knows once it has read its arguments and the shared spec."""

    rank: int
    spec: dict[str, Any]
    label: str  # "rank 3 (west-h1)": the prefix of every line the rank logs
    out_dir: Path


def rank_args(prog: str, description: str | None, argv: list[str] | None) -> argparse.Namespace:
    """``--spec FILE --rank N`` (as the launcher, testbed.experiment.ranks, passes them); SIGUSR1
    then dumps every thread's stack, which the launcher asks for before it kills a hung rank."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spec", required=True, type=Path, help="spec JSON shared by all ranks")
    parser.add_argument("--rank", required=True, type=int)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    return args


def rank_start(args: argparse.Namespace) -> RankStart:
    """Read the spec; the rank's output directory exists afterwards."""
    spec = json.loads(args.spec.read_text())
    out_dir = Path(spec["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    label = f"rank {args.rank} ({spec['ranks'][args.rank]['host']})"
    return RankStart(args.rank, spec, label, out_dir)


def log_lines(label: str, text: str) -> None:
    """``text`` on stderr, every line prefixed with the rank's label."""
    print("\n".join(f"{label}: {line}" for line in text.splitlines()), file=sys.stderr)


def log(label: str, msg: str) -> None:
    """One line on stderr, prefixed with the rank's label, flushed."""
    print(f"{label}: {msg}", file=sys.stderr, flush=True)


# gloo's text when an operation's deadline passed (gloo/transport/tcp/unbound_buffer.cc): the
# process group timeout; any other exception of an operation is an "error".
TIMEOUT_TEXT = "Timed out waiting"


def failure_fields(exc: BaseException) -> dict[str, str]:
    """The outcome columns of an operation that raised ``exc``: ``outcome`` timeout|error, the
    exception's type and its full text (one row per rank and failed operation)."""
    text = str(exc) or repr(exc)
    outcome = "timeout" if TIMEOUT_TEXT in text else "error"
    return {"outcome": outcome, "error_type": type(exc).__name__, "error": text}


def exit_on_error(label: str, out: IO[str] | None, code: int) -> NoReturn:
    """From an ``except``: the traceback on stderr (prefixed), the rank's output flushed as far
    as it got, then ``os._exit(code)``, so a hung gloo thread cannot keep the process alive."""
    log_lines(label, traceback.format_exc().rstrip())
    with contextlib.suppress(Exception):
        if out is not None:
            out.flush()
    leave(code)


def leave(code: int) -> NoReturn:
    """A rank module's last act (``if __name__ == "__main__": leave(main())``): stdout and
    stderr flushed, then ``os._exit(code)``. The rank has closed its rows and written its state;
    the interpreter's finalization would only tear down torch's modules one by one (with
    torch._dynamo loaded, as any optimizer or DDP loads it, about 1.2 s of CPU per rank on a
    2-core VM, longer than the rank's 30 training steps of the built-in model) and gloo's
    threads could keep a finished rank alive."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


# -- the rank-status protocol ------------------------------------------------------------------
# Where a rank is (``rank-R.state``, JSON ``{"state", "iteration", "since"}``): ``starting``
# (Python up, spec read), ``setup`` (joining torch.distributed), ``running`` (joined), ``done``.
# A rank module may name finer states once joined (traffic.user_rank: ``barrier``, ``fn``,
# ``final-barrier``); every state but these two means joined.
STARTING, SETUP, RUNNING, DONE = "starting", "setup", "running", "done"
NOT_JOINED = (STARTING, SETUP)


def state_path(out_dir: Path, rank: int) -> Path:
    return Path(out_dir) / f"rank-{rank}.state"


def rows_path(out_dir: Path, rank: int) -> Path:
    """The rank's output rows (one JSON object a line)."""
    return Path(out_dir) / f"rank-{rank}.jsonl"


def write_state(out_dir: Path, rank: int, state: str, iteration: int | None = None) -> None:
    """Replace the rank's state file atomically: the launcher polls it and must never read half
    of one. ``iteration``: the iteration or step the rank is at, where it has one."""
    doc = {"state": state, "iteration": iteration, "since": time.time()}
    atomic_write_bytes(state_path(out_dir, rank), json.dumps(doc).encode())


def read_state(out_dir: Path, rank: int) -> dict[str, Any]:
    """The rank's state file; ``{"state": None, "iteration": None}`` while there is none."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(state_path(out_dir, rank).read_text())
        if isinstance(doc, dict):
            return {"state": None, "iteration": None, **doc}
    return {"state": None, "iteration": None}


def has_joined(out_dir: Path, rank: int) -> bool:
    """Whether the rank has joined torch.distributed: its state file says so. A rank program
    that writes no state file (a user's own) counts as joined once its rows file exists (the
    rank modules here write their state before they open it)."""
    state = read_state(out_dir, rank)["state"]
    if state is None:
        return rows_path(out_dir, rank).exists()
    return state not in NOT_JOINED
