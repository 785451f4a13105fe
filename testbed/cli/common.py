"""What several verb modules share: the root check of the verbs that touch the kernel, the
``--engine`` option."""

from __future__ import annotations

import argparse
import os

from testbed.core.errors import TestbedError


def need_root(verb: str) -> None:
    if os.geteuid() != 0:
        raise TestbedError(
            f"`testbed {verb}` needs root (network namespaces, qdiscs); run it with sudo"
        )


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=["native", "mininet"],
        help="what builds the network (default: the scenario's `engine`, else native)",
    )
