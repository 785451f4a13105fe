"""What a run will do and about how long it takes, from the scenario alone (`testbed plan`). PURE:
no kernel, no network, no root.

Per run: the α-β model's predicted time of each collective x algorithm x size (the runner's own
prediction, analysis.model, on the topology the runner gives it, without the windows a run
measures), or a training run's predicted communication per step; where the ranks go; and an
estimate of the run's duration: build and teardown, the link self-check (its probes' own sizing,
testbed.live.selfcheck), the ranks' start-up, then the workload (its operations x the prediction,
or its flows' length). The fixed costs are round figures of the order benchmarks/RESULTS.md
records on a small machine; the estimate plans a sweep's time, it bounds nothing.

The backend is the one ``testbed run`` will choose on this machine (testbed.link.choose), with the
qdiscs read from the kernel's configuration and module tree instead of tried as root.
"""

from __future__ import annotations

import gzip
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analysis.model import Topology
from testbed.config.scenario import Scenario
from testbed.config.sweep import RunSpec
from testbed.config.workloads import TrainingWorkload, Workload
from testbed.plan.model import NetworkPlan
from testbed.plan.ranks import RankSlot, place_ranks

BUILD_S = 2.0  # network up and down, a small topology
RANK_START_S = 8.0  # the ranks import torch and join their process group
SELFCHECK_SETUP_S = 1.0  # per WAN direction: the probes' processes, beyond their own durations
PINGS = 20  # the self-check's RTT samples per direction (testbed.live.selfcheck.check_links)
MSS = 1448  # bytes of payload per segment at MTU 1500 (timestamps on)
MATHIS_C = 1.22  # sqrt(3/2): the Mathis et al. constant for periodic loss, delayed ACKs off


@dataclass(frozen=True)
class Predicted:
    """One predicted quantity of a run: an operation's time (``collective algorithm size``) or
    a training run's communication per step; ``seconds`` None with ``note`` saying why."""

    what: str
    seconds: float | None
    times: int = 1  # how often the run does it (warm-up + iterations; steps)
    note: str = ""


@dataclass
class Forecast:
    """One run's forecast: its ranks, predictions and the estimate's parts (seconds)."""

    run_id: str
    params: dict[str, Any]
    ranks: list[RankSlot] = field(default_factory=list)
    predicted: list[Predicted] = field(default_factory=list)
    parts: dict[str, float] = field(default_factory=dict)
    unknown: str = ""  # what the estimate leaves out

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())


def forecast(spec: RunSpec, plan: NetworkPlan, selfcheck_s: float = 1.0) -> Forecast:
    """The forecast of one run of the sweep (``plan``: its network plan)."""
    sc = spec.scenario
    out = Forecast(spec.run_id, dict(spec.params))
    out.parts["build and teardown"] = BUILD_S
    out.parts["self-check"] = selfcheck_seconds(plan, selfcheck_s)
    w = sc.rank_workload
    if w is not None:
        out.ranks = place_ranks(plan, w.ranks_per_host, w.placement)
        out.parts["ranks start"] = RANK_START_S
        out.predicted = _predictions(sc, plan, out.ranks)
        known = [p for p in out.predicted if p.seconds is not None]
        out.parts["workload"] = sum(p.seconds * p.times for p in known if p.seconds is not None)
        if isinstance(w, TrainingWorkload):
            out.unknown = "training's compute (the estimate counts its communication only)"
        elif not isinstance(w, Workload):
            out.unknown = f"a {w.kind} workload's own length"
        elif len(known) < len(out.predicted):
            out.unknown = "operations the model has no answer for"
    if sc.flows:
        end = max(f.start + f.duration for f in sc.flows)
        out.parts["workload"] = max(out.parts.get("workload", 0.0), end)
    return out


def selfcheck_seconds(plan: NetworkPlan, window: float) -> float:
    """The link self-check's length: every WAN direction one after the other, each its pings,
    capacity probe and TCP probe as testbed.live.selfcheck sizes them."""
    from testbed.live.selfcheck import PING_INTERVAL, size_probes

    total = 0.0
    for d in plan.wan:
        rtt = 2 * d.delay
        sizes = size_probes(d.rate, rtt, window, burst=d.shaper.burst)
        total += PINGS * max(PING_INTERVAL, rtt) + sizes.capacity_send + sizes.tcp_duration
        total += SELFCHECK_SETUP_S
    return total


_COMM_PER_STEP: dict[tuple[str, str], float | None] = {}  # replaying every step's sync is slow


def _predictions(sc: Scenario, plan: NetworkPlan, ranks: list[RankSlot]) -> list[Predicted]:
    from analysis.model import predict_timed, unsupported
    from analysis.run_summary import predicted_comm_per_step
    from testbed.core.syntax import size_text
    from testbed.experiment.execute import model_topology

    w = sc.rank_workload
    assert w is not None
    plain = model_topology(plan, ranks, w.placement, w.ranks_per_host)
    topo = loss_limited(plain, sc, plan)
    mathis = "random loss priced by the Mathis bound" if topo != plain else ""
    if isinstance(w, Workload):
        out = []
        for c in w.collectives:
            for a in w.algorithms:
                for s in w.sizes:
                    what = f"{c} {a} {size_text(s)}"
                    why = unsupported(c, a, topo)
                    times = w.warmup + w.iterations
                    if why:
                        out.append(Predicted(what, None, times, why))
                        continue
                    try:
                        seconds = predict_timed(c, a, s, topo)
                    except ValueError as exc:
                        out.append(Predicted(what, None, times, str(exc)))
                        continue
                    out.append(Predicted(what, seconds, times, mathis))
        return out
    if isinstance(w, TrainingWorkload):
        key = (w.model_dump_json(), repr(topo))  # points of a sweep often share both
        try:
            if key not in _COMM_PER_STEP:
                _COMM_PER_STEP[key] = predicted_comm_per_step(w.model_dump(mode="json"), topo)
            per_step = _COMM_PER_STEP[key]
        except (ValueError, KeyError) as exc:
            return [Predicted(f"{w.algorithm}: communication per step", None, w.steps, str(exc))]
        note = mathis if per_step is not None else "the model has no answer for this schedule"
        return [Predicted(f"{w.algorithm}: communication per step", per_step, w.steps, note)]
    return []


def loss_limited(topo: Topology, sc: Scenario, plan: NetworkPlan) -> Topology:
    """``topo`` with each lossy WAN direction's goodput capped at the Mathis bound
    (MSS/RTT x 1.22/sqrt(p)) when its sender's congestion control backs off on loss (not bbr):
    the α-β model does not price random loss (docs/model.md), and without the cap a lossy
    point's estimate is a fraction of its run."""
    from dataclasses import replace

    delays = {(lk.src, lk.dst): lk.delay_s for lk in topo.links}
    loss = {(d.src, d.dst): d.loss for d in plan.wan}
    links = []
    for lk in topo.links:
        p = loss.get((lk.src, lk.dst), 0.0)
        if p > 0 and sc.cluster_tcp(lk.src).congestion != "bbr":
            rtt = lk.delay_s + delays.get((lk.dst, lk.src), lk.delay_s)
            bound = MSS * 8 / max(rtt, 1e-4) * MATHIS_C / math.sqrt(p)
            lk = replace(lk, goodput_bps=min(lk.goodput_bps, bound))
        links.append(lk)
    return replace(topo, links=tuple(links))


# -- the backend -------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackendChoice:
    name: str  # kernel | userspace | shaping only | tclink | unknown
    reason: str


def backend_here(sc: Scenario, plan: NetworkPlan) -> BackendChoice:
    """The link backend ``testbed run`` would choose for ``sc`` on this machine."""
    from testbed.core.errors import TestbedError
    from testbed.link.choose import choose_backend
    from testbed.net.probe import KernelFeatures

    qdiscs = kernel_qdiscs()
    needs = plan.needs_propagation_emulation()
    marking, hold = plan.needs_marking(), plan.needs_hold()
    if sc.backend == "auto" and (needs or marking or hold) and qdiscs is None:
        return BackendChoice(
            "unknown",
            "kernel if it has sch_netem, else userspace: this kernel's qdiscs cannot be read "
            "without root (`testbed doctor` tries them)",
        )
    feats = KernelFeatures(platform.release(), root=False, netns=True, qdiscs=qdiscs or {})
    try:
        choice = choose_backend(sc.backend, needs, feats, marking, hold)
    except TestbedError as exc:
        return BackendChoice("refused", str(exc))
    name = {"KernelBackend": "kernel", "ShapingOnlyBackend": "kernel (shaping only)"}.get(
        type(choice).__name__, choice.name
    )
    return BackendChoice(name, choice.reason)


QDISCS = ("htb", "bfifo", "netem", "red", "plug", "fq", "fq_codel", "tbf")


def kernel_qdiscs(release: str | None = None) -> dict[str, bool] | None:
    """Which qdiscs this kernel has, read (not tried): built in or a module per its
    configuration (/proc/config.gz, /boot/config-*), a module in its module tree, or one already
    loaded (/sys/module). None when none of these can be read."""
    release = release or platform.release()
    config = _kernel_config(release)
    tree = Path("/lib/modules") / release
    builtin = tree / "modules.builtin"
    builtins = builtin.read_text() if builtin.is_file() else ""
    if config is None and not tree.is_dir():
        return None
    out = {}
    for q in QDISCS:
        key = f"CONFIG_NET_SCH_{q.upper()}="
        configured = config is not None and any(
            line.startswith(key) and line[len(key) :] in ("y", "m") for line in config
        )
        module = (
            any((tree / "kernel" / "net" / "sched").glob(f"sch_{q}.ko*"))
            or f"/sch_{q}.ko" in builtins
            or Path(f"/sys/module/sch_{q}").exists()
        )
        out[q] = configured or module
    return out


def _kernel_config(release: str) -> list[str] | None:
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{release}")):
        try:
            raw = path.read_bytes()
        except OSError:
            continue
        text = gzip.decompress(raw).decode() if path.suffix == ".gz" else raw.decode()
        return text.splitlines()
    return None


def total_seconds(forecasts: list[Forecast]) -> float:
    return math.fsum(f.seconds for f in forecasts)
