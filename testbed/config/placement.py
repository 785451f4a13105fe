"""Where a scenario's clusters run when they span several machines (``placement:``): a machine
per cluster and the MTU of the underlay between the machines."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from testbed.config.fields import Strict

MACHINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,62}$")


class Placement(Strict):
    """Clusters on machines (``testbed.live.spanned`` builds them): ``machines`` maps every
    cluster to a machine (a Ray node label or address); only WAN wires cross machines, over
    VXLAN cables. ``underlay_mtu``: the MTU between the machines; below 1550 every testbed
    interface gets 1450 (the cable's 50 bytes)."""

    machines: dict[str, str]
    underlay_mtu: int = Field(1500, ge=1280, le=9216)

    @field_validator("machines")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for cluster, machine in v.items():
            if not MACHINE_NAME.match(str(machine)):
                raise ValueError(
                    f"{cluster}: {machine!r} is not a machine name; allowed: letters, digits "
                    "and . _ : - (a Ray node label or an address), at most 63 characters"
                )
        return v
