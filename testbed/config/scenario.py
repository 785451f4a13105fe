"""A scenario: the whole testbed and what runs on it, and the checks that need all of it (WAN
links between known clusters that reach each other, placement, BGP, faults and flows that name
real links and hosts).

Each part's schema lives in a module of its own (clusters, wan, routing, placement, workloads,
dynamics, dcqcn, expect); testbed.config.loading reads a file into a :class:`Scenario`. Every
unit string is parsed to an SI number at this edge ("25ms" -> 0.025), and unknown keys are errors.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

import testbed.config.command  # noqa: F401  (registers workload kind: command)
from testbed.config.clusters import (
    CLUSTER_NAME,
    CLUSTER_NAME_MAX,
    MAX_CLUSTERS,
    Cluster,
    TcpSettings,
)
from testbed.config.dcqcn import DcqcnTraffic, DcqcnWorkload
from testbed.config.dynamics import BulkFlow, Fault
from testbed.config.expect import Expectation
from testbed.config.fields import FieldError, Strict
from testbed.config.placement import Placement
from testbed.config.routing import Routing
from testbed.config.wan import WanLink
from testbed.config.workloads import AnyWorkload, RankWorkloadModel
from testbed.core.units import parse_duration, parse_size
from testbed.core.wanpaths import first_hops

SCENARIO_NAME = re.compile(r"^[a-z0-9-]{1,32}$")


TrafficFlow = Annotated[
    Annotated[BulkFlow, Tag("bulk")] | Annotated[DcqcnTraffic, Tag("dcqcn")],
    Discriminator(lambda v: v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)),
]
TRAFFIC_KINDS = ("bulk", "dcqcn")


def _off_or_period(v: Any) -> Any:
    if v is None or v is False or v == "off":
        return None
    period = parse_duration(v)
    if period < 1e-3:
        raise ValueError(f"{v!r} is too short a sampling period; use off or at least 1ms")
    return period


def _pcap_cap(v: Any) -> Any:
    if v is False or v is None or v == "off":
        return 0
    if v is True:
        return DEFAULT_PCAP_BYTES
    size = parse_size(v)
    if size < 1 << 20:
        raise ValueError(f"{v!r}: a pcap cap below 1MiB would hold almost nothing; e.g. 64MiB")
    return size


DEFAULT_PCAP_BYTES = 64 << 20
Period = Annotated[float | None, BeforeValidator(_off_or_period)]


class Trace(Strict):
    """What is recorded while the workload runs (off by default: tracing costs CPU)."""

    # sampling period of tcp_info of every workload socket; off to disable
    tcp_info: Period = None
    # sampling period of WAN queue occupancy, drops and marks; off to disable
    queues: Period = None
    # headers-only capture on the WAN interfaces: false, true (64MiB per interface) or a cap
    pcap: Annotated[int, BeforeValidator(_pcap_cap)] = 0


class Scenario(Strict):
    name: str
    description: str = ""
    # What the scenario asks and the outcome its author expects: the report opens with them,
    # beside the verdict of the expectations (``expect``).
    question: str = ""
    expected: str = ""
    clusters: dict[str, Cluster]
    wan: list[WanLink] = Field(default_factory=list)
    tcp: TcpSettings = TcpSettings()
    # tclink: Mininet's own TCLink on the WAN links, unchanged (engine mininet; for comparison)
    backend: Literal["auto", "kernel", "userspace", "tclink"] = "auto"
    # what makes the namespaces and veth pairs: the testbed itself, or Mininet (its nodes and
    # links, shaped by the same backends; docs/mininet.md)
    engine: Literal["native", "mininet"] = "native"
    routing: Routing = Routing()
    placement: Placement | None = None
    workload: AnyWorkload | None = None
    trace: Trace = Trace()
    # The WAN misbehaving while the workload runs (testbed.config.dynamics, docs/faults.md).
    faults: list[Fault] = Field(default_factory=list)
    traffic: list[TrafficFlow] = Field(default_factory=list)
    # DCQCN's time dilation: its parameters (times x s, rates / s) are given in real
    # units and run dilated; the WAN is in the testbed's (emulated) units
    dilation: float = Field(default=1.0, ge=1.0, le=10000.0)
    # Origin of schedule, trace and fault times: the first measured iteration (workload; the
    # start of the traffic when there is no workload) or the start of the run (wall).
    clock: Literal["workload", "wall"] = "workload"
    # Checked and expanded by testbed.config.sweep before validation; kept here so that the schema
    # lists them and a resolved run can show what it came from.
    sweep: dict[str, list[Any]] = Field(default_factory=dict)
    repeat: int = Field(default=1, ge=1, le=1000)
    # What the results must show; checked by `testbed run` (testbed.config.expect).
    expect: list[Expectation] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not SCENARIO_NAME.match(v):
            raise ValueError(
                f"{v!r} is not a valid scenario name; allowed: a-z, 0-9 and '-', 1 to 32 characters"
            )
        return v

    @field_validator("clusters", mode="before")
    @classmethod
    def _cluster_names(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        for name in v:
            if (
                not isinstance(name, str)
                or not CLUSTER_NAME.match(name)
                or (len(name) > CLUSTER_NAME_MAX)
            ):
                raise FieldError(
                    f"clusters.{name}",
                    f"{name!r} is not a valid cluster name; allowed: a lowercase letter, then "
                    f"a-z and 0-9, at most {CLUSTER_NAME_MAX} characters",
                )
        if not v:
            raise FieldError("clusters", "at least one cluster is needed")
        if len(v) > MAX_CLUSTERS:
            raise FieldError(
                "clusters", f"{len(v)} clusters given; at most {MAX_CLUSTERS} are allowed"
            )
        return v

    @model_validator(mode="after")
    def _wan_topology(self) -> Scenario:
        seen: dict[frozenset[str], int] = {}
        for i, link in enumerate(self.wan):
            for end in link.between:
                if end not in self.clusters:
                    raise FieldError(
                        f"wan[{i}].between",
                        f"unknown cluster {end!r}; clusters are: {', '.join(self.clusters)}",
                    )
            pair = frozenset(link.between)
            if pair in seen:
                raise FieldError(
                    f"wan[{i}].between",
                    f"the pair {list(link.between)} already appears in wan[{seen[pair]}]; "
                    "a cluster pair appears at most once",
                )
            seen[pair] = i
        # Every cluster must reach every other one, possibly over several WAN hops.
        names = list(self.clusters)
        reached = first_hops(names, [link.between for link in self.wan], names[0])
        missing = [n for n in names[1:] if n not in reached]
        if missing:
            raise FieldError(
                "wan",
                f"cluster(s) {', '.join(missing)} have no WAN path to {names[0]}; "
                "add a `between` entry that connects them",
            )
        return self

    @model_validator(mode="after")
    def _placed_clusters(self) -> Scenario:
        if self.placement is None:
            return self
        placed = self.placement.machines
        for cluster in placed:
            if cluster not in self.clusters:
                raise FieldError(
                    f"placement.machines.{cluster}",
                    f"unknown cluster {cluster!r}; clusters are: {', '.join(self.clusters)}",
                )
        missing = [c for c in self.clusters if c not in placed]
        if missing:
            raise FieldError(
                "placement.machines",
                f"every cluster needs a machine; missing: {', '.join(missing)}",
            )
        if self.engine == "mininet":
            raise FieldError(
                "placement",
                "clusters on several machines need `engine: native`: Mininet builds its nodes "
                "from one process in one kernel, and placement puts clusters in other machines' "
                "kernels (through their agents)",
            )
        return self

    @model_validator(mode="after")
    def _bgp_routes_what_it_can(self) -> Scenario:
        if self.routing.mode != "bgp":
            return self
        if not self.wan:
            raise FieldError("routing.mode", "bgp routes over WAN links; this scenario has none")
        for i, link in enumerate(self.wan):
            if len({p.weight for p in link.paths}) > 1:
                raise FieldError(
                    f"wan[{i}].paths",
                    "unequal weights need static routing (BGP multipath here is equal-cost); "
                    "use `routing: {mode: static}` or equal weights",
                )
        return self

    @model_validator(mode="after")
    def _dynamics_refer_to_the_testbed(self) -> Scenario:
        self.check_dynamics()
        return self

    def check_dynamics(self) -> None:
        """Raise FieldError unless faults, flows and dynamic links name this testbed's hosts,
        clusters and links and have something running to act on (also for a copy with
        other faults: loading.with_faults)."""
        hosts = {f"{c}-h{i}" for c, cl in self.clusters.items() for i in range(cl.hosts)}
        known_links = ", ".join(p.name for p in self.wan_paths) or "(none)"
        for i, f in enumerate(self.faults):
            link = getattr(f, "link", None)
            if link is not None and not self.links_named(link):
                raise FieldError(
                    f"faults[{i}].link", f"no WAN link {link!r}; links are: {known_links}"
                )
            named = [getattr(f, "cluster", None)] + [c for g in getattr(f, "groups", []) for c in g]
            for c in named:
                if c is not None and c not in self.clusters:
                    field = "cluster" if f.kind == "gateway_crash" else "groups"
                    raise FieldError(
                        f"faults[{i}].{field}",
                        f"unknown cluster {c!r}; clusters are: {', '.join(self.clusters)}",
                    )
            if f.kind == "partition":
                flat = [c for g in f.groups for c in g]
                if len(set(flat)) != len(flat) or any(not g for g in f.groups):
                    raise FieldError(
                        f"faults[{i}].groups",
                        "each cluster appears in at most one group, and no group is empty",
                    )
            if f.after is not None and self.workload is None:
                raise FieldError(
                    f"faults[{i}].after", "`after` an iteration needs a workload; use `at`"
                )
        named_flows = [(f"traffic[{i}]", f) for i, f in enumerate(self.traffic)]
        if isinstance(self.workload, DcqcnWorkload):
            named_flows += [(f"workload.flows[{i}]", f) for i, f in enumerate(self.workload.flows)]
        for where, flow in named_flows:
            for field, host in (("from", flow.from_), ("to", flow.to)):
                if host not in hosts:
                    raise FieldError(
                        f"{where}.{field}",
                        f"no host {host!r}; hosts are named <cluster>-h<i>, e.g. "
                        f"{sorted(hosts)[0]}",
                    )
            if flow.from_ == flow.to:
                raise FieldError(f"{where}.to", "a flow goes to another host")
        dynamic = self.faults or any(link.schedule or link.trace for link in self.wan_paths)
        if dynamic and self.workload is None and not self.traffic:
            raise FieldError(
                "faults" if self.faults else "wan",
                "schedules, traces and faults act while something runs: add a workload or traffic",
            )

    @property
    def flows(self) -> list[BulkFlow | DcqcnTraffic]:
        """Every flow the runner starts: the ``traffic:`` entries, then a dcqcn workload's."""
        extra = self.workload.as_traffic() if isinstance(self.workload, DcqcnWorkload) else []
        return [*self.traffic, *extra]

    @property
    def rank_workload(self) -> RankWorkloadModel | None:
        """The workload the ranks run (collectives, training, ...); None: a traffic-only run
        (no workload, or one of flows alone such as dcqcn)."""
        return self.workload if isinstance(self.workload, RankWorkloadModel) else None

    @property
    def wan_paths(self) -> list[WanLink]:
        """Every path of every WAN link, as links of their own (``WanLink.paths_of``)."""
        return [p for link in self.wan for p in link.paths_of()]

    def links_named(self, name: str) -> list[WanLink]:
        """The paths a fault's ``link`` names: ``east-west`` (either order) is every path of
        that link, ``east-west/1`` one path of it. Empty: no such link."""
        base, _, path = name.partition("/")
        for link in self.wan:
            if frozenset(base.split("-", 1)) == frozenset(link.between):
                paths = link.paths_of()
                if not path:
                    return paths
                return [p for p in paths if p.path is not None and str(p.path) == path]
        return []

    def cluster_tcp(self, cluster: str) -> TcpSettings:
        override = self.clusters[cluster].tcp
        return override.apply(self.tcp) if override else self.tcp
