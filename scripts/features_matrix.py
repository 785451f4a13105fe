"""Generate docs/features.md: which feature runs in which combination of engine, machines and
link, and the test that runs it or the schema's reason for refusing it.

Nothing in the matrix is written by hand. Each cell is a small scenario validated by the real
schema (``testbed.config.scenario.Scenario``): accepted, or refused with the schema's own text.
The tests that run an accepted cell are the explicit table ``TESTS`` below (node ids in
tests/live and tests/acceptance; tests/unit/test_features_matrix.py collects them). The
refusals the schema can give are found in its source (``refusal_sites``: every ``raise`` in
testbed/config whose text refuses a combination), and the unit test fails when one of them is
given by no cell, so a new refusal cannot stay out of the matrix.

    .venv/bin/python scripts/features_matrix.py          # rewrite docs/features.md
    .venv/bin/python scripts/features_matrix.py --check  # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import ValidationError  # noqa: E402

from testbed.config.fields import FieldError  # noqa: E402
from testbed.config.loading import describe_errors  # noqa: E402
from testbed.config.scenario import Scenario  # noqa: E402

DOC = ROOT / "docs" / "features.md"
CONFIG = ROOT / "testbed" / "config"

# A raise in testbed/config refuses a combination (rather than a bad value) when its text says
# the feature is not there (yet, on paths, across machines) or names the engine it needs.
REFUSAL = re.compile(
    r"not across machines|several machines|on a link with `paths`|`engine: native`"
    r"|static routing|mininet|\bnot supported\b|\byet\b",
    re.IGNORECASE,
)

ENGINES = ("native", "mininet")
MACHINES = ("one", "across")
LINKS = ("single", "multipath")


@dataclass(frozen=True)
class Column:
    engine: str
    machines: str
    link: str

    @property
    def title(self) -> str:
        where = "one machine" if self.machines == "one" else "across machines"
        link = "one path" if self.link == "single" else "multipath"
        return f"{self.engine}<br>{where}<br>{link}"


COLUMNS = [Column(e, m, ln) for e in ENGINES for m in MACHINES for ln in LINKS]

Data = dict[str, Any]


def _base(col: Column) -> Data:
    """The smallest scenario of a column: two clusters, one WAN link, a collectives workload."""
    if col.link == "single":
        link: Data = {"between": ["east", "west"], "rate": "100mbit", "delay": "5ms"}
    else:
        path = {"rate": "100mbit", "delay": "5ms"}
        link = {"between": ["east", "west"], "paths": [dict(path), dict(path)]}
    data: Data = {
        "name": "features",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [link],
        "workload": {"kind": "collectives"},
    }
    if col.engine != "native":
        data["engine"] = col.engine
    if col.machines == "across":
        data["placement"] = {"machines": {"east": "machine-a", "west": "machine-b"}}
    return data


def _workload(kind: Data) -> Callable[[Data, Column], list[Data]]:
    return lambda d, col: [{**d, "workload": kind}]


def _traffic(flow: Data, keep_workload: bool = True) -> Callable[[Data, Column], list[Data]]:
    def make(d: Data, col: Column) -> list[Data]:
        out = {**d, "traffic": [flow]}
        if not keep_workload:
            out.pop("workload")
        return [out]

    return make


def _link_dynamics(key: str, value: Any) -> Callable[[Data, Column], list[Data]]:
    """On the link; on a multipath link on its first path, then on the link: the cell is
    accepted when either is."""

    def make(d: Data, col: Column) -> list[Data]:
        link = d["wan"][0]
        if key == "preset":  # a preset fills the rate and delay itself
            link = {k: v for k, v in link.items() if k not in ("rate", "delay")}
        tries = [{**d, "wan": [{**link, key: value}]}]
        if "paths" in link:
            first = {k: v for k, v in link["paths"][0].items() if key != "preset" or k == "weight"}
            paths = [{**first, key: value}, *link["paths"][1:]]
            tries.insert(0, {**d, "wan": [{**d["wan"][0], "paths": paths}]})
        return tries

    return make


def _fault(fault: Data) -> Callable[[Data, Column], list[Data]]:
    def make(d: Data, col: Column) -> list[Data]:
        f = dict(fault)
        if "link" in f and col.link == "multipath":
            f["link"] = "east-west/1"  # one path of the link
        return [{**d, "faults": [{"at": "1s", **f}]}]

    return make


def _set(key: str, value: Any) -> Callable[[Data, Column], list[Data]]:
    return lambda d, col: [{**d, key: value}]


def _unequal(mode: str) -> Callable[[Data, Column], list[Data]]:
    def make(d: Data, col: Column) -> list[Data]:
        link = d["wan"][0]
        paths = [{**p, "weight": w} for p, w in zip(link["paths"], (1, 3), strict=True)]
        return [{**d, "routing": {"mode": mode}, "wan": [{**link, "paths": paths}]}]

    return make


@dataclass(frozen=True)
class Row:
    group: str
    name: str
    make: Callable[[Data, Column], list[Data]]
    links: tuple[str, ...] = LINKS  # where it applies; elsewhere the cell is "n/a"
    why_na: str = ""


BULK = {"kind": "bulk", "from": "east-h0", "to": "west-h0", "duration": "10s"}
DCQCN_FLOW = {"from": "east-h0", "to": "west-h0"}
ONE_PATH = "a link of one path has nothing to spread or weigh"
ROWS = [
    Row("workloads", "collectives", _workload({"kind": "collectives"})),
    Row("workloads", "training (a real model)", _workload({"kind": "training"})),
    Row(
        "workloads",
        "training (an emulated model)",
        _workload(
            {"kind": "training", "model": "llama-3-1b", "compute": {"step": "0.1s"}, "scale": 0.001}
        ),
    ),
    Row(
        "workloads", "command (a user's program)", _workload({"kind": "command", "argv": ["true"]})
    ),
    Row(
        "workloads",
        "dcqcn flows",
        _workload({"kind": "dcqcn", "flows": [DCQCN_FLOW], "duration": "10s"}),
    ),
    Row("workloads", "bulk traffic alone", _traffic(BULK, keep_workload=False)),
    Row("workloads", "bulk cross-traffic beside a workload", _traffic(BULK)),
    Row(
        "workloads",
        "dcqcn cross-traffic beside a workload",
        _traffic({"kind": "dcqcn", **DCQCN_FLOW, "duration": "10s"}),
    ),
    Row("dynamics", "schedule", _link_dynamics("schedule", [{"at": "1s", "rate": "50mbit"}])),
    Row("dynamics", "trace", _link_dynamics("trace", {"file": "steps.csv", "format": "csv"})),
    Row("dynamics", "preset", _link_dynamics("preset", "pantheon/aws-korea-china")),
    Row(
        "faults", "blackhole", _fault({"kind": "blackhole", "link": "east-west", "duration": "2s"})
    ),
    Row(
        "faults", "link_down", _fault({"kind": "link_down", "link": "east-west", "duration": "2s"})
    ),
    Row("faults", "reset", _fault({"kind": "reset", "link": "east-west"})),
    Row("faults", "flap", _fault({"kind": "flap", "link": "east-west", "down": "1s", "up": "1s"})),
    Row(
        "faults",
        "burst_loss",
        _fault(
            {"kind": "burst_loss", "link": "east-west", "duration": "2s", "p": "1%", "r": "10%"}
        ),
    ),
    Row(
        "faults",
        "partition",
        _fault({"kind": "partition", "groups": [["east"], ["west"]], "duration": "2s"}),
    ),
    Row("faults", "gateway_crash", _fault({"kind": "gateway_crash", "cluster": "east"})),
    Row("tracing", "tcp_info", _set("trace", {"tcp_info": "100ms"})),
    Row("tracing", "queues", _set("trace", {"queues": "10ms"})),
    Row("tracing", "pcap", _set("trace", {"pcap": True})),
    Row("routing", "static", _set("routing", {"mode": "static"})),
    Row(
        "routing",
        "static, unequal path weights",
        _unequal("static"),
        links=("multipath",),
        why_na=ONE_PATH,
    ),
    Row(
        "routing",
        "ecmp (L3 or L4 hash)",
        _set("routing", {"mode": "static", "ecmp": {"hash": "l3"}}),
        links=("multipath",),
        why_na=ONE_PATH,
    ),
    Row("routing", "bgp (FRR, BFD)", _set("routing", {"mode": "bgp"})),
    Row(
        "routing",
        "bgp, unequal path weights",
        _unequal("bgp"),
        links=("multipath",),
        why_na=ONE_PATH,
    ),
]

# (row, engine, machines, link) -> (a file of tests/live, a test in it) that runs that
# combination. A test here exercises the feature in that column, through a scenario or the
# runner's own API.
_LIVE_TESTS: dict[tuple[str, str, str, str], tuple[str, str]] = {
    ("collectives", "native", "one", "single"): (
        "test_live_collectives.py",
        "test_every_collective_and_algorithm_runs_correctly",
    ),
    ("collectives", "native", "one", "multipath"): (
        "test_flowpaths.py",
        "test_every_cross_wan_flow_has_a_path_matching_the_shaper_counters",
    ),
    ("collectives", "native", "across", "single"): (
        "test_spanned.py",
        "test_a_topology_over_two_machines_reaches_checks_and_reduces_like_one",
    ),
    ("schedule", "native", "across", "single"): (
        "test_spanned_dynamics.py",
        "test_a_schedule_step_and_a_blackhole_act_across_machines_on_the_drivers_clock",
    ),
    ("blackhole", "native", "across", "single"): (
        "test_spanned_dynamics.py",
        "test_a_schedule_step_and_a_blackhole_act_across_machines_on_the_drivers_clock",
    ),
    ("link_down", "native", "across", "single"): (
        "test_spanned_dynamics.py",
        "test_a_schedule_step_and_a_blackhole_act_across_machines_on_the_drivers_clock",
    ),
    ("trace", "native", "across", "single"): (
        "test_spanned_composed.py",
        "test_a_placed_scenario_with_everything_reports_like_one_machine",
    ),
    ("training (a real model)", "native", "across", "multipath"): (
        "test_spanned_composed.py",
        "test_a_placed_scenario_with_everything_reports_like_one_machine",
    ),
    ("collectives", "mininet", "one", "single"): (
        "test_mininet_engine.py",
        "test_a_run_on_the_mininet_engine_records_it",
    ),
    ("dcqcn flows", "native", "one", "single"): (
        "test_dcqcn_run.py",
        "test_a_dcqcn_workload_runs_records_and_reports",
    ),
    ("bulk traffic alone", "native", "one", "single"): (
        "test_events_runner.py",
        "test_bulk_traffic_alone_records_its_goodput",
    ),
    ("dcqcn cross-traffic beside a workload", "native", "one", "single"): (
        "test_dcqcn_run.py",
        "test_a_dcqcn_tenant_beside_an_all_reduce_is_recorded_when_the_workload_stops_it",
    ),
    ("schedule", "native", "one", "single"): (
        "test_events_runner.py",
        "test_iterations_are_announced_and_a_set_moves_the_collective",
    ),
    ("trace", "native", "one", "single"): (
        "test_live_trace_replay.py",
        "test_a_replayed_step_trace_is_followed_second_by_second",
    ),
    ("blackhole", "native", "one", "single"): (
        "test_fault_mechanisms.py",
        "test_a_2s_blackhole_stalls_tcp_for_the_rto_series_then_it_resumes",
    ),
    ("blackhole", "native", "one", "multipath"): (
        "test_bgp_routing.py",
        "test_a_run_records_routing_events_and_the_failover",
    ),
    ("link_down", "native", "one", "single"): (
        "test_fault_mechanisms.py",
        "test_link_down_is_survived_and_its_routes_come_back",
    ),
    ("link_down", "native", "one", "multipath"): (
        "test_multipath.py",
        "test_flows_cross_every_path_and_a_downed_path_moves_them",
    ),
    ("reset", "native", "one", "single"): (
        "test_fault_mechanisms.py",
        "test_reset_gives_an_established_sender_econnreset_within_1s",
    ),
    ("preset", "native", "one", "single"): (
        "test_events_runner.py",
        "test_a_blackhole_longer_than_the_timeout_fails_the_run_with_gloos_text",
    ),
    ("flap", "native", "one", "single"): (
        "test_events_runner.py",
        "test_a_blackhole_longer_than_the_timeout_fails_the_run_with_gloos_text",
    ),
    ("bgp (FRR, BFD)", "native", "one", "single"): (
        "test_bgp_routing.py",
        "test_bgp_with_bfd_on_a_link_of_one_path",
    ),
    ("burst_loss", "native", "one", "single"): (
        "test_fault_mechanisms.py",
        "test_burst_loss_on_the_delay_line_matches_gilbert_elliott",
    ),
    ("partition", "native", "one", "single"): (
        "test_pytest_plugin.py",
        "test_a_users_collective_survives_a_partition_and_sees_its_events",
    ),
    ("gateway_crash", "native", "one", "single"): (
        "test_fault_mechanisms.py",
        "test_gateway_crash_loses_its_queues_and_is_survived_after_restore",
    ),
    ("tcp_info", "native", "one", "single"): (
        "test_live_traces.py",
        "test_tcp_trace_has_sane_samples_of_the_wan_flows",
    ),
    ("queues", "native", "one", "single"): (
        "test_live_traces.py",
        "test_queue_trace_follows_the_bottleneck",
    ),
    ("queues", "native", "one", "multipath"): (
        "test_flowpaths.py",
        "test_every_cross_wan_flow_has_a_path_matching_the_shaper_counters",
    ),
    ("pcap", "native", "one", "single"): (
        "test_live_traces.py",
        "test_flows_from_the_pcaps_carry_the_collective",
    ),
    ("static", "native", "one", "single"): (
        "test_live_network.py",
        "test_every_host_reaches_every_other_host_by_name",
    ),
    ("static", "native", "one", "multipath"): (
        "test_multipath.py",
        "test_flows_cross_every_path_and_a_downed_path_moves_them",
    ),
    ("static", "native", "across", "single"): (
        "test_spanned.py",
        "test_a_topology_over_two_machines_reaches_checks_and_reduces_like_one",
    ),
    ("static", "mininet", "one", "single"): (
        "test_mininet_engine.py",
        "test_the_plan_as_mininet_nodes_with_the_project_links",
    ),
    ("bulk cross-traffic beside a workload", "native", "one", "single"): (
        "test_events_runner.py",
        "test_tcp_user_timeout_fails_a_blackholed_rank_before_the_operation_timeout",
    ),
    ("bulk traffic alone", "native", "one", "multipath"): (
        "test_multipath_dynamics.py",
        "test_a_trace_on_one_path_sets_its_rate_while_the_hash_spreads_flows",
    ),
    ("schedule", "native", "one", "multipath"): (
        "test_multipath_dynamics.py",
        "test_a_schedule_step_on_one_path_changes_that_path_only",
    ),
    ("trace", "native", "one", "multipath"): (
        "test_multipath_dynamics.py",
        "test_a_trace_on_one_path_sets_its_rate_while_the_hash_spreads_flows",
    ),
    ("training (a real model)", "native", "one", "single"): (
        "test_live_training.py",
        "test_every_algorithm_trains_and_diloco_sends_one_hth_of_ddp",
    ),
    ("training (an emulated model)", "native", "one", "single"): (
        "test_live_emulated_training.py",
        "test_ddp_at_scale_moves_the_scaled_gradient_and_its_cu_follows_the_paper_model",
    ),
    ("command (a user's program)", "native", "one", "single"): (
        "test_command_workload.py",
        "test_a_plain_program_gets_its_placeholders_environment_hostname_and_metrics",
    ),
    ("training (a real model)", "native", "across", "single"): (
        "test_spanned_workloads.py",
        "test_a_diloco_run_across_machines_sends_the_wan_bytes_of_one_machine",
    ),
    ("training (an emulated model)", "native", "across", "single"): (
        "test_spanned_workloads.py",
        "test_a_diloco_run_across_machines_sends_the_wan_bytes_of_one_machine",
    ),
    ("command (a user's program)", "native", "across", "single"): (
        "test_spanned_workloads.py",
        "test_a_command_workload_and_its_service_run_across_machines",
    ),
    ("ecmp (L3 or L4 hash)", "native", "one", "multipath"): (
        "test_multipath.py",
        "test_l3_hash_keeps_one_host_pair_on_one_path",
    ),
    ("bgp (FRR, BFD)", "native", "one", "multipath"): (
        "test_bgp_routing.py",
        "test_frr_routes_over_every_path_with_bfd_and_leaves_nothing",
    ),
    ("bgp (FRR, BFD)", "mininet", "one", "multipath"): (
        "test_mininet_engine.py",
        "test_bgp_with_bfd_runs_on_the_mininet_engine",
    ),
    ("bgp (FRR, BFD)", "native", "across", "single"): (
        "test_spanned_bgp.py",
        "test_bgp_with_bfd_across_two_machines_routes_fails_over_and_leaves_nothing",
    ),
    ("bgp (FRR, BFD)", "native", "across", "multipath"): (
        "test_spanned_bgp.py",
        "test_bgp_with_bfd_across_two_machines_routes_fails_over_and_leaves_nothing",
    ),
    ("collectives", "native", "across", "multipath"): (
        "test_spanned_bgp.py",
        "test_bgp_with_bfd_across_two_machines_routes_fails_over_and_leaves_nothing",
    ),
    ("tcp_info", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("queues", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("pcap", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("bulk traffic alone", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("dcqcn flows", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("bulk cross-traffic beside a workload", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("dcqcn cross-traffic beside a workload", "native", "across", "single"): (
        "test_spanned_tracing.py",
        "test_traces_and_cross_traffic_across_machines_land_in_one_machines_tables",
    ),
    ("command (a user's program)", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("command (a user's program)", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("command (a user's program)", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("bulk cross-traffic beside a workload", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("bulk cross-traffic beside a workload", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("bulk cross-traffic beside a workload", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("dcqcn cross-traffic beside a workload", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("dcqcn cross-traffic beside a workload", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("dcqcn cross-traffic beside a workload", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("schedule", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("schedule", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("blackhole", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("blackhole", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("link_down", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("link_down", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("reset", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("reset", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("reset", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("flap", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("flap", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("flap", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("burst_loss", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("burst_loss", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("burst_loss", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("partition", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("partition", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("partition", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("gateway_crash", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("gateway_crash", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("gateway_crash", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("tcp_info", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("tcp_info", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("tcp_info", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("queues", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("queues", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("pcap", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("pcap", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_the_mininet_engine",
    ),
    ("pcap", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("static", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("static, unequal path weights", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two",
    ),
    ("static, unequal path weights", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("ecmp (L3 or L4 hash)", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_on_the_mininet_engine",
    ),
    ("training (a real model)", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_workload_beside_traffic_with_a_trace_and_a_preset_on_two_paths",
    ),
    ("training (an emulated model)", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_workload_beside_traffic_with_a_trace_and_a_preset_on_two_paths",
    ),
    ("dcqcn flows", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_workload_beside_traffic_with_a_trace_and_a_preset_on_two_paths",
    ),
    ("preset", "native", "one", "multipath"): (
        "test_composed_native_multipath.py",
        "test_every_workload_beside_traffic_with_a_trace_and_a_preset_on_two_paths",
    ),
    ("training (a real model)", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("training (an emulated model)", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("dcqcn flows", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("bulk traffic alone", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("trace", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("preset", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_the_mininet_engine",
    ),
    ("collectives", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("training (a real model)", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("training (an emulated model)", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("dcqcn flows", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("bulk traffic alone", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("trace", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("preset", "mininet", "one", "multipath"): (
        "test_mininet_composed.py",
        "test_every_workload_and_bulk_alone_with_a_trace_and_a_preset_on_two_paths_on_mininet",
    ),
    ("bgp (FRR, BFD)", "mininet", "one", "single"): (
        "test_mininet_composed.py",
        "test_bgp_with_bfd_on_a_link_of_one_path_on_the_mininet_engine",
    ),
    ("preset", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("reset", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("flap", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("burst_loss", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("partition", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("gateway_crash", "native", "across", "single"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_a_preset_link_across_machines",
    ),
    ("command (a user's program)", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("bulk cross-traffic beside a workload", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("dcqcn cross-traffic beside a workload", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("schedule", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("blackhole", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("link_down", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("reset", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("flap", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("burst_loss", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("partition", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("gateway_crash", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("tcp_info", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("queues", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("pcap", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("static", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("static, unequal path weights", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("ecmp (L3 or L4 hash)", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("preset", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_every_fault_traffic_and_trace_on_one_path_of_two_across_machines",
    ),
    ("training (an emulated model)", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_a_training_beside_traffic_with_a_trace_and_a_preset_on_two_paths_across_machines",
    ),
    ("dcqcn flows", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_a_training_beside_traffic_with_a_trace_and_a_preset_on_two_paths_across_machines",
    ),
    ("bulk traffic alone", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_a_training_beside_traffic_with_a_trace_and_a_preset_on_two_paths_across_machines",
    ),
    ("trace", "native", "across", "multipath"): (
        "test_spanned_columns.py",
        "test_a_training_beside_traffic_with_a_trace_and_a_preset_on_two_paths_across_machines",
    ),
}
TESTS = {key: f"tests/live/{file}::{name}" for key, (file, name) in _LIVE_TESTS.items()}


@dataclass(frozen=True)
class Refusal:
    field: str
    text: str
    site: tuple[str, int] | None  # (file relative to the root, line of the raise)


@dataclass
class Cell:
    row: Row
    col: Column
    refusals: list[Refusal] = field(default_factory=list)  # empty: accepted
    test: str | None = None
    na: bool = False


def _site(exc: BaseException) -> tuple[str, int] | None:
    tb = exc.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    try:
        return str(path.relative_to(ROOT)), tb.tb_lineno
    except ValueError:
        return None


def validate(data: Data) -> list[Refusal]:
    """The schema's refusals of ``data`` (empty: accepted), each with the raise it came from."""
    try:
        Scenario.model_validate(data)
    except ValidationError as exc:
        described = describe_errors(exc, data)
        sites = []
        for error in exc.errors():
            inner = (error.get("ctx") or {}).get("error")
            sites.append(_site(inner) if isinstance(inner, FieldError | ValueError) else None)
        return [
            Refusal(path, message, site)
            for (path, message), site in zip(described, sites, strict=False)
        ]
    return []


def probe(row: Row, col: Column) -> Cell:
    if col.link not in row.links:
        return Cell(row, col, na=True)
    tries = row.make(_base(col), col)
    refused = []
    for data in tries:
        refusals = validate(data)
        if not refusals:
            test = TESTS.get((row.name, col.engine, col.machines, col.link))
            return Cell(row, col, test=test)
        refused.append(refusals)
    # the reason: the first try refused by a refusal of the schema (not a hint to move a
    # field, which another try follows), else the first try's errors
    sites = refusal_sites()
    for refusals in refused:
        if any(s.covers(r.site) for r in refusals for s in sites):
            return Cell(row, col, refusals=refusals)
    return Cell(row, col, refusals=refused[0])


def cells() -> list[Cell]:
    return [probe(row, col) for row in ROWS for col in COLUMNS]


# ------------------------------------------------------------------ the refusals in the source


@dataclass(frozen=True)
class Site:
    file: str
    first: int  # the raise statement's lines
    last: int
    text: str  # its message's literal parts, local string names resolved

    def covers(self, site: tuple[str, int] | None) -> bool:
        return site is not None and site[0] == self.file and self.first <= site[1] <= self.last


def _literal(node: ast.AST, names: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_literal(v, names) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return _literal(node.value, names)
    if isinstance(node, ast.Name):
        return names.get(node.id, "")
    if isinstance(node, ast.BinOp):
        return _literal(node.left, names) + _literal(node.right, names)
    if isinstance(node, ast.Tuple | ast.List):  # a table of (where, bad, what) checks
        return " ".join(_literal(e, names) for e in node.elts)
    return ""


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            yield node


@functools.cache
def refusal_sites(config: Path = CONFIG) -> tuple[Site, ...]:
    """Every ``raise`` in testbed/config (``config``) whose message (with the strings its
    function binds to local names, and the module's string constants) refuses a combination."""
    out = []
    for path in sorted(config.glob("*.py")):
        tree = ast.parse(path.read_text())
        consts = {
            t.id: _literal(n.value, {})
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        consts.update(  # a module-level dict of reasons: its values
            {
                t.id: " ".join(_literal(v, {}) for v in n.value.values)
                for n in tree.body
                if isinstance(n, ast.Assign | ast.AnnAssign) and isinstance(n.value, ast.Dict)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                if isinstance(t, ast.Name)
            }
        )
        for fn in _functions(tree):
            names = dict(consts)
            for node in ast.walk(fn):
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            names[t.id] = _literal(node.value, names)
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
                    continue
                text = " ".join(_literal(a, names) for a in node.exc.args)
                if REFUSAL.search(text):
                    rel = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
                    out.append(Site(rel, node.lineno, node.end_lineno or node.lineno, text))
    return tuple(out)


# ----------------------------------------------------------------------------- the document

INTRO = """# Features: what runs with what

Which feature runs on which engine, on one machine or across machines (`placement:`), and on a
link of one path or several (`paths:`). A cell links the test that runs that combination, says
the scenario schema accepts it with no test running it yet, or gives the schema's reason for
refusing it (the text `testbed validate` prints). Generated by `scripts/features_matrix.py` from
the schema and the tests: do not edit it by hand; rerun the script after changing either
(tests/unit/test_features_matrix.py fails when this page, the schema's refusals or a linked test
disagree).

Each cell is the smallest scenario with that feature (two clusters of one host, one WAN link, a
collectives workload unless the row is one), validated by `testbed.config.scenario.Scenario`.
On a multipath link, a schedule, trace or preset is tried on the link and on one of its paths;
a fault names one path (`east-west/1`).

Key: ✅ T*n*: a test runs it, named below · ☑️ accepted, no test runs it yet · ❌ R*n*: refused, the
reason below · n/a: the row does not apply to the column.
"""


def render(all_cells: list[Cell] | None = None) -> str:
    all_cells = cells() if all_cells is None else all_cells
    reasons: dict[str, int] = {}  # a refusal's text -> its number
    fields: dict[str, list[str]] = {}  # the fields it is given for
    for c in all_cells:
        for r in c.refusals:
            reasons.setdefault(r.text, len(reasons) + 1)
            if r.field not in fields.setdefault(r.text, []):
                fields[r.text].append(r.field)
    tests: dict[str, int] = {}  # a linked test -> its number
    for c in all_cells:
        if c.test and not c.refusals:
            tests.setdefault(c.test, len(tests) + 1)
    by = {(c.row.name, c.col): c for c in all_cells}
    lines = [INTRO]
    groups = list(dict.fromkeys(r.group for r in ROWS))
    for group in groups:
        lines.append(f"## {group.capitalize()}\n")
        lines.append("| | " + " | ".join(c.title for c in COLUMNS) + " |")
        lines.append("|---" * (len(COLUMNS) + 1) + "|")
        for row in (r for r in ROWS if r.group == group):
            shown = []
            for col in COLUMNS:
                c = by[(row.name, col)]
                if c.na:
                    shown.append("n/a")
                elif c.refusals:
                    ids = dict.fromkeys(reasons[r.text] for r in c.refusals)
                    shown.append("❌ " + ", ".join(f"[R{i}](#r{i})" for i in ids))
                elif c.test:
                    shown.append(f"✅ [T{tests[c.test]}](#t{tests[c.test]})")
                else:
                    shown.append("☑️")
            lines.append(f"| {row.name} | " + " | ".join(shown) + " |")
        lines.append("")
    lines.append("## Tests\n")
    lines.append("The tests the cells link (pytest node ids).\n")
    for node, i in tests.items():
        file = node.partition("::")[0]
        lines.append(f'- <a id="t{i}"></a>**T{i}** [`{node}`](../{file})')
    lines.append("")
    lines.append("## Not applicable\n")
    for row in ROWS:
        if row.why_na:
            lines.append(f"- {row.name}: n/a on a link of one path: {row.why_na}.")
    lines.append("")
    lines.append("## Refusals\n")
    lines.append("The schema's own words, after the fields it names.\n")
    for text, i in reasons.items():
        named = ", ".join(f"`{f}`" for f in fields[text])
        lines.append(f'- <a id="r{i}"></a>**R{i}** {named}: {text}')
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/features.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/features.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run {Path(__file__).name}")
            return 1
        return 0
    DOC.write_text(text)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
