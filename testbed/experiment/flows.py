"""A scenario's flows, live (``Scenario.flows``: the ``traffic:`` entries and a dcqcn
workload's): one launcher for every kind, started at the clock origin + each flow's ``start``
for its ``duration``.

* ``bulk``: one TCP connection (traffic.bulk ``sink`` in the receiving host, ``send`` in the
  sending one), its goodput sampled every ``INTERVAL`` by the receiver (the ``flows_goodput``
  table, docs/results.md).
* ``dcqcn``: one DCQCN flow (traffic.dcqcn.flow ``recv`` = NP, ``send`` = RP) with the
  variant's parameters resolved and dilated by the scenario's ``dilation``; its RP events, CNPs
  and per-100 ms receive counts become the ``dcqcn`` and ``dcqcn_rx`` tables.

The receivers start first and report READY in their logs; a thread waits for the origin
(testbed.experiment.clock.OriginClock) and starts each sender at its time, with the network's
``popen`` (recorded, so teardown stops what is left). Across machines each process runs on its
host's machine and its files (logs, samples, a DCQCN flow's records) come back into the run
directory as it runs (testbed.live.spanned); :meth:`stop` stops them. The samples carry their
own unix times, their machine's, put on the driver's timeline in the tables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.config.dcqcn import DcqcnTraffic, resolve
from testbed.config.dynamics import BulkFlow
from testbed.core.dcqcn import DcqcnParams
from testbed.core.errors import NetError
from testbed.experiment.clock import Instant, OriginClock
from testbed.live.spanned import SpannedNetwork
from testbed.live.spanned.traces import driver_time
from testbed.net import procs

if TYPE_CHECKING:
    from testbed.live.protocol import HostProcess, LiveNetwork
    from testbed.plan.model import NetworkPlan, WanDirection

BASE_PORT = 5300  # flow i listens on BASE_PORT + i (below the kernel's ephemeral range)
INTERVAL = 0.1  # s between two goodput samples
END_GRACE = 30.0  # s after its planned end a flow may take to drain and close
# s a DCQCN sender stopped early gets to take its last CNPs and write its log (SIGTERM)
STOP_GRACE = 60.0  # (a NIC-default tenant of minutes writes millions of events)
READY_POLL = 0.05  # s between two looks at a receiver's log for its READY
Flow = BulkFlow | DcqcnTraffic


def ready_in_log(proc: HostProcess, log: Path, timeout: float = procs.READY_TIMEOUT) -> str:
    """Wait until ``proc`` wrote its READY line to ``log`` (its output, on this machine or
    brought back from the machine it runs on by each ``poll``); why not ("" once it did)."""
    deadline = time.monotonic() + timeout
    text = ""
    while True:
        code = proc.poll()  # first: what it wrote before it exited is then here
        with contextlib.suppress(OSError):
            text = log.read_text(errors="replace")
            if procs.READY in (line.strip() for line in text.splitlines()):
                return ""
        if code is not None:
            return f"exited with code {code}: {text.strip()[-300:] or 'no output'}"
        if time.monotonic() > deadline:
            return f"no READY within {timeout:.0f} s"
        time.sleep(READY_POLL)


def dcqcn_params(flow: DcqcnTraffic, dilation: float) -> DcqcnParams:
    """The flow's RP/NP parameters in the testbed's (dilated) units."""
    return resolve(flow.variant, flow.params, dilation)


def flow_bottleneck(flow: Flow, plan: NetworkPlan) -> WanDirection | None:
    """The WAN direction a flow's queue builds in: the one from its cluster to the
    receiver's (or, across several hops, the first one leaving its cluster)."""
    src, dst = (h.rsplit("-h", 1)[0] for h in (flow.from_, flow.to))
    leaving = [d for d in plan.wan if d.src == src]
    return next((d for d in leaving if d.dst == dst), leaving[0] if leaving else None)


def dcqcn_setup(flow: DcqcnTraffic, plan: NetworkPlan, dilation: float) -> dict[str, Any]:
    """What a DCQCN flow runs with, in the testbed's (dilated) units, and the bottleneck the
    fluid model needs: ``params``, ``line_rate_bps`` (the flow's ``line_rate`` / dilation,
    else twice the bottleneck's rate, so that one flow builds a queue: DCQCN reacts to none
    otherwise), ``direction``, ``bottleneck_bps``, ``rtt_s``, ``buffer_bytes``, ``aqm``, the
    datagram ``size``."""
    d = flow_bottleneck(flow, plan)
    rate = d.rate if d is not None else 100e6
    back = next((r for r in plan.wan if d is not None and r.src == d.dst and r.dst == d.src), None)
    line = flow.line_rate / dilation if flow.line_rate is not None else 2.0 * rate
    return {
        "params": dataclasses.asdict(dcqcn_params(flow, dilation)),
        "line_rate_bps": line,
        "direction": d.name if d is not None else None,
        "bottleneck_bps": rate,
        "rtt_s": (d.delay if d else 0.0) + (back.delay if back else 0.0),
        "buffer_bytes": d.buffer if d is not None else None,
        "aqm": d.aqm.model_dump() if d is not None and d.aqm is not None else None,
        "dilation": dilation,
        "size": flow.size,
    }


class Flows:
    """The flows of one run; ``start()``, then ``wait()`` (traffic-only runs) or ``stop()``."""

    def __init__(
        self,
        tb: LiveNetwork,
        flows: list[Flow],
        clock: OriginClock,
        run_dir: Path,
        dilation: float = 1.0,
    ) -> None:
        self.tb = tb
        self.flows = flows
        self.dilation = dilation
        self.dcqcn: dict[int, dict[str, Any]] = {}  # DCQCN flow -> what it ran with
        # the first bulk flow's bottleneck, for the bulk flows' summary (analysis.dcqcn)
        self.bulk: dict[str, Any] = {}
        self.clock = clock
        self.run_dir = run_dir
        self.receivers: list[HostProcess] = []
        self.senders: dict[int, HostProcess] = {}
        self.started: dict[int, Instant] = {}
        self.errors: list[str] = []
        # flows still sending when stop() came (the workload ended before their planned end)
        self.cut: list[int] = []
        self._stopping = False
        self._thread = threading.Thread(target=self._start_senders, name="flows", daemon=True)

    def samples_path(self, i: int) -> Path:
        return self.run_dir / f"flow-{i}.jsonl"

    def dcqcn_dir(self, i: int) -> Path:
        return self.run_dir / f"dcqcn-{i}"

    def _receiver_argv(self, i: int, flow: Flow) -> list[str]:
        port = str(BASE_PORT + i)
        if isinstance(flow, DcqcnTraffic):
            params = json.dumps(dataclasses.asdict(dcqcn_params(flow, self.dilation)))
            argv = [sys.executable, "-m", "traffic.dcqcn.flow", "recv", "--port", port]
            argv += ["--bind", self.tb.hosts[flow.to], "--params", params]
            return [*argv, "--out", str(self.dcqcn_dir(i))]
        argv = [sys.executable, "-m", "traffic.bulk", "sink", "--port", port]
        return [*argv, "--out", str(self.samples_path(i)), "--interval", str(INTERVAL)]

    def _sender_argv(self, i: int, flow: Flow) -> list[str]:
        port = str(BASE_PORT + i)
        if isinstance(flow, DcqcnTraffic):
            assert self.tb.plan is not None
            setup = self.dcqcn[i] = dcqcn_setup(flow, self.tb.plan, self.dilation)
            params, rate = json.dumps(setup["params"]), setup["line_rate_bps"]
            argv = [sys.executable, "-m", "traffic.dcqcn.flow", "send", "--port", port]
            argv += ["--to", self.tb.hosts[flow.to], "--flow", str(i), "--line-rate", f"{rate:g}"]
            argv += ["--duration", str(flow.duration), "--params", params]
            return [*argv, "--size", str(flow.size), "--out", str(self.dcqcn_dir(i))]
        argv = [sys.executable, "-m", "traffic.bulk", "send", "--host", flow.to]
        argv += ["--port", port, "--duration", str(flow.duration)]
        if flow.congestion:
            argv += ["--congestion", flow.congestion]
        return argv

    def start(self) -> Flows:
        """Start every receiver (READY), then the thread that starts the senders."""
        plan = self.tb.plan
        through = {
            i: d
            for i, f in enumerate(self.flows)
            if isinstance(f, BulkFlow) and plan is not None and (d := flow_bottleneck(f, plan))
        }
        if through:
            first = next(iter(through.values()))
            flows = [i for i, d in through.items() if d.name == first.name]
            self.bulk = {"direction": first.name, "bottleneck_bps": first.rate, "flows": flows}
        for i, flow in enumerate(self.flows):
            argv = self._receiver_argv(i, flow)
            log = self.run_dir / f"flow-{i}-sink.log"
            with open(log, "w") as out:
                proc = self.tb.popen(
                    flow.to, argv, what=f"flow {i} receiver", stdout=out, stderr=subprocess.STDOUT
                )
            self.receivers.append(proc)
            if why := ready_in_log(proc, log):
                raise NetError(f"traffic[{i}]: the receiver on {flow.to} did not start ({why})")
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
            argv = self._sender_argv(i, flow)
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
            grace = STOP_GRACE if isinstance(self.flows[i], DcqcnTraffic) else 0.0
            code = procs.stop(p, grace)
            if not running and code != 0:
                said = ""
                with contextlib.suppress(OSError):
                    said = (self.run_dir / f"flow-{i}-send.log").read_text().strip()[-300:]
                self.errors.append(f"traffic[{i}] sender exited with code {code}: {said}")
        for p in self.receivers:
            procs.stop(p)

    def _to_driver(self, host: str) -> Callable[[float], float]:
        """A unix time of ``host``'s machine on the driver's timeline (across machines: with
        its clock offset; testbed.live.spanned.traces.driver_time)."""
        if isinstance(self.tb, SpannedNetwork):
            return driver_time(self.tb, self.tb.machine_of(host))
        return lambda t: t

    def rows(self) -> list[dict[str, Any]]:
        """The goodput samples of every bulk flow (flows_goodput rows, without run_id)."""
        out = []
        for i, flow in enumerate(self.flows):
            if not isinstance(flow, BulkFlow):
                continue
            congestion = None
            at = self._to_driver(flow.to)  # the receiver's samples
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
                                "t": at(s["t"]),
                                "seconds": s["seconds"],
                                "bytes": s["bytes"],
                                "goodput_bps": s["goodput_bps"],
                            }
                        )
        return out

    def dcqcn_rows(self) -> dict[str, list[dict[str, Any]]]:
        """The DCQCN flows' records, unix times: ``dcqcn`` (the RP's events and the NP's CNPs,
        one row each) and ``dcqcn_rx`` (what the receiver got per 100 ms window), without
        run_id."""
        events: list[dict[str, Any]] = []
        rx: list[dict[str, Any]] = []
        for i, flow in enumerate(self.flows):
            if not isinstance(flow, DcqcnTraffic):
                continue
            base = {"flow": i, "from": flow.from_, "to": flow.to, "variant": flow.variant}
            d = self.dcqcn_dir(i)
            sender, receiver = self._to_driver(flow.from_), self._to_driver(flow.to)
            files = (
                (f"rp-{i}.jsonl", events, sender),
                ("np.jsonl", events, receiver),
                ("rx.jsonl", rx, receiver),
            )
            for name, table, at in files:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    lines = (d / name).read_text().splitlines()
                    head = json.loads(lines[0])
                    zero = head["monotonic_zero_unix"]
                    if "t0" in head:  # the sender's: when it began, at its line rate
                        rate = head["line_rate_bps"]
                        start = at(head["t0"] + zero)
                        table.append(base | {"t": start, "kind": "start", "rc": rate})
                    for line in lines[1:]:
                        with contextlib.suppress(ValueError):
                            r = json.loads(line)
                            r["t"] = at(r["t"] + zero)
                            if name == "np.jsonl":
                                r |= {"kind": "cnp_sent"}
                            r.pop("flow", None)
                            table.append(base | r)
            with contextlib.suppress(OSError, ValueError, IndexError):  # the sender's last line
                lines = (self.run_dir / f"flow-{i}-send.log").read_text().splitlines()
                said = json.loads(lines[-1])
                start = next(r["t"] for r in events if r["flow"] == i and r["kind"] == "start")
                events.append(
                    base
                    | {
                        "t": start + said["seconds"],
                        "kind": "end",
                        "rc": said["final_rate_bps"],
                        "sent": said["sent"],
                        "cnps_received": said["cnps"],
                        "send_errors": said["send_errors"],
                    }
                )
        for r in rx:
            r["rate_bps"] = r["bytes"] * 8 / r["seconds"]
        return {"dcqcn": events, "dcqcn_rx": rx}
