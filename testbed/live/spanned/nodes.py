"""Which Ray node takes each placed machine's part. PURE: Ray's node list in.

A machine name is a node's ``testbed-machine`` label (``testbed ray-node --machine NAME``) or its
address; the machine's underlay address is the node's ``testbed-underlay`` label, else its Ray
address; its ``testbed-netns`` label names a namespace that stands for the machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from testbed.core.errors import ScenarioError
from testbed.live.ray_common import RESOURCE

MACHINE_LABEL = "testbed-machine"
UNDERLAY_LABEL = "testbed-underlay"
NETNS_LABEL = "testbed-netns"


@dataclasses.dataclass
class MachineNode:
    """A Ray node that takes a placed machine's part."""

    machine: str
    node_id: str
    address: str  # underlay
    netns: str | None


def machine_nodes(ray_nodes: list[dict[str, Any]], machines: Sequence[str]) -> list[MachineNode]:
    """The node of each machine name (its ``testbed-machine`` label, else its address), among
    the live nodes that offer the ``testbed`` resource. PURE: Ray's node list in."""
    nodes = [n for n in ray_nodes if n.get("Alive") and n.get("Resources", {}).get(RESOURCE)]
    out = []
    for m in machines:
        found = [n for n in nodes if (n.get("Labels") or {}).get(MACHINE_LABEL) == m] or [
            n for n in nodes if n.get("NodeManagerAddress") == m
        ]
        if len(found) != 1:
            known = ", ".join(
                f"{(n.get('Labels') or {}).get(MACHINE_LABEL, '-')} ({n.get('NodeManagerAddress')})"
                for n in nodes
            )
            what = "no" if not found else f"{len(found)}"
            raise ScenarioError(
                f"placement.machines: {what} Ray node with label {MACHINE_LABEL}={m} or address "
                f"{m} offers the `{RESOURCE}` resource; testbed nodes: {known or 'none'} "
                "(join one with `testbed ray-node --machine NAME`)"
            )
        labels = found[0].get("Labels") or {}
        out.append(
            MachineNode(
                m,
                found[0]["NodeID"],
                labels.get(UNDERLAY_LABEL) or found[0]["NodeManagerAddress"],
                labels.get(NETNS_LABEL),
            )
        )
    return out
