"""DCQCN's notification point (NP, the receiver NIC's CNP generator) as a pure state machine.

This module owns when a receiver sends CNPs: a marked packet gets a CNP at once if none was sent
for its flow in the last N, else at most one CNP per N while marks arrive (the paper, htsim's
DCQCNSink); NVIDIA's ``min_time_between_cnps`` counts N per *port* (``params.cnp_per_port``).

No clock is read: :meth:`NotificationPoint.on_packet` takes each arriving packet's time and says
whether to send a CNP now; a CE inside the window leaves a deferred CNP due N after the previous
one, collected with :meth:`NotificationPoint.due` (:meth:`NotificationPoint.next_due`: how long
the loop may sleep). A CNP's time is when it is sent, so the spacing is >= N however late the
loop polls; per port, deferred CNPs go out one per N in the order their flows were first marked.
"""

from __future__ import annotations

from collections.abc import Hashable

from testbed.core.dcqcn import DcqcnParams

_PORT = ("port",)  # the one rate-limit key in per-port mode


class NotificationPoint:
    """CNP generation for every flow arriving at one receiver."""

    def __init__(self, params: DcqcnParams, *, record: bool = True) -> None:
        if params.cnp_interval < 0:
            raise ValueError("cnp_interval N must be >= 0")
        self.interval = params.cnp_interval
        self.per_port = params.cnp_per_port
        self._last: dict[Hashable, float] = {}  # key -> time of its latest CNP
        # flows with a CE since their key's latest CNP, oldest mark first (dicts keep order)
        self._pending: dict[Hashable, float] = {}
        # (t, flow) of every CNP, in order (record=False: a receiver that logs its own)
        self.record = record
        self.sent: list[tuple[float, Hashable]] = []
        self.count = 0

    def _key(self, flow: Hashable) -> Hashable:
        return _PORT if self.per_port else flow

    def _open(self, key: Hashable, t: float) -> bool:
        last = self._last.get(key)
        return last is None or t - last >= self.interval

    def _send(self, t: float, flow: Hashable) -> None:
        self._last[self._key(flow)] = t
        self._pending.pop(flow, None)
        self.count += 1
        if self.record:
            self.sent.append((t, flow))

    def on_packet(self, t: float, flow: Hashable, ce: bool) -> bool:
        """A packet of ``flow`` arrived at ``t`` (``ce``: marked): send a CNP for it now?"""
        key = self._key(flow)
        if ce or flow in self._pending:
            if self._open(key, t):
                # a CE with no CNP in the last N, or this flow's deferred CNP now due
                self._send(t, flow)
                return True
            self._pending.setdefault(flow, t)
        return False

    def due(self, t: float) -> list[Hashable]:
        """The flows whose deferred CNP is due at ``t`` (sent now: send them)."""
        out: list[Hashable] = []
        for flow in list(self._pending):
            if self._open(self._key(flow), t):
                self._send(t, flow)
                out.append(flow)
        return out

    def next_due(self) -> float | None:
        """The earliest time a deferred CNP falls due (None: none pending)."""
        times = [
            self._last.get(self._key(flow), float("-inf")) + self.interval for flow in self._pending
        ]
        return min(times, default=None)
