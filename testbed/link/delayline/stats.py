"""What the delay line reports: the stats file and the trace records of bottleneck queues.

This module owns the contents of the stats file (its fields are listed in the package
docstring), the per-queue errors it carries, the JSONL trace record of a bottleneck queue, the
kernel's per-queue counters (``/proc/net/netfilter/nfnetlink_queue``) and :func:`read_stats`, the
supervisor's side of the file.
"""

from __future__ import annotations

import json
import os
from typing import Any

from testbed.link.delayline.model import Queue

PROC_QUEUE_FILE = "/proc/net/netfilter/nfnetlink_queue"


def read_stats(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a stats file written by the delay line (always complete: it is replaced atomically)."""
    with open(path, encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


def read_kernel_queue_counters(path: str = PROC_QUEUE_FILE) -> dict[int, dict[str, int]]:
    """Parse ``/proc/net/netfilter/nfnetlink_queue`` of the caller's network namespace."""
    out: dict[int, dict[str, int]] = {}
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        cols = line.split()
        if len(cols) < 8:
            continue
        try:
            vals = [int(c) for c in cols[:8]]
        except ValueError:
            continue
        out[vals[0]] = {
            "peer_portid": vals[1],
            "queue_total": vals[2],
            "copy_mode": vals[3],
            "copy_range": vals[4],
            "queue_dropped": vals[5],
            "user_dropped": vals[6],
            "id_sequence": vals[7],
        }
    return out


def update_kernel_counters(q: Queue, kern: dict[int, dict[str, int]]) -> None:
    """Take ``q``'s kernel drop counters from a :func:`read_kernel_queue_counters` result; a queue
    that is gone (after unbind) keeps the last values seen."""
    k = kern.get(q.cfg.num)
    if k is not None:
        q.kernel_queue_dropped = k["queue_dropped"]
        q.kernel_user_dropped = k["user_dropped"]


def queue_errors(q: Queue) -> dict[str, str]:
    """key -> message of each way ``q`` lost packets or had verdicts refused (keys are stable, so
    a repeated condition is reported once per change)."""
    qc = q.cfg
    label = f"queue {qc.num} ({qc.name})"
    errors = {}
    if q.kernel_queue_dropped:
        errors[f"qd{qc.num}"] = (
            f"{label}: kernel queue_dropped={q.kernel_queue_dropped} "
            f"(queue full at maxlen {qc.maxlen}); packets were lost"
        )
    if q.kernel_user_dropped:
        errors[f"ud{qc.num}"] = (
            f"{label}: kernel user_dropped={q.kernel_user_dropped} "
            "(netlink receive buffer full); packets were lost"
        )
    if q.verdict_errors:
        errors[f"verdict{qc.num}"] = (
            f"{label}: kernel rejected {q.verdict_errors} "
            f"verdicts (last: {os.strerror(q.last_verdict_errno)})"
        )
    return errors


def queue_stats(q: Queue, now: float) -> dict[str, Any]:
    """The stats file's entry for ``q`` at monotonic time ``now``."""
    qc = q.cfg
    row: dict[str, Any] = {
        "num": qc.num,
        "name": qc.name,
        "delay": qc.delay,
        "jitter": qc.jitter,
        "loss": qc.loss,
        "reorder": qc.reorder,
        "ge_p": qc.ge_p,
        "ge_r": qc.ge_r,
        "copy_mode": qc.copy_mode,
        "packets": q.packets,
        "bytes": q.nbytes if qc.copy_mode != "meta" else None,
        "accepted": q.accepted,
        "dropped_loss": q.dropped_loss,
        "dropped_burst": q.dropped_burst,
        "reordered": q.reordered,
        "held": len(q.ids),
        "max_held": q.max_held,
        "lateness_us": q.hist.summary(),
        "queue_dropped": q.kernel_queue_dropped,
        "user_dropped": q.kernel_user_dropped,
        "verdict_errors": q.verdict_errors,
        "timestamp_fallbacks": q.ts_fallbacks,
    }
    if qc.bottleneck:
        backlog, packets = q.backlog(now)
        row.update(
            rate=0.0 if qc.held else qc.rate,
            buffer=qc.buffer,
            aqm=(qc.aqm or {"kind": "droptail"})["kind"],
            wire_bytes=q.wire_bytes,
            ect_packets=q.ect,
            marked=q.marked,
            dropped_queue=q.dropped_queue,
            dropped_aqm=q.dropped_aqm,
            backlog_bytes=round(backlog),
            backlog_packets=packets,
            max_backlog_bytes=round(q.max_backlog),
        )
    return row


def trace_record(q: Queue, now: float, unix_time: float) -> str:
    """One JSONL line for a bottleneck queue: occupancy at monotonic ``now``, cumulative counters,
    stamped with ``unix_time``."""
    backlog, packets = q.backlog(now)
    return (
        json.dumps(
            {
                "time": round(unix_time, 6),
                "direction": q.cfg.name,
                "backlog_bytes": round(backlog),
                "backlog_packets": packets,
                "packets": q.packets,
                # through the bottleneck as HTB counts it (dequeued), so that a trace replay's
                # achieved rate is what the link delivered, not what was offered to it
                "bytes": round(q.departed_bytes(now)),
                "dropped": q.dropped_queue + q.dropped_aqm + q.dropped_loss,
                "dropped_queue": q.dropped_queue,
                "dropped_aqm": q.dropped_aqm,
                "dropped_loss": q.dropped_loss,
                "marked": q.marked,
            }
        )
        + "\n"
    )
