"""Live test of a DCQCN flow (traffic.dcqcn.flow): a UDP sender (RP) and receiver (NP) in two
host namespaces across a WAN whose bottleneck (the delay line, aqm red) marks CE. The sender's
logged CNP arrivals and sends, replayed offline through a fresh RP, reproduce its live event
trace exactly."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from helpers import scenario

from testbed.core.dcqcn import defaults, dilate
from testbed.net import procs
from traffic.dcqcn.flow import params_to_json
from traffic.dcqcn.replay import replay
from traffic.dcqcn.rp import RpEvent

pytestmark = pytest.mark.live


@pytest.mark.timing
def test_a_dcqcn_flow_is_cut_by_cnps_and_replays_exactly(make_testbed, tmp_path):
    data = scenario(
        wan=[
            {
                "between": ["east", "west"], "rate": "50mbit", "delay": "2ms", "buffer": "1MB",
                "aqm": {"kind": "red", "kmin": "20KB", "kmax": "200KB", "pmax": "10%"},
            }
        ],
        backend="userspace",
    )  # fmt: skip
    tb = make_testbed(data)
    params = dilate(defaults("paper"), 100)
    dst = tb.plan.host("west-h0")
    common = ["--port", "6000", "--params", params_to_json(params), "--out", str(tmp_path)]
    recv = tb.python(
        "west-h0", "traffic.dcqcn.flow", "recv", "--bind", dst.address, *common,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert procs.wait_ready(recv), "the receiver did not start"
        send = tb.python(
            "east-h0", "traffic.dcqcn.flow", "send", "--to", dst.address, "--flow", "0",
            "--line-rate", "100e6", "--duration", "3", *common,
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        sent = json.loads(send.communicate(timeout=60)[0].strip().splitlines()[-1])
        got = json.loads(recv.communicate(timeout=60)[0].strip().splitlines()[-1])
    finally:
        procs.stop(recv)
    # a sender at twice the link's rate builds the queue: marks, CNPs, and the RP cuts.
    # Counts, compared exactly: no time or rate is bounded here, so no tolerance applies (the
    # 2 ms path marks within a few RTTs, long before 3 s of 50 Mbit/s excess (18.75 MB) fill 1 MB)
    assert got["ce"] > 0 and got["cnps"] > 0, got
    # every CNP comes back (small, on an idle reverse path), those for the queue left at the end too
    assert sent["cnps"] == got["cnps"]
    assert got["datagrams"] == sent["sent"]  # the buffer (1 MB) holds the queue: nothing lost
    lines = (tmp_path / "rp-0.jsonl").read_text().splitlines()
    head = json.loads(lines[0])
    live = [RpEvent(**json.loads(line)) for line in lines[1:]]
    assert sum(e.kind == "cut" for e in live) == sent["cnps"]  # the paper cuts on every CNP
    sends = np.load(tmp_path / "rp-0-sends.npy")
    cnps = np.load(tmp_path / "rp-0-cnps.npy")
    again = replay(
        params, head["line_rate_bps"], [(float(t), 1400) for t in sends],
        [float(t) for t in cnps], t0=head["t0"],
    )  # fmt: skip
    assert again == live
