"""A scenario's clusters: how many hosts, their fabric to the cluster gateway, and the TCP
settings of their namespaces (the scenario's, overridden per cluster), with the name rules that
the kernel's interface names impose."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator

from testbed.config.fields import Duration, Rate, Strict
from testbed.core.units import parse_size

MAX_CLUSTERS = 16
MAX_HOSTS_PER_CLUSTER = 64
# Cluster names become host names (east-h0), namespace labels (wan-east-west) and interface names
# (w-east, at most 15 characters in the kernel): so a letter then letters and digits, no '-' (which
# would make wan-a-b-c ambiguous), at most 12 characters.
CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9]*$")
CLUSTER_NAME_MAX = 12
CONGESTION_NAME = re.compile(r"^[a-z0-9_]{1,16}$")


def _auto_or_size(v: Any) -> Any:
    if v == "auto":
        return v
    try:
        size = parse_size(v)
    except ValueError:
        raise ValueError(f"{v!r} is neither auto nor a size; examples: auto, 4MiB, 64MB") from None
    if size <= 0:
        raise ValueError("a buffer size must be positive; examples: auto, 4MiB, 64MB")
    return size


AutoSize = Annotated[Any, BeforeValidator(_auto_or_size)]


class Fabric(Strict):
    """Host <-> cluster-gateway links. Unshaped unless a rate is given."""

    rate: Rate | None = None
    delay: Duration = 0.0


class TcpSettings(Strict):
    """TCP stack settings of a host namespace. ``None`` in a cluster override means 'inherit'."""

    congestion: str = "cubic"
    ecn: bool = False
    rmem: AutoSize = "auto"
    wmem: AutoSize = "auto"
    # Linux resets cwnd after an idle RTO; collectives idle between iterations, so on a long
    # link every iteration pays slow start again. Kernel default (true) unless turned off.
    slow_start_after_idle: bool = True
    # net.ipv4.tcp_retries2: how many RTO backoffs before an established connection with
    # unacknowledged data gives up (None: the kernel's, 15, about 924 s).
    retries2: int | None = Field(default=None, ge=1, le=255)
    # TCP_USER_TIMEOUT on every TCP socket a rank holds (gloo sets none): how long sent data may
    # stay unacknowledged before the connection fails with ETIMEDOUT. 0: the kernel's (off).
    user_timeout: Duration = 0.0

    @field_validator("congestion")
    @classmethod
    def _congestion_name(cls, v: str) -> str:
        if not CONGESTION_NAME.match(v):
            raise ValueError(f"{v!r} is not a congestion control name; examples: cubic, bbr, reno")
        return v


class TcpOverride(Strict):
    congestion: str | None = None
    ecn: bool | None = None
    rmem: AutoSize | None = None
    wmem: AutoSize | None = None
    slow_start_after_idle: bool | None = None
    retries2: int | None = Field(default=None, ge=1, le=255)
    user_timeout: Duration | None = None

    _congestion_name = field_validator("congestion")(
        lambda cls, v: v if v is None else TcpSettings._congestion_name(v)
    )

    def apply(self, base: TcpSettings) -> TcpSettings:
        changes = {k: v for k, v in self.model_dump().items() if v is not None}
        return base.model_copy(update=changes)


class Cluster(Strict):
    hosts: int = Field(ge=1, le=MAX_HOSTS_PER_CLUSTER)
    fabric: Fabric = Fabric()
    tcp: TcpOverride | None = None
