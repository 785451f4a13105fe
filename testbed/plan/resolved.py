"""The network a run was built with, as rows: one per WAN direction (each path of a multipath
link its own), in plan order. PURE. The runner writes them to network.parquet, so that the
analysis reads the network's facts (rate, delay, RTT, buffer, MTU, goodput ceiling) from the
results directory instead of re-deriving them from the scenario's text."""

from __future__ import annotations

import json
from typing import Any

from testbed.config.scenario import Scenario
from testbed.core.direction import Direction
from testbed.core.units import format_buffer
from testbed.plan.model import NetworkPlan


def network_rows(plan: NetworkPlan, scenario: Scenario) -> list[dict[str, Any]]:
    """One row per WAN direction (columns: testbed.core.results, table ``network``)."""
    delays = {d.name: d.delay for d in plan.wan}
    out = []
    for d in plan.wan:
        name = Direction.parse(d.name)
        back = delays.get(str(name.reverse()), d.delay)
        out.append(
            {
                "direction": d.name,
                "link": name.link,
                "path": name.path,
                "src": d.src,
                "dst": d.dst,
                "rate_bps": float(d.rate),
                "goodput_factor": plan.goodput_factor,
                "goodput_bps": d.rate * plan.goodput_factor,
                "delay_s": d.delay,
                "jitter_s": d.jitter,
                "loss": d.loss,
                "reorder": d.reorder,
                "buffer_bytes": d.buffer,
                "bdp_bytes": d.bdp,
                "buffer": _buffer_spec(scenario, name),
                "aqm": json.dumps(d.aqm.model_dump(mode="json")) if d.aqm is not None else None,
                "mtu": plan.interface_mtu,
                "rtt_s": d.delay + back,
            }
        )
    return out


def _buffer_spec(scenario: Scenario, name: Direction) -> str | None:
    """The buffer as the scenario wrote it: ``1bdp`` or ``250000B``."""
    for link in scenario.wan_paths:
        if set(link.between) == {name.src, name.dst} and link.path == name.path:
            kind, value = link.direction(reverse=link.between[0] != name.src)["buffer"]
            return format_buffer(kind, value)
    return None
