"""What several verb modules share: the root check of the verbs that touch the kernel, and the
options that run, plan and validate take alike (``--engine``, ``--set``, ``--selfcheck``)."""

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


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``--set PATH=VALUE``, repeatable: a scenario field overridden (run, plan, validate)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field, e.g. --set wan[0].delay=50ms (repeatable)",
    )


def add_selfcheck_option(parser: argparse.ArgumentParser, use: str) -> None:
    """``--selfcheck SECONDS`` (default 1.0): the link self-check's bulk TCP per WAN direction;
    ``use`` ends its help (what the command does with it)."""
    parser.add_argument(
        "--selfcheck",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help=f"seconds of bulk TCP per WAN direction in the link self-check, {use} "
        "(default: %(default)s)",
    )
