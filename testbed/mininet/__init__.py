"""The project's links and scenarios for a user's own Mininet scripts.

* :class:`TestbedLink` (:mod:`testbed.mininet.link`): a Mininet link class with TCLink's keywords,
  emulated by the project's backends (``Mininet(topo, link=TestbedLink, ...)``);
* :func:`topo_from_scenario` (:mod:`testbed.mininet.topo`): a scenario file as a Mininet ``Topo``.

Importing this package needs Mininet (``pip install 'multicluster-testbed[mininet]'`` and the
Debian packages ``mininet net-tools``; ``scripts/setup.sh`` installs them).
"""

from __future__ import annotations

try:
    import mininet.link  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the machine
    raise ImportError(
        "testbed.mininet needs Mininet: pip install 'multicluster-testbed[mininet]' and the "
        "Debian packages mininet and net-tools (scripts/setup.sh installs them)"
    ) from exc

from testbed.mininet.link import TestbedLink
from testbed.mininet.topo import topo_from_scenario

__all__ = ["TestbedLink", "topo_from_scenario"]
