"""What every use of Ray here shares: importing it (an optional extra), the resource a testbed
machine offers, where a node keeps files, and a node's identity in the results."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from testbed.core.errors import TestbedError

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
