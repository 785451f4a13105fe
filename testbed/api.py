"""The public Python API: ``from testbed.api import Network``.

with Network.from_file("scenarios/quickstart.yaml") as tb:
    tb.run("east-h0", ["ping", "-c3", "west-h1"])
"""

from testbed.config.loading import load_scenario
from testbed.live.network import Network, Terminated
from testbed.live.protocol import LiveNetwork

__all__ = ["LiveNetwork", "Network", "Terminated", "load_scenario"]
