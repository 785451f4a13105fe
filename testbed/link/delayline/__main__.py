"""``python -m testbed.link.delayline --config FILE``: the process the userspace backend starts.

This module owns the command line and the exit codes: 2 for a bad config, 1 when the socket or a
queue could not be set up (both before READY), else what :meth:`DelayLine.run` returns.
"""

from __future__ import annotations

import argparse
import sys

from testbed.link.delayline.config import Config, ConfigError
from testbed.link.delayline.loop import DelayLine


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.link.delayline",
        description="NFQUEUE delay line (run inside the router namespace).",
    )
    ap.add_argument("--config", required=True, help="JSON config file")
    args = ap.parse_args(argv)
    try:
        cfg = Config.load(args.config)
    except ConfigError as e:
        print(f"delayline: config error: {e}", file=sys.stderr)
        return 2
    line = DelayLine(cfg, config_path=args.config)
    try:
        line.setup()
    except OSError as e:
        print(f"delayline: setup failed: {e}", file=sys.stderr)
        return 1
    return line.run()


if __name__ == "__main__":
    sys.exit(main())
