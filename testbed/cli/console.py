"""The one place the CLI's rich consoles are made.

Off a terminal (CI logs, pipes, the `testbed vm` guest) rich falls back to 80 columns and cuts
every table cell to fit (``1.2… s``); these consoles are as wide as their longest line instead,
so tables keep their natural width. On a terminal rich measures the terminal as usual. Values
interpolated into markup go through :func:`escape` (``[flat]`` is data, not a style tag).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.markup import escape as _escape

OFF_TERMINAL_WIDTH = 10_000  # wider than any line the CLI prints: never wrap or cut


def make_console(stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    return Console(stderr=stderr, width=None if tty else OFF_TERMINAL_WIDTH)


def escape(value: Any) -> str:
    """``value`` as text that rich markup prints literally."""
    return _escape(str(value))
