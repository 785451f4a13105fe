"""A scenario's ``traffic:`` flows, live: one bulk TCP flow per ``BulkFlow`` (traffic.bulk
``sink`` in the receiving host, ``send`` in the sending one), started at the clock origin +
its ``start`` for its ``duration``, its goodput sampled every ``INTERVAL`` by the receiver
(the ``flows_goodput`` table, docs/results.md).

The receivers start first and report READY (testbed.net.procs); a thread waits for the origin
(testbed.run.events.OriginClock) and starts each sender at its time. Every process is started
with ``Testbed.popen`` (recorded, so teardown stops what is left) and stopped by :meth:`stop`.
A sender starts a Python interpreter, so its first bytes leave some 0.1-0.3 s after its start
time; the samples carry their own unix times.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.dynamics import BulkFlow
from testbed.core.errors import NetError
from testbed.net import procs
from testbed.run.events import Instant, OriginClock

if TYPE_CHECKING:
    from testbed.run.testbed import Testbed

BASE_PORT = 5300  # flow i listens on BASE_PORT + i (below the kernel's ephemeral range)
INTERVAL = 0.1  # s between two goodput samples
END_GRACE = 30.0  # s after its planned end a flow may take to drain and close


class BulkFlows:
    """The flows of one run; ``start()``, then ``wait()`` (traffic-only runs) or ``stop()``."""

    def __init__(
        self, tb: Testbed, flows: list[BulkFlow], clock: OriginClock, run_dir: Path
    ) -> None:
        self.tb = tb
        self.flows = flows
        self.clock = clock
        self.run_dir = run_dir
        self.receivers: list[subprocess.Popen] = []
        self.senders: dict[int, subprocess.Popen] = {}
        self.started: dict[int, Instant] = {}
        self.errors: list[str] = []
        # flows still sending when stop() came (the workload ended before their planned end)
        self.cut: list[int] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._start_senders, name="flows", daemon=True)

    def samples_path(self, i: int) -> Path:
        return self.run_dir / f"flow-{i}.jsonl"

    def start(self) -> BulkFlows:
        """Start every receiver (READY), then the thread that starts the senders."""
        for i, flow in enumerate(self.flows):
            argv = [sys.executable, "-m", "traffic.bulk", "sink", "--port", str(BASE_PORT + i)]
            argv += ["--out", str(self.samples_path(i)), "--interval", str(INTERVAL)]
            with open(self.run_dir / f"flow-{i}-sink.log", "w") as err:
                proc = self.tb.popen(
                    flow.to, argv, what=f"flow {i} receiver", stdout=subprocess.PIPE, stderr=err
                )
            self.receivers.append(proc)
            got = procs.wait_ready(proc)
            if not got:
                raise NetError(
                    f"traffic[{i}]: the receiver on {flow.to} did not start ({got.reason})"
                )
        if self.flows:
            self._thread.start()
        return self

    def _start_senders(self) -> None:
        origin = self.clock.wait_origin()
        if origin is None:
            return
        for i, flow in sorted(enumerate(self.flows), key=lambda f: f[1].start):
            while not self._stopping:
                left = origin.mono + flow.start - time.monotonic()
                if left <= 0:
                    break
                self.clock.wait_change(min(left, 0.25))
            if self._stopping:
                return
            argv = [sys.executable, "-m", "traffic.bulk", "send", "--host", flow.to]
            argv += ["--port", str(BASE_PORT + i), "--duration", str(flow.duration)]
            if flow.congestion:
                argv += ["--congestion", flow.congestion]
            with open(self.run_dir / f"flow-{i}-send.log", "w") as out:
                self.started[i] = Instant.now()
                self.senders[i] = self.tb.popen(
                    flow.from_, argv, what=f"flow {i} sender", stdout=out, stderr=subprocess.STDOUT
                )

    def end_mono(self, origin: Instant) -> float:
        """When the last flow is planned to end (monotonic)."""
        return origin.mono + max((f.start + f.duration for f in self.flows), default=0.0)

    def wait(self) -> None:
        """Until every flow ended (or END_GRACE after the last one's planned end)."""
        origin = self.clock.wait_origin()
        if origin is None:
            return
        deadline = self.end_mono(origin) + END_GRACE
        while time.monotonic() < deadline:
            if len(self.senders) == len(self.flows) and all(
                p.poll() is not None for p in [*self.senders.values(), *self.receivers]
            ):
                return
            time.sleep(0.1)
        self.errors.append(f"traffic did not end within {END_GRACE:.0f}s of its planned end")

    def stop(self) -> None:
        """Stop the sender thread and every process still running; note the failed senders."""
        self._stopping = True
        self.clock.wake()
        if self._thread.is_alive():
            self._thread.join()
        for i, p in self.senders.items():
            running = p.poll() is None
            if running:
                self.cut.append(i)
            code = procs.stop(p)
            if not running and code != 0:
                said = ""
                with contextlib.suppress(OSError):
                    said = (self.run_dir / f"flow-{i}-send.log").read_text().strip()[-300:]
                self.errors.append(f"traffic[{i}] sender exited with code {code}: {said}")
        for p in self.receivers:
            procs.stop(p)
            if p.stdout is not None:
                p.stdout.close()

    def rows(self) -> list[dict[str, Any]]:
        """The goodput samples of every flow (flows_goodput rows, without run_id)."""
        out = []
        for i, flow in enumerate(self.flows):
            congestion = None
            with contextlib.suppress(OSError, ValueError, IndexError):
                lines = (self.run_dir / f"flow-{i}-send.log").read_text().splitlines()
                congestion = json.loads(lines[-1]).get("congestion")
            with contextlib.suppress(OSError):
                for line in self.samples_path(i).read_text().splitlines():
                    with contextlib.suppress(ValueError):
                        s = json.loads(line)
                        out.append(
                            {
                                "flow": i,
                                "from": flow.from_,
                                "to": flow.to,
                                "congestion": congestion or flow.congestion,
                                "t": s["t"],
                                "seconds": s["seconds"],
                                "bytes": s["bytes"],
                                "goodput_bps": s["goodput_bps"],
                            }
                        )
        return out
