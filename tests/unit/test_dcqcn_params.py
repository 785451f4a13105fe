"""DCQCN's parameter vocabulary: the variants' defaults and time dilation (pure)."""

from __future__ import annotations

import pytest

from testbed.core.dcqcn import DEFAULTS, defaults, dilate, real_rate, real_time, undilate


def test_the_papers_defaults() -> None:
    p = defaults("paper")
    assert (p.cnp_interval, p.alpha_timer, p.rate_timer) == (50e-6, 55e-6, 55e-6)
    assert (p.g, p.fast_recovery_steps, p.byte_counter) == (1 / 256, 5, 10_000_000)
    assert (p.rai, p.rhai) == (40e6, 200e6)
    m = defaults("mellanox")
    assert (m.rate_timer, m.fast_recovery_steps, m.rai, m.rhai) == (300e-6, 1, 5e6, 50e6)
    assert m.byte_counter is None and not m.clamp_target and m.min_dec_fac == 0.5
    with pytest.raises(ValueError, match="paper, mellanox, ns3"):
        defaults("timely")  # type: ignore[arg-type]


def test_dilation_scales_times_up_and_rates_down_and_leaves_bytes() -> None:
    p = DEFAULTS["paper"]
    d = dilate(p, 100)
    assert d.rate_timer == pytest.approx(5.5e-3) and d.cnp_interval == pytest.approx(5e-3)
    assert d.rai == pytest.approx(0.4e6) and d.rhai == pytest.approx(2e6)
    assert (d.byte_counter, d.g, d.fast_recovery_steps) == (p.byte_counter, p.g, 5)
    back = undilate(d, 100)
    assert back.rai == pytest.approx(40e6) and back.rate_timer == pytest.approx(55e-6)
    # the paper's 40 Gbit/s, 85 µs datacenter is a 400 Mbit/s, 8.5 ms testbed at s = 100
    assert real_rate(400e6, 100) == 40e9 and real_time(8.5e-3, 100) == pytest.approx(85e-6)
    with pytest.raises(ValueError):
        dilate(p, 0)
