"""DCQCN's reaction point (RP, the sender NIC's rate limiter) as a pure state machine.

This module owns the RP's state (current rate RC, target rate RT, α, the timer and byte stage
counters) and its three published variants, ``paper``, ``ns3`` and ``mellanox`` (the parameters
in :class:`testbed.core.dcqcn.DcqcnParams`). It reads no clock: every call carries its time, and
timer events are applied lazily, in time order, whenever a call moves time forward. So a sender
that ticks every few hundred µs needs no µs sleeps, and the same calls replayed offline
(:mod:`traffic.dcqcn.replay`) give the same state and the same event log exactly:
:meth:`ReactionPoint.advance` only makes due timer events happen, its call points never change
the result. Each variant's rules, the choices all variants share (the smallest cut, the timer's
arming, closed-form α decay, the order of simultaneous events) and their sources:
docs/congestion.md, "The reaction point's variants".
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from testbed.core.dcqcn import DcqcnParams

EventKind = Literal["cnp", "cut", "alpha", "increase_timer", "increase_bytes"]
Stage = Literal["fast_recovery", "additive", "hyper"]
CallOp = Literal["cnp", "sent", "advance"]


class RpEvent(NamedTuple):
    """One state change (the state after it), a row of dcqcn.parquet."""

    t: float
    kind: EventKind
    stage: Stage
    rc: float  # bit/s
    rt: float  # bit/s
    alpha: float


class RpCall(NamedTuple):
    """One call made to the RP: the live sender's log, which replay feeds back identically."""

    t: float
    op: CallOp
    nbytes: int = 0


# Timer instants closer than this fraction of their step are the same instant: mellanox's grids
# (K 1 µs, the 4 µs check, T 300 µs from a check) coincide by design, and whether
# t1 + j·P or t1 + 4j·K is the larger float must not decide whether α is updated before a cut,
# nor flip when every time is dilated by s.
SAME_INSTANT = 1e-9


def grid_count(ref: float, step: float, t: float) -> int:
    """How many of the instants ref + i·step (i >= 1) are at or before t (within
    SAME_INSTANT·step), with exactly the comparisons the event loop makes."""
    tol = SAME_INSTANT * step
    if t + tol < ref + step:
        return 0
    n = int((t - ref) / step)
    while ref + (n + 1) * step <= t + tol:
        n += 1
    while n > 0 and ref + n * step > t + tol:
        n -= 1
    return n


class ReactionPoint:
    """One flow's DCQCN rate limiter, driven by explicit times (see the module docstring)."""

    def __init__(
        self,
        params: DcqcnParams,
        line_rate: float,
        *,
        t0: float = 0.0,
        log_alpha_decay: bool = False,
        record_calls: bool = True,
    ) -> None:
        if line_rate <= 0:
            raise ValueError(f"line rate must be positive, got {line_rate}")
        if params.rate_timer <= 0 or params.alpha_timer <= 0:
            raise ValueError("the increase timer T and the α timer K must be positive")
        if params.rate_reduce_period < 0:
            raise ValueError("rate_reduce_period must be >= 0")
        self.params = params
        self.line_rate = float(line_rate)
        self.log_alpha_decay = log_alpha_decay
        # every call kept in self.calls for replay_calls; a sender at tens of kpps that logs
        # its sends and CNP arrivals itself (enough for replay()) can save the memory
        self.record_calls = record_calls
        self.t0 = t0
        self.t = t0  # the time of the latest call: calls must not go back in time
        self.rc = self.line_rate
        self.rt = self.line_rate
        self.timer_stage = 0  # T: timer events since the last cut
        self.byte_stage = 0  # BC: byte-counter events since the last cut
        self.bytes_since = 0  # bytes sent since the last byte event (or cut)
        self.bytes_total = 0
        self.last_cut: float | None = None
        self.last_timer_event: float | None = None  # the latest increase-timer event
        # the latest α change other than a pure (1 − g) decay (those are in closed form)
        self.last_alpha_update = t0
        self.increased_since_cut = False
        self._mlx = params.variant == "mellanox"
        # α = base·(1 − g)^(i − base_idx) at the i-th instant of its grid ref + i·K
        self._alpha_base = params.alpha0
        self._alpha_base_idx = 0
        # paper: the grid runs from the last CNP (from t0 before one); ns3 (the author's
        # ResumeAlpha is first scheduled by a CNP) and mellanox: none before the first CNP
        self._alpha_ref: float | None = t0 if params.variant == "paper" else None
        self._alpha_logged_idx = 0  # log_alpha_decay: the last grid instant logged
        self._alpha_cnp_arrived = False  # mellanox: the next update adds g
        self._alpha_pending_idx = 0
        self._decrease_cnp_arrived = False  # mellanox: the next cut check cuts
        self._dec_ref: float | None = None
        self._dec_pending_idx = 0
        self._rate_next: float | None = None  # the increase timer's next instant; None: off
        self._ns3 = params.variant == "ns3"
        # ns3: the author's explicit stage (0 none yet, 1 fast recovery, 2 additive, 3 hyper)
        # and byte budget (counts down per datagram, an event when it goes below 0)
        self._ns3_stage = 0
        self._ns3_budget = params.byte_counter or 0
        # no timer instant falls due before this (a fast path for the per-packet on_sent:
        # conservative by twice the tie tolerance, so it never changes what happens)
        self._horizon = float("-inf")
        self.events: list[RpEvent] = []
        self.calls: list[RpCall] = []

    # ---- the calls (each one logged in self.calls, so that replay can repeat it) ----

    def on_cnp(self, t: float) -> None:
        """A CNP arrived at ``t``."""
        self._enter(RpCall(t, "cnp"))
        self._advance(t)
        self._horizon = float("-inf")  # a CNP starts or moves timers
        p = self.params
        self._log(t, "cnp")
        if self._mlx:
            if self._alpha_ref is None:  # the first CNP: α = 1, RT = RC, start both grids
                self._alpha_ref = t
                self._dec_ref = t
                self._alpha_base, self._alpha_base_idx = 1.0, 0
                self.rt = self.rc  # HPCC's rate_on_first_cnp 1.0: keep the rate
                self.last_alpha_update = t
                self._log(t, "alpha")
            else:
                if not self._alpha_cnp_arrived:
                    self._alpha_pending_idx = grid_count(self._alpha_ref, p.alpha_timer, t) + 1
                self._alpha_cnp_arrived = True
            if p.rate_reduce_period == 0:
                self._cut(t, self.alpha)
            elif not self._decrease_cnp_arrived:
                assert self._dec_ref is not None
                self._decrease_cnp_arrived = True
                self._dec_pending_idx = grid_count(self._dec_ref, p.rate_reduce_period, t) + 1
            return
        may_cut = (
            p.rate_reduce_period == 0
            or self.last_cut is None
            or t - self.last_cut >= p.rate_reduce_period
        )
        if p.variant == "ns3":  # the author's code: α first, then the cut with the new α
            self._cnp_alpha(t)
            if may_cut:
                self._cut(t, self.alpha)
        else:
            if may_cut:
                self._cut(t, self.alpha)
            self._cnp_alpha(t)

    def on_sent(self, t: float, nbytes: int) -> None:
        """``nbytes`` left at ``t`` (drives the byte counter: paper, ns3)."""
        if nbytes < 0:
            raise ValueError(f"negative byte count {nbytes}")
        self._enter(RpCall(t, "sent", nbytes))
        self._advance(t)
        self.bytes_total += nbytes
        b = self.params.byte_counter
        if self._mlx or not b:
            return
        if self._ns3:
            self._ns3_sent(t, nbytes, b)
            return
        self.bytes_since += nbytes
        while self.bytes_since >= b:
            self.bytes_since -= b
            if self._rate_next is not None:  # disarmed: a no-op event (see the docstring)
                self.byte_stage += 1
                self._increase(t, "increase_bytes")

    def advance(self, t: float) -> None:
        """Apply every timer event due up to ``t`` (state-neutral as to when it is called)."""
        self._enter(RpCall(t, "advance"))
        self._advance(t)

    def apply(self, call: RpCall) -> None:
        """Make one logged call again (replay's path into the same methods)."""
        if call.op == "cnp":
            self.on_cnp(call.t)
        elif call.op == "sent":
            self.on_sent(call.t, call.nbytes)
        elif call.op == "advance":
            self.advance(call.t)
        else:
            raise ValueError(f"unknown RP call {call.op!r}")

    # ---- the state ----

    @property
    def rate(self) -> float:
        """The current rate RC, bit/s (what the pacer sends at)."""
        return self.rc

    @property
    def target(self) -> float:
        return self.rt

    @property
    def alpha(self) -> float:
        """α at the latest call's time."""
        return self._alpha_at(self.t)

    @property
    def stage(self) -> Stage:
        """The stage the counters are in now (what the next increase would do, roughly)."""
        p = self.params
        f = p.fast_recovery_steps
        if self._mlx:
            s = self.timer_stage
            return "fast_recovery" if s < f else "additive" if s == f else "hyper"
        if self._ns3:
            stages: dict[int, Stage] = {2: "additive", 3: "hyper"}
            return stages.get(self._ns3_stage, "fast_recovery")
        hi, lo = max(self.timer_stage, self.byte_stage), min(self.timer_stage, self.byte_stage)
        return "fast_recovery" if hi <= f else "hyper" if lo > f else "additive"

    # ---- internals ----

    def _enter(self, call: RpCall) -> None:
        if call.t < self.t:
            raise ValueError(f"RP call at t={call.t} is before the previous one at t={self.t}")
        if self.record_calls:
            self.calls.append(call)

    def _log(self, t: float, kind: EventKind, stage: Stage | None = None) -> None:
        self.events.append(
            RpEvent(t, kind, stage or self.stage, self.rc, self.rt, self._alpha_at(t))
        )

    def _alpha_at(self, t: float) -> float:
        if self._alpha_ref is None:
            return self._alpha_base
        i = grid_count(self._alpha_ref, self.params.alpha_timer, t)
        if self._mlx and self._alpha_cnp_arrived and i >= self._alpha_pending_idx:
            # only between the pending update's instant and its processing (same t, in order)
            i = self._alpha_pending_idx - 1
        return self._alpha_base * (1 - self.params.g) ** max(0, i - self._alpha_base_idx)

    def _cnp_alpha(self, t: float) -> None:
        """paper/ns3: α = (1 − g)α + g at the CNP, and the decay grid restarts there."""
        g = self.params.g
        a = self._alpha_at(t)
        self._alpha_base, self._alpha_base_idx = (1 - g) * a + g, 0
        self._alpha_ref = t
        self._alpha_logged_idx = 0
        self.last_alpha_update = t
        self._log(t, "alpha")

    def _cut(self, t: float, alpha: float) -> None:
        p = self.params
        if p.clamp_target or self.increased_since_cut:
            self.rt = self.rc
            if self._ns3:  # the author resets the byte budget only together with RT
                self._ns3_budget = p.byte_counter or 0
        self._ns3_stage = 1
        factor = max(1 - alpha / 2, p.min_dec_fac)  # rpg_min_dec_fac: keep at least this much
        self.rc = max(p.min_rate, self.rc * factor)
        self.timer_stage = self.byte_stage = 0
        self.bytes_since = 0
        self.increased_since_cut = False
        self.last_cut = t
        self._rate_next = t + p.rate_timer
        self._log(t, "cut", "fast_recovery")

    def _increase(self, t: float, kind: EventKind) -> None:
        """One increase event; the counter that caused it is already updated (paper/ns3) or is
        incremented after (mellanox)."""
        p = self.params
        f = p.fast_recovery_steps
        rc0 = self.rc
        stage: Stage
        if self._ns3:
            stage = self._ns3_increase(kind)
        elif self._mlx:
            s = self.timer_stage
            if s < f:
                stage = "fast_recovery"
            elif s == f:
                stage, self.rt = "additive", self.rt + p.rai
            else:
                stage, self.rt = "hyper", self.rt + p.rhai
            self.timer_stage += 1
        else:
            hi = max(self.timer_stage, self.byte_stage)
            lo = min(self.timer_stage, self.byte_stage)
            if hi <= f:
                stage = "fast_recovery"
            elif lo > f:
                steps = lo - f + (1 if p.variant == "ns3" else 0)
                stage, self.rt = "hyper", self.rt + steps * p.rhai
            else:
                stage, self.rt = "additive", self.rt + p.rai
        if not self._ns3:  # the author's AdjustRates clamps RC only, RT may exceed the line
            self.rt = min(self.rt, self.line_rate)
            self.rc = min(self.line_rate, max(p.min_rate, (self.rt + self.rc) / 2))
        self.increased_since_cut = True
        self._log(t, kind, stage)
        if self.rt >= self.line_rate and (self.rc == rc0 or self.rc >= self.line_rate):
            # RC is at the line rate (or a float hair below it, where (RT + RC)/2 no longer
            # moves it) and stays there: the next cut sets RT = RC (an increase happened) and
            # resets the counters, so every event until then is a no-op: stop the timer
            self._rate_next = None

    def _ns3_increase(self, kind: EventKind) -> Stage:
        """The author's rpr_* handlers: the counter of this event is already incremented."""
        p = self.params
        f = p.fast_recovery_steps
        timer = kind == "increase_timer"
        own = self.timer_stage if timer else self.byte_stage
        if self._ns3_stage == 1 and own < f:
            self._ns3_adjust(0.0)  # rpr_fast_*: fast recovery while this counter < F
            return "fast_recovery"
        if self._ns3_stage == 3 or (
            # rpr_active_select (from stage 1 at F, or a timer event in stage 2); a byte event
            # in stage 2 (rpr_active_byte) is always additive
            (self._ns3_stage == 1 or timer) and min(self.timer_stage, self.byte_stage) >= f
        ):
            self._ns3_adjust((min(self.timer_stage, self.byte_stage) - f + 1) * p.rhai)
            self._ns3_stage = 3
            return "hyper"
        self._ns3_adjust(p.rai)
        self._ns3_stage = 2
        return "additive"

    def _ns3_adjust(self, increase: float) -> None:
        """The author's AdjustRates, with its QCN rule: on a counter's first event a target
        above 10·RC is divided by 8 instead of increased."""
        if (self.byte_stage == 1 or self.timer_stage == 1) and self.rt > 10 * self.rc:
            self.rt /= 8
        else:
            self.rt += increase
        self.rc = min(self.line_rate, self.rc / 2 + self.rt / 2)

    def _ns3_sent(self, t: float, nbytes: int, b: int) -> None:
        """The author's byte counter: a budget of B counted down per datagram while a stage
        is active (refilled before the first CNP); below 0 one event and a fresh budget, B/2
        in the hyper stage, the remainder dropped."""
        if self._ns3_stage == 0:
            self._ns3_budget = b
            return
        self._ns3_budget -= nbytes
        self.bytes_since = b - self._ns3_budget
        if self._ns3_budget < 0:
            self._ns3_budget = b // 2 if self._ns3_stage == 3 else b
            self.bytes_since = 0
            if self._rate_next is not None:  # disarmed: a no-op event
                self.byte_stage += 1
                self._increase(t, "increase_bytes")

    def _advance(self, t: float) -> None:
        """Apply the timer events due at or before ``t`` in time order."""
        if t < self._horizon:
            self.t = t
            return
        p = self.params
        while True:
            due: list[tuple[float, int, float]] = []  # (instant, priority on a tie, step)
            if self._alpha_ref is not None:
                k = p.alpha_timer
                if self.log_alpha_decay:
                    ia = self._alpha_logged_idx + 1
                    if self._mlx and self._alpha_cnp_arrived:
                        ia = min(self._alpha_pending_idx, ia)
                    due.append((self._alpha_ref + ia * k, 0, k))
                elif self._mlx and self._alpha_cnp_arrived:
                    due.append((self._alpha_ref + self._alpha_pending_idx * k, 0, k))
            if self._decrease_cnp_arrived and self._dec_ref is not None:
                rr = p.rate_reduce_period
                due.append((self._dec_ref + self._dec_pending_idx * rr, 2, rr))
            if self._rate_next is not None:
                due.append((self._rate_next, 1, p.rate_timer))
            later = [d for d in due if d[0] > t + SAME_INSTANT * d[2]]
            if len(later) == len(due):
                self._horizon = min(
                    (d[0] - 2 * SAME_INSTANT * d[2] for d in due), default=float("inf")
                )
                break
            due = [d for d in due if d[0] <= t + SAME_INSTANT * d[2]]
            first = min(d[0] for d in due)
            # of the instants that coincide with the first, the tie order decides
            te, which, _ = min(
                (d for d in due if d[0] <= first + SAME_INSTANT * d[2]), key=lambda d: d[1]
            )
            if which == 0:
                self._alpha_event(te)
            elif which == 1:
                self.last_timer_event = te
                # the next instant: T after this one (ns3: T/2 after an event in the hyper
                # stage, the author's rpr_hyper_time)
                period = p.rate_timer / 2 if self._ns3 and self._ns3_stage == 3 else p.rate_timer
                self._rate_next = te + period
                if not self._mlx:
                    self.timer_stage += 1
                self._increase(te, "increase_timer")
            else:
                self._decrease_cnp_arrived = False
                self._cut(te, self._alpha_at(te))
        self.t = t

    def _alpha_event(self, te: float) -> None:
        """The α grid's instant at ``te``: mellanox's update with a CNP in the period, or a
        pure decay (only visited when decays are logged)."""
        assert self._alpha_ref is not None
        g = self.params.g
        i = grid_count(self._alpha_ref, self.params.alpha_timer, te)
        if self._mlx and self._alpha_cnp_arrived and i >= self._alpha_pending_idx:
            i = self._alpha_pending_idx
            prev = self._alpha_base * (1 - g) ** max(0, i - 1 - self._alpha_base_idx)
            self._alpha_base, self._alpha_base_idx = (1 - g) * prev + g, i
            self._alpha_cnp_arrived = False
            self.last_alpha_update = te
        self._alpha_logged_idx = max(self._alpha_logged_idx, i)
        self._log(te, "alpha")
