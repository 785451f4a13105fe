"""The delay-line process: one :class:`DelayLine` serves all its queues through one socket.

This module owns the process's life: setup and teardown (binding the queues, SCHED_FIFO, the
frozen garbage collector), the hot path (:meth:`DelayLine._drain` reads packet messages and
hands each to :func:`~testbed.link.delayline.model.decide`; :func:`release` accepts the due ones
with batch verdicts), the main loop (:meth:`DelayLine.run`: when to wake, when to write stats and
trace samples, the stop sequence) and the process-level counters of the stats file.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import math
import os
import random
import resource
import select
import signal
import socket
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from testbed.core.clock import wall_offset
from testbed.core.files import atomic_write_text
from testbed.link.delayline.config import Config, ConfigError
from testbed.link.delayline.lateness import LatenessHistogram
from testbed.link.delayline.model import HOLD, Queue, decide, dequeue_verdict, retime
from testbed.link.delayline.nfqueue import (
    ATTRS_AT,
    FIRST_ATTRS_END,
    NF_ACCEPT,
    NF_DROP,
    NFQA_CAP_LEN,
    NFQA_PACKET_HDR,
    NFQA_PAYLOAD,
    NFQA_TIMESTAMP,
    NFQNL_MSG_PACKET,
    PACKET_HDR_LEN,
    PACKET_ID_AT,
    QUEUE_NUM_AT,
    NfQueueSocket,
    queue_number_at,
    timestamp_socket,
    verdict_msg,
)
from testbed.link.delayline.stats import (
    queue_errors,
    queue_stats,
    read_kernel_queue_counters,
    trace_record,
    update_kernel_counters,
)
from testbed.net.netlink import NLA_TYPE_MASK, NLMSG_ERROR, NLMSGHDR, RTA, error_code

RECV_BUDGET = 1024  # messages per socket per wakeup before deadlines are checked again
EARLY_SLACK = 0.0  # release packets due within this many seconds (0: never early)
STALE_TS = 2.0  # kernel timestamps older than this (s) are treated as bogus
LONG_SLEEP = 0.0005  # sleeps longer than this (s) are shortened by the learnt timer oversleep
MAX_WAKE_EARLY = 0.0003  # cap of that correction (s)
STATS_QUIET = 0.002  # write stats only when no deadline is due within this (s), if possible

# nlmsg_len, nlmsg_type and a packet's queue number as stored (big endian), read in one call
_PACKET_START = struct.Struct(f"=IH{QUEUE_NUM_AT - 6}xH")
_BE32 = struct.Struct(">I")
_BE64x2 = struct.Struct(">QQ")
_HDR = NLMSGHDR.size
_ERR_QUEUE_AT = _HDR + 4 + _HDR + 2  # nlmsgerr: error, then the refused request's header


def learn_oversleep(wake_early: float, overslept: float) -> float:
    """The next wake-early correction (s) after a timed-out sleep that overslept ``overslept``:
    a slow moving average of 80% of the oversleep, both clamped to ``MAX_WAKE_EARLY``-ish bounds
    so one long stall cannot make the line wake far too early."""
    over = min(max(overslept, 0.0), 2 * MAX_WAKE_EARLY)
    return min(MAX_WAKE_EARLY, 0.9 * wake_early + 0.1 * 0.8 * over)


def release(q: Queue, limit: float, out: bytearray) -> None:
    """Append the verdicts accepting every held packet of ``q`` due by ``limit`` to ``out``: one
    batch, split around packets to be released with the CE mark. Records their lateness."""
    deadlines, ids = q.deadlines, q.ids
    if not deadlines or deadlines[0] > limit:
        return
    now = time.monotonic()
    # LatenessHistogram.add_us, inlined: this runs once per packet
    counts = q.hist.counts
    fine, coarse = LatenessHistogram.FINE, LatenessHistogram.COARSE
    last_bin = LatenessHistogram.NBINS - 1
    max_us = q.hist.max_us
    n = 0
    pid = prev = -1
    popd, popi = deadlines.popleft, ids.popleft
    marked = q.marked_ids
    at_dequeue = q.at_dequeue
    num = q.cfg.num
    while deadlines and deadlines[0] <= limit:
        due = popd()
        us = int((now - due) * 1e6)
        pid = popi()
        n += 1
        if at_dequeue and pid in at_dequeue:
            verdict = dequeue_verdict(q, pid, due)
            if verdict == HOLD:
                marked.add(pid)
            elif verdict == NF_DROP:
                if prev >= 0:
                    out += verdict_msg(num, prev, NF_ACCEPT, batch=True)
                out += verdict_msg(num, pid, NF_DROP)
                prev = pid = -1
                n -= 1
                continue
        if marked and pid in marked:
            # the batch "accept all ids <= N" before it, then this one with the CE mark
            marked.discard(pid)
            if prev >= 0:
                out += verdict_msg(num, prev, NF_ACCEPT, batch=True)
            out += verdict_msg(num, pid, NF_ACCEPT, mark=q.cfg.ce_mark)
            pid = -1
        prev = pid
        if us < fine:
            counts[us if us > 0 else 0] += 1
        elif us < 1_000_000:
            counts[fine + (us - fine) // coarse] += 1
        else:
            counts[last_bin] += 1
        if us > max_us:
            max_us = us
    q.hist.max_us = max_us
    q.hist.count += n
    q.accepted += n
    if pid >= 0:
        out += verdict_msg(num, pid, NF_ACCEPT, batch=True)


@dataclass
class _Timers:
    """The main loop's schedule (monotonic seconds)."""

    next_stats: float
    next_sample: float
    last_release: float = -math.inf
    wake_early: float = 0.0  # learnt select() oversleep: we ask to wake up this much earlier
    stop_at: float | None = None


class DelayLine:
    """All queues of one process, served through one netlink socket."""

    def __init__(self, cfg: Config, config_path: str | None = None) -> None:
        self.cfg = cfg
        self.config_path = config_path  # re-read on SIGHUP (:meth:`reload`)
        self.reload_pending = False
        self.reloads = 0  # SIGHUPs handled (applied or refused): the stats file's acknowledgement
        self.queues: list[Queue] = []
        self.by_num: dict[int, Queue] = {}
        self.nfq: NfQueueSocket | None = None
        self.sock: socket.socket | None = None  # self.nfq's, kept at hand for the hot path
        self.errors: dict[str, str] = {}
        self._reported: dict[str, str] = {}
        self._buf = bytearray(1 << 17)
        self._ts_sock: socket.socket | None = None
        self.sched_fifo = False
        self.rcvbuf = 0
        self.enobufs = 0
        self.verdict_errors_other = 0
        self.wakeups = 0
        self.verdict_sends = 0
        self.stopping = False
        self._t0 = time.monotonic()
        self._cpu_last = (self._t0, self._cpu())
        self.cpu_percent = 0.0
        self._trace: IO[str] | None = None
        self._rt_off = wall_offset()

    # ---- setup

    @staticmethod
    def _cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    def setup(self) -> None:
        self._ts_sock, warning = timestamp_socket()
        if warning:
            print(f"delayline: {warning}", file=sys.stderr)
        self.nfq = nfq = NfQueueSocket(self.cfg.rcvbuf)
        self.sock = nfq.sock
        if nfq.warning:
            self._error("rcvbuf", nfq.warning)
        self.rcvbuf = nfq.rcvbuf
        for qc in self.cfg.queues:
            nfq.bind(qc)
            q = Queue(cfg=qc, rng=random.Random(qc.seed))
            self.queues.append(q)
            self.by_num[qc.num] = q
        if self.cfg.rt_priority > 0:
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(self.cfg.rt_priority))
                self.sched_fifo = True
            except (OSError, AttributeError):
                self.sched_fifo = False

    def unbind(self) -> None:
        if self.nfq is not None:
            for q in self.queues:
                self.nfq.unbind(q.cfg.num)
            self.nfq.close()
            self.nfq = self.sock = None
        if self._ts_sock is not None:
            self._ts_sock.close()
            self._ts_sock = None

    # ---- errors and stats

    def _error(self, key: str, msg: str) -> None:
        self.errors[key] = msg

    def _report_errors(self) -> None:
        for key, msg in self.errors.items():
            if self._reported.get(key) != msg:
                print(f"delayline: ERROR: {msg}", file=sys.stderr, flush=True)
                self._reported[key] = msg

    def stats(self, final: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = ru.ru_utime + ru.ru_stime
        t_last, cpu_last = self._cpu_last
        if now - t_last > 0.05:
            self.cpu_percent = 100.0 * (cpu - cpu_last) / (now - t_last)
            self._cpu_last = (now, cpu)
        uptime = now - self._t0
        if self.enobufs:
            self._error(
                "enobufs",
                f"ENOBUFS on the netlink socket {self.enobufs} times "
                "(receive buffer overflow; packets were lost)",
            )
        if self.verdict_errors_other:
            self._error(
                "verdict",
                f"kernel rejected {self.verdict_errors_other} messages of unknown queue",
            )
        kern = read_kernel_queue_counters()
        queues: dict[str, Any] = {}
        for q in self.queues:
            update_kernel_counters(q, kern)
            self.errors.update(queue_errors(q))
            queues[str(q.cfg.num)] = queue_stats(q, now)
        self._report_errors()
        return {
            "version": 1,
            "pid": os.getpid(),
            "time": time.time(),
            "uptime_s": round(uptime, 3),
            "cpu_seconds": round(cpu, 3),
            # user = this program; system includes the kernel's forwarding work done inside our
            # verdict syscalls (reinjected packets are routed, shaped and delivered there)
            "cpu_user_seconds": round(ru.ru_utime, 3),
            "cpu_system_seconds": round(ru.ru_stime, 3),
            "cpu_percent": round(self.cpu_percent, 1),
            "cpu_percent_avg": round(100.0 * cpu / uptime, 1) if uptime > 0 else 0.0,
            "sched_fifo": self.sched_fifo,
            "rcvbuf": self.rcvbuf,
            "enobufs": self.enobufs,
            "wakeups": self.wakeups,
            "verdict_sends": self.verdict_sends,
            "reloads": self.reloads,
            "final": final,
            "errors": list(self.errors.values()),
            "queues": queues,
        }

    def write_stats(self, final: bool = False) -> None:
        data = self.stats(final)
        path = self.cfg.stats_file
        if not path:
            return
        p = Path(path)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(p, json.dumps(data, indent=1) + "\n")
        except OSError as e:
            msg = f"delayline: cannot write stats {path}: {e}"
            if self._reported.get("stats_write") != msg:  # say it once, not every interval
                print(msg, file=sys.stderr, flush=True)
                self._reported["stats_write"] = msg

    # ---- queue trace

    def _open_trace(self) -> None:
        if self.cfg.trace_file and any(q.cfg.bottleneck for q in self.queues):
            self._trace = open(self.cfg.trace_file, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115

    def _sample(self, now: float) -> None:
        """One line per bottleneck queue: occupancy now, cumulative counters (unix time)."""
        if self._trace is None:
            return
        for q in self.queues:
            if q.cfg.bottleneck:
                self._trace.write(trace_record(q, now, now + self._rt_off))

    # ---- hot path

    def _drain(self, budget: int) -> int:
        """Read up to ``budget`` packet messages (all queues); returns the number read.

        Drops and reordered packets get their per-packet verdicts here, sent before any batch
        verdict that could cover their ids.
        """
        sock = self.sock
        assert sock is not None
        buf = self._buf
        out = bytearray()
        now = time.monotonic()
        rt_off = wall_offset()  # realtime -> monotonic, never making a stamp early
        got = self._messages(sock, buf, budget, out, rt_off, now - STALE_TS, now + STALE_TS)
        if got:
            for q in self.queues:
                if len(q.ids) > q.max_held:
                    q.max_held = len(q.ids)
        if out:
            self._send(out)
        return got

    def _messages(
        self,
        sock: socket.socket,
        buf: bytearray,
        budget: int,
        out: bytearray,
        rt_off: float,
        oldest: float,
        newest: float,
    ) -> int:
        """Read ``sock`` into ``buf`` until it is empty or ``budget`` packet messages were
        handled; per-packet verdicts go to ``out``. Returns the number of packet messages.
        Arrival stamps outside ``oldest..newest`` are bogus. ENOBUFS (the kernel could not queue a
        message for us) is counted and reading goes on.

        This is the hot path: each packet message is read inline (a function call per packet
        measurably costs CPU time) and handed to :func:`~testbed.link.delayline.model.decide`,
        the one home of the per-packet arithmetic. Names are bound to locals for the same reason,
        once per wakeup: the kernel queues one packet message per datagram, so a ``recv`` mostly
        returns a single packet (set-up per ``recv`` was ~40% of the read cost per packet).
        """
        by_num = self.by_num
        min_len = _PACKET_START.size  # shorter messages are neither packets nor errors
        unpack_hdr = _PACKET_START.unpack_from
        unpack_be32 = _BE32.unpack_from
        unpack_attr = RTA.unpack_from
        unpack_ts = _BE64x2.unpack_from
        model, hold = decide, HOLD
        recv_into = sock.recv_into
        got = 0
        qraw = -1
        q: Queue | None = None
        want_tos = False
        while got < budget:
            try:
                n = recv_into(buf)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno != errno.ENOBUFS:
                    raise
                self.enobufs += 1
                continue
            off = 0
            while off + min_len <= n:
                mlen, mtype, raw = unpack_hdr(buf, off)
                if mlen < _HDR or off + mlen > n:
                    break
                end = off + mlen
                if mtype != NFQNL_MSG_PACKET:
                    if mtype == NLMSG_ERROR and mlen >= _HDR + 4:
                        self._verdict_error(buf, off, mlen)
                    off += (mlen + 3) & ~3
                    continue
                got += 1
                if raw != qraw:  # a run of one queue's packets looks its queue up once
                    qraw, q = raw, by_num.get(queue_number_at(buf, off))
                    want_tos = q is not None and bool(q.cfg.rate)
                off += (mlen + 3) & ~3
                if q is None:
                    continue
                arrival = -1.0
                length = tos = 0
                start = end - mlen
                # NFQA_PACKET_HDR comes first (nfqueue's layout note); else search for it
                if (
                    buf[start + ATTRS_AT + 2] == NFQA_PACKET_HDR
                    and buf[start + ATTRS_AT] == PACKET_HDR_LEN
                    and mlen >= FIRST_ATTRS_END
                ):
                    pid = unpack_be32(buf, start + PACKET_ID_AT)[0]
                    a = start + FIRST_ATTRS_END
                else:
                    pid = -1
                    a = start + ATTRS_AT
                while a + 4 <= end:
                    alen, atype = unpack_attr(buf, a)
                    if alen < 4:
                        break
                    atype &= NLA_TYPE_MASK
                    if atype == NFQA_TIMESTAMP:
                        sec, usec = unpack_ts(buf, a + 4)
                        arrival = sec + usec * 1e-6 - rt_off
                    elif atype == NFQA_CAP_LEN:
                        length = unpack_be32(buf, a + 4)[0]
                        if not want_tos:
                            break
                    elif atype == NFQA_PAYLOAD:
                        tos = buf[a + 5] if alen >= 6 else 0
                        break
                    elif atype == NFQA_PACKET_HDR:
                        pid = unpack_be32(buf, a + 4)[0]
                    a += (alen + 3) & ~3
                if pid < 0:
                    continue
                if not oldest <= arrival <= newest:
                    arrival = time.monotonic()  # no (sane) kernel stamp: time of recv
                    q.ts_fallbacks += 1
                verdict = model(q, pid, arrival, length, tos)
                if verdict != hold:
                    out += verdict_msg(q.cfg.num, pid, verdict)
        return got

    def _verdict_error(self, buf: bytearray, off: int, mlen: int) -> None:
        """Count a refused verdict against its queue (the error message carries the offending
        request, whose nfgenmsg names the queue)."""
        err = error_code(buf, off + _HDR)
        if not err:
            return
        q = (
            self.by_num.get(queue_number_at(buf, off + _HDR + 4))
            if mlen >= _ERR_QUEUE_AT + 2
            else None
        )
        if q is None:
            self.verdict_errors_other += 1
        else:
            q.verdict_errors += 1
            q.last_verdict_errno = err

    def _send(self, data: bytes | bytearray) -> None:
        sock = self.sock
        assert sock is not None
        self.verdict_sends += 1
        while True:
            try:
                sock.send(data)
                return
            except InterruptedError:
                continue
            except BlockingIOError:
                select.select([], [sock], [], 0.01)
            except OSError as e:
                self.verdict_errors_other += 1
                self._error("send", f"sending verdicts failed: {e}")
                return

    def _release_due(self, limit: float) -> bool:
        out = bytearray()
        for q in self.queues:
            if q.deadlines and q.deadlines[0] <= limit:
                release(q, limit, out)
        if out:
            self._send(out)
            return True
        return False

    # ---- main loop

    def run(self, ready_stream: IO[str] | None = None) -> int:
        """Serve until SIGTERM/SIGINT, then flush (see the package docstring); returns 0."""
        rfd, wfd = self._start(ready_stream)
        now = time.monotonic()
        t = _Timers(
            next_stats=now + self.cfg.stats_interval,
            next_sample=now if self._trace is not None else math.inf,
        )
        gap = self.cfg.release_gap
        while True:
            if self.reload_pending:
                self.reload()
            now = time.monotonic()
            if self._release_due(now + EARLY_SLACK):
                t.last_release = now
            now, nxt = self._housekeeping(now, self._next_wakeup(t), t)
            if self.stopping and self._stop_now(now, t):
                break
            ready = self._wait(now, nxt, t, rfd)
            if ready is None:
                continue
            now = time.monotonic()
            # due packets first: reading takes a while
            if now >= t.last_release + gap and self._release_due(now + EARLY_SLACK):
                t.last_release = now
            if rfd in ready:
                with contextlib.suppress(OSError):
                    rfd.recv(4096)
            self._drain(RECV_BUDGET)
        self._finish(rfd, wfd)
        return 0

    def _start(self, ready_stream: IO[str] | None) -> tuple[socket.socket, socket.socket]:
        """Signals (through a wakeup socket pair), frozen gc, first stats, READY, the trace."""
        rfd, wfd = socket.socketpair()
        rfd.setblocking(False)
        wfd.setblocking(False)

        def _on_signal(signum: int, frame: Any) -> None:
            self.stopping = True

        def _on_hup(signum: int, frame: Any) -> None:
            self.reload_pending = True

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
        signal.signal(signal.SIGHUP, _on_hup)
        signal.set_wakeup_fd(wfd.fileno(), warn_on_full_buffer=False)

        # everything allocated so far lives as long as the process: keep collections cheap
        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 50, 50)

        self.write_stats()
        stream = ready_stream if ready_stream is not None else sys.stdout
        stream.write("READY\n")
        stream.flush()
        self._open_trace()
        # While every queue holds packets, arrivals need not wake us: with kernel arrival
        # timestamps and order-preserving deadlines a new packet is never due before the held
        # head of its queue, so its message can wait in the socket until the next deadline
        # wakeup (every wakeup reads all pending messages). An idle queue, or reordering
        # (immediate verdicts), needs the socket watched.
        self._watch_always = any(q.cfg.reorder > 0 for q in self.queues)
        return rfd, wfd

    def reload(self) -> None:
        """Apply the config file again (SIGHUP): each queue, found by its number, takes its new
        delay, jitter, loss, reorder and bottleneck settings for the packets that arrive from
        now on; held packets keep their release times (and a queue stays FIFO, so a shorter
        delay takes effect as the held ones drain), except that a bottleneck's new rate also
        drains what its queue holds (:func:`~testbed.link.delayline.model.retime`). The queue
        set, ``maxlen`` and ``copy_mode`` are bound to the kernel and cannot change: such a
        file, or an invalid one, is refused as a whole (an error in the stats until a reload
        succeeds; the old settings stay). The stats file is rewritten at once: its ``reloads``
        count (applied or refused) is the acknowledgement, its errors say which."""
        self.reload_pending = False
        try:
            if self.config_path is None:
                raise ConfigError("no config file to reload")
            new = {q.num: q for q in Config.load(self.config_path).queues}
            if set(new) != set(self.by_num):
                bound = sorted(self.by_num)
                raise ConfigError(f"queues {sorted(new)} differ from the bound ones {bound}")
            for num, qc in new.items():
                old = self.by_num[num].cfg
                if (qc.maxlen, qc.copy_mode) != (old.maxlen, old.copy_mode):
                    raise ConfigError(f"queue {num}: maxlen and copy_mode cannot change")
        except ConfigError as e:
            self._error("reload", f"config reload refused: {e}")
        else:
            now = time.monotonic()
            for num, qc in new.items():
                q = self.by_num[num]
                old_rate = q.cfg.service_rate
                q.cfg = qc  # its random stream (Queue.rng) goes on
                # a bottleneck's new rate also applies to what it holds (dequeue-time shaping)
                retime(q, now, old_rate)
                if not qc.ge_p:
                    q.ge_bad = False  # a burst model turned on again starts in the good state
            self._watch_always = any(q.cfg.reorder > 0 for q in self.queues)
            self.errors.pop("reload", None)
        self.reloads += 1
        self.write_stats()

    def _next_wakeup(self, t: _Timers) -> float:
        """The earliest deadline of any queue, no sooner than ``release_gap`` after the last
        release (coalescing releases under load bounds the lateness by the gap)."""
        nxt = math.inf
        for q in self.queues:
            if q.deadlines and q.deadlines[0] < nxt:
                nxt = q.deadlines[0]
        gap = self.cfg.release_gap
        if gap and nxt < t.last_release + gap:
            nxt = t.last_release + gap
        return nxt

    def _housekeeping(self, now: float, nxt: float, t: _Timers) -> tuple[float, float]:
        """Write stats and trace samples when due; returns (now, next wakeup) updated."""
        interval = self.cfg.stats_interval
        # stats: postponed (up to one interval) while a deadline is imminent
        if now >= t.next_stats and (nxt - now > STATS_QUIET or now >= t.next_stats + interval):
            self.write_stats()
            now = time.monotonic()
            t.next_stats = max(t.next_stats + interval, now + interval * 0.5)
        nxt = min(nxt, t.next_stats if t.next_stats > now else now + STATS_QUIET)
        if now >= t.next_sample:
            self._sample(now)
            every = self.cfg.trace_interval
            t.next_sample = max(t.next_sample + every, now + every / 2)
        return now, min(nxt, t.next_sample)

    def _stop_now(self, now: float, t: _Timers) -> bool:
        """While stopping: whether the loop is done (nothing held and nothing left to read, or
        the grace period is over)."""
        grace = self.cfg.flush_grace
        if t.stop_at is None:
            t.stop_at = now
            # deadlines further away than flush_grace: accept everything now
            if any(q.deadlines and q.deadlines[-1] > now + grace for q in self.queues):
                self._release_due(math.inf)
        if now > t.stop_at + grace + 0.5:
            return True
        # nothing held: stop once the socket is empty too (messages queued before the rules
        # were removed are still delayed normally)
        return all(not q.deadlines for q in self.queues) and not self._drain(RECV_BUDGET)

    def _wait(self, now: float, nxt: float, t: _Timers, rfd: socket.socket) -> list[Any] | None:
        """Sleep until ``nxt`` or a wakeup (a packet, a signal); the ready list, None if the
        sleep was interrupted."""
        sock = self.sock
        assert sock is not None
        timeout = nxt - now
        if timeout > LONG_SLEEP:
            # timer wakeups in a VM come late; wake up a bit earlier and finish with a short
            # sleep (short sleeps overshoot much less)
            timeout -= t.wake_early
        elif timeout < 0:
            timeout = 0.0
        watch = self._watch_always or not all(q.deadlines for q in self.queues)
        try:
            ready = select.select([sock, rfd] if watch else [rfd], [], [], timeout)[0]
        except InterruptedError:
            return None
        self.wakeups += 1
        if not ready and timeout > LONG_SLEEP - MAX_WAKE_EARLY:
            t.wake_early = learn_oversleep(t.wake_early, time.monotonic() - now - timeout)
        return ready

    def _finish(self, rfd: socket.socket, wfd: socket.socket) -> None:
        """Pick up stragglers, release everything, unbind, final stats."""
        while self._drain(RECV_BUDGET):
            pass
        self._release_due(math.inf)
        self.stats()  # last look at the kernel's counters while the queues still exist
        self.unbind()
        if self._trace is not None:
            self._sample(time.monotonic())
            self._trace.close()
        signal.set_wakeup_fd(-1)
        rfd.close()
        wfd.close()
        self.write_stats(final=True)
