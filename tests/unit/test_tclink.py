"""backend tclink, pure: a WAN direction as Mininet's TCLink keywords, and who gets it."""

from __future__ import annotations

from testbed.config.loading import parse_scenario
from testbed.plan.render import tclink_params
from testbed.plan.topology import build_plan


def test_tclink_params_are_what_a_mininet_user_writes() -> None:
    """backend tclink: a WAN direction as TCIntf.config keywords (Mbit/s, netem strings,
    percent, the buffer in full-size packets as netem's limit; none of it without netem)."""
    data = {
        "name": "x",
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": "2gbit", "delay": "25ms", "jitter": "1ms",
                 "loss": "0.5%", "buffer": "1514000B"}],
    }  # fmt: skip
    d = build_plan(parse_scenario(data), "p", 1).wan[0]
    assert tclink_params(d) == {
        "bw": 2000.0, "max_queue_size": 1000, "delay": "25ms", "jitter": "1ms", "loss": 0.5,
    }  # fmt: skip
    assert "max_queue_size" not in tclink_params(d, netem=False)
