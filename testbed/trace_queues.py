"""Queue traces of the WAN bottlenecks, as rows of ``queues.parquet``.

Where a direction's queue lives depends on the backend (docs/congestion.md): in the kernel, the
leaf qdisc under HTB on the sending gateway's egress (``bfifo`` for drop-tail, ``red`` for a
marking profile); on the userspace backend with an ``aqm``, inside the delay line, which writes its
own samples (JSONL, see :mod:`testbed.delayline`). This module samples the former
(:class:`QdiscSampler`, one netlink request per direction per period, about 1.5 ms each) and reads
the latter (:func:`line_trace_rows`), both into the same columns:

======================  =========================================================================
``time``                unix seconds (``time.time()``), the clock of every trace table
``direction``           ``east->west``
``source``              ``qdisc:bfifo``, ``qdisc:red`` or ``delayline``
``backlog_bytes``       bytes queued at the bottleneck now (the line counts wire bytes, as HTB)
``backlog_packets``     packets queued (a GSO packet counts once)
``packets``, ``bytes``  cumulative, through the bottleneck (qdisc: dequeued; line: arrived)
``dropped``             cumulative drops at the bottleneck (overflow, AQM and, for the line,
                        random loss)
``marked``              cumulative CE marks (red qdisc or line); None for bfifo
======================  =========================================================================
"""

from __future__ import annotations

import contextlib
import json
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEAF_HANDLE = 0x000A0000  # 10: -- the HTB leaf the plan renders (testbed.render)
RED_XSTATS = struct.Struct("=IIII")  # struct tc_red_xstats: early, pdrop, other, marked


@dataclass(frozen=True)
class QdiscTarget:
    direction: str
    ns: str
    ifname: str


def _xstats_marked(raw: Any) -> int | None:
    """``marked`` of a red qdisc's TCA_XSTATS, however pyroute2 hands it over."""
    if isinstance(raw, dict):
        return raw.get("marked")
    if isinstance(raw, str):  # pyroute2 shows unknown payloads as "00:01:..." hex
        with contextlib.suppress(ValueError):
            raw = bytes.fromhex(raw.replace(":", ""))
    if isinstance(raw, bytes | bytearray) and len(raw) >= RED_XSTATS.size:
        return RED_XSTATS.unpack_from(raw)[3]
    return None


def qdisc_row(direction: str, msg: Any, now: float) -> dict[str, Any]:
    kind = msg.get_attr("TCA_KIND")
    stats = msg.get_attr("TCA_STATS2")
    basic = stats.get_attr("TCA_STATS_BASIC") if stats else None
    queue = stats.get_attr("TCA_STATS_QUEUE") if stats else None
    return {
        "time": now,
        "direction": direction,
        "source": f"qdisc:{kind}",
        "backlog_bytes": queue["backlog"] if queue else None,
        "backlog_packets": queue["qlen"] if queue else None,
        "packets": basic["packets"] if basic else None,
        "bytes": basic["bytes"] if basic else None,
        "dropped": queue["drops"] if queue else None,
        "marked": _xstats_marked(msg.get_attr("TCA_XSTATS")) if kind == "red" else None,
    }


class QdiscSampler:
    """Samples the leaf qdisc of each target every ``period`` seconds in a background thread.

    One pyroute2 socket per namespace, opened once; the thread never raises: problems (a
    namespace gone mid-run) end up in ``errors`` and that target stops being sampled."""

    def __init__(self, targets: list[QdiscTarget], period: float) -> None:
        self.targets = targets
        self.period = period
        self.rows: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sockets: dict[str, Any] = {}
        self._index: dict[QdiscTarget, int] = {}

    def start(self) -> None:
        from pyroute2 import IPRoute  # imported here: the pure layers never need it

        for t in self.targets:
            if t.ns not in self._sockets:
                self._sockets[t.ns] = IPRoute(netns=t.ns)
            found = self._sockets[t.ns].link_lookup(ifname=t.ifname)
            if not found:
                self.errors.append(f"queue trace {t.direction}: no {t.ifname} in {t.ns}")
                continue
            self._index[t] = found[0]
        self._thread = threading.Thread(target=self._loop, name="qdisc-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        tick = time.monotonic()
        while not self._stop.is_set():
            for t, index in list(self._index.items()):
                try:
                    msgs = self._sockets[t.ns].get_qdiscs(index=index)
                except Exception as exc:  # a vanished namespace must not kill the run
                    self.errors.append(f"queue trace {t.direction}: {exc}")
                    del self._index[t]
                    continue
                now = time.time()
                for msg in msgs:
                    if msg.get("handle") == LEAF_HANDLE:
                        self.rows.append(qdisc_row(t.direction, msg, now))
            tick += self.period
            delay = tick - time.monotonic()
            if delay < 0:  # fell behind (a slow read): skip ticks, never burst
                tick = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for sock in self._sockets.values():
            with contextlib.suppress(Exception):
                sock.close()
        self._sockets.clear()

    def __enter__(self) -> QdiscSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def line_trace_rows(path: Path) -> list[dict[str, Any]]:
    """The delay line's JSONL samples as queue-trace rows (a torn last line is skipped)."""
    rows = []
    with contextlib.suppress(OSError), open(path, encoding="utf-8") as f:
        for line in f:
            try:
                s = json.loads(line)
            except ValueError:
                continue
            rows.append(
                {
                    "time": s["time"],
                    "direction": s["direction"],
                    "source": "delayline",
                    "backlog_bytes": s["backlog_bytes"],
                    "backlog_packets": s["backlog_packets"],
                    "packets": s["packets"],
                    "bytes": s["bytes"],
                    "dropped": s["dropped"],
                    "marked": s["marked"],
                }
            )
    return rows
