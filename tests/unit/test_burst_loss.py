"""Gilbert-Elliott burst loss, the pure parts: the delay line's state machine (long-run loss
p/(p+r), bursts of 1/r packets on average), its config and reload, and netem's rendering."""

from __future__ import annotations

import dataclasses
import random

import pytest

from testbed.link import delayline as dl
from testbed.link.delayline.loop import DelayLine
from testbed.link.delayline.model import HOLD, Queue, decide
from testbed.link.delayline.nfqueue import NF_DROP
from testbed.link.delayline.stats import queue_stats
from testbed.plan.model import Impairment
from testbed.plan.render import netem_args


def queue(seed: int = 1, **cfg: object) -> Queue:
    return Queue(dl.QueueConfig.from_dict({"num": 3, "delay": 0.01, **cfg}), random.Random(seed))


def losses(q: Queue, n: int) -> list[bool]:
    return [decide(q, pid, pid * 1e-5, 1500, 0) == NF_DROP for pid in range(n)]


def bursts(lost: list[bool]) -> list[int]:
    """Lengths of the runs of consecutive losses."""
    out, run = [], 0
    for x in lost:
        if x:
            run += 1
        elif run:
            out.append(run)
            run = 0
    return out + ([run] if run else [])


@pytest.mark.parametrize(("p", "r"), [(0.01, 0.25), (0.05, 0.5), (0.002, 0.1)])
def test_long_run_loss_is_p_over_p_plus_r_and_bursts_last_one_over_r(p: float, r: float) -> None:
    n = 300_000
    q = queue(seed=7, ge_p=p, ge_r=r)
    lost = losses(q, n)
    rate, runs = sum(lost) / n, bursts(lost)
    # Bursts are geometric (mean 1/r, variance (1-r)/r^2) and start about n*p*r/(p+r) times:
    # with ~600+ bursts here the loss rate is within ~6% of its mean (1 sigma), the burst
    # length within ~5%; the bounds are 3 sigma.
    starts = n * p * r / (p + r)
    rel = 3 * (1 + (1 - r)) ** 0.5 / starts**0.5
    assert rate == pytest.approx(p / (p + r), rel=rel), (rate, len(runs))
    mean = sum(runs) / len(runs)
    assert mean == pytest.approx(1 / r, rel=3 * (1 - r) ** 0.5 / len(runs) ** 0.5), mean
    assert q.dropped_burst == q.dropped_loss == sum(lost)
    print(f"p={p} r={r}: loss {rate:.4f} (p/(p+r) {p / (p + r):.4f}), mean burst {mean:.2f}")


def test_random_loss_applies_in_the_good_state_only() -> None:
    q = queue(seed=3, ge_p=0.01, ge_r=0.25, loss=0.02)
    lost = losses(q, 200_000)
    bad = 0.01 / 0.26
    want = bad + (1 - bad) * 0.02
    assert sum(lost) / len(lost) == pytest.approx(want, rel=0.08)
    assert 0 < q.dropped_burst < q.dropped_loss == sum(lost)


def test_without_the_model_nothing_changes() -> None:
    q = queue()
    assert not any(losses(q, 1000)) and not q.ge_bad and q.dropped_burst == 0
    assert decide(q, 5000, 1.0, 1500, 0) == HOLD


def test_config_checks_the_burst_parameters() -> None:
    with pytest.raises(dl.ConfigError, match=r"ge_p=1\.5 must be a fraction"):
        dl.QueueConfig.from_dict({"num": 1, "ge_p": 1.5, "ge_r": 0.5})
    with pytest.raises(dl.ConfigError, match="never leave the bad state"):
        dl.QueueConfig.from_dict({"num": 1, "ge_p": 0.1})
    qc = dl.QueueConfig.from_dict({"num": 1, "ge_p": 0.01, "ge_r": 0.25})
    assert (qc.ge_p, qc.ge_r) == (0.01, 0.25)


def test_stats_report_the_model_and_its_drops() -> None:
    q = queue(ge_p=0.5, ge_r=0.5)
    losses(q, 100)
    row = queue_stats(q, 0.0)
    assert (row["ge_p"], row["ge_r"]) == (0.5, 0.5)
    assert row["dropped_burst"] == q.dropped_burst > 0


def test_a_reload_that_turns_the_model_off_leaves_the_bad_state(tmp_path) -> None:
    cfg_path = tmp_path / "line.json"
    on = {"queues": [{"num": 3, "ge_p": 1.0, "ge_r": 0.001}]}
    cfg_path.write_text(__import__("json").dumps(on))
    line = DelayLine(dl.Config.load(cfg_path), str(cfg_path))
    q = Queue(line.cfg.queues[0], random.Random(1))
    line.queues.append(q)
    line.by_num[3] = q
    assert losses(q, 10) == [True] * 10 and q.ge_bad
    cfg_path.write_text('{"queues": [{"num": 3}]}')
    line.reload()
    assert not q.ge_bad and q.cfg.ge_p == 0 and not any(losses(q, 10))


def test_netem_renders_gemodel_with_the_random_loss_in_the_good_state() -> None:
    imp = Impairment("ns", "to-a", "to-b", 0.02, 0.0, 0.0, 0.0, 1000)
    assert "loss" not in netem_args(imp)
    burst = dataclasses.replace(imp, ge_p=0.01, ge_r=0.25)
    assert burst.active
    assert netem_args(burst).endswith("loss gemodel 1% 25% 100% 0%")
    both = dataclasses.replace(burst, loss=0.005)
    assert netem_args(both).endswith("loss gemodel 1% 25% 100% 0.5%")
    assert "loss random" not in netem_args(both)
    assert dataclasses.replace(imp, delay=0.0, ge_p=0.01, ge_r=0.25).active
