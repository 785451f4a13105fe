"""``python -m testbed.link.delayline``: the process the userspace backend starts.

* ``--config FILE``: one delay line in the current namespace (run it with ``ip netns exec``);
* ``--line NS CONFIG LOG`` (repeatable): from the initial namespace, one line per wire
  namespace, all forked from this one interpreter (:mod:`.launch`: the READY/FAILED protocol);
  ``--rules NS FILE``: the line in NS applies these iptables rules itself before READY;
  ``--wait``: fork only after a line on stdin (the supervisor's go, once the namespaces exist).

This module owns the command line and the exit codes: 2 for a bad config (or bad arguments), 1
when the socket or a queue could not be set up (both before READY), else what
:meth:`DelayLine.run` returns.
"""

from __future__ import annotations

import argparse
import sys

from testbed.link.delayline.launch import launch, run_line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.link.delayline",
        description="NFQUEUE delay line: here (--config), or one per namespace (--line).",
    )
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--config", help="JSON config file (one line, in this namespace)")
    how.add_argument(
        "--line",
        nargs=3,
        action="append",
        metavar=("NETNS", "CONFIG", "LOG"),
        help="a line in namespace NETNS, its config and its stderr file (repeatable)",
    )
    ap.add_argument(
        "--rules",
        nargs=2,
        action="append",
        metavar=("NETNS", "FILE"),
        help="with --line: iptables-restore FILE in NETNS once its line is bound, before READY",
    )
    ap.add_argument(
        "--wait",
        action="store_true",
        help="with --line: wait for a line on stdin (the namespaces exist) before forking",
    )
    args = ap.parse_args(argv)
    if (args.rules or args.wait) and not args.line:
        ap.error("--rules and --wait go with --line")
    if args.line:
        rules = dict(args.rules or [])
        lines = [(ns, config, log) for ns, config, log in args.line]
        return launch(lines, rules, wait=args.wait)
    return run_line(args.config)


if __name__ == "__main__":
    sys.exit(main())
