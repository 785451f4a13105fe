"""The ``testbed`` command: the parser, one module per group of verbs, and the one ``main``.

Each verb module (:mod:`~testbed.cli.network`, :mod:`~testbed.cli.steer`,
:mod:`~testbed.cli.run`, :mod:`~testbed.cli.vm`, :mod:`~testbed.cli.report`) exposes
``register(subparsers)``, which adds its verbs and sets ``fn`` to the function that runs one.
``main`` is the only place errors are turned into text and exit codes: a
:class:`~testbed.core.errors.TestbedError` is printed as one ``error:`` line through the CLI's
console, without a traceback unless ``--debug``.

Exit codes: 0 success, 1 a run or check failed, 2 bad input (scenario, arguments), 125 the
`testbed vm` guest itself failed, 127 command not found in the guest, 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib.metadata

from rich.text import Text

from testbed.cli import network, report, run, steer, vm
from testbed.cli.console import make_console
from testbed.core.errors import TestbedError

DESCRIPTION = (
    "Emulate a multi-datacenter network (clusters in Linux namespaces joined by slow, long, lossy "
    "WAN links) and run real PyTorch collectives across it."
)
# The order of the help's verb list: network verbs, steering a live one, run, vm, then report
# and compare.
VERB_MODULES = (network, steer, run, vm, report)


def _version() -> str:
    try:
        return importlib.metadata.version("multicluster-testbed")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="testbed", description=DESCRIPTION)
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for module in VERB_MODULES:
        module.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    err = make_console(stderr=True)
    try:
        return args.fn(args)
    except TestbedError as exc:
        if args.debug:
            raise
        # Text, not markup: the message is data ("[c10d]" must print as written).
        err.print(Text.assemble(("error:", "bold red"), f" {exc}"), soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted; torn down")
        return 130
