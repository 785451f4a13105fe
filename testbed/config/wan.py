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


# What a multipath link takes per path only, and why: each path is an emulated link of its own
# (its own shaper, delay line and wire namespace), so a change names the path it acts on.
_PER_PATH_ONLY = {
    "schedule": "a schedule step changes one path's shaper and delay line",
    "trace": "a trace replays on one path's shaper and delay line",
    "preset": "a preset describes one measured path",
}


class LinkDynamics(Strict):
    """What a single link and each path of a multipath link may add to their settings: how they
    change while the workload runs (``schedule`` steps or a recorded ``trace`` replayed
    (testbed.config.dynamics), not both) and a measured real path they start from (``preset``,
    testbed.config.presets: it fills the fields not written; ``scale`` multiplies its rates and
    byte buffer)."""

    schedule: list[ScheduleStep] = Field(default_factory=list)
    trace: LinkTrace | None = None
    preset: str | None = None
    scale: float = 1.0

    @property
    def preset_source(self) -> str | None:
        """The preset, its scale and where its numbers come from (for the plan and results)."""
        return None if self.preset is None else find_preset(self.preset).describe(self.scale)

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if data.get("paths"):
            for key, why in _PER_PATH_ONLY.items():
                if data.get(key) not in (None, []):
                    raise FieldError(
                        key,
                        f"a link with `paths` takes `{key}` per path ({why}): move it into the "
                        f"path it applies to (`paths: [{{..., {key}: ...}}]`), or into each path",
                    )
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
    def _one_dynamics(self) -> LinkDynamics:
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


# what a path of a multipath link carries to its link of its own (WanLink.paths_of)
_PATH_CARRIES = (*PATH_SETTINGS, *LinkDynamics.model_fields)


class WanPath(LinkDynamics, LinkSettings):
    """One of a WAN link's parallel paths (``paths:``): every setting of a single link, its own
    schedule, trace or preset, and its weight in the gateways' multipath routes (ECMP when all
    weights are equal)."""

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


class WanLink(LinkDynamics, LinkSettings, _Between):
    """A WAN link: the clusters it joins, its settings and dynamics (LinkSettings,
    LinkDynamics), or its parallel paths, each with its own."""

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
                between=self.between, **{f: getattr(p, f) for f in _PATH_CARRIES}
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
        return self

    def where(self, i: int) -> str:
        """The field that holds this link's (or path's) settings when it is ``wan[i]``:
        ``wan[0]``, or ``wan[0].paths[1]`` for a path."""
        return f"wan[{i}]" + ("" if self._path is None else f".paths[{self._path}]")
