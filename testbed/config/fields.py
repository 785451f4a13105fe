"""The scenario schema's building blocks: unit-typed fields (parsed from text to SI numbers at
the edge), the strict base model, and the error a cross-field check raises to name its field."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from testbed.core.metrics import Metric
from testbed.core.units import parse_buffer, parse_duration, parse_percent, parse_rate, parse_size


def _positive_rate(v: int) -> int:
    if v <= 0:
        raise ValueError("a rate must be positive; examples: 100mbit, 1gbit")
    return v


def _nonnegative_duration(v: float) -> float:
    if v < 0:
        raise ValueError("a duration must not be negative; examples: 0ms, 25ms, 100us")
    return v


def _percentage(v: float) -> float:
    if not 0 <= v <= 1:
        raise ValueError(f"{v * 100:g}% is out of range; allowed: 0% to 100%")
    return v


Rate = Annotated[int, BeforeValidator(parse_rate), AfterValidator(_positive_rate)]
Duration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_nonnegative_duration)]
Fraction = Annotated[float, BeforeValidator(parse_percent), AfterValidator(_percentage)]
Size = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]  # bytes: 64KiB, 10MB
Buffer = Annotated[tuple[str, float], BeforeValidator(parse_buffer)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkloadModel(Strict):
    """What every workload kind's schema has: its ``kind`` (the registry's key,
    testbed.config.workloads.WORKLOAD_KINDS); a workload of torch ranks is a
    ``RankWorkloadModel`` (one of flows alone, such as dcqcn, is not)."""

    kind: str
    # the summary columns its kind offers to ``expect``
    metrics: ClassVar[tuple[Metric, ...]] = ()


class FieldError(ValueError):
    """A cross-field check that knows which field path is at fault."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path = path
        self.message = message
