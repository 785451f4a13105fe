"""testbed.mininet, pure: TCLink's keywords as a one-link scenario, the bridged link's plan, the
delay line's rules on bridge ports, a scenario's WAN links as TestbedLink keywords."""

from __future__ import annotations

import pytest

from testbed.config.loading import parse_scenario
from testbed.core.errors import ScenarioError
from testbed.link.delayline import iptables_rules
from testbed.link.kernel import KernelBackend
from testbed.plan.bridged import bridged_link_plan
from testbed.plan.render import ip_batches

pytest.importorskip("mininet.link", reason="testbed.mininet needs Mininet (extra [mininet])")
from testbed.mininet.link import link_scenario
from testbed.mininet.topo import wan_keywords


def test_tclink_keywords_become_the_links_fields():
    data = link_scenario(
        "L",
        {"bw": 2500, "delay": "25ms", "jitter": "1ms", "loss": 0.5, "max_queue_size": 1000,
         "reverse": {"bw": 100, "buffer": "2bdp"}},
    )  # fmt: skip
    (link,) = data["wan"]
    assert link == {
        "between": ["n1", "n2"], "rate": 2_500_000_000, "delay": "25ms", "jitter": "1ms",
        "loss": "0.5%", "buffer": 1_514_000, "reverse": {"rate": 100_000_000, "buffer": "2bdp"},
    }  # fmt: skip
    sc = parse_scenario(data)  # above 1 Gbit/s is kept (TCLink ignores bw > 1000)
    assert sc.wan[0].rate == 2_500_000_000 and sc.wan[0].direction(True)["rate"] == 100_000_000
    assert link_scenario("L", {})["wan"][0]["rate"] == "10gbit"  # unshaped, as TCLink


@pytest.mark.parametrize(
    ("params", "text"),
    [
        ({"delay": 10}, "L: delay: 10 is not a duration string"),
        ({"bw": 0}, "L: bw: 0 is not a rate in Mbit/s"),
        ({"reorder": -1}, "L: reorder: -1 is not a percentage"),
        ({"max_queue_size": 1.5}, "L: max_queue_size: 1.5 is not a number of packets"),
        ({"backend": "netem"}, "L: backend: 'netem' is not allowed"),
        ({"reverse": 5}, "L: reverse: a dict of the second->first direction's keywords"),
        ({"reverse": {"backend": "kernel"}}, "L: reverse: unknown keyword 'backend'"),
        ({"use_tbf": True}, "L: unknown keyword 'use_tbf'; allowed: bw, delay, jitter"),
    ],
)
def test_bad_keywords_are_named_with_what_is_allowed(params, text):
    with pytest.raises(ScenarioError) as err:
        link_scenario("L", params)
    assert text in str(err.value)


def test_the_bridged_plan_puts_bottleneck_then_propagation_in_the_wire():
    sc = parse_scenario(
        link_scenario("L", {"bw": 10, "delay": "10ms", "reverse": {"delay": "5ms"}})
    )
    plan = bridged_link_plan(sc, "mctbx", "l3")
    fwd, rev = plan.wan
    assert (fwd.name, rev.name) == ("n1->n2", "n2->n1")
    assert (fwd.delay, rev.delay) == (0.010, 0.005) and fwd.bdp == rev.bdp == 18750
    # 1 -> 2: a -> br1 -> m1 (HTB) -> m2 -> br2 (the line hooks m2) -> b (netem)
    assert (fwd.shaper.ns, fwd.shaper.ifname) == ("mctbx-l3", "m1")
    assert (fwd.impairment.ingress_if, fwd.impairment.egress_if) == ("m2", "b")
    assert (rev.shaper.ifname, rev.impairment.ingress_if, rev.impairment.egress_if) == (
        "m2", "m1", "a",
    )  # fmt: skip
    assert fwd.impairment.bridged and rev.impairment.bridged
    (ns,) = plan.namespaces
    assert ns.sysctls["net.bridge.bridge-nf-call-iptables"] == "1"
    lines = ip_batches(plan)["mctbx-l3"]
    # the ends' peers (made outside the plan) are enslaved and brought up with the rest
    assert {"link set a master br1", "link set b master br2", "link set a up"} <= set(lines)
    netem = KernelBackend().wire_lines(plan)["mctbx-l3"]
    assert any("dev b " in line and "netem" in line for line in netem), netem


def test_delay_line_rules_match_bridge_ports_with_physdev():
    routed = iptables_rules("to-east", 1, ce_iface="to-west")
    bridged = iptables_rules("m2", 1, ce_iface="b", bridged=True)
    assert routed[0][6:8] == ["-i", "to-east"]
    assert bridged[0][6:10] == ["-m", "physdev", "--physdev-in", "m2"]
    assert bridged[1][6:10] == ["-m", "physdev", "--physdev-out", "b"]
    assert bridged[0][-4:] == routed[0][-4:]  # same queue


def test_a_scenarios_wan_link_as_testbed_link_keywords():
    sc = parse_scenario(
        {"name": "x", "clusters": {"a": {"hosts": 1}, "b": {"hosts": 1}},
         "wan": [{"between": ["a", "b"], "rate": "100mbit", "delay": "20ms", "loss": "0.1%",
                  "buffer": "256KiB", "reverse": {"delay": "5ms"}}]}
    )  # fmt: skip
    kw = wan_keywords(sc.wan[0])
    assert kw == {
        "bw": 100.0, "buffer": 262144, "delay": "20ms", "loss": 0.1,
        "reverse": {"bw": 100.0, "buffer": 262144, "delay": "5ms", "loss": 0.1},
    }  # fmt: skip
    # they validate back to the same link
    back = parse_scenario(link_scenario("L", kw)).wan[0]
    assert back.direction(False)["delay"] == 0.020 and back.direction(True)["delay"] == 0.005
