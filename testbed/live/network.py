"""The live network on one machine (:class:`Network`), built from a scenario, always torn down.

    with Network.from_file("scenarios/quickstart.yaml") as tb:
        tb.run("east-h0", ["ping", "-c3", "west-h1"])

Commands run through ``ip netns exec`` so that they see the testbed's ``/etc/hosts``; processes
started with ``popen`` are recorded (pid + start time) so teardown and ``testbed clean`` can stop
exactly them. SIGTERM is turned into an exception while a testbed is up, so ``kill`` tears down
as cleanly as Ctrl-C.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from testbed.config.loading import load_scenario
from testbed.config.scenario import Scenario
from testbed.core.errors import RegistryError, TestbedError, UnsupportedError
from testbed.link.base import LinkBackend
from testbed.link.choose import choose_backend
from testbed.live.processes import master_port
from testbed.net import build as net
from testbed.net import frr, procs, registry
from testbed.net import probe as kernel
from testbed.net.cables import Underlay
from testbed.net.engines import Engine, make_engine
from testbed.plan.compensation import Compensation, calibration_plan
from testbed.plan.model import NetworkPlan, WanDirection
from testbed.plan.topology import build_plan

COMPENSATION_KEY = "rtt_compensation"  # in the registry record's ``extra``


class Terminated(TestbedError):
    """SIGTERM arrived while a testbed was up."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated("terminated by SIGTERM; tearing down")


class Network:
    """A live network on this machine (see the module); a :class:`testbed.live.LiveNetwork`."""

    def __init__(
        self,
        scenario: Scenario | None,
        name: str | None = None,
        persistent: bool = False,
        source: str = "",
        compensate_rtt: bool = True,
        underlay: Underlay | None = None,
        reserve: tuple[str, int] | None = None,
    ) -> None:
        self.scenario = scenario  # None: a handle on a testbed another process made (attach)
        if name is None:
            assert scenario is not None, "a testbed without a scenario needs a name"
            name = f"{scenario.name}-{secrets.token_hex(2)}"
        self.name = name
        self.persistent = persistent
        self.source = source
        self.record: registry.Record | None = None
        self.plan: NetworkPlan | None = None
        self.backend: LinkBackend | None = None  # chosen at up(); keeps its stats after down()
        self.features: kernel.KernelFeatures | None = None
        # Off only to measure what the emulation does without it (benchmarks/link_fidelity.py).
        self.compensate_rtt = compensate_rtt
        self.compensation: list[Compensation] = []  # per WAN direction, when compensated
        # what makes the namespaces: the scenario's engine (native for an attach: it builds none)
        self.engine: Engine = make_engine(scenario.engine if scenario is not None else "native")
        # One machine's part of a topology placed over several (testbed.live.spanned: its agent
        # on this machine): builds only the part, joins the others over the VXLAN cables,
        # under the prefix and address slot of ``reserve`` when given; the driver compensates.
        self.underlay = underlay
        self.reserve = reserve

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> Network:
        return cls(load_scenario(path), source=str(path), **kwargs)

    @classmethod
    def attach(cls, name: str) -> Network:
        """A handle on a testbed that is already up (made by ``testbed up``)."""
        rec = registry.find(name)
        if not rec.live():
            raise RegistryError(f"testbed {name!r} is a leftover, not live; run `testbed clean`")
        tb = cls(None, name=rec.name, persistent=rec.persistent)
        tb.record = rec
        tb.compensation = [Compensation(**row) for row in rec.extra.get(COMPENSATION_KEY, [])]
        return tb

    # -- lifecycle ---------------------------------------------------------------------------
    def up(self) -> Network:
        assert self.scenario is not None, "an attached testbed is already up"
        self.features = kernel.probe()
        self.engine.check()
        part = self.underlay
        if self.scenario.placement is not None and part is None:
            raise UnsupportedError(
                "placement: clusters on several machines come up with one agent per machine, "
                "on the Ray cluster those machines joined: `testbed run FILE --ray ADDRESS` "
                "(in Python: testbed.live.spanned.SpannedNetwork; docs/scale-out.md); remove "
                "`placement:` to build on this machine alone"
            )
        if self.scenario.routing.mode == "bgp" and (why := frr.missing()):
            raise UnsupportedError(f"routing.mode bgp: {why}")
        prefix, slot = self.reserve or (None, None)
        self.record = registry.claim(
            self.name, self.source, prefix=prefix, slot=slot,
            machine=part.machine if part else "", machine_netns=(part.netns or "") if part else "",
        )  # fmt: skip
        try:
            self.plan = build_plan(self.scenario, self.record.prefix, self.record.slot)
            if part is not None:
                self.plan = self.plan.part(part.machine)
            self.backend = choose_backend(
                self.scenario.backend,
                self.plan.needs_propagation_emulation(),
                self.features,
                self.plan.needs_marking(),
                self.plan.needs_hold(),
            )
            self.backend.check(self.plan)
            tclinks = {
                (d.shaper.ns, d.shaper.ifname): params
                for d in self.plan.wan
                if (params := self.backend.mininet_link_params(d)) is not None
            }
            self.engine.set_tclinks(tclinks)
            self.record.backend = self.backend.name
            self.record.engine = self.engine.name
            self.record.save()
            # RTT compensation: the emulators start with the delays alone, the floor of each
            # direction is measured, then they get configured - floor and the rest of their
            # impairment (testbed.plan.compensation).
            # (Mininet's TCLink runs unchanged: no compensation)
            calibrating = (
                self.compensate_rtt and any(d.delay for d in self.plan.wan) and not tclinks
            )
            first = calibration_plan(self.plan) if calibrating else self.plan
            backend, record = self.backend, self.record
            trace = self.scenario.trace.queues
            namespaces_made = backend.prepare(first, record, trace)
            net.build(
                self.plan,
                record,
                self.features,
                backend.tc_batches(first),
                self.engine,
                namespaces_made,
                part,
            )
            backend.start(first, record, trace)
            if self.plan.bgp is not None:  # routes between clusters: traffic needs them
                # a part's sessions need the other parts' daemons: its driver waits for them
                frr.start(self.plan.bgp, record, converge=part is None)
            if calibrating and part is None:  # a part's driver measures across machines
                from testbed.live.calibrate import calibrate  # imports the probe: only when used

                self.compensation = calibrate(self.plan, backend)
                self.record.extra[COMPENSATION_KEY] = [c.row() for c in self.compensation]
            self.record.phase = "up"
            self.record.persistent = self.persistent
            self.record.save()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        try:
            if self.backend is not None:
                self.backend.stop()
        finally:
            try:
                self.engine.stop()
            finally:
                if self.record is not None:
                    net.destroy(self.record)
                    self.record = None

    def problems(self) -> list[str]:
        """What is broken in the emulation right now (a dead delay line, queue overflow, an
        FRR daemon that exited)."""
        out = self.backend.problems() if self.backend is not None else []
        if self.plan is not None and self.plan.bgp is not None and self.record is not None:
            out += frr.problems(self.record)
        return out

    def queue_in_backend(self, d: WanDirection) -> bool:
        """Whether this direction's bottleneck queue is the link backend's, not a qdisc's."""
        return self.backend is not None and self.backend.owns_queue(d)

    def backend_queue_trace(self) -> list[dict]:
        """The link backend's samples of the queues it owns (complete once the testbed is down)."""
        return self.backend.queue_trace() if self.backend is not None else []

    def compensation_of(self, direction: str) -> Compensation | None:
        """The RTT compensation of a WAN direction (None when the testbed did not compensate)."""
        return next((c for c in self.compensation if c.direction == direction), None)

    def link_stats(self) -> list[dict]:
        """The link backend's counters per WAN direction (the delay line's, on userspace)."""
        return self.backend.link_stats() if self.backend is not None else []

    def across_machines(self) -> dict[str, Any]:
        """Nothing: it spans one machine (see ``SpannedNetwork.across_machines``)."""
        return {}

    def __enter__(self) -> Network:
        self._old_term = signal.getsignal(signal.SIGTERM)
        with contextlib.suppress(ValueError):  # not in the main thread: leave signals alone
            signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return self.up()
        except BaseException:
            self._restore_signals()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.down()
        finally:
            self._restore_signals()

    def _restore_signals(self) -> None:
        with contextlib.suppress(ValueError, TypeError):
            signal.signal(signal.SIGTERM, self._old_term)

    # -- using it ----------------------------------------------------------------------------
    @property
    def hosts(self) -> dict[str, str]:
        """Name -> address of every host and gateway."""
        assert self.record is not None, "testbed is not up"
        return dict(self.record.hosts)

    def namespace(self, host: str) -> str:
        rec = self.record
        assert rec is not None, "testbed is not up"
        if host not in rec.hosts:
            known = ", ".join(rec.hosts)
            raise RegistryError(f"no host {host!r} in testbed {rec.name!r}; hosts: {known}")
        return f"{rec.prefix}-{host}"

    def sysctls(self, host: str, keys: list[str]) -> dict[str, str]:
        """What ``host``'s namespace holds for these sysctl keys."""
        from testbed.net import netns

        return netns.read_sysctls(self.namespace(host), keys)

    def free_port(self, host: str) -> int:
        """A TCP port free in ``host`` right now (a rank master's)."""
        return master_port(self.namespace(host))

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def run(self, host: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` inside ``host`` and wait (kwargs go to ``subprocess.run``)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(host, argv), **kwargs)

    def popen(
        self, host: str, argv: Sequence[str], what: str = "", **kwargs: Any
    ) -> subprocess.Popen:
        """Start ``argv`` inside ``host``; the process is recorded and stopped at teardown."""
        assert self.record is not None
        proc = subprocess.Popen(self.command(host, argv), **kwargs)
        self.record.add_process(proc.pid, what or " ".join(argv)[:80])
        return proc

    def python(self, host: str, module: str, *args: str, **kwargs: Any) -> subprocess.Popen:
        """Start ``python -m module args`` of this very interpreter inside ``host``."""
        return self.popen(host, [sys.executable, "-m", module, *args], what=module, **kwargs)

    @contextlib.contextmanager
    def serving(self, host: str, module: str, *args: str) -> Iterator[subprocess.Popen]:
        """``python -m module args`` inside ``host``, yielded once it printed READY (what it
        writes after stays for ``communicate()``); stopped on the way out."""
        server = self.python(
            host, module, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        with procs.ready(server, f"{module} server on {host}"):
            yield server
