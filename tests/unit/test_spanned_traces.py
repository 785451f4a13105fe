"""What each machine's part of a run's traces samples (testbed.trace.run_traces on a
``NetworkPlan.part``): the qdisc counters of the shapers it holds, the captures of its wires,
the path taps of its gateways; on one machine, everything. Pure: samplers built, none started."""

from __future__ import annotations

from pathlib import Path

from testbed.config.loading import parse_scenario
from testbed.config.scenario import Trace
from testbed.net.registry import Record
from testbed.plan.model import NetworkPlan, WanDirection
from testbed.plan.topology import build_plan
from testbed.trace.run_traces import RunTraces

TRACE = Trace.model_validate({"tcp_info": "50ms", "queues": "20ms", "pcap": "4MiB"})


class Part:
    """A network of one plan (what RunTraces uses of a live one); its queues are qdiscs."""

    record: Record | None = None

    def __init__(self, plan: NetworkPlan) -> None:
        self.plan: NetworkPlan | None = plan

    def namespace(self, host: str) -> str:
        assert self.plan is not None
        return f"{self.plan.prefix}-{host}"

    def queue_in_backend(self, d: WanDirection) -> bool:
        return False

    def backend_queue_trace(self) -> list[dict]:
        return []


def plan(paths: int = 1, placed: bool = True) -> NetworkPlan:
    link: dict = {"between": ["east", "west"], "rate": "50mbit", "delay": "5ms"}
    if paths > 1:
        link = {"between": ["east", "west"], "paths": [{"rate": "50mbit"}] * paths}
    data: dict = {"name": "t", "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
                  "wan": [link]}  # fmt: skip
    if placed:
        data["placement"] = {"machines": {"east": "node-a", "west": "node-b"}}
    return build_plan(parse_scenario(data, "test"), "mctb0000", 64)


def sampled(p: NetworkPlan, tmp: Path) -> tuple[list[str], list[str], list[str]]:
    t = RunTraces(Part(p), TRACE, tmp, [])
    assert t.qdiscs is not None and t.pcap is not None
    taps = [tap.out_direction for tap in t.paths.taps] if t.paths is not None else []
    return [q.direction for q in t.qdiscs.targets], [s.label for s in t.pcap.specs], taps


def test_each_machine_samples_the_shapers_and_wires_it_holds(tmp_path):
    whole = plan()
    # east's gateway shapes east->west, west's west->east; the wire is east's (its first cluster)
    assert sampled(whole.part("node-a"), tmp_path) == (
        ["east->west"],
        ["east->west@to-west", "west->east@to-east"],
        [],
    )
    assert sampled(whole.part("node-b"), tmp_path) == (["west->east"], [], [])
    # on one machine: everything
    one = sampled(plan(placed=False), tmp_path)
    assert one[0] == ["east->west", "west->east"] and len(one[1]) == 2


def test_a_multipath_links_taps_are_on_its_first_gateways_machine(tmp_path):
    whole = plan(paths=2)
    assert sampled(whole.part("node-a"), tmp_path)[2] == ["east->west/0", "east->west/1"]
    assert sampled(whole.part("node-b"), tmp_path)[2] == []
