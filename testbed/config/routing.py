"""How a scenario's gateways route over the WAN: static routes from the plan or BGP (FRR), the
multipath hash that spreads flows over a link's paths, and BGP's timers and BFD."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from testbed.config.fields import Duration, FieldError, Strict


class Ecmp(Strict):
    """How gateways spread flows over a link's paths: the kernel's multipath hash
    (``net.ipv4.fib_multipath_hash_policy``): ``l3`` addresses only (0, the kernel's default),
    ``l4`` addresses, protocol and ports (3, with those fields: ``testbed.plan.routes``)."""

    hash: Literal["l3", "l4"] = "l3"


class Bfd(Strict):
    """BFD on every BGP session: a packet every ``interval`` (FRR's transmit and receive
    interval, whole milliseconds, 10 ms to 60 s); down after ``multiplier`` missed ones."""

    interval: Duration = Field(0.05, ge=0.01, le=60.0)
    multiplier: int = Field(3, ge=2, le=255)

    @field_validator("interval")
    @classmethod
    def _whole_ms(cls, v: float) -> float:
        if abs(v * 1e3 - round(v * 1e3)) > 1e-6:
            raise ValueError(f"{v * 1e3:g} ms is not whole milliseconds (FRR's unit)")
        return v


class Bgp(Strict):
    """BGP between the gateways (eBGP per path): ``hold`` time (whole seconds, 3 to 65535;
    keepalives every third of it); ``bfd``: BFD on each session (none: only the hold timer
    notices a silent failure)."""

    bfd: Bfd | None = None
    hold: Duration = Field(9.0, ge=3.0, le=65535.0)

    @field_validator("hold")
    @classmethod
    def _whole_s(cls, v: float) -> float:
        if v != round(v):
            raise ValueError(f"{v:g} s is not whole seconds (BGP's unit)")
        return v


class Routing(Strict):
    """How the gateways route over the WAN: ``static`` routes from the plan (multipath over a
    link's paths), or ``bgp``: FRR (zebra, bgpd, bfdd) in each gateway, eBGP on every path,
    multipath over the paths (docs/multipath.md)."""

    mode: Literal["static", "bgp"] = "static"
    ecmp: Ecmp = Ecmp()
    bgp: Bgp | None = None

    @model_validator(mode="after")
    def _bgp_only_with_bgp(self) -> Routing:
        if self.bgp is not None and self.mode != "bgp":
            raise FieldError("bgp", "bgp settings apply to `mode: bgp` only")
        return self
