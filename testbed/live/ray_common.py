"""What every use of Ray here shares: importing it (an optional extra), connecting to a cluster
(one error line when there is none), the resource a testbed machine offers, where a node keeps
files, and a node's identity in the results."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from testbed.core.errors import TestbedError, UsageError

RESOURCE = "testbed"  # a machine that measures offers one: one point or topology part at a time
NODE_DIR = Path("/var/tmp/testbed-ray")  # a node's files: runs' large files, ranks' copies


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise TestbedError(
            "--ray needs Ray: pip install 'multicluster-testbed[ray]' (scripts/setup.sh does)"
        ) from None
    return ray


def connect_ray(address: str) -> Any:
    """Ray, connected to the cluster at ``address`` (``auto``: the one this machine is part of);
    a no-op when connected already. Without a cluster Ray raises ``ConnectionError``, whose
    advice (``--address``, ``RAY_ADDRESS``) is Ray's own; the user gets how to start one here."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except ConnectionError as exc:
        what = str(exc).split(". ")[0].rstrip(".") or "no Ray cluster to connect to"
        raise UsageError(
            f"{what} (address {address}); start one with `testbed ray-node --head` (other "
            "machines join with `testbed ray-node --address HOST:PORT`), or point --ray at a "
            "running head's HOST:PORT"
        ) from None
    return ray


def node_identity() -> dict[str, Any]:
    """What the results record of the machine a run ran on."""
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "kernel": os.uname().release,
        "cpu": cpu,
        "cpus": os.cpu_count(),
    }
