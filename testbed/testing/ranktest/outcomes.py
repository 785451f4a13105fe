"""What one rank did in one ``run_ranks`` call (:class:`RankOutcome`), read back from a
:class:`testbed.experiment.session.RankSession`: the result file traffic.user_rank wrote
(``rank-R.result.pkl``), its state when it was stopped, its exit code, log and stack; and the
call's problem line per rank, root causes first.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.experiment.session import RankSession
from testbed.plan.ranks import RankSlot

_GLOO_LOCATION = re.compile(r"^\[[^\]]+:[0-9]+\] ")
HARNESS_STAGES = ("setup", "barrier", "final-barrier")  # the harness's own torch.distributed calls

_STATE_TEXT = {
    "starting": "starting Python and loading the function",
    "setup": "joining torch.distributed",
    "import": "loading the function or its arguments",
    "return": "sending its return value",
    "final-barrier": "in the final barrier after returning",
    "done": "finished",
}


@dataclass
class RankOutcome:
    """What one rank did in one ``run_ranks`` call.

    ``status``: ``ok`` (the function returned on every iteration), ``error`` (an exception;
    ``where`` says in whose code: ``fn``, ``import``, ``return``, or the harness's ``setup``,
    ``barrier``, ``final-barrier``), ``timeout`` (stopped at a deadline), ``stopped`` (stopped
    because another rank failed), ``crashed`` (exited without writing a result).
    """

    rank: int
    host: str
    cluster: str
    status: str
    returned: Any = None
    seconds: list[float] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)  # unix time each timed iteration began
    warmup_seconds: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)
    where: str | None = None
    iteration: int | None = None
    error: str = ""
    error_summary: str = ""
    error_time: float | None = None
    exit_code: int | None = None
    stack: str = ""
    log: Path | None = None
    name: str = ""  # run_command's process: "rank 3 (east-h1)" or "host east-h1"

    @property
    def label(self) -> str:
        return self.name or f"rank {self.rank} ({self.host})"

    @property
    def stdout(self) -> str:
        """Its log: stdout and stderr as it wrote them ("" without one)."""
        if self.log is None:
            return ""
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")
        return ""

    @property
    def primary(self) -> bool:
        """True when this rank's own code (or setup) failed or hung, not when it failed or
        waited in one of the harness's barriers (because another rank did not arrive)."""
        return self.status in ("error", "crashed", "timeout") and self.where not in (
            "barrier",
            "final-barrier",
        )


def _short(message: str, limit: int = 160) -> str:
    """First line of an error message, without gloo's source location and advice."""
    line = message.strip().splitlines()[0] if message.strip() else ""
    line = _GLOO_LOCATION.sub("", line).split(". This is typically", 1)[0]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _user_frames(stack: str) -> str:
    """A faulthandler dump without the harness's own frames (runpy, traffic.user_rank)."""
    keep = [
        line
        for line in stack.splitlines()
        if not ("<frozen runpy>" in line or f"{os.sep}traffic{os.sep}user_rank.py" in line)
    ]
    return "\n".join(keep)


def root_causes_first(outcomes: list[RankOutcome]) -> list[RankOutcome]:
    """Failed ranks whose own code failed first (earliest first), then the ranks that failed
    because of them, then the ranks that were fine."""
    return sorted(
        outcomes,
        key=lambda o: (
            o.status == "ok",
            not o.primary,
            o.error_time if o.error_time is not None else math.inf,
            o.rank,
        ),
    )


def where_text(state: str | None, iteration: int | None, function: str) -> str:
    if state == "fn":
        return f"in {function}, iteration {iteration}"
    if state == "barrier":
        return f"in the barrier before iteration {iteration}"
    return _STATE_TEXT.get(state or "", state or "not started")


# -- read back from a session ------------------------------------------------------------------
def read_outcomes(session: RankSession) -> list[RankOutcome]:
    """Every rank's outcome, in rank order."""
    return [_outcome(session, slot) for slot in session.ranks]


def _stack(session: RankSession, rank: int) -> str:
    """The faulthandler dump of a stopped rank, without the harness's frames."""
    dump = session.stack(rank)
    return "stack when stopped:\n" + _user_frames(dump) if dump else ""


def _outcome(session: RankSession, slot: RankSlot) -> RankOutcome:
    r = slot.rank
    o = RankOutcome(r, slot.host, slot.cluster, "crashed", log=session.log_path(r))
    o.exit_code = session.codes.get(r)
    path = session.run_dir / f"rank-{r}.result.pkl"
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, pickle.UnpicklingError, EOFError):
        data = pickle.loads(path.read_bytes())
    if data:
        o.status = data["status"]
        o.seconds = list(data.get("seconds", []))
        o.starts = list(data.get("starts", []))
        o.warmup_seconds = list(data.get("warmup_seconds", []))
        o.phases = list(data.get("phases", []))
        o.where, o.iteration = data.get("where"), data.get("iteration")
        o.error = data.get("error", "")
        if o.error:
            what = f"{data.get('error_type')}: {_short(str(data.get('error_message')))}"
            harness = o.where in HARNESS_STAGES
            o.error_summary = f"failed: {what}" if harness else f"raised {what}"
        o.error_time = data.get("error_time")
        if data.get("returned") is not None:
            try:
                o.returned = pickle.loads(data["returned"])
            except Exception as exc:  # e.g. a class only the rank could import
                o.status, o.where = "error", "return"
                o.error = f"the returned value cannot be unpickled here: {exc!r}"
                o.error_summary = "returned a value that cannot be unpickled by the test"
    if r in session.stopped and o.status != "ok":
        why, state = session.stopped[r], session.stopped_state[r]
        o.status = "timeout" if why in ("timeout", "setup-timeout") else "stopped"
        o.where, o.iteration = state.get("state"), state.get("iteration")
        o.stack = _stack(session, r)
        o.error_time = o.error_time or time.time()
    elif o.status == "crashed":
        tail = session.log(r).strip().splitlines()[-10:]
        o.error = "\n".join(tail)
        o.error_summary = f"exited with code {o.exit_code} without a result"
        o.where = session.state(r).get("state")
    return o


def call_problems(
    session: RankSession,
    outcomes: list[RankOutcome],
    function: str,
    timeout: float,
    setup_timeout: float,
) -> list[str]:
    """One line per rank that did not return, in the order of ``outcomes``."""
    out = []
    for o in outcomes:
        where = where_text(o.where, o.iteration, function)
        why = session.stopped.get(o.rank, "")
        if o.status == "timeout" and why == "setup-timeout":
            out.append(f"{o.label} did not finish setting up within {setup_timeout:g} s ({where})")
        elif o.status == "timeout":
            out.append(f"{o.label} did not finish within {timeout:g} s ({where})")
        elif o.status == "stopped":
            reason = "a link failed" if why == "link" else "another rank failed"
            out.append(f"{o.label} stopped after {reason} ({where})")
        elif o.status in ("error", "crashed"):
            out.append(f"{o.label} {o.error_summary} ({where})")
    return out
