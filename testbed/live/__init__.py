"""The live network: built from a scenario on one machine (:class:`Network`) or across the
machines of a Ray cluster (:class:`SpannedNetwork`), both a :class:`LiveNetwork`; the RTT
calibration at bring-up and the link self-check that any run can call."""

from testbed.live.network import Network, Terminated
from testbed.live.protocol import LiveNetwork
from testbed.live.spanned import SpannedNetwork

__all__ = ["LiveNetwork", "Network", "SpannedNetwork", "Terminated"]
