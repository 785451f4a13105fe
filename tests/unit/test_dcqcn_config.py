"""The scenario's DCQCN fields (testbed.config.dcqcn): parsing, defaults per variant, dilation."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from testbed.config.dcqcn import DcqcnParamsSpec, DcqcnSettings, resolve
from testbed.core.dcqcn import defaults


def test_the_issues_params_line_parses_to_the_papers_defaults() -> None:
    spec = DcqcnParamsSpec.model_validate(
        {"T": "55us", "K": "55us", "N": "50us", "g": "1/256", "F": 5, "B": "10MB",
         "rai": "40mbit", "rhai": "200mbit"}
    )  # fmt: skip
    got, want = dataclasses.asdict(resolve("paper", spec)), dataclasses.asdict(defaults("paper"))
    assert got == pytest.approx(want)


def test_unset_fields_keep_the_variants_defaults_and_dilation_applies() -> None:
    spec = DcqcnParamsSpec.model_validate({"T": "5ms", "min_dec_fac": "95%", "B": "off"})
    p = resolve("mellanox", spec)
    assert (p.rate_timer, p.min_dec_fac, p.byte_counter) == (0.005, 0.95, None)
    assert p.rai == defaults("mellanox").rai  # not given: the NIC's 5 Mbit/s
    d = resolve("paper", DcqcnParamsSpec(), dilation=100)
    assert d.rate_timer == pytest.approx(5.5e-3) and d.rai == pytest.approx(0.4e6)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [("g", "1/0", "not a ratio"), ("g", "2", "(0, 1]"), ("F", 0, "greater than or equal"),
     ("T", "fast", "T"), ("rai", "-1mbit", "rai"), ("Q", 1, "Extra inputs")],
)  # fmt: skip
def test_bad_params_are_refused_naming_the_field(field, value, says) -> None:
    with pytest.raises(ValidationError) as exc:
        DcqcnParamsSpec.model_validate({field: value})
    assert says in str(exc.value)


def test_settings_defaults() -> None:
    s = DcqcnSettings()
    assert (s.variant, s.line_rate, s.size) == ("paper", None, 1400)
    with pytest.raises(ValidationError):
        DcqcnSettings.model_validate({"variant": "timely"})
