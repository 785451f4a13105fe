"""An action across machines applied in parts (testbed.experiment.spanned_events.spanning): one
row of the events table, applied when its last part was, and taking from its first part's
start (a part applied on time acts from then while another machine's part is late)."""

from __future__ import annotations

import pytest

from testbed.experiment.events import Applied
from testbed.experiment.spanned_events import spanning


def test_an_action_in_parts_takes_from_the_first_start_to_the_last_end():
    on_time = Applied(unix=100.02, bound_s=0.001, apply_s=0.02)  # started at 100.00
    late = Applied(unix=100.47, bound_s=0.002, apply_s=0.02)  # started at 100.45
    whole = spanning([late, on_time])
    assert whole.unix == 100.47 and whole.bound_s == 0.002
    assert whole.apply_s == pytest.approx(0.47)


def test_an_action_of_one_part_is_that_part():
    one = Applied(unix=5.0, bound_s=0.001, apply_s=0.003)
    got = spanning([one])
    assert (got.unix, got.bound_s) == (one.unix, one.bound_s)
    assert got.apply_s == pytest.approx(one.apply_s)
