"""The scenario schema of a WAN that changes while the workload runs: a link's ``schedule``
(piecewise constant steps) or ``trace`` (a recorded link replayed), the scenario's ``faults``
(blackhole, link_down, reset, flap, burst_loss, partition, gateway_crash) and its ``traffic``
(bulk TCP flows beside or instead of the workload). Times are seconds from the scenario's clock
origin (docs/faults.md); the Scenario checks which links, clusters and hosts they name.

The timeline these expand into (every change at its time, per WAN direction) is
testbed.plan.timeline's job; this module only says what a user may write.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from testbed.config.fields import Buffer, Duration, FieldError, Fraction, Rate, Strict

Direction = Literal["forward", "reverse", "both"]  # forward: between[0] -> between[1]
MIN_TRACE_BIN = 0.01  # s: a shaper changed more often than this is not applied on time


def _positive(v: float, what: str, example: str) -> float:
    if v <= 0:
        raise ValueError(f"{what} must be positive; example: {example}")
    return v


class DirectionSettings(Strict):
    """Settings of a WAN direction, each optional: what a schedule step changes, what a link's
    ``reverse`` overrides."""

    rate: Rate | None = None
    delay: Duration | None = None
    jitter: Duration | None = None
    loss: Fraction | None = None
    reorder: Fraction | None = None
    buffer: Buffer | None = None


SETTINGS = tuple(DirectionSettings.model_fields)


class ScheduleStep(DirectionSettings):
    """From ``at`` on, the named settings of the link (one direction or both); ``restore: true``
    alone returns to the link's configured settings."""

    at: Duration
    direction: Direction = "both"
    restore: bool = False

    @model_validator(mode="after")
    def _something_changes(self) -> ScheduleStep:
        given = [f for f in SETTINGS if getattr(self, f) is not None]
        if self.restore and given:
            raise ValueError(
                f"a step with restore: true sets nothing else (it also sets {', '.join(given)}); "
                "split it into two steps"
            )
        if not self.restore and not given:
            raise ValueError(
                f"a schedule step changes at least one of {', '.join(SETTINGS)} or says "
                "restore: true; example: {at: 10s, rate: 300mbit}"
            )
        return self


class LinkTrace(Strict):
    """A recorded link replayed on the WAN link: its rate (and, for csv, delay and loss) changed
    every ``bin``."""

    file: str  # relative to the scenario file's directory
    format: Literal["mahimahi", "pensieve", "csv"]
    direction: Direction = "forward"
    scale: float = 1.0  # rate multiplier
    bin: Duration = 0.1
    loop: bool = True  # false: hold the last bin's value at the end

    _scale = field_validator("scale")(lambda cls, v: _positive(v, "a trace's scale", "scale: 10"))

    @field_validator("bin")
    @classmethod
    def _bin(cls, v: float) -> float:
        if v < MIN_TRACE_BIN:
            raise ValueError(
                f"a trace bin below {MIN_TRACE_BIN * 1e3:g}ms cannot be applied on time; "
                "examples: 100ms, 1s"
            )
        return v


class After(Strict):
    """A time relative to the workload: ``offset`` after iteration (or step) ``iteration``
    starts (0 = the first measured one)."""

    iteration: int = Field(ge=0)
    offset: Duration = 0.0


class _Timed(Strict):
    at: Duration | None = None
    after: After | None = None

    @model_validator(mode="after")
    def _one_start(self) -> _Timed:
        if (self.at is None) == (self.after is None):
            raise ValueError(
                "a fault starts either `at` a time or `after` an iteration, exactly one; "
                "examples: at: 12s, or after: {iteration: 3, offset: 50ms}"
            )
        return self


def _duration(v: float) -> float:
    return _positive(v, "a fault's duration", "duration: 2s")


class Blackhole(_Timed):
    """Every packet of the link (in ``direction``) silently dropped for ``duration``."""

    kind: Literal["blackhole"]
    link: str
    duration: Duration
    direction: Direction = "both"
    _d = field_validator("duration")(lambda cls, v: _duration(v))


class LinkDown(_Timed):
    """The gateways' WAN ports of the link down for ``duration`` (routes withdrawn, ICMP
    unreachable to senders), then up with their routes re-installed."""

    kind: Literal["link_down"]
    link: str
    duration: Duration
    _d = field_validator("duration")(lambda cls, v: _duration(v))


class Reset(_Timed):
    """Every TCP connection crossing the link is reset: for ``duration`` each TCP segment that
    crosses it is answered with a RST (and dropped)."""

    kind: Literal["reset"]
    link: str
    duration: Duration = 1.0
    _d = field_validator("duration")(lambda cls, v: _duration(v))


class Flap(_Timed):
    """``count`` times: the link down for ``down``, then up for ``up`` (as link_down)."""

    kind: Literal["flap"]
    link: str
    down: Duration
    up: Duration
    count: int = Field(1, ge=1, le=10000)
    _d = field_validator("down", "up")(
        lambda cls, v: _positive(v, "a flap's down and up", "down: 500ms, up: 3s")
    )


class BurstLoss(_Timed):
    """Gilbert-Elliott loss for ``duration``: ``p`` the chance per packet of going from the good
    state to the bad one, ``r`` back; every packet in the bad state is lost."""

    kind: Literal["burst_loss"]
    link: str
    duration: Duration
    p: Fraction
    r: Fraction
    direction: Direction = "both"
    _d = field_validator("duration")(lambda cls, v: _duration(v))

    @field_validator("r")
    @classmethod
    def _leaves_bad_state(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("r = 0% would never leave the bad state (a blackhole); use r > 0")
        return v


class Partition(_Timed):
    """No packet between clusters of different ``groups`` for ``duration`` (a blackhole on
    every WAN link joining two groups)."""

    kind: Literal["partition"]
    groups: list[list[str]] = Field(min_length=2)
    duration: Duration
    _d = field_validator("duration")(lambda cls, v: _duration(v))


class GatewayCrash(_Timed):
    """The cluster's gateway stops forwarding and loses its queues (all its ports down) until
    ``restore_after`` (never, when absent), then comes back with its routes."""

    kind: Literal["gateway_crash"]
    cluster: str
    restore_after: Duration | None = None
    _d = field_validator("restore_after")(
        lambda cls, v: v if v is None else _positive(v, "restore_after", "restore_after: 10s")
    )


Fault = Annotated[
    Blackhole | LinkDown | Reset | Flap | BurstLoss | Partition | GatewayCrash,
    Field(discriminator="kind"),
]
FAULT_KINDS = (
    "blackhole",
    "link_down",
    "reset",
    "flap",
    "burst_loss",
    "partition",
    "gateway_crash",
)


class BulkFlow(Strict):
    """One bulk TCP flow from host ``from`` to host ``to``; its goodput over time is recorded."""

    kind: Literal["bulk"]
    from_: str = Field(alias="from")
    to: str
    congestion: str | None = None  # None: the sending cluster's
    start: Duration = 0.0
    duration: Duration

    _d = field_validator("duration")(
        lambda cls, v: _positive(v, "a flow's duration", "duration: 60s")
    )


def fault_field_error(i: int, field: str, message: str) -> FieldError:
    return FieldError(f"faults[{i}].{field}", message)
