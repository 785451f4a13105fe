"""The guest's console, split: boot messages (kept, shown with ``--verbose`` or when the boot
fails), the command's output (passed on as it comes) and the exit marker stage 2 prints."""

from __future__ import annotations

import contextlib
import time

from testbed.vm.job import GuestJob


class Console:
    """Splits the guest console into boot log, the command's output and the exit marker."""

    def __init__(self, job: GuestJob, out, verbose: bool) -> None:
        self.out, self.verbose = out, verbose
        self.phase = "boot"  # boot | command | done
        self.pending = b""
        self.boot = bytearray()
        self.exit_code: int | None = None
        self.started_at: float | None = None
        self.start = job.start_marker.encode()
        self.exit = job.exit_marker.encode()

    def _emit(self, data: bytes) -> None:
        # The guest's serial line ends lines with \r\n; a terminal here adds its own \r.
        data = data.replace(b"\r\n", b"\n")
        self.out.write(data)
        self.out.flush()

    def feed(self, data: bytes) -> None:
        self.pending += data
        while b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
            self._line(line + b"\n")
        # A partial line is shown at once (progress bars), unless it may become the marker.
        if self.phase == "command" and self.pending and not self._maybe_marker(self.pending):
            cut = len(self.pending) - self.pending.endswith(b"\r")  # a \r may precede a \n
            self._emit(self.pending[:cut])
            self.pending = self.pending[cut:]

    def _maybe_marker(self, part: bytes) -> bool:
        if self.exit in part:
            return True
        return any(part.endswith(self.exit[:i]) for i in range(1, len(self.exit)))

    def _line(self, line: bytes) -> None:
        text = line.strip()
        if self.phase == "boot":
            if text.endswith(self.start):  # after whatever the firmware left on the line
                self.phase, self.started_at = "command", time.monotonic()
                return
            self.boot += line
            if self.verbose:
                self._emit(line)
        elif self.phase == "command":
            if self.exit in text:
                if not text.startswith(self.exit):  # the command's last line had no newline
                    self._emit(line[: line.index(self.exit)] + b"\n")
                with contextlib.suppress(ValueError):
                    self.exit_code = int(text.partition(self.exit)[2])
                self.phase = "done"
                return
            self._emit(line)
        elif self.verbose:
            self._emit(line)

    def close(self) -> None:
        if self.pending and self.phase == "command":
            self._emit(self.pending)
        self.pending = b""

    def tail(self, n: int = 15) -> str:
        """The boot's last lines before the guest gave up (a kernel panic's trace left out)."""
        text = bytes(self.boot).decode(errors="replace").replace("\r", "")
        head, panic, rest = text.partition("Kernel panic")
        if panic:
            text = head + panic + rest.split("\n", 1)[0]
        lines = text.strip().splitlines()[-n:]
        return "; console:\n  " + "\n  ".join(lines) if lines else ""
