"""One topology over several machines (``placement:``): an agent per machine, a driver.

The driver (:class:`SpannedNetwork`, :mod:`.driver`) reserves the placed machines in a Ray
cluster and starts a :class:`MachineAgent` actor on each (:mod:`.agent`; :mod:`.nodes` finds the
Ray node of a machine name). Each agent builds its machine's part of the plan; the driver
compensates the emulated delays from measured round trips. Commands in hosts go to the agent of
the host's machine, through objects shaped like a Popen (:mod:`.remote`): the link self-check
and the rank launcher run unchanged across machines. Teardown is per machine (each agent's
``down``); an agent dies with its driver (Ray ends an owner's actors), and ``testbed clean`` on
each machine then removes its part like any testbed whose owner is gone.
"""

from testbed.live.spanned.agent import MachineAgent
from testbed.live.spanned.driver import BackendInfo, SpannedNetwork, split_round_trips
from testbed.live.spanned.nodes import (
    MACHINE_LABEL,
    NETNS_LABEL,
    UNDERLAY_LABEL,
    MachineNode,
    machine_nodes,
)

__all__ = [
    "MACHINE_LABEL",
    "NETNS_LABEL",
    "UNDERLAY_LABEL",
    "BackendInfo",
    "MachineAgent",
    "MachineNode",
    "SpannedNetwork",
    "machine_nodes",
    "split_round_trips",
]
