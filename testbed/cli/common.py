"""What several verb modules share: the root check of the verbs that touch the kernel."""

from __future__ import annotations

import os

from testbed.core.errors import TestbedError


def need_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            f"`testbed {verb}` needs root (network namespaces, qdiscs); run it with sudo"
        )
