"""``backend: tclink``: Mininet's own ``TCLink`` on the WAN links, unchanged, for side-by-side
comparison with the project's backends (engine mininet only).

Each WAN direction's parameters go to Mininet's ``TCIntf.config`` on the sending gateway's
interface, as a Mininet user would write them: ``bw`` in Mbit/s (Mininet ignores more than 1000
with a log line, and the link then runs unshaped), ``delay``/``jitter`` as netem strings,
``loss`` in percent, ``max_queue_size`` = the buffer in 1514-byte packets (netem's limit: the
bottleneck buffer and the store of every delayed packet at once; without netem Mininet cannot
set it, and the buffer is its HTB leaf's default, txqueuelen packets). The engine creates those veth
pairs as ``TCLink`` (:class:`testbed.net.engines.MininetEngine`); this backend only refuses
what Mininet would silently get wrong and renders the clusters' fabric like the others.
"""

from __future__ import annotations

from typing import ClassVar

from testbed.core.errors import UnsupportedError
from testbed.link.base import LinkBackend
from testbed.plan.model import Impairment, NetworkPlan, WanDirection
from testbed.plan.render import tclink_params


class TclinkBackend(LinkBackend):
    """The WAN's queues are Mininet's (HTB + netem leaf per TCLink end)."""

    name: ClassVar[str] = "tclink"

    def __init__(self, reason: str = "", netem: bool = False) -> None:
        super().__init__(reason)
        self.netem = netem

    def check(self, plan: NetworkPlan) -> None:
        impaired = [d.name for d in plan.wan if d.delay or d.jitter or d.loss]
        if impaired and not self.netem:
            raise UnsupportedError(
                f"backend tclink (Mininet's TCLink, unchanged): {', '.join(impaired)} need "
                "sch_netem for delay/jitter/loss, which this kernel lacks (unsupported on this "
                "kernel: netem); Mininet would print 'Specified qdisc kind is unknown' and run "
                "them with no delay. Use `backend: auto` (the project's links) or `testbed vm`"
            )
        unsupported = [d.name for d in plan.wan if d.aqm is not None or d.reorder or d.traced]
        if unsupported or any(d.changes_later for d in plan.wan):
            raise UnsupportedError(
                "backend tclink takes rate, delay, jitter, loss and buffer only (TCLink's own "
                "parameters); aqm, reorder, traces, schedules and faults need the project's "
                f"backends (`backend: auto`); directions: {', '.join(unsupported) or 'all'}"
            )

    def mininet_link_params(self, d: WanDirection) -> dict:
        return tclink_params(d, self.netem)

    def owns_queue(self, d: WanDirection) -> bool:
        return True  # Mininet's TCIntf holds it: the base renders no WAN shaper

    def set_rate(self, changes: dict[str, tuple[int, int]]) -> None:
        raise UnsupportedError("backend tclink: change a TCLink with Mininet's intf.config()")

    def set_impairments(self, changes: dict[str, Impairment]) -> None:
        if changes:
            raise UnsupportedError("backend tclink: change a TCLink with Mininet's intf.config()")
