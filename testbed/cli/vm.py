"""The ``testbed vm`` verb: only its registration; the options and the command are
:mod:`testbed.vm`'s own (``add_arguments``, ``cmd``), shared with ``python -m testbed.vm``."""

from __future__ import annotations

from typing import Any

from testbed import vm


def register(sub: Any) -> None:
    """Register ``vm`` on the CLI's sub-parsers."""
    s = sub.add_parser(
        "vm",
        help="run a command in a throwaway QEMU guest with a stock kernel (netem, fq, red, dctcp)",
    )
    vm.add_arguments(s)
    s.set_defaults(fn=vm.cmd)
