"""Live emulated-compute training: a synthetic 1B-parameter model at scale 1/1000 across two
emulated clusters, compute a timed wait, the gradients real bytes on the emulated WAN."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import RUN_TAG

from testbed.config.sweep import expand
from testbed.experiment.sweep import Experiment

pytestmark = pytest.mark.live


def emulated_scenario(name: str, rate: str, **workload) -> dict:
    return {
        "name": f"h4-{RUN_TAG}-{name}"[:32],
        "clusters": {"east": {"hosts": 1}, "west": {"hosts": 1}},
        "wan": [{"between": ["east", "west"], "rate": rate, "delay": "1ms"}],
        "workload": {
            "kind": "training",
            "model": {"synthetic": {"params": 1e9, "dtype": "bf16", "layers": 24}},
            "compute": {"step": "0.1s"},
            "scale": "1/1000",
            "timeout": "60s",
            **workload,
        },
    }


@pytest.mark.timeout(120)
def test_ddp_at_scale_moves_the_scaled_gradient_and_its_cu_follows_the_paper_model(root, tmp_path):
    # 1B bf16 gradients at 1/1000: 2 MB per step; a 2-rank ring sends it once each way:
    # at 160 Mbit/s (153 Mbit/s of goodput) 0.105 s against 0.1 s of compute: CU about 0.5.
    # One bucket (the paper model's one all-reduce per step; the real 48 buckets of 28-56 KB
    # pay gloo's round trips 48 times, which the model's single ε does not count)
    ddp = {"overlap": False, "bucket": "4GiB"}
    data = emulated_scenario("ddp", "160mbit", algorithm="ddp", steps=20, ddp=ddp)
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    ok = exp.run(selfcheck_seconds=0.3)
    runs = exp.manifest["runs"]
    assert ok, {k: r["reason"] for k, r in runs.items() if r["status"] != "ok"}
    (s,) = exp.manifest["summary"]
    print({k: s.get(k) for k in sorted(s)})
    assert s["compute"] == "emulated" and s["scale"] == pytest.approx(1e-3)
    assert s["steps"] == 20
    df = pd.read_parquet(exp.results.path / "training.parquet")
    assert set(df["compute_kind"]) == {"emulated"}
    assert (df["compute_s"] == 0.1).all()
    # bf16 gradients of 1e9 x 1/1000 parameters (48 tensors rounded to whole elements)
    assert s["payload_bytes_per_step"] == pytest.approx(2e6, abs=48)
    # both directions of the WAN carry the payload once plus headers and ACKs
    assert s["wan_bytes_per_step"] == pytest.approx(2 * 2e6, rel=0.15)
    assert s["wan_goodput_real_bps"] == pytest.approx(s["wan_goodput_bps"] * 1000)
    cu, paper = s["compute_utilisation_settled"], s["cu_paper_model"]
    assert 0 < cu < 1 and 0 < paper < 1
    assert cu == pytest.approx(paper, rel=0.10)


@pytest.mark.timeout(120)
def test_fp4_streaming_fragments_are_four_bits_an_element_on_the_wire(root, tmp_path):
    # 8 fragments of 3 layers, one every 3 steps, 62.5 KB of fp4 codes each, overlapped by one
    # step (0.1 s) at 4 Mbit/s
    data = emulated_scenario(
        "fp4",
        "4mbit",
        steps=48,
        algorithm="streaming-diloco",
        diloco={"inner_steps": 24, "dtype": "fp4"},
        streaming={"fragments": 8, "overlap_steps": 1},
    )
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    ok = exp.run(selfcheck_seconds=0.3)
    runs = exp.manifest["runs"]
    assert ok, {k: r["reason"] for k, r in runs.items() if r["status"] != "ok"}
    (s,) = exp.manifest["summary"]
    print({k: s.get(k) for k in sorted(s)})
    # 4 bits an element plus one fp32 scale per tensor, a fragment of 6 tensors every 3 steps
    assert s["payload_bytes_per_step"] * 3 == pytest.approx(1e6 / 8 / 2 + 24, abs=6)
    # a 2-rank all-gather: each direction carries one rank's codes (plus headers and ACKs)
    assert s["wan_bytes_per_step"] == pytest.approx(2 * s["payload_bytes_per_step"], rel=0.15)
    assert 0.5 < s["compute_utilisation_settled"] <= 1.0


@pytest.mark.timeout(150)
def test_the_same_point_at_two_scales_has_the_same_cu(root, tmp_path):
    # DiLoCo H=10 with a 1B bf16 model at 6 Gbit/s real: a 2 GB sync (2.8 s real) every 1 s of
    # compute. At 1/1000 it is 2 MB over 6 Mbit/s, at 1/100 20 MB over 60 Mbit/s: both are
    # many initial windows and shaper buckets, so the CU must agree. The bottleneck buffer is
    # scaled with them (200 MB real: 267 ms at either scale): the default, 1 BDP floored at
    # 128 KiB, is not scaled (175 ms of queue at 6 Mbit/s, 17 ms at 60 Mbit/s)
    data = emulated_scenario("scl", "60mbit", steps=15, algorithm="diloco")
    data["workload"]["diloco"] = {"inner_steps": 10, "dtype": "bf16"}
    data["sweep"] = {
        "cases": [
            {"workload.scale": "1/100", "wan[0].rate": "60mbit", "wan[0].buffer": "2MB"},
            {"workload.scale": "1/1000", "wan[0].rate": "6mbit", "wan[0].buffer": "200KB"},
        ]
    }
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    ok = exp.run(selfcheck_seconds=0.3)
    runs = exp.manifest["runs"]
    assert ok, {k: r["reason"] for k, r in runs.items() if r["status"] != "ok"}
    by_scale = {round(s["scale"], 6): s for s in exp.manifest["summary"]}
    for s in by_scale.values():
        print({k: s.get(k) for k in sorted(s)})
    big, small = by_scale[0.01], by_scale[0.001]
    assert big["wan_goodput_real_bps"] == pytest.approx(small["wan_goodput_real_bps"], rel=0.01)
    # each of the 48 tensors rounded to whole elements at each scale
    assert big["payload_bytes_per_step"] == pytest.approx(
        10 * small["payload_bytes_per_step"], rel=1e-4
    )
    # Both scales measure a CU. How close the two are is a fidelity target (within 5%), so it is
    # measured in benchmarks/table4.py (its DiLoCo twin points), not asserted here: one sync
    # period per scale read 0.208 and 0.250 beside a second test worker, 0.249 and 0.256 alone.
    for s in (big, small):
        assert 0.0 < s["compute_utilisation_settled"] <= 1.0


@pytest.mark.timing
@pytest.mark.timeout(150)
def test_hierarchical_cu_follows_diloco_with_the_clusters_as_replicas(root, tmp_path):
    # 2 clusters x 2 ranks, 1B bf16 at 1/1000: DDP's 48 buckets (2 MB) all-reduced inside each
    # cluster every step over the unshaped fabric, overlapped with the backward wait; every
    # H = 5 steps the two leaders all-reduce 2 MB of bf16 pseudo-gradients over 32 Mbit/s
    # (32 Gbit/s real; 30.6 Mbit/s of goodput: 0.52 s) and broadcast the parameters in their
    # cluster. Paper model (DiLoCo with M = 2 clusters): CU about 0.49.
    data = emulated_scenario(
        "hier",
        "32mbit",
        algorithm="hierarchical",
        steps=30,
        diloco={"inner_steps": 5, "dtype": "bf16"},
    )
    data["clusters"] = {"east": {"hosts": 2}, "west": {"hosts": 2}}
    exp = Experiment(expand(data, "test"), "test", tmp_path, resume=False)
    ok = exp.run(selfcheck_seconds=0.3)
    runs = exp.manifest["runs"]
    assert ok, {k: r["reason"] for k, r in runs.items() if r["status"] != "ok"}
    (s,) = exp.manifest["summary"]
    print({k: s.get(k) for k in sorted(s)})
    assert s["compute"] == "emulated" and s["steps"] == 30
    # the cluster's 2 MB every step and the leaders' 2 MB every 5 steps (48 tensors rounded)
    assert s["payload_bytes_per_step"] == pytest.approx(2e6 + 2e6 / 5, abs=100)
    # only the leaders cross the WAN: each direction carries their 2 MB once per 5 steps (plus
    # headers and ACKs); the in-cluster gradients would add 4 MB per step
    assert s["wan_bytes_per_step"] == pytest.approx(2 * 2e6 / 5, rel=0.15)
    cu, paper, ab = (
        s[k] for k in ("compute_utilisation_settled", "cu_paper_model", "cu_alpha_beta")
    )
    # Bound from the measurement's resolution and spread. Above the model: the shaper's 67 KB
    # bucket passes 3.3% of each 2 MB sync at line rate (CU 1.7% higher), plus 1 ms of sleep
    # resolution per step (1%): +3%. Below: what the paper model leaves out. The slowest rank's
    # steps without a sync run 5-8 ms over their compute (the in-cluster exchange's tail after
    # the backward) and each sync 15 ms over the leaders' all-reduce (the broadcast in the
    # cluster); and a sync whose 2 MB lose a packet at the 128 KiB bottleneck buffer (cubic
    # probing past it: 0-5 drops a sync in the queue counters) takes 35-115 ms longer (a queue's
    # round trip of recovery; a TLP when the drop is near the end). At 15 steps (2 settled sync
    # periods) those drops spread the ratio by sd 2.6% (13 quiet runs: -8.7% to -1.1%), hence 30
    # steps (5 periods): 63 runs with at most one core busy beside the test (quiet, one live-tier
    # worker, stress-ng on one core as the flake hunt runs) read -7.4% to -0.5% (mean -3.1%, sd
    # 1.3%; one core busy alone: mean -3.4%). Mean - 4 sd: -8.3%, so -8%. The host's share moves
    # it: 14 runs beside one busy core *and* a live-tier worker (others 55-65% of the machine)
    # read mean -4.4%, down to -8.2% (slower in-cluster exchanges: 12-13 ms a step instead of
    # 3-5); beyond one core of others the timing plugin reruns, then xfails (tests/timing.py).
    # At 60 steps the spread stays (20 runs: sd 1.3-1.4%): the load moves the mean, not noise.
    for model in (paper, ab):
        assert -0.08 <= cu / model - 1 <= 0.03, (cu, model)
