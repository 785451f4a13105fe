"""The WAN links of a scenario: the settings of a link (rate, delay, loss, buffer, queue
discipline, a reverse direction that differs), its parallel paths, its presets and dynamics.

A single link and each path of a multipath link have the same settings, so both derive from
one :class:`LinkSettings`; a path adds its routing weight, a link the clusters it joins, its
schedule or trace, its preset and its paths.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

from testbed.config.dynamics import DirectionSettings, LinkTrace, ScheduleStep
from testbed.config.fields import Buffer, Duration, FieldError, Fraction, Rate, Size, Strict
from testbed.config.presets import fill_link as fill_preset
from testbed.config.presets import find as find_preset
from testbed.core.aqm import KIND_FIELDS, THRESHOLD_FIELDS

MAX_PATHS = 8  # a gateway port p<j>-<cluster> has at most 15 characters (cluster names: 12)


class Aqm(Strict):
    """The WAN bottleneck's queue discipline.

    ``droptail``: a FIFO of ``buffer`` bytes. ``red``: DCQCN's switch ramp, marking (or
    dropping, for non-ECN packets or ``ecn: false``) with probability rising linearly from 0 at
    ``kmin`` to ``pmax`` at ``kmax`` bytes of queue, and always above ``kmax``. ``step``:
    DCTCP-like, marks everything that arrives at more than ``k`` bytes of queue.

    ``at``: where the decision is taken: ``dequeue`` (on the queue a packet leaves behind, as
    DCQCN's simulators do) or ``arrival`` (on the queue it finds, as ``sch_red`` does). Unset:
    dequeue on the delay line, arrival on the kernel backend (``core.aqm.marking_point``).
    """

    kind: Literal["droptail", "red", "step"]
    kmin: Size | None = None
    kmax: Size | None = None
    pmax: Fraction | None = None
    k: Size | None = None
    ecn: bool = True
    at: Literal["dequeue", "arrival"] | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Aqm:
        needs = KIND_FIELDS[self.kind]
        given = [f for f in THRESHOLD_FIELDS if getattr(self, f) is not None]
        missing = [f for f in needs if f not in given]
        extra = [f for f in given if f not in needs]
        if missing:
            raise ValueError(
                f"aqm kind {self.kind} needs {', '.join(missing)}; "
                "examples: {kind: red, kmin: 20KB, kmax: 200KB, pmax: 1%} or {kind: step, k: 65KB}"
            )
        if extra:
            raise ValueError(
                f"aqm kind {self.kind} takes no {', '.join(extra)}"
                + (f" (it takes {', '.join(needs)})" if needs else "")
            )
        if self.kind == "red":
            assert self.kmin is not None and self.kmax is not None and self.pmax is not None
            if self.kmin >= self.kmax:
                raise ValueError(f"aqm kmin ({self.kmin} B) must be below kmax ({self.kmax} B)")
            if self.pmax <= 0:
                raise ValueError("aqm pmax must be above 0%; examples: 1%, 10%")
        return self

    @property
    def threshold(self) -> int:
        """The largest queue depth (bytes) the profile reacts to."""
        return {"droptail": 0, "red": self.kmax, "step": self.k}[self.kind] or 0


class DirectionOverride(DirectionSettings):
    """Settings of the second->first direction of a WAN link that differ from the first->second."""

    aqm: Aqm | None = None


def _positive_buffer(v: tuple[str, float]) -> tuple[str, float]:
    if v[1] <= 0:
        raise ValueError("buffer must be positive; examples: 1bdp, 0.5bdp, 4MiB")
    return v


class LinkSettings(Strict):
    """The settings of one WAN link or of one of its parallel paths."""

    rate: Rate = 1_000_000_000
    delay: Duration = 0.0
    jitter: Duration = 0.0
    loss: Fraction = 0.0
    reorder: Fraction = 0.0
    buffer: Buffer = ("bdp", 1.0)
    # None: drop-tail in the kernel's HTB leaf (bfifo). See Aqm, and docs/congestion.md for
    # where each backend keeps the queue.
    aqm: Aqm | None = None
    reverse: DirectionOverride | None = None

    _positive_buffer = field_validator("buffer")(lambda cls, v: _positive_buffer(v))

    def direction(self, reverse: bool) -> dict[str, Any]:
        """The settings of one direction: forward as written, reverse with ``reverse`` applied."""
        settings = {f: getattr(self, f) for f in DIRECTION_SETTINGS}
        if reverse and self.reverse is not None:
            overrides = {f: getattr(self.reverse, f) for f in DIRECTION_SETTINGS}
            settings.update({f: v for f, v in overrides.items() if v is not None})
        return settings


# settings a WAN link and each of its parallel paths have; those a direction has of them
PATH_SETTINGS = tuple(LinkSettings.model_fields)
DIRECTION_SETTINGS = tuple(f for f in PATH_SETTINGS if f != "reverse")


# A link-wide setting a multipath link refuses, with what the user can do instead.
_NOT_PER_PATH = {
    "schedule": "use a link without `paths`, or `faults:` on one path (`link: a-b/1`)",
    "trace": "use a link without `paths` to replay a trace",
    "preset": "write the preset's settings (`testbed plan` shows them) into each path",
}


class WanPath(LinkSettings):
    """One of a WAN link's parallel paths (``paths:``): every setting of a single link, and its
    weight in the gateways' multipath routes (ECMP when all weights are equal)."""

    weight: int = Field(1, ge=1, le=256)


class _Between(Strict):
    """The two clusters a link joins. A base of its own, after LinkSettings in WanLink's bases,
    so that ``between`` stays a link's first key (pydantic orders fields from the last base)."""

    between: tuple[str, str]

    @field_validator("between", mode="before")
    @classmethod
    def _two_clusters(cls, v: Any) -> Any:
        if not isinstance(v, list | tuple) or len(v) != 2:
            raise ValueError("`between` names two clusters, e.g. [east, west]")
        if v[0] == v[1]:
            raise ValueError(f"a WAN link joins two different clusters, got {list(v)}")
        return v


class WanLink(LinkSettings, _Between):
    # How the link changes while the workload runs (testbed.config.dynamics): steps, or a
    # recorded link replayed; not both.
    schedule: list[ScheduleStep] = Field(default_factory=list)
    trace: LinkTrace | None = None
    # A measured real path the link starts from (testbed.config.presets): it fills the fields
    # not written here; ``scale`` multiplies its rates and byte buffer.
    preset: str | None = None
    scale: float = 1.0
    # Parallel paths between the two gateways, each with the settings above (then not written
    # at the link itself); the gateways spread traffic over them (routing.ecmp).
    paths: list[WanPath] = Field(default_factory=list)
    # Which of its link's paths this is (paths_of(): one WanLink per path); None: not a path.
    _path: int | None = PrivateAttr(None)
    _weight: int = PrivateAttr(1)

    @property
    def name(self) -> str:
        """How faults name the link: ``east-west`` (either order is accepted); a path of a
        multipath link: ``east-west/1``."""
        return "-".join(self.between) + ("" if self._path is None else f"/{self._path}")

    @property
    def path(self) -> int | None:
        return self._path

    @property
    def weight(self) -> int:
        return self._weight

    def paths_of(self) -> list[WanLink]:
        """The link's paths as links of their own (``east-west/0``, ...), each with its
        path's settings and weight; ``[self]`` for a single-path link."""
        if not self.paths:
            return [self]
        out = []
        for j, p in enumerate(self.paths):
            # validated already, as the path's fields
            link = WanLink.model_construct(
                between=self.between, **{f: getattr(p, f) for f in PATH_SETTINGS}
            )
            link._path, link._weight = j, p.weight
            out.append(link)
        return out

    @model_validator(mode="after")
    def _paths_alone(self) -> WanLink:
        if not self.paths:
            return self
        written = [f for f in PATH_SETTINGS if f in self.model_fields_set]
        if written:
            raise FieldError(
                written[0],
                "a link with `paths` has its settings in each path; move "
                f"{', '.join(written)} into the paths",
            )
        if not 2 <= len(self.paths) <= MAX_PATHS:
            raise FieldError(
                "paths", f"{len(self.paths)} paths given; a multipath link has 2 to {MAX_PATHS}"
            )
        for key, instead in _NOT_PER_PATH.items():
            if key in self.model_fields_set:
                raise FieldError(
                    key,
                    f"{key} is not supported on a link with `paths` yet: each path has its own "
                    f"emulators, and a {key} per path is not built; {instead}",
                )
        return self

    @property
    def preset_source(self) -> str | None:
        """The preset, its scale and where its numbers come from (for the plan and results)."""
        return None if self.preset is None else find_preset(self.preset).describe(self.scale)

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "scale" in data and data.get("preset") is None:
            raise FieldError(
                "scale",
                "scale multiplies a preset's rate; without `preset:` write the rate itself",
            )
        scale = data.get("scale", 1.0)
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < 1e6:
            raise FieldError(
                "scale", f"{scale!r} is not a positive number (a rate multiplier, e.g. 0.1)"
            )
        try:
            return fill_preset(data)
        except ValueError as exc:
            raise FieldError("preset", str(exc)) from None

    @model_validator(mode="after")
    def _one_dynamics(self) -> WanLink:
        if self.schedule and self.trace is not None:
            raise FieldError(
                "trace", "a link has a schedule or a trace, not both; drop one of them"
            )
        for i, (a, b) in enumerate(zip(self.schedule, self.schedule[1:], strict=False)):
            if b.at <= a.at:
                raise FieldError(
                    f"schedule[{i + 1}].at",
                    f"{b.at:g}s is not after the step before it ({a.at:g}s); steps are in "
                    "increasing time",
                )
        return self
