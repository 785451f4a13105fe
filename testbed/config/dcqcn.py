"""The scenario's DCQCN fields: a flow's variant and parameters as a user writes them,
checked and turned into :class:`testbed.core.dcqcn.DcqcnParams`.

    params: {T: 55us, K: 55us, N: 50us, g: 1/256, F: 5, B: 10MB, rai: 40mbit, rhai: 200mbit}

Parameters are in **real** units (a NIC's, the paper's): the scenario's ``dilation`` turns them
into the emulated ones (:func:`testbed.core.dcqcn.dilate`). A field left out keeps the variant's
default; ``B: off`` turns the byte counter off.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from testbed.config.fields import (
    Duration,
    FieldError,
    Fraction,
    Rate,
    Size,
    Strict,
    WorkloadModel,
)
from testbed.core.dcqcn import DcqcnParams, Variant, defaults, dilate


def _ratio(value: Any) -> float:
    """'1/256' or a number in (0, 1]."""
    examples = "examples: 1/256, 0.004"
    if isinstance(value, str) and "/" in value:
        num, _, den = value.partition("/")
        try:
            got = float(num) / float(den)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"{value!r} is not a ratio; {examples}") from None
    elif isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            got = float(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a ratio; {examples}") from None
    else:
        raise ValueError(f"{value!r} is not a ratio; {examples}")
    if not 0 < got <= 1:
        raise ValueError(f"{value!r} must be in (0, 1]; {examples}")
    return got


def _off_or_size(value: Any) -> Any:
    return None if value in ("off", False) else value


Ratio = Annotated[float, BeforeValidator(_ratio)]


class DcqcnParamsSpec(Strict):
    """What a scenario may set; None keeps the variant's default (real units)."""

    N: Duration | None = None  # CNP interval
    K: Duration | None = None  # α timer
    T: Duration | None = None  # rate-increase timer
    B: Annotated[Size | None, BeforeValidator(_off_or_size)] = None  # byte counter; off
    F: int | None = Field(default=None, ge=1, le=100)  # fast-recovery steps
    g: Ratio | None = None
    alpha0: Ratio | None = None
    rai: Rate | None = None
    rhai: Rate | None = None
    rate_reduce_period: Duration | None = None
    min_dec_fac: Fraction | None = None  # what a cut leaves of the rate: 50%, 95%
    min_rate: Rate | None = None
    clamp_target: bool | None = None
    cnp_per_port: bool | None = None


# scenario field -> DcqcnParams field
FIELDS = {
    "N": "cnp_interval", "K": "alpha_timer", "T": "rate_timer", "B": "byte_counter",
    "F": "fast_recovery_steps", "g": "g", "alpha0": "alpha0", "rai": "rai", "rhai": "rhai",
    "rate_reduce_period": "rate_reduce_period", "min_dec_fac": "min_dec_fac",
    "min_rate": "min_rate", "clamp_target": "clamp_target", "cnp_per_port": "cnp_per_port",
}  # fmt: skip


def resolve(variant: Variant, spec: DcqcnParamsSpec, dilation: float = 1.0) -> DcqcnParams:
    """The variant's defaults with what ``spec`` sets, in real units, then dilated by
    ``dilation`` into the testbed's (emulated) units."""
    given = spec.model_dump(exclude_unset=True)
    changes = {FIELDS[k]: v for k, v in given.items()}
    real = dataclasses.replace(defaults(variant), **changes)
    return dilate(real, dilation) if dilation != 1 else real


class DcqcnFlowSpec(Strict):
    """One DCQCN flow of a ``kind: dcqcn`` workload."""

    from_: str = Field(alias="from")
    to: str
    start: Duration = 0.0


class DcqcnSettings(Strict):
    """What every DCQCN flow of a workload or traffic entry shares."""

    variant: Literal["paper", "mellanox", "ns3"] = "paper"
    params: DcqcnParamsSpec = DcqcnParamsSpec()
    # the sender NIC's line rate in real units (None: twice the WAN's, so one flow can queue)
    line_rate: Rate | None = None
    size: Size = 1400  # datagram payload, bytes (no UDP GSO: the bottleneck marks each one)


def _positive_duration(v: float) -> float:
    if v <= 0:
        raise ValueError("a duration must be positive; examples: 20s, 500ms")
    return v


class DcqcnTraffic(DcqcnSettings):
    """One DCQCN flow as cross-traffic (``traffic: [{kind: dcqcn, ...}]``), beside bulk flows,
    collectives or training."""

    kind: Literal["dcqcn"]
    from_: str = Field(alias="from")
    to: str
    start: Duration = 0.0
    duration: Duration

    _d = field_validator("duration")(lambda cls, v: _positive_duration(v))


class DcqcnWorkload(DcqcnSettings, WorkloadModel):
    """``workload: kind: dcqcn``: DCQCN flows alone, each from its ``start`` to ``duration``
    (no ranks: a traffic-only run)."""

    kind: Literal["dcqcn"]
    flows: list[DcqcnFlowSpec] = Field(min_length=1)
    duration: Duration

    _d = field_validator("duration")(lambda cls, v: _positive_duration(v))

    @model_validator(mode="after")
    def _starts_before_the_end(self) -> DcqcnWorkload:
        for i, f in enumerate(self.flows):
            if f.start >= self.duration:
                raise FieldError(
                    f"workload.flows[{i}].start",
                    f"starts at {f.start:g} s, not before the workload's duration "
                    f"({self.duration:g} s)",
                )
        return self

    def as_traffic(self) -> list[DcqcnTraffic]:
        """Its flows as traffic entries (what the runner starts)."""
        shared = {k: getattr(self, k) for k in DcqcnSettings.model_fields}
        return [
            DcqcnTraffic.model_construct(
                kind="dcqcn",
                from_=f.from_,
                to=f.to,
                start=f.start,
                duration=self.duration - f.start,
                **shared,
            )  # validated already, as this workload's parts
            for f in self.flows
        ]
