"""The public Python API: ``from testbed.api import Testbed``.

with Testbed.from_file("scenarios/quickstart.yaml") as tb:
    tb.run("east-h0", ["ping", "-c3", "west-h1"])
"""

from testbed.config.loading import load_scenario
from testbed.run.testbed import Terminated, Testbed

__all__ = ["Terminated", "Testbed", "load_scenario"]
