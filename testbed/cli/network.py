"""The network verbs' command lines: ``validate``, ``plan`` (pure: the scenario and what would
be built; :mod:`~testbed.cli.plan_view`), ``up``, ``exec``, ``ls``, ``down``, ``clean`` (live
testbeds on this machine; :mod:`~testbed.cli.lifecycle`) and ``doctor`` (what this kernel
offers; :mod:`~testbed.cli.doctor`). Their order here is their order in ``testbed --help``.
"""

from __future__ import annotations

import argparse
from typing import Any

from testbed.cli.common import add_engine_option, add_selfcheck_option, add_set_option
from testbed.cli.doctor import cmd_doctor
from testbed.cli.lifecycle import cmd_clean, cmd_down, cmd_exec, cmd_ls, cmd_up
from testbed.cli.plan_view import cmd_plan, cmd_validate
from testbed.plan.graph import GRAPHS


def register(sub: Any) -> None:
    """Register the network verbs on the CLI's sub-parsers."""
    s = sub.add_parser(
        "validate",
        help="check a scenario file as `testbed run` would: every sweep point, the expectations",
    )
    s.add_argument("file", help="the scenario file (YAML)")
    add_set_option(s)
    s.add_argument("--json", action="store_true", help="print the result as JSON (docs/json.md)")
    s.set_defaults(fn=cmd_validate)
    s = sub.add_parser(
        "plan",
        help="print what a run would build and do (network, ranks, sweep, predictions, "
        "duration, backend), without touching the kernel",
    )
    s.add_argument("file", help="the scenario file (YAML)")
    add_set_option(s)
    s.add_argument(
        "--point",
        type=int,
        metavar="K",
        help="only the K-th run of the sweep (0-based, points x repeats; as `testbed run`)",
    )
    add_engine_option(s)
    add_selfcheck_option(s, "as `testbed run` would spend it (for the estimate)")
    s.add_argument(
        "--graph",
        choices=GRAPHS,
        help="print the topology as a Mermaid or Graphviz dot graph instead (clusters, "
        "gateways, WAN links with their settings)",
    )
    s.add_argument("--json", action="store_true", help="print the plan as JSON (docs/json.md)")
    s.set_defaults(fn=cmd_plan)
    s = sub.add_parser("up", help="build a network and leave it running")
    s.add_argument("file", help="the scenario file (YAML)")
    s.add_argument("--name", help="testbed name (default: the scenario's name)")
    s.add_argument(
        "--foreground",
        action="store_true",
        help="stay in the foreground and tear down on Ctrl-C/SIGTERM",
    )
    add_engine_option(s)
    s.add_argument(
        "--cli",
        action="store_true",
        help="engine mininet: Mininet's own CLI (`west_h0 ping east_h1`); tears down on exit",
    )
    s.set_defaults(fn=cmd_up)
    s = sub.add_parser(
        "exec",
        help="run a command inside a host: exec NAME HOST -- ARGV...",
        usage="testbed exec NAME HOST -- ARGV...",
        description="Run ARGV inside HOST's network namespace of the running testbed NAME, "
        "e.g. `testbed exec quickstart east-h0 -- ping -c3 west-h1`. The `--` ends testbed's "
        "own options: what follows is the command and its arguments, passed as written (its "
        "own options too, like -c3).",
    )
    s.add_argument("name", metavar="NAME", help="the testbed's name (testbed ls lists them)")
    s.add_argument("host", metavar="HOST", help="a host of it, e.g. east-h0")
    s.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="-- ARGV...",
        help="the command and its arguments, after `--`",
    )
    s.set_defaults(fn=cmd_exec)
    s = sub.add_parser("ls", help="list testbeds on this machine")
    s.add_argument("--json", action="store_true", help="print the list as JSON (docs/json.md)")
    s.set_defaults(fn=cmd_ls)
    s = sub.add_parser("down", help="tear a testbed down")
    s.add_argument("name", help="the testbed's name (testbed ls lists them)")
    s.set_defaults(fn=cmd_down)
    s = sub.add_parser("clean", help="remove what crashed testbeds left behind")
    s.add_argument("--all", action="store_true", help="also remove persistent `up` testbeds")
    s.set_defaults(fn=cmd_clean)
    s = sub.add_parser("doctor", help="what this kernel offers and which backend is used")
    s.add_argument(
        "file", nargs="?", help="a scenario: also say which backend it gets and what it lacks"
    )
    s.add_argument("--json", action="store_true", help="print the findings as JSON (docs/json.md)")
    s.set_defaults(fn=cmd_doctor)
